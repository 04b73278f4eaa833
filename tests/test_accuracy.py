"""Training sizing against published runs (benchmarks/accuracy.py): predicted GPU-hours within ±35 % of published.

Cases over the tolerance are strict xfails, each with what the model lacks for it — visible, and they must
flip to passing rather than be hidden. No constant was fitted to a case (benchmarks/accuracy.py docstring).
"""

from __future__ import annotations

import statistics

import pytest

from benchmarks.accuracy import MPT_SHAPES, TOLERANCE, mpt_architecture, training_cases

ALL = training_cases()
CASES = {c.name: c for c in ALL if c.predicted_tokens_per_second_per_gpu}
# None today (measured 2026-11-23). The closest: MPT-13B on 64 H100 at −33% (a 0.57 s step at global batch 128; the
# same config on 8 GPUs is −33% too), after inter-node collectives got their node's NIC bandwidth and the llm-foundry
# rows their published global batch. A case over the tolerance goes here as a strict xfail with its reason.
OVER_TOLERANCE: dict[str, str] = {}


def test_every_published_run_with_a_gpu_count_is_predicted():
    assert len(CASES) == 30
    assert all(c.note.startswith("skipped") for c in ALL if c.name not in CASES)


def test_median_error_is_small():
    assert statistics.median(abs(c.error) for c in CASES.values()) < 0.25


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OVER_TOLERANCE[n])) if n in OVER_TOLERANCE else n
        for n in sorted(CASES)
    ],
)
def test_case_within_tolerance(name):
    c = CASES[name]
    published, predicted = c.gpu_hours()
    assert abs(c.error) <= TOLERANCE, f"predicted {predicted:,.0f} GPU-hours vs published {published:,.0f}"


def test_mpt_shapes_reproduce_the_published_parameter_counts():
    """llm-foundry's MPT shapes (learned positions, tied embeddings, no biases) give the CSV's counts ±0.03 %."""
    from compiler.catalog.params import count_params

    published = {
        "MPT-1B": 1315950592,
        "MPT-3B": 2651837440,
        "MPT-7B": 6658859008,
        "MPT-13B": 12853954560,
        "MPT-30B": 29975214080,
        "MPT-70B": 64862437376,
    }
    assert published.keys() == MPT_SHAPES.keys()
    for family in MPT_SHAPES:
        assert count_params(mpt_architecture(family, 2048)).total == pytest.approx(published[family], rel=3e-4)


def test_megatron_2021_conversion_uses_equation_3():
    """Narayanan et al. 2021 eq. (3): 1.7B at 137 TFLOP/s/GPU is 137e12 / (96·l·h²·(1 + s/6h + V/16lh)) tokens/s."""
    case = next(c for c in ALL if c.name.startswith("GPT (1.7B) Megatron-LM 2021"))
    l, h, s, v = 24, 2304, 2048, 51200
    per_token = 96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    assert case.published_tokens_per_second_per_gpu == pytest.approx(137e12 / per_token)


def test_llm_foundry_h100_table_within_tolerance_at_every_sequence_length():
    """All 43 rows of llm-foundry's H100 BF16 table (1B-70B, 512-65k tokens, 8-64 GPUs) within ±35 %: the attention
    kernel and the inter-node bandwidth hold across the sweep, not only on the rows of the table above."""
    from benchmarks.accuracy import sweep_rows

    rows = sweep_rows()
    assert len(rows) == 43
    outside = {r.name: round(r.error, 3) for r in rows if abs(r.error) > TOLERANCE}
    assert not outside
