"""Predicted vs measured on a real H200: pinned single-GPU layouts (transformers + torch AdamW).

Reads benchmarks/calibration/h200/pinned_layouts.jsonl (written by benchmarks/gpu/pinned_layouts.py on the GPU;
provenance in benchmarks/calibration/h200/README.md), compiles the same layout as a pinned plan (framework ddp,
one H200, mixed = fp32 master weights, pure = master_weights none) and prints step time and peak allocated memory
against the plan's headline and its P10–P90 range.

    python3 benchmarks/h200_pinned.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.pipeline import compile_plan  # noqa: E402

MEASURED = REPO / "benchmarks" / "calibration" / "h200" / "pinned_layouts.jsonl"
LLAMA_31_8B_SHAPE = {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256}


def pinned_plan(row: dict) -> dict:
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
        "cluster": {"scheduler": "slurm", "gpus": ["h200-sxm-141gb"], "gpus_per_node": 8, "max_gpus": 1},
    }


def predicted(row: dict) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plan.yaml"
        path.write_text(yaml.safe_dump(pinned_plan(row)))
        plan = json.loads(next(f.text for f in compile_plan(path).files if f.path.endswith("plan.json")))
    ranges = {r["quantity"]: r for r in plan["ranges"]}
    return {
        "step_seconds": plan["training"]["step_seconds"],
        "step_range": (ranges["training.step_seconds"]["p10"], ranges["training.step_seconds"]["p90"]),
        "allocated_bytes": plan["memory_per_gpu_bytes"]["allocated"],
    }


def main() -> int:
    rows = [json.loads(line) for line in MEASURED.read_text().splitlines() if line.strip()]
    print(
        f"{'layout':44s} {'step s':>7s} {'pred':>7s} {'err':>6s} {'P10-P90':>13s} in  {'GiB':>6s} {'pred':>6s} {'err':>6s}"
    )
    step_errors, memory_errors, inside = [], [], 0
    for row in rows:
        if "error" in row:
            continue
        p = predicted(row)
        name = f"{row['layers']}L seq{row['seq_len']} mb{row['micro_batch']} {row['precision']} rc-{row['recompute']}"
        step_error = p["step_seconds"] / row["step_seconds_median"] - 1
        memory_error = p["allocated_bytes"] / row["peak_allocated_bytes"] - 1
        low, high = p["step_range"]
        hit = low <= row["step_seconds_median"] <= high
        inside += hit
        step_errors.append(step_error)
        memory_errors.append(memory_error)
        print(
            f"{name:44s} {row['step_seconds_median']:7.3f} {p['step_seconds']:7.3f} {step_error:+6.0%} "
            f"{low:6.3f}-{high:6.3f} {'y' if hit else 'n':2s} {row['peak_allocated_bytes'] / 2**30:6.1f} "
            f"{p['allocated_bytes'] / 2**30:6.1f} {memory_error:+6.0%}"
        )
    step_errors.sort()
    memory_errors.sort()
    print(
        f"{len(step_errors)} layouts: step median error {step_errors[len(step_errors) // 2]:+.0%}, "
        f"{inside} inside P10-P90; memory median error {memory_errors[len(memory_errors) // 2]:+.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
