"""The H200 steps we measured as calibration rows (benchmarks/calibration/h200_measured.csv): each row is the raw record
it names, the rows are dated after the cut-off and never fit a family, and the predictions on them are the numbers
benchmarks/h200_pinned.py prints (measured ÷ roofline from the compiled plans)."""

from __future__ import annotations

import statistics

import pytest
import yaml

from benchmarks.coverage import measured_here
from benchmarks.h200_pinned import GPU, h200_cases, measured_rows, raw_record
from benchmarks.residuals import CUTOFF_YEAR, families, held_out, labelled_rows


def _layout(record: dict) -> tuple[int, int, int, str, float, int]:
    """(layers, seq_len, micro-batch, recompute, step seconds, peak allocated bytes) of a raw record."""
    if "plan_text" in record:  # a probe layout: its reduced plan states the shape
        plan = yaml.safe_load(record["plan_text"])
        shape = (plan["model"]["architecture"]["layers"], plan["train"]["seq_len"])
        return (
            *shape,
            record["micro_batch"],
            record["recompute"],
            record["step_seconds"],
            record["peak_allocated_bytes"],
        )
    return (
        record["layers"],
        record["seq_len"],
        record["micro_batch"],
        record["recompute"],
        record["step_seconds_median"],
        record["peak_allocated_bytes"],
    )


def test_each_row_copies_the_raw_record_it_names():
    rows = measured_rows()
    assert len(rows) == 13  # device run 1: 4 pinned, the probe: 3 FSDP layouts, device run 4: 6 pinned
    for row in rows:
        copied = (
            int(row["layers"]),
            int(row["seq_len"]),
            int(row["micro_batch"]),
            row["recompute"],
            float(row["step_seconds"]),
            int(row["peak_allocated_bytes"]),
        )
        assert copied == _layout(raw_record(row)), row["case"]
        assert "2026-11-28" in row["source"] and row["gpu_count"] == "1"


def test_the_h200_rows_are_dated_after_the_cutoff_and_never_fit():
    """Measured 2026-11-28: held out like every row after its family's cut-off, so the families keep their 21 and 17
    published fitted rows and the step family's GPU support stays the published rows' A100s and H100s."""
    ours = [r for r in labelled_rows() if r.measured_here]
    assert sorted({r.family for r in ours}) == ["memory-full", "train-step-time"] and len(ours) == 26
    assert all(r.year == 2026 > CUTOFF_YEAR and held_out(r) and r.gpu == GPU for r in ours)
    fitted = families()
    assert fitted["train-step-time"]["rows"] == 21 and fitted["memory-full"]["rows"] == 17
    assert GPU not in fitted["train-step-time"]["gpus"]


def test_predicted_vs_measured_on_the_h200():
    """Every measured step is slower than the roofline (measured ÷ roofline 1.15-1.48, median 1.30: the 8-layer
    seq-4096 mixed-precision step 0.1549 s against 0.1155 s); 12 of 13 land inside the P10-P90 the compile states, the
    FSDP probe's micro-batch 2 above its P90 (0.2504 s > 0.2361 s). Peak allocated memory is 0.93-1.18 × the plan's
    allocated bytes."""
    cases = h200_cases()
    first = cases[0]
    assert first.measured_step_seconds == pytest.approx(0.154943, rel=1e-5)
    assert first.roofline_step_seconds == pytest.approx(0.115522, rel=1e-4)
    steps = [c.step_ratio for c in cases]
    assert 1.14 < min(steps) and max(steps) < 1.48
    assert statistics.median(steps) == pytest.approx(1.2965, rel=1e-3)
    outside = [c.name for c in cases if not c.step_range[0] <= c.measured_step_seconds <= c.step_range[2]]
    assert outside == ["H200 probe Mistral-7B shape 8L FSDP seq4096 mb2 (micro-batch ÷2)"]
    assert cases[6].step_range[2] == pytest.approx(0.2361, rel=1e-3)  # the probe mb2 row
    memory = [c.memory_ratio for c in cases]
    assert 0.92 < min(memory) and max(memory) < 1.19
    assert statistics.median(memory) == pytest.approx(1.0327, rel=1e-3)


def test_coverage_reports_the_rows_measured_here_on_their_own():
    found = {m.family: m for m in measured_here()}
    assert (found["train-step-time"].rows, found["train-step-time"].inside) == (13, 12)
    assert (found["memory-full"].rows, found["memory-full"].inside) == (13, 13)
    assert found["train-step-time"].roofline_signed == pytest.approx(1 / 1.2965 - 1, rel=1e-3)
