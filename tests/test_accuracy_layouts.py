"""Step throughput at published layouts (benchmarks/accuracy.py --layouts): every row of train_steps_2.csv stated
with its TP, PP, CP, EP and VP (none left to the search), per family within the tolerances the module states:
median |GPU-hours error| ≤ LAYOUT_MEDIAN_TOLERANCE (35%), every row ≤ LAYOUT_ROW_TOLERANCE (75%)."""

from __future__ import annotations

import csv

import pytest

from benchmarks.accuracy import (
    LAYOUT_MEDIAN_TOLERANCE,
    LAYOUT_ROW_TOLERANCE,
    LAYOUTS,
    layout_cases,
    layout_family_stats,
    layout_row,
)

CASES = {c.name: c for c in layout_cases()}
ROWS = list(csv.DictReader(LAYOUTS.open()))


def test_every_row_is_stated_with_its_published_layout():
    assert len(CASES) == len(ROWS) == 21
    for row in ROWS:
        r = layout_row(row)
        for key in ("tp", "pp", "cp", "ep"):
            assert r[key] == int(row[key] or 1), (row["model"], key)
        assert r["tp"] * r["pp"] * r["cp"] * r["dp"] == r["gpus"]
    stated = [c.layout for c in CASES.values()]
    assert any(" CP2 " in s and " VP5 " in s for s in stated)  # NeMo Llama-3-70B: TP4 PP4 CP2 VP5
    assert any(" CP32 " in s for s in stated)  # 1M-token Llama-2-7B
    assert any(" VP12 " in s for s in stated)  # Nemotron-340B


@pytest.mark.parametrize("family", ["nemo", "nemo-long-context", "torchtitan"])
def test_family_median_within_tolerance(family):
    rows, median, _, _ = layout_family_stats(list(CASES.values()))[family]
    assert rows >= 3
    assert median <= LAYOUT_MEDIAN_TOLERANCE


@pytest.mark.parametrize("name", sorted(CASES))
def test_row_within_tolerance(name):
    assert abs(CASES[name].error) <= LAYOUT_ROW_TOLERANCE, f"{CASES[name].error:+.0%} at {CASES[name].layout}"


def test_new_layouts_close_the_gap_on_the_rows_that_need_them():
    """NeMo Llama-3-70B (TP4 PP4 CP2 VP5) and Nemotron-340B (TP8 PP8 VP12): forced into TP/PP/DP only they were
    52% and 103% off; stated as published, within 15% and 55%. Since Transformer Engine's FP8 GEMM inputs are
    counted in 1 byte (activations.py), the FP8 Llama forced into TP/PP/DP is 14% off, still more than its
    published layout's 12%."""
    llama = next(c for n, c in CASES.items() if n.startswith("Llama-3-70B (NeMo"))
    nemotron = next(c for n, c in CASES.items() if n.startswith("Nemotron"))
    assert abs(llama.error) < abs(llama.error_before) < 0.15
    assert abs(nemotron.error) < 0.55 < 1.0 < abs(nemotron.error_before)
