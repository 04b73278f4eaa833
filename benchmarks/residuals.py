"""How far our predictions land from published figures, per family: the ranges every headline number carries.

For each family, the ratio actual ÷ predicted over the benchmark's rows, and its P10, P50 and P90 (empirical,
statistics.quantiles 'inclusive'). A prediction x then reads "x × P10 … x × P90" (or ÷ for a rate). Families:
* train-step-time: step time of the 30+ published training runs of benchmarks/accuracy.py (published tokens/s
  against ours, at the layouts the sources state);
* train-whole-run: GPU-hours of the published whole pre-training runs (benchmarks/whole_runs.py): wall time,
  GPU-hours and cost take it;
* memory-full, memory-lora, memory-qlora: measured peak memory (accuracy.py --memory);
* serve-throughput: output tokens/s of the TensorRT-LLM max-throughput rows (accuracy_serving.py) and of the
  serve_points_2.csv rows at their load points (accuracy_serve_points.py); cost per month scales inversely;
* serve-ttft, serve-tpot: time to first token and inter-token latency of the serve_points_2.csv rows at their load
  points (static batches, closed-loop clients, single streams): seconds, published ÷ predicted.
* serve-moe-throughput, serve-moe-tpot: the same for mixture-of-experts models, a regime of its own (routing, grouped
  GEMMs over experts, expert exchange, more kernels a layer): every MoE row lands optimistic (Mixtral +23…+43 %, the
  giant MoEs +33…+83 %), so they would widen the dense families' ranges; an MoE plan draws its ranges from these
  (MOE_FAMILY). No MoE TTFT is published in the set: an MoE plan's TTFT takes serve-ttft.
* train-cnn: a CNN's training step (images/s) of the published PyTorch ResNet-50 training tables
  (accuracy_cnn_train.py): step time, wall time, GPU-hours and cost of a CNN with a layer table take it;
* serve-vision, serve-vision-batch1: CNN images/s at a batch of 64-256, and at batch 1 (accuracy_vision.py); a
  batch's time, so the request latency, scales inversely. A plan takes the second when it sizes batch 1.
Usage: python benchmarks/residuals.py [--write]   (--write: compiler/catalog/residuals.yaml, which the compiler reads)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.accuracy import memory_cases, training_cases  # noqa: E402
from benchmarks.accuracy_cnn_train import FAMILY as CNN_TRAIN_FAMILY  # noqa: E402
from benchmarks.accuracy_cnn_train import cnn_train_cases  # noqa: E402
from benchmarks.accuracy_cnn_train import ratios as cnn_train_ratios  # noqa: E402
from benchmarks.accuracy_serve_points import moe_model_ids, point_cases  # noqa: E402
from benchmarks.accuracy_serving import serving_cases  # noqa: E402
from benchmarks.accuracy_vision import vision_cases  # noqa: E402
from benchmarks.whole_runs import FAMILY as WHOLE_RUN_FAMILY  # noqa: E402
from benchmarks.whole_runs import ratios as whole_run_ratios  # noqa: E402
from benchmarks.whole_runs import whole_run_cases  # noqa: E402

RESIDUALS = REPO / "compiler" / "catalog" / "residuals.yaml"
# The family an MoE model's row goes to instead of the dense one (compiler/passes/attach_ranges.py reads them the same way).
MOE_FAMILY = {"serve-throughput": "serve-moe-throughput", "serve-tpot": "serve-moe-tpot"}
SOURCES = {
    "train-step-time": "benchmarks/accuracy.py: published training throughput (benchmarks/calibration/training_runs.csv)",
    WHOLE_RUN_FAMILY: "benchmarks/whole_runs.py: published GPU-hours of whole pre-training runs (benchmarks/calibration/whole_runs.csv)",
    "memory-full": "benchmarks/accuracy.py --memory: measured peaks, full fine-tuning and pre-training",
    "memory-lora": "benchmarks/accuracy.py --memory: measured peaks, LoRA",
    "memory-qlora": "benchmarks/accuracy.py --memory: measured peaks, QLoRA",
    "serve-throughput": "benchmarks/accuracy_serving.py: TensorRT-LLM trtllm-bench max-throughput tables; accuracy_serve_points.py: serve_points_2.csv at each row's load point",
    "serve-ttft": "benchmarks/accuracy_serve_points.py: published TTFT at each serve_points_2.csv row's load point",
    "serve-tpot": "benchmarks/accuracy_serve_points.py: published inter-token latency at each serve_points_2.csv row's load point",
    "serve-moe-throughput": "MoE models only: accuracy_serving.py's Mixtral rows and accuracy_serve_points.py's MoE rows (Qwen3-235B-A22B, Llama-4-Maverick, DeepSeek-R1)",
    "serve-moe-tpot": "MoE models only: accuracy_serve_points.py's DeepSeek-R1 single-stream inter-token latency, without and with MTP",
    CNN_TRAIN_FAMILY: "benchmarks/accuracy_cnn_train.py: published ResNet-50 training images/s, PyTorch, 1 and 8 GPUs (benchmarks/calibration/vision_train_points.csv)",
    "serve-vision": "benchmarks/accuracy_vision.py: published CNN images/s at batch 64-256 (benchmarks/calibration/vision_points.csv)",
    "serve-vision-batch1": "benchmarks/accuracy_vision.py: published batch-1 detector latency on Jetson (benchmarks/calibration/vision_points.csv)",
}


def ratios() -> dict[str, list[float]]:
    """actual ÷ predicted per row, by family."""
    found: dict[str, list[float]] = {name: [] for name in SOURCES}
    for case in training_cases():
        if case.predicted_tokens_per_second_per_gpu and case.published_tokens_per_second_per_gpu:
            found["train-step-time"].append(
                case.predicted_tokens_per_second_per_gpu / case.published_tokens_per_second_per_gpu
            )
    found[WHOLE_RUN_FAMILY] = whole_run_ratios(whole_run_cases())
    found[CNN_TRAIN_FAMILY] = cnn_train_ratios(cnn_train_cases())
    for case in memory_cases():
        found[f"memory-{case.family}"].append(case.measured_bytes / case.predicted_bytes)
    moe = moe_model_ids()
    for case in serving_cases():
        found[_serve_family("serve-throughput", case.model_id in moe)].append(
            case.published_tokens_per_second / case.predicted_tokens_per_second
        )
    for case in point_cases()[0]:
        for c in case.comparisons:
            found[_serve_family(f"serve-{c.family}", case.statement.model in moe)].append(c.published / c.predicted)
    for case in vision_cases():
        family = "serve-vision-batch1" if case.regime == "batch1" else "serve-vision"
        found[family].append(case.published_items_per_second / case.predicted_items_per_second)
    return found


def _serve_family(family: str, is_moe: bool) -> str:
    return MOE_FAMILY.get(family, family) if is_moe else family


def families() -> dict[str, dict]:
    out = {}
    for name, values in ratios().items():
        cuts = statistics.quantiles(values, n=10, method="inclusive")
        out[name] = {
            "rows": len(values),
            "p10": round(cuts[0], 4),
            "p50": round(statistics.median(values), 4),
            "p90": round(cuts[-1], 4),
            "source": SOURCES[name],
        }
    return out


def residuals_text() -> str:
    lines = [
        "# Generated by `python benchmarks/residuals.py --write`; do not edit (tests/test_ranges.py checks it).",
        "# actual ÷ predicted over each family's benchmark rows: P10, P50, P90.",
        "families:",
    ]
    for name, f in families().items():
        lines.append(
            f'  {name}: {{rows: {f["rows"]}, p10: {f["p10"]}, p50: {f["p50"]}, p90: {f["p90"]}, source: "{f["source"]}"}}'
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    for name, f in families().items():
        print(
            f"{name:18s} {f['rows']:3d} rows  P10 {f['p10']:.3f}  P50 {f['p50']:.3f}  P90 {f['p90']:.3f}  ({f['source']})"
        )
    if "--write" in sys.argv[1:]:
        RESIDUALS.write_text(residuals_text(), encoding="utf-8")
        print(f"wrote {RESIDUALS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
