"""Training memory against measured peaks (benchmarks/accuracy.py --memory): torchtune's README tables, torchtitan's
Dec 2024 H100 tables (max reserved) and BLOOM-176B.

Tolerances (README, "Accuracy"): per family (full / LoRA / QLoRA) the median |error| within MEMORY_MEDIAN_TOLERANCE
and every row within MEMORY_ROW_TOLERANCE. Rows over it are strict xfails with what the model lacks for them — they
must flip to passing rather than be hidden. No constant is fitted to a row (train_memory docstring names each source).
"""

from __future__ import annotations

import pytest

from benchmarks.accuracy import (
    MEMORY_MEDIAN_TOLERANCE,
    MEMORY_ROW_TOLERANCE,
    MEMORY_ROWS,
    memory_cases,
    memory_family_stats,
    memory_skipped,
)

CASES = {c.name: c for c in memory_cases()}
# Rows known to miss their tolerance, with why. BLOOM-176B (−42%) left once Megatron's fp32 main_grad was counted
# (model_states.gradient_bytes_per_param): −24%.
OVER_TOLERANCE: dict[str, str] = {}


def test_every_configured_row_is_predicted_and_the_rest_say_why():
    assert len(CASES) == len(MEMORY_ROWS) + 1 == 24
    assert all(why for _, why in memory_skipped())


@pytest.mark.parametrize("family", ["full", "lora", "qlora"])
def test_family_median_within_tolerance(family):
    rows, median, _ = memory_family_stats(list(CASES.values()))[family]
    assert rows >= 3
    assert median <= MEMORY_MEDIAN_TOLERANCE[family]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OVER_TOLERANCE[n])) if n in OVER_TOLERANCE else n
        for n in sorted(CASES)
    ],
)
def test_row_within_tolerance(name):
    c = CASES[name]
    assert abs(c.error) <= MEMORY_ROW_TOLERANCE[c.family], (
        f"{c.metric} {c.predicted_bytes / 2**30:.1f} GiB vs measured {c.measured_bytes / 2**30:.1f} GiB"
    )


def test_issue_17_named_cases():
    """Llama-3.1-8B LoRA on one 24 GB GPU (16.2 GiB measured) and QLoRA (7.4 GiB) within 15%."""
    lora = CASES["torchtune Llama 3.1 8B LoRA on 1x 4090"]
    qlora = CASES["torchtune Llama 3.1 8B QLoRA on 1x 4090"]
    assert abs(lora.error) <= 0.15 and abs(qlora.error) <= 0.15


def test_torchtitan_8b_op_sac_rows_within_5_percent():
    """The eager BF16 1-D FSDP rows (selective op AC, mb2 s8192), max reserved, within 5% — before the
    op-SAC mode they were sized with Megatron's selective recompute (activations 87.7 GiB) and did not fit 96 GB."""
    for gpus, measured in ((8, 82.4), (128, 67.0)):
        c = CASES[f"torchtitan Llama 3.1 8B FSDP on {gpus}x H100"]
        assert c.metric == "reserved" and c.measured_bytes == measured * 2**30
        assert abs(c.error) <= 0.05, c
