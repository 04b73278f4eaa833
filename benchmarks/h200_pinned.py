"""Predicted vs measured on a real H200: the rows of benchmarks/calibration/h200_measured.csv.

Seven single-GPU layouts measured on one NVIDIA H200 on 2026-11-28 (provenance per row in the CSV's `source`): four
pinned layouts of Llama-3.1-8B's shape as a plain transformers + torch AdamW script runs them
(benchmarks/gpu/pinned_layouts.py; raw records in calibration/h200/pinned_layouts.jsonl) and the probe's three FSDP
fine-tuning layouts of Mistral-7B's shape (raw records in calibration/h200-probe/measured/probe-results.json). Each row
is compiled as the plan it ran: a pinned plan (framework ddp, one H200, mixed = fp32 master weights, pure =
master_weights none) or the probe layout's own reduced plan (`plan_text`). Step time is compared with the roofline (the
range's `roofline`, what the residual families divide by) and with the P50 headline and its P10-P90; peak allocated
memory with the plan's allocated bytes.

The rows are dated 2026, after benchmarks/residuals.py's CUTOFF_YEAR: they never fit a family and only measure how
the ranges hold out of sample (train-step-time and memory-full; benchmarks/coverage.py).

    python3 benchmarks/h200_pinned.py
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.published_dates import years_by  # noqa: E402
from compiler.pipeline import compile_plan  # noqa: E402

CALIBRATION = REPO / "benchmarks" / "calibration"
ROWS = CALIBRATION / "h200_measured.csv"
GPU = "h200-sxm-141gb"
LLAMA_31_8B_SHAPE = {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256}


@dataclass(frozen=True)
class H200Case:
    name: str
    measured_step_seconds: float
    roofline_step_seconds: float  # the compiled plan's step before any residual (ranges[].roofline)
    step_range: tuple[float, float, float]  # the compiled plan's P10, P50 (the headline) and P90
    measured_allocated_bytes: float
    predicted_allocated_bytes: float
    year: int | None
    active_params: int  # the compiled plan's model.params_active

    @property
    def step_ratio(self) -> float:
        """Measured ÷ roofline step: what a train-step-time row's ratio is."""
        return self.measured_step_seconds / self.roofline_step_seconds

    @property
    def memory_ratio(self) -> float:
        return self.measured_allocated_bytes / self.predicted_allocated_bytes


def pinned_plan(row: dict) -> dict:
    """The plan of one pinned_layouts.jsonl record."""
    return {
        "name": "pinned",
        "workload": "train",
        "model": {"architecture": {"layers": row["layers"], "max_position": 131072, **LLAMA_31_8B_SHAPE}},
        "precision": "bf16",
        "train": {
            "tokens": "1B",
            "seq_len": row["seq_len"],
            "global_batch": row["micro_batch"],
            "optimizer": "adamw",
            "master_weights": "fp32" if row["precision"] == "mixed" else "none",
            "framework": "ddp",
        },
        "parallelism": {"tp": 1, "pp": 1, "dp": 1, "micro_batch": row["micro_batch"], "recompute": row["recompute"]},
        "cluster": {"scheduler": "slurm", "gpus": [GPU], "gpus_per_node": 8, "max_gpus": 1},
    }


def measured_rows() -> list[dict]:
    with ROWS.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def raw_record(row: dict) -> dict:
    """The raw record a CSV row was taken from: a line of a .jsonl file (1-based) or a probe layout by its folder."""
    path = CALIBRATION / row["raw"]
    if path.suffix == ".jsonl":
        return json.loads(path.read_text(encoding="utf-8").splitlines()[int(row["record"]) - 1])
    layouts = json.loads(path.read_text(encoding="utf-8"))["layouts"]
    return next(layout for layout in layouts if layout["folder"] == row["record"])


def plan_text(row: dict) -> str:
    record = raw_record(row)
    return record["plan_text"] if "plan_text" in record else yaml.safe_dump(pinned_plan(record))


def compiled(text: str) -> dict:
    """plan.json of a plan's text, compiled as `mlinfra-compile` does."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plan.yaml"
        path.write_text(text, encoding="utf-8")
        return json.loads(next(f.text for f in compile_plan(path).files if f.path.endswith("plan.json")))


@cache
def h200_cases() -> tuple[H200Case, ...]:
    years = years_by(ROWS.name, "case")
    cases = []
    for row in measured_rows():
        plan = compiled(plan_text(row))
        step = next(r for r in plan["ranges"] if r["quantity"] == "training.step_seconds")
        cases.append(
            H200Case(
                name=row["case"],
                measured_step_seconds=float(row["step_seconds"]),
                roofline_step_seconds=step["roofline"],
                step_range=(step["p10"], step["p50"], step["p90"]),
                measured_allocated_bytes=float(row["peak_allocated_bytes"]),
                predicted_allocated_bytes=float(plan["memory_per_gpu_bytes"]["allocated"]),
                year=years[row["case"]],
                active_params=plan["model"]["params_active"],
            )
        )
    return tuple(cases)


def main() -> int:
    cases = h200_cases()
    print(
        f"{'measured on one H200 (h200_measured.csv)':66s} {'step s':>7s} {'roof':>6s} {'err':>5s} {'P50':>6s} "
        f"{'err':>5s} {'P10-P90':>13s} in {'GiB':>5s} {'pred':>5s} {'err':>5s}"
    )
    for c in cases:
        low, mid, high = c.step_range
        print(
            f"{c.name:66s} {c.measured_step_seconds:7.3f} {c.roofline_step_seconds:6.3f} "
            f"{1 / c.step_ratio - 1:+5.0%} {mid:6.3f} {mid / c.measured_step_seconds - 1:+5.0%} "
            f"{low:6.3f}-{high:6.3f} {'y' if low <= c.measured_step_seconds <= high else 'n':2s} "
            f"{c.measured_allocated_bytes / 2**30:5.1f} {c.predicted_allocated_bytes / 2**30:5.1f} "
            f"{1 / c.memory_ratio - 1:+5.0%}"
        )
    inside = sum(c.step_range[0] <= c.measured_step_seconds <= c.step_range[2] for c in cases)
    print(
        f"{len(cases)} layouts: step error median roofline {statistics.median(1 / c.step_ratio - 1 for c in cases):+.0%}, "
        f"P50 {statistics.median(c.step_range[1] / c.measured_step_seconds - 1 for c in cases):+.0%}, "
        f"{inside} inside P10-P90; allocated memory error median "
        f"{statistics.median(1 / c.memory_ratio - 1 for c in cases):+.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
