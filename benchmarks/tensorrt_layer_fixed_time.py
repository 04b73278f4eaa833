"""The fixed time per layer of a TensorRT engine on a Jetson (vision.TENSORRT_EDGE_LAYER_FIXED_SECONDS).

python -m benchmarks.tensorrt_layer_fixed_time

Each used row of benchmarks/calibration/mlperf_singlestream.csv is a published MLPerf Inference SingleStream latency
(90th percentile of one-image queries, NVIDIA's closed submissions: ResNet-50, INT8, TensorRT, batch 1, one CUDA graph
per query, GPU only, MaxP): the latency less our roofline for that model, precision and device (vision.batch_time
with TensorRT's fusions, without the fixed term), divided by the model's layers. The constant is the median over the
used rows. Rows marked otherwise are printed as cross-checks, not in the median (the L4: a data-centre GPU).
None of these rows is scored by benchmarks/accuracy_vision.py (Ultralytics' YOLO11 tables).
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.catalog.loader import load_gpus, load_models  # noqa: E402
from compiler.catalog.params import count_params  # noqa: E402
from compiler.sizing.serve.replica import compute_dtype  # noqa: E402
from compiler.sizing.serve.vision import batch_time, flops_per_item, weights_bytes  # noqa: E402

SINGLESTREAM = Path(__file__).resolve().parent / "calibration" / "mlperf_singlestream.csv"


@dataclass(frozen=True)
class SingleStreamRow:
    name: str
    model: str  # catalog preset with a layer table
    gpu: str  # catalog GPU
    precision: str
    latency_seconds: float  # published 90th percentile
    used: bool
    why_not: str  # '' when used; else the CSV's reason


def rows() -> list[SingleStreamRow]:
    with SINGLESTREAM.open() as f:
        return [
            SingleStreamRow(
                f"{r['round']} {r['system']}",
                r["model"],
                r["catalog_gpu"],
                r["precision"],
                int(r["p90_latency_ns"]) * 1e-9,
                r["used"] == "yes",
                "" if r["used"] == "yes" else r["used"].removeprefix("no: "),
            )
            for r in csv.DictReader(f)
        ]


def roofline_seconds(row: SingleStreamRow) -> tuple[float, int]:
    """Our batch-1 time for the row without the fixed term, and the model's layers."""
    arch, gpu = load_models()[row.model].architecture, load_gpus()[row.gpu]
    params = count_params(arch)
    t = batch_time(
        arch,
        gpu,
        compute_dtype(row.precision, gpu),
        row.precision,
        flops_per_item(arch, params, 1),
        weights_bytes(params, row.precision),
        1,
        fusion="tensorrt",
    )
    return t.seconds - t.fixed_seconds, t.layers


def per_layer_seconds(row: SingleStreamRow) -> float:
    roofline, layers = roofline_seconds(row)
    return (row.latency_seconds - roofline) / layers


def derived_seconds() -> float:
    """The median over the used rows: the constant vision.TENSORRT_EDGE_LAYER_FIXED_SECONDS holds."""
    return statistics.median(per_layer_seconds(r) for r in rows() if r.used)


def main() -> None:
    for row in rows():
        roofline, layers = roofline_seconds(row)
        print(
            f"{row.name:52s} {row.gpu:20s} published {row.latency_seconds * 1e3:5.3f} ms  roofline {roofline * 1e3:5.3f} ms"
            f"  {layers} layers  per layer {per_layer_seconds(row) * 1e6:4.2f} µs{'' if row.used else '  (not in the median: ' + row.why_not + ')'}"
        )
    print(f"median of the used rows: {derived_seconds() * 1e6:.2f} µs per layer")


if __name__ == "__main__":
    main()
