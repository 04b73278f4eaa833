"""CNN training throughput against published figures: python -m benchmarks.accuracy_cnn_train

Family "CNN training" (residual family train-cnn). For each row of benchmarks/calibration/vision_train_points.csv
marked used=yes this times one optimizer step of the row's model at the row's per-GPU batch, GPU count (data
parallel), GPU and precision with the training model (compiler/sizing/train/time.step_time, which sizes a CNN with a
layer table kernel by kernel: compiler/sizing/cnn_train.py) and compares images/s. The optimizer is the recipes' SGD
with momentum (fp32 weights and momentum, 8 bytes a parameter), the gradients all-reduced in 16 bits as the plans
assume. Rows marked otherwise are listed with the reason they are left out.
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script or as python -m benchmarks.…

from compiler.sizing.train.communication import INTER_NODE_ACHIEVABLE_FRACTION, NVLINK_ACHIEVABLE_FRACTION  # noqa: E402
from compiler.sizing.train.layout import Layout, Links, Workload  # noqa: E402
from compiler.sizing.train.step_rates import GRADIENT_BYTES, StepTraffic  # noqa: E402
from compiler.sizing.train.time import step_time  # noqa: E402

POINTS = Path(__file__).resolve().parent / "calibration" / "vision_train_points.csv"
FAMILY = "train-cnn"
# tests/test_accuracy_cnn_train.py fails beyond these |published ÷ predicted − 1| (README, "Accuracy", says why): 35 %,
# the training tolerance the fitted constant was held to, for every row but the 8-GPU AMP rows on DGX A100, whose
# published strong scaling (6.72× against TF32's 7.72× on the same node) shows a host-side limit: 40 %.
TOLERANCE = 0.35
HOST_LIMITED_TOLERANCE = 0.40
SGD_STATE_BYTES_PER_PARAM = 8  # fp32 weights + fp32 momentum (torch.optim.SGD; native AMP keeps fp32 parameters)
# the links: a node of 8 GPUs on 50 GB/s NICs at 5 µs (one GPU type per row; DP inside a node)
LINKS = Links(8, 50e9, 5e-6, NVLINK_ACHIEVABLE_FRACTION, INTER_NODE_ACHIEVABLE_FRACTION)


@dataclass(frozen=True)
class CnnTrainCase:
    name: str
    gpus: int
    host_limited: bool
    published_items_per_second: float
    predicted_items_per_second: float
    active_params: int | None = None  # the model's active parameters (count_params)

    @property
    def error(self) -> float:
        """published ÷ predicted − 1 (the training tests' convention): negative when we are optimistic."""
        return self.published_items_per_second / self.predicted_items_per_second - 1


def _rows() -> list[dict]:
    with POINTS.open() as f:
        return list(csv.DictReader(f))


def cnn_train_cases() -> list[CnnTrainCase]:
    from compiler.catalog.loader import load_gpus, load_models
    from compiler.catalog.params import count_params

    gpus, models, cases = load_gpus(), load_models(), []
    for row in _rows():
        if row["used"] != "yes":
            continue
        arch, gpu = models[row["model"]].architecture, gpus[row["catalog_gpu"]]
        params, n, batch = count_params(arch), int(row["gpus"]), int(row["batch_per_gpu"])
        work = Workload(arch, params, seq_len=1, global_batch_sequences=batch * n, precision=row["precision"])
        traffic = StepTraffic(
            state_bytes_on_gpu=SGD_STATE_BYTES_PER_PARAM * params.total,
            gradient_bytes_per_replica=GRADIENT_BYTES * params.total,
        )
        step = step_time(work, Layout(dp=n, micro_batch=batch), gpu, LINKS, traffic)
        name = f"{row['model']} {row['precision']} {row['gpu_type']} ×{n} b{batch} {row['memory_format']}"
        published, predicted = float(row["throughput_items_per_s"]), batch * n / step.total
        host_limited = "host-side limit" in row["notes"]
        cases.append(CnnTrainCase(name, n, host_limited, published, predicted, params.active))
    return cases


def tolerance(case: CnnTrainCase) -> float:
    return HOST_LIMITED_TOLERANCE if case.host_limited else TOLERANCE


def left_out() -> list[tuple[str, str]]:
    return [
        (f"{r['model']} {r['gpu_type']} {r['framework']} ×{r['gpus']}", r["used"])
        for r in _rows()
        if r["used"] != "yes"
    ]


def family_stats(cases: list[CnnTrainCase]) -> tuple[int, float, float]:
    """Rows, median |error|, worst |error|."""
    errors = [abs(c.error) for c in cases]
    return len(errors), statistics.median(errors), max(errors)


def ratios(cases: list[CnnTrainCase]) -> list[float]:
    """actual ÷ predicted step time per row (= predicted ÷ published images/s), for residuals.py."""
    return [c.predicted_items_per_second / c.published_items_per_second for c in cases]


def share_inside_range(cases: list[CnnTrainCase]) -> float:
    """Rows whose published images/s fall inside the predicted P10–P90 of the committed train-cnn residuals."""
    from compiler.catalog.residuals import load_residuals

    r = load_residuals()[FAMILY]
    return sum(r.p10 <= x <= r.p90 for x in ratios(cases)) / len(cases)


def main() -> None:
    cases = cnn_train_cases()
    print(f"{'case':58} {'pred img/s':>10} {'published':>10} {'error':>7}")
    for c in cases:
        print(f"{c.name:58} {c.predicted_items_per_second:10.0f} {c.published_items_per_second:10.0f} {c.error:+7.0%}")
    rows, median, worst = family_stats(cases)
    print(
        f"CNN training: {rows} rows, median |error| {median:.0%}, worst {worst:.0%} (tolerance {TOLERANCE:.0%}, "
        f"host-limited rows {HOST_LIMITED_TOLERANCE:.0%}); {share_inside_range(cases):.0%} inside P10–P90"
    )
    for name, why in left_out():
        print(f"left out: {name}: {why}")


if __name__ == "__main__":
    main()
