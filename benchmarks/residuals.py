"""How far our predictions land from published figures, per family: the ranges every headline number carries.

For each family, the ratio actual ÷ predicted over the benchmark's rows published up to CUTOFF_YEAR (or undated), and
the P10, P50 and P90 of the next row's ratio (`interval`: a prediction interval on log ratios, wider where a family is
thin). A roofline prediction x then reads "x × P10 … x × P50 … x × P90" (or ÷ for a rate), and the headline is the
P50. Rows published after CUTOFF_YEAR never fit; benchmarks/coverage.py measures the ranges on them. Families:
* train-step-time: step time of the 30+ published training runs of benchmarks/accuracy.py (published tokens/s
  against ours, at the layouts the sources state); and the seven single-GPU steps we measured on an H200
  (benchmarks/h200_pinned.py, calibration/h200_measured.csv), against the roofline of the plan each ran;
* train-whole-run: GPU-hours of the published whole pre-training runs (benchmarks/whole_runs.py): wall time,
  GPU-hours and cost take it;
* memory-full, memory-lora, memory-qlora: measured peak memory (accuracy.py --memory), and the same seven H200 steps'
  max_memory_allocated against the plan's allocated bytes (memory-full). The H200 rows are dated 2026 (measured
  2026-11-28): like every row after CUTOFF_YEAR they never fit, so they measure the ranges out of sample;
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
Each family also records what its fitted rows cover: the GPUs they ran on (`gpus`) and the fewest and most active
parameters of their models (`active_params`, compiler.catalog.params.count_params as the compiler counts a plan's),
each empty where a row does not name it; compiler/passes/attach_ranges.py marks a plan outside them.
Usage: python benchmarks/residuals.py [--write]   (--write: compiler/catalog/residuals.yaml, which the compiler reads)
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.accuracy import memory_cases, training_cases  # noqa: E402
from benchmarks.accuracy_cnn_train import FAMILY as CNN_TRAIN_FAMILY  # noqa: E402
from benchmarks.accuracy_cnn_train import cnn_train_cases  # noqa: E402
from benchmarks.accuracy_cnn_train import ratios as cnn_train_ratios  # noqa: E402
from benchmarks.accuracy_serve_points import moe_model_ids, point_cases  # noqa: E402
from benchmarks.accuracy_serve_points import rows as serve_point_rows  # noqa: E402
from benchmarks.accuracy_serving import serving_cases  # noqa: E402
from benchmarks.accuracy_vision import vision_cases  # noqa: E402
from benchmarks.h200_pinned import GPU as H200_GPU  # noqa: E402
from benchmarks.h200_pinned import h200_cases  # noqa: E402
from benchmarks.published_dates import published_year, year_by_prefix, years_by, years_by_index  # noqa: E402
from benchmarks.whole_runs import FAMILY as WHOLE_RUN_FAMILY  # noqa: E402
from benchmarks.whole_runs import whole_run_cases  # noqa: E402

RESIDUALS = REPO / "compiler" / "catalog" / "residuals.yaml"
# The time split: rows published after this year never fit a family; the benchmark reports them on their own. A
# family with fewer than MIN_FIT_ROWS rows, or rows from fewer than MIN_FIT_SOURCES documents, up to it moves its
# cut-off to the first year that gives it both: rows of one document share its engine, settings and bias, so one
# document alone cannot say how far the next source lands (its rows' spread is not the spread between sources).
CUTOFF_YEAR = 2023
MIN_FIT_ROWS = 3
MIN_FIT_SOURCES = 2
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


@dataclass(frozen=True)
class Row:
    family: str
    name: str
    ratio: float  # actual ÷ predicted
    year: int | None  # published (benchmarks/published_dates.py); None: the source names no year
    gpu: str | None = None  # the catalog GPU the row ran on, where the benchmark names one
    measured_here: bool = False  # measured by this project (benchmarks/h200_pinned.py), not published by others
    active_params: int | None = None  # the row's model's active parameters (compiler.catalog.params.count_params)
    source: str | None = None  # the document the row is from (source_document); None: the row counts as its own


@lru_cache(maxsize=1)
def labelled_rows() -> tuple[Row, ...]:
    """Every row's actual ÷ predicted, with its family, name and year of publication."""
    found: list[Row] = []
    for case in training_cases():
        if case.predicted_tokens_per_second_per_gpu and case.published_tokens_per_second_per_gpu:
            ratio = case.predicted_tokens_per_second_per_gpu / case.published_tokens_per_second_per_gpu
            year = year_by_prefix(case.name, "training_runs.csv", "model")
            found.append(Row("train-step-time", case.name, ratio, year, case.gpu, active_params=case.active_params))
    for case in whole_run_cases():
        if case.predicted_gpu_hours:
            year = year_by_prefix(case.name, "whole_runs.csv", "model")
            ratio = case.published_gpu_hours / case.predicted_gpu_hours
            found.append(Row(WHOLE_RUN_FAMILY, case.name, ratio, year, active_params=case.active_params))
    for case in h200_cases():  # measured step ÷ roofline step, as the published rows' tokens/s ratio
        found.append(Row("train-step-time", case.name, case.step_ratio, case.year, H200_GPU, True, case.active_params))
        found.append(Row("memory-full", case.name, case.memory_ratio, case.year, H200_GPU, True, case.active_params))
    cnn = cnn_train_cases()
    found += [
        Row(CNN_TRAIN_FAMILY, f"ResNet-50 row {i}", r, None, active_params=case.active_params)
        for i, (r, case) in enumerate(zip(cnn_train_ratios(cnn), cnn))
    ]
    for case in memory_cases():
        year = years_by("memory_peaks_2.csv", "case").get(case.name) or years_by(
            "memory_peaks_torchtitan.csv", "case"
        ).get(case.name)
        ratio = case.measured_bytes / case.predicted_bytes
        found.append(Row(f"memory-{case.family}", case.name, ratio, year, active_params=case.active_params))
    moe = moe_model_ids()
    for case, year in zip(serving_cases(), years_by_index("inference_points.csv"), strict=True):
        family = _serve_family("serve-throughput", case.model_id in moe)
        ratio = case.published_tokens_per_second / case.predicted_tokens_per_second
        found.append(Row(family, case.name, ratio, year, gpu=case.gpu_id, active_params=case.active_params))
    dated = years_by_index("serve_points_2.csv")
    documents = [source_document(row["source"]) for row in serve_point_rows()]
    for case in point_cases()[0]:
        for c in case.comparisons:
            family = _serve_family(f"serve-{c.family}", case.statement.model in moe)
            ratio, gpu = c.published / c.predicted, case.statement.gpu_id
            name, year = f"{case.name} {c.family}", dated[case.row]
            found.append(Row(family, name, ratio, year, gpu, False, case.active_params, documents[case.row]))
    for case in vision_cases():
        family = "serve-vision-batch1" if case.regime == "batch1" else "serve-vision"
        ratio = case.published_items_per_second / case.predicted_items_per_second
        found.append(Row(family, case.name, ratio, None, active_params=case.active_params))
    return tuple(replace(row, year=published_year(row.name, row.year)) for row in found)


def ratios(rows: tuple[Row, ...] | None = None) -> dict[str, list[float]]:
    """actual ÷ predicted per row the fit may see (published up to CUTOFF_YEAR, or undated), by family."""
    found: dict[str, list[float]] = {name: [] for name in SOURCES}
    for row in labelled_rows() if rows is None else rows:
        if not held_out(row):
            found[row.family].append(row.ratio)
    return found


def held_out(row: Row) -> bool:
    """Published after its family's cut-off (cutoff_year): it never fits, the benchmark measures the range on it."""
    return row.year is not None and row.year > cutoff_year(row.family)


@cache
def source_document(source: str) -> str:
    """The document a CSV row's source names: its text before the first ' (' or ';' (the table, settings and quotes
    that follow tell rows of one document apart, not documents)."""
    return re.split(r" \(|;", source, maxsplit=1)[0].strip()


def cutoff_year(family: str) -> int:
    """CUTOFF_YEAR, or the first later year up to which the family has MIN_FIT_ROWS rows from MIN_FIT_SOURCES
    documents (undated rows count; a row without a named document counts as one of its own): a family whose rows are
    mostly recent fits on its earliest years and is measured on the later ones. A family that never has that many
    keeps them all (nothing held out; the benchmark says so)."""
    rows = [r for r in labelled_rows() if r.family == family]
    years = sorted({r.year for r in rows if r.year is not None})
    for year in [CUTOFF_YEAR] + [y for y in years if y > CUTOFF_YEAR]:
        fitted = [r for r in rows if r.year is None or r.year <= year]
        sources = {r.source or f"row {i}" for i, r in enumerate(fitted)}
        if len(fitted) >= MIN_FIT_ROWS and len(sources) >= MIN_FIT_SOURCES:
            return year
    return max(years, default=CUTOFF_YEAR)


def _serve_family(family: str, is_moe: bool) -> str:
    return MOE_FAMILY.get(family, family) if is_moe else family


# Student's t 0.90 quantile by degrees of freedom 1..30 (any t table; scipy.stats.t.ppf(0.9, df) to 3 places), then
# the normal 1.2816 beyond: a P10-P90 prediction interval for one new row of a family.
T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356, 1.350, 1.345, 1.341)
T90 += (1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318, 1.316, 1.315, 1.314, 1.313, 1.311, 1.310)
Z90 = 1.2816


def interval(values: list[float], documents: list[object] | None = None) -> tuple[float, float, float]:
    """(P10, P50, P90) of the next row's actual ÷ predicted: a prediction interval on log ratios for a row of a new
    document, rows grouped by the document they come from (`documents`, parallel to `values`; None: each row its own).

    Rows of one document share its engine, settings and bias, so the next source lands about as far as documents
    differ, not rows: the one-way random-effects prediction for a new study (Higgins, Thompson & Spiegelhalter 2009, "A
    re-evaluation of random-effects meta-analysis", J. R. Stat. Soc. A 172(1), §3.4): about the mean m of the k
    documents' means, exp(m ± t(0.90, k−1) · √(s_b² · (1 + 1/k) + s_w² · (1 − 1/ñ))), s_b² the variance of the
    document means (its part of the within-document spread is topped up by s_w², the pooled within-document
    variance, ñ the harmonic mean of the documents' row counts). With one row per document it is the normal prediction
    interval exp(m ± t(0.90, n−1) · s · √(1 + 1/n)) (Geisser 1993, Predictive Inference, ch. 2). It widens where a
    family is thin (in rows or in documents) and narrows where it is dense; the P50 is exp(m). A family of one
    document cannot measure how documents differ: its rows are taken as independent (each its own document)."""
    logs = [math.log(v) for v in values]
    groups: dict[object, list[float]] = {}
    for i, x in enumerate(logs):
        groups.setdefault(i if documents is None else documents[i], []).append(x)
    if len(groups) < 2:
        groups = {i: [x] for i, x in enumerate(logs)}
    k, means = len(groups), [statistics.fmean(g) for g in groups.values()]
    mean = statistics.fmean(means)
    between = statistics.variance(means) if k > 1 else 0.0
    within_sum = sum((x - statistics.fmean(g)) ** 2 for g in groups.values() for x in g)
    within = within_sum / (len(logs) - k) if len(logs) > k else 0.0
    harmonic = k / sum(1 / len(g) for g in groups.values())
    t = T90[k - 2] if k - 1 <= len(T90) else Z90
    half = t * math.sqrt(between * (1 + 1 / k) + within * (1 - 1 / harmonic))
    return math.exp(mean - half), math.exp(mean), math.exp(mean + half)


def document_labels(rows: list[Row]) -> list[object]:
    """Each row's document (Row.source); a row that names none is a document of its own."""
    return [r.source or ("row", i) for i, r in enumerate(rows)]


def interval_of(rows: list[Row]) -> tuple[float, float, float]:
    """`interval` over rows, grouped by their documents."""
    return interval([r.ratio for r in rows], document_labels(rows))


def _fitted(rows: tuple[Row, ...] | None) -> dict[str, list[Row]]:
    found: dict[str, list[Row]] = {name: [] for name in SOURCES}
    for row in labelled_rows() if rows is None else rows:
        if not held_out(row):
            found[row.family].append(row)
    return found


def gpus(rows: tuple[Row, ...] | None = None) -> dict[str, list[str]]:
    """The GPUs each family's fitted rows ran on, where every row names one (else no claim: an empty list)."""
    found = _fitted(rows)
    return {f: sorted({r.gpu for r in rs}) if rs and all(r.gpu for r in rs) else [] for f, rs in found.items()}


def active_params_span(rows: tuple[Row, ...] | None = None) -> dict[str, list[int]]:
    """[fewest, most] active parameters of each family's fitted rows' models, where every row names its model's
    count (else no claim: an empty list)."""
    found = _fitted(rows)
    return {
        f: [min(r.active_params for r in rs), max(r.active_params for r in rs)]
        if rs and all(r.active_params for r in rs)
        else []
        for f, rs in found.items()
    }


def families(rows: tuple[Row, ...] | None = None) -> dict[str, dict]:
    out, support, sizes = {}, gpus(rows), active_params_span(rows)
    for name, fitted in _fitted(rows).items():
        p10, p50, p90 = interval_of(fitted)
        out[name] = {
            "rows": len(fitted),
            "p10": round(p10, 4),
            "p50": round(p50, 4),
            "p90": round(p90, 4),
            "gpus": support[name],
            "active_params": sizes[name],
            "source": SOURCES[name],
        }
    return out


def residuals_text() -> str:
    lines = [
        "# Generated by `python benchmarks/residuals.py --write`; do not edit (tests/test_ranges.py checks it).",
        "# actual ÷ predicted over each family's benchmark rows: P10, P50, P90; gpus: what its rows ran on; active_params:",
        "# the fewest and most active parameters of its rows' models (either empty: not known for every row).",
        "families:",
    ]
    for name, f in families().items():
        lines.append(
            f"  {name}: {{rows: {f['rows']}, p10: {f['p10']}, p50: {f['p50']}, p90: {f['p90']}, "
            f"gpus: [{', '.join(f['gpus'])}], active_params: [{', '.join(map(str, f['active_params']))}], "
            f'source: "{f["source"]}"}}'
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
