"""CNN serving throughput against published figures: python -m benchmarks.accuracy_vision

Family "CNN", in two regimes with a residual family each: batched throughput (serve-vision) and batch-1
latency (serve-vision-batch1, the edge detector rows, where launch and framework overhead dominate: the model's
fixed time per TensorRT layer, from MLPerf's C++ CUDA-graph runs, holds part of it). For each row of benchmarks/calibration/vision_points.csv marked used=yes this times the row's
model at the row's batch, GPU and precision with the serving model (compiler/sizing/vision.py: the per-layer
roofline), with the row's runtime fusion (cnn_layers: TensorRT fuses batch norm, activation and add into the
convolutions; PyTorch eager runs each as a kernel of its own), and
compares images/s. Rows marked otherwise are listed with the reason they are left out.
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script or as python -m benchmarks.…

from compiler.sizing.serve.replica import compute_dtype  # noqa: E402
from compiler.sizing.serve.vision import batch_time, flops_per_item, weights_bytes  # noqa: E402

VISION_POINTS = Path(__file__).resolve().parent / "calibration" / "vision_points.csv"
# tests/test_accuracy_vision.py fails beyond these |error|s (README, "Accuracy", says why): batched rows 45 %;
# batch-1 rows 200 % (today 191 %: the fixed time per TensorRT layer comes from C++ runs in CUDA graphs; the scored
# rows are Python-timed engine calls without one, whose host time no source gives). Was 350 % before that term.
TOLERANCE = {"batched": 0.45, "batch1": 2.0}


@dataclass(frozen=True)
class VisionCase:
    name: str
    regime: str  # batched | batch1
    published_items_per_second: float
    predicted_items_per_second: float
    active_params: int | None = None  # the model's active parameters (count_params)

    @property
    def error(self) -> float:
        return self.predicted_items_per_second / self.published_items_per_second - 1


def _rows() -> list[dict]:
    with VISION_POINTS.open() as f:
        return list(csv.DictReader(f))


def vision_cases() -> list[VisionCase]:
    from compiler.catalog.loader import load_gpus, load_models
    from compiler.catalog.params import count_params

    gpus, models, cases = load_gpus(), load_models(), []
    for row in _rows():
        if row["used"] != "yes":
            continue
        arch, gpu, precision, batch = (
            models[row["model"]].architecture,
            gpus[row["catalog_gpu"]],
            row["precision"],
            int(row["batch"]),
        )
        params = count_params(arch)
        timing = batch_time(
            arch,
            gpu,
            compute_dtype(precision, gpu),
            precision,
            flops_per_item(arch, params, 1),
            weights_bytes(params, precision),
            batch,
            fusion=row["fusion"],
        )
        cases.append(
            VisionCase(
                f"{row['model']} {precision} {row['gpu_type']} b{batch} {row['engine']}",
                "batch1" if batch == 1 else "batched",
                float(row["throughput_items_per_s"]),
                batch / timing.seconds,
                params.active,
            )
        )
    return cases


def left_out() -> list[tuple[str, str]]:
    return [
        (f"{r['model']} {r['gpu_type']} b{r['batch']} {r['engine']}", r["used"]) for r in _rows() if r["used"] != "yes"
    ]


def family_stats(cases: list[VisionCase], regime: str) -> tuple[int, float, float]:
    """Rows, median |error|, worst |error| of one regime."""
    errors = [abs(c.error) for c in cases if c.regime == regime]
    return len(errors), statistics.median(errors), max(errors)


def main() -> None:
    cases = vision_cases()
    print(f"{'case':64} {'pred img/s':>10} {'published':>10} {'error':>7}")
    for c in cases:
        print(f"{c.name:64} {c.predicted_items_per_second:10.0f} {c.published_items_per_second:10.0f} {c.error:+7.0%}")
    for regime in TOLERANCE:
        rows, median, worst = family_stats(cases, regime)
        print(
            f"CNN {regime}: {rows} rows, median |error| {median:.0%}, worst {worst:.0%} (tolerance {TOLERANCE[regime]:.0%})"
        )
    for name, why in left_out():
        print(f"left out: {name}: {why}")


if __name__ == "__main__":
    main()
