"""llm-analysis (benchmarks/peer_llm_analysis.py) on the rows of benchmarks/residuals.py, each as its source states it.

Every row gets a PeerRow with the same family and name as its residuals.Row and the same ratio, actual ÷ predicted,
with llm-analysis's prediction in place of ours; or the reason llm-analysis cannot express it. What is stated:
* train-step-time (accuracy.py's published steps, h200_pinned.py's measured ones): model shape, GPU, precision,
  TP/PP/DP, ZeRO, micro-batch, accumulation, recompute and flash attention as the row states (unstated TP/PP: 1;
  llm-analysis's tokens/s per GPU does not depend on the layout: no communication, no pipeline bubble);
* train-whole-run (whole_runs.py): the same, with the run's tokens: its gpu_hours;
* memory-full (accuracy.py --memory, the H200 steps): its weight + optimizer + gradient + activation bytes per GPU;
* serving (accuracy_serving.py, accuracy_serve_points.py): inference() at the row's batch (a static batch or
  closed-loop clients per replica; at max load the batch our search sizes, capped at the largest its memory model
  admits), prompt and output lengths. Throughput is
  its batch ÷ per-token latency (prefill included), TTFT its prefill of the batch (of one request for a p50 under a
  closed loop), TPOT one decode step. Attention-DP replicas are expressed as TP over all their GPUs.
Usage: python benchmarks/peer_rows.py
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import accuracy, h200_pinned, whole_runs  # noqa: E402
from benchmarks import peer_llm_analysis as peer  # noqa: E402
from benchmarks.accuracy_serve_points import GPT_J_6B, moe_model_ids, point_cases  # noqa: E402
from benchmarks.accuracy_serving import serving_cases  # noqa: E402
from compiler.catalog.loader import load_gpus, load_models  # noqa: E402
from compiler.catalog.params import count_params  # noqa: E402
from compiler.catalog.types import Architecture  # noqa: E402
from compiler.sizing.train.flops import COMPUTE_DTYPE, model_flops_per_token  # noqa: E402

# What llm-analysis 0.2.2 has no term for: rows needing one are left out, with the reason
NO_LORA = "LoRA/QLoRA: no frozen base or adapters in its memory model"
NO_OFFLOAD = "CPU offload or paging (parameters, optimizer states or activations): not in its memory model"
NO_FUSED_OPTIMIZER = "optimizer step fused into the backward (no whole-model gradients held): not in its memory model"
NO_SPECULATIVE = "MTP speculative decoding: not in its inference model"
NO_FIT = "its inference() refuses the point: weights + KV cache + activations exceed its GPU memory"
NOT_TRANSFORMER = "CNNs: its model is a transformer"
PEER_VERSION = "0.2.2"  # scripts/install-test-deps.sh pins it
MEMORY_GPU = "h100-sxm-80gb"  # the GPU does not enter its memory figure (only the warnings that compare with it)


@dataclass(frozen=True)
class PeerRow:
    family: str
    name: str
    ratio: float | None  # actual ÷ llm-analysis's prediction, as residuals.Row.ratio; None: left out
    left_out: str = ""


def _step_layout(pins, gpus: int, batch: int, precision: str, flash: bool) -> peer.PeerLayout:
    tp, pp = pins.tp or 1, pins.pp or 1
    dp = max(1, gpus // (tp * pp))
    micro = pins.micro_batch if getattr(pins, "micro_batch", None) else 1
    return peer.PeerLayout(
        tp=tp,
        pp=pp,
        dp=dp,
        zero=pins.zero_stage or 0,
        micro_batch=micro,
        accumulation=max(1, batch // (micro * dp)),
        recompute=pins.recompute or "none",
        precision=precision,
        flash_attention=flash,
    )


def training_rows() -> list[PeerRow]:
    """accuracy.py's published steps: llm-analysis's tokens/s per GPU against the published one."""
    gpus, found = load_gpus(), []
    with accuracy.RUNS.open() as handle:
        for row in csv.DictReader(handle):
            gpu_id = accuracy._gpu_id(row["gpu_type"])
            name = f"{row['model']} s{row['seq_len'] or 2048} on {row['gpu_count'] or '?'} × {gpu_id}"
            if not row["gpu_count"] or not row["seq_len"]:
                continue
            count, seq = int(row["gpu_count"]), int(row["seq_len"])
            arch, family = accuracy._architecture(row)
            precision = "fp8" if "fp8" in row["precision"] else "bf16"
            batch, _ = accuracy._global_batch(row, count)
            layout = _step_layout(accuracy._pins(row, family), count, batch, precision, family != "megatron-2021")
            gpu = gpus[gpu_id]
            flops = model_flops_per_token(arch, count_params(arch), seq)
            published, _ = accuracy._published(row, arch, family, gpu.dense_tflops[COMPUTE_DTYPE[precision]], flops)
            predicted = peer.tokens_per_second_per_gpu(peer.training(arch, gpu, layout, seq), seq)
            found.append(PeerRow("train-step-time", name, predicted / published))
    return found


def _h200_layout(plan: dict) -> peer.PeerLayout:
    train, parallel = plan["train"], plan["parallelism"]
    pure = train.get("master_weights") == "none"
    micro = int(parallel["micro_batch"])
    return peer.PeerLayout(
        zero=int(parallel.get("zero_stage", 0)),
        micro_batch=micro,
        accumulation=max(1, int(train["global_batch"]) // micro),
        recompute=parallel["recompute"],
        master_bytes=2 if pure else 4,
        state_bytes=4 if pure else 8,
    )


def h200_rows() -> list[PeerRow]:
    """The H200 steps we measured: step seconds (train-step-time) and bytes per GPU (memory-full)."""
    gpu, found = load_gpus()[h200_pinned.GPU], []
    for row in h200_pinned.measured_rows():
        plan = yaml.safe_load(h200_pinned.plan_text(row))
        arch = Architecture(**plan["model"]["architecture"])
        summary = peer.training(arch, gpu, _h200_layout(plan), int(plan["train"]["seq_len"]))
        found.append(PeerRow("train-step-time", row["case"], float(row["step_seconds"]) / summary["latency_per_iter"]))
        memory = float(row["peak_allocated_bytes"]) / peer.memory_bytes(summary)
        found.append(PeerRow("memory-full", row["case"], memory))
    return found


def whole_run_rows() -> list[PeerRow]:
    """whole_runs.py's pre-training runs: llm-analysis's gpu_hours for the run's tokens."""
    gpus, found = load_gpus(), []
    with whole_runs.WHOLE_RUNS.open() as handle:
        for row in csv.DictReader(handle):
            count = int(row["gpu_count"])
            name = f"{row['model']} {float(row['tokens']) / 1e12:g}T on {count} × {row['gpu_type']}"
            r = whole_runs.request(row)
            layout = _step_layout(r.pins, count, r.global_batch_sequences, r.precision, r.flash_attention)
            summary = peer.training(r.arch, gpus[r.gpu_ids[0]], layout, r.seq_len, r.tokens)
            found.append(PeerRow(whole_runs.FAMILY, name, whole_runs.published_gpu_hours(row) / summary["gpu_hours"]))
    return found


def _memory_layout(pins: dict) -> peer.PeerLayout:
    pure = pins["options"].get("master_weights") == "none"
    states = 2 if pins.get("optimizer", "adamw").startswith("adamw-8bit") else (4 if pure else 8)
    return peer.PeerLayout(
        tp=pins.get("tp", 1),
        pp=pins.get("pp", 1),
        dp=pins.get("dp", 1),
        zero=pins.get("zero", 0),
        micro_batch=pins["mb"],
        recompute=pins["recompute"],
        master_bytes=2 if pure else 4,
        state_bytes=states,
    )


def _memory_row(name: str, pins: dict, measured_bytes: float, gpu) -> PeerRow:
    family = f"memory-{pins['method']}"
    if pins["method"] != "full":
        return PeerRow(family, name, None, NO_LORA)
    if pins.get("offload") or pins["options"].get("activation_offload") or "paged" in pins.get("optimizer", ""):
        return PeerRow(family, name, None, NO_OFFLOAD)
    if pins["options"].get("optimizer_in_backward"):
        return PeerRow(family, name, None, NO_FUSED_OPTIMIZER)
    model = pins["model"]
    arch = load_models()[model].architecture if isinstance(model, str) else model
    summary = peer.training(arch, gpu, _memory_layout(pins), pins["seq"])
    return PeerRow(family, name, measured_bytes / peer.memory_bytes(summary))


def memory_rows() -> list[PeerRow]:
    """accuracy.py --memory's measured peaks against its bytes per GPU."""
    gpu, found = load_gpus()[MEMORY_GPU], []
    for row in accuracy._memory_peak_rows():
        pins = accuracy.MEMORY_ROWS.get(row["case"])
        if pins is not None:
            measured = accuracy._measured_bytes(row["peak_memory_value"], row["peak_memory_unit"])
            found.append(_memory_row(row["case"], pins, measured, gpu))
    bloom = "BLOOM-176B TP4 PP12 DP8 ZeRO-1 (memory_points.csv)"
    return found + [_memory_row(bloom, accuracy.BLOOM_ROW, 60e9, gpu)]


def _serve(arch, gpu, point: peer.ServePoint) -> dict | None:
    try:
        return peer.inference(arch, gpu, point)
    except AssertionError:  # its own memory check: the point does not fit
        return None


def _serve_at_most(arch, gpu, point: peer.ServePoint) -> dict | None:
    """At max load: the batch our search sizes, or the largest llm-analysis's memory model admits when that is less
    (what a user of it would run: its own decode_max_batch_size_per_gpu and prefill_max_batch_size_per_gpu)."""
    summary = _serve(arch, gpu, point)
    one = summary or _serve(arch, gpu, replace(point, batch=1))
    if summary or one is None:
        return summary
    cap = min(point.batch, one["decode_max_batch_size_per_gpu"], one["prefill_max_batch_size_per_gpu"])
    return next((s for b in (cap, cap - 1) if b >= 1 and (s := _serve(arch, gpu, replace(point, batch=b)))), None)


def _kv_bytes(precision: str, kv_dtype: str) -> float:
    return 1.0 if (kv_dtype or ("fp8" if precision == "fp8" else "auto")) == "fp8" else 2.0


def serving_rows() -> list[PeerRow]:
    """accuracy_serving.py's max-throughput rows at the batch our search sizes: output tokens/s per replica."""
    gpus, models, moe, found = load_gpus(), load_models(), moe_model_ids(), []
    for case in serving_cases():
        family = "serve-moe-throughput" if case.model_id in moe else "serve-throughput"
        kv = _kv_bytes(case.precision, "")
        point = peer.ServePoint(case.precision, kv, case.tp, case.batch, case.prompt_tokens, case.output_tokens)
        summary = _serve_at_most(models[case.model_id].architecture, gpus[case.gpu_id], point)
        ratio = case.published_tokens_per_second / summary["total_tokens_per_sec"] if summary else None
        found.append(PeerRow(family, case.name, ratio, "" if summary else NO_FIT))
    return found


def _point_predictions(case, arch, gpu) -> dict[str, float] | str:
    """llm-analysis's throughput, TTFT and TPOT at one serve_points_2.csv row's point, or why it has none."""
    s = case.statement
    if s.speculative_tokens:
        return NO_SPECULATIVE
    replicas = 1 if s.load == "max-load" else case.replicas
    batch = case.batch if s.load == "max-load" else math.ceil(s.clients / replicas)
    kv = _kv_bytes(s.precision, s.kv_cache_dtype)
    serve = _serve_at_most if s.load == "max-load" else _serve
    at_batch = serve(arch, gpu, peer.ServePoint(s.precision, kv, s.gpus, batch, s.prompt_tokens, s.output_tokens))
    one = _serve(arch, gpu, peer.ServePoint(s.precision, kv, s.gpus, 1, s.prompt_tokens, s.output_tokens))
    if at_batch is None or one is None:
        return NO_FIT
    return {
        "throughput": at_batch["total_tokens_per_sec"] * replicas,
        "ttft": (at_batch if s.ttft == "together" else one)["prefill_latency"],
        "tpot": at_batch["decode_latency"],
    }


def point_rows() -> list[PeerRow]:
    """accuracy_serve_points.py's rows at their load points: each published figure against llm-analysis's."""
    gpus, models, moe, found = load_gpus(), load_models(), moe_model_ids(), []
    for case in point_cases()[0]:
        s = case.statement
        arch = GPT_J_6B if s.model == "gpt-j-6b" else models[s.model].architecture
        predicted = _point_predictions(case, arch, gpus[s.gpu_id])
        for c in case.comparisons:
            family = f"serve-{c.family}"
            family = (
                {"serve-throughput": "serve-moe-throughput", "serve-tpot": "serve-moe-tpot"}.get(family, family)
                if s.model in moe
                else family
            )
            name = f"{case.name} {c.family}"
            if isinstance(predicted, str):
                found.append(PeerRow(family, name, None, predicted))
            else:
                found.append(PeerRow(family, name, c.published / predicted[c.family]))
    return found


@lru_cache(maxsize=1)
def peer_rows() -> tuple[PeerRow, ...]:
    """Every row llm-analysis is asked about, in residuals.labelled_rows()'s order within each family."""
    if not peer.available():
        raise RuntimeError("llm-analysis is not installed: pip install --no-deps llm-analysis==0.2.2 'fire<0.6'")
    return tuple(training_rows() + whole_run_rows() + h200_rows() + memory_rows() + serving_rows() + point_rows())


def main() -> None:
    for r in peer_rows():
        shown = f"{1 / r.ratio - 1:+7.0%}" if r.ratio else f"left out: {r.left_out}"
        print(f"{r.family:21s} {r.name[:80]:80s} {shown}")


if __name__ == "__main__":
    main()
