"""The one place sizing's reasons become English: `words(reason)` for a `sizing.reasons.Reason`.

The searches return codes and figures (bytes, seconds, USD, ids); each code below has one sentence. Passes word
what they put into the resolved plan (decisions, warnings, rejections, infeasible plans); so does anything else
that shows a search's reasons (benchmarks, tests). tests/test_wording.py checks that every code the sizing
modules use is worded here, and nothing else is. The decisions the sizing passes record are worded in
wording_training.py and wording_serving.py; what a framework path cannot run, in wording_gaps.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..sizing.reasons import Reason
from ..units import format_seconds, format_usd
from .wording_gaps import FRAMEWORK_GAPS

GIB = 2**30


FUSION_WORDS = {
    "tensorrt": "batch norm, activation and residual add fused into the convolutions, as TensorRT builds them",
    "onnxruntime": "ONNX Runtime folds batch norm into the convolutions; activations and residual adds run as kernels of their own",
    "eager": "batch norm, activation and residual add each a kernel of their own",
}


def words(reason: Reason) -> str:
    return SENTENCES[reason.code](**dict(reason.facts))


def rejection_rows(rejections: Iterable[Any], limit: int | None = None) -> list[tuple[str, str]]:
    """(description, sentence) of each rejection, in order; sorted by both first when `limit` keeps a bounded,
    deterministic sample (the serving searches return every rejection they met)."""
    rows = [(r.description, words(r.reason)) for r in rejections]
    return rows if limit is None else sorted(rows)[:limit]


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _ms(seconds: float, digits: int) -> str:
    return f"{seconds * 1e3:.{digits}f}"


def _rejection(r: Any) -> str:
    return f"{r.description}: {words(r.reason)}"


def _no_batch_meets_slo(batch: int, ttft: float, ttft_slo: float | None, tpot: float, tpot_slo: float | None) -> str:
    parts = []
    if ttft_slo and ttft > ttft_slo:
        parts.append(f"TTFT p99 {_ms(ttft, 0)} ms > {_ms(ttft_slo, 0)} ms")
    if tpot_slo and tpot > tpot_slo:
        parts.append(f"TPOT p99 {_ms(tpot, 1)} ms > {_ms(tpot_slo, 1)} ms")
    return f"no batch meets the SLO; best at batch {batch}: " + ", ".join(parts)


def _kv_below_context(weights: int, workspace: int, usable: int, kv_tokens: int, context: int) -> str:
    if weights + workspace < usable:
        return (
            f"weights {weights / GIB:.1f} GiB + workspace {workspace / GIB:.1f} GiB of {usable / GIB:.1f} GiB usable "
            f"leave KV for {kv_tokens} tokens < context {context}"
        )
    return f"weights {weights / GIB:.1f} GiB + workspace {workspace / GIB:.1f} GiB exceed {usable / GIB:.1f} GiB usable per GPU"


@dataclass(frozen=True)
class _MmcQueue:
    """The facts of an "mmc-queue" reason: the M/M/c slot wait at the capacity limit and the decode step's terms."""

    batch: int
    utilization: float
    wait: float
    step: float
    bound: str
    gemm: float
    attention: float
    elementwise: float
    comm: float
    fixed: float = 0.0

    def __str__(self) -> str:
        return f"{self._wait_words()}; {self._step_words()}"

    def _wait_words(self) -> str:
        return f"M/M/c slot wait, c = {self.batch}, ρ = {self.utilization:g}: p99 wait {_ms(self.wait, 1)} ms"

    def _step_words(self) -> str:
        return (
            f"decode step {_ms(self.step, 2)} ms ({self.bound}-bound) = GEMMs {_ms(self.gemm, 2)} "
            f"+ attention {_ms(self.attention, 2)} + elementwise {_ms(self.elementwise, 2)} "
            f"+ TP/PP comm {_ms(self.comm, 2)} + fixed per layer {_ms(self.fixed, 2)} ms"
        )


def _worded_facts(facts: type) -> Callable[..., str]:
    """A sentence for a reason with many facts, grouped in a dataclass whose str() words them; it takes the facts as
    keywords, and its signature is the dataclass's (tests/test_wording.py compares it with the facts given)."""

    def sentence(**given: Any) -> str:
        return str(facts(**given))

    sentence.__signature__ = inspect.signature(facts).replace(return_annotation=str)  # type: ignore[attr-defined]
    return sentence


def _smallest_fit(fit: tuple[int, str, int, int, str]) -> str:
    gpus, gpu_id, tp, pp, precision = fit
    return f"{gpus} × {gpu_id} (TP{tp} PP{pp}, {precision})"


def _vision_no_gpu(model_id: str, rejections: tuple) -> str:
    first = min(rejections, key=lambda r: (r.description, words(r.reason)), default=None)
    return f"{model_id}: no GPU meets the request" + (f"; e.g. {_rejection(first)}" if first else "")


def _no_fit_memory(closest: Any) -> str:
    return "no configuration fits in GPU memory" + (f" (closest: {_rejection(closest)})" if closest else "")


def _gated(value: str, gated: str, quantile: str) -> str:
    """A roofline figure and the one the deadline or budget was checked with, when they differ."""
    return f"roofline {value}" if gated == value else f"roofline {value} ({gated} at {quantile})"


def _over_budget_cheapest(
    cost: float,
    gated: float,
    quantile: str,
    budget: float,
    deadline: float | None,
    gpus: int,
    gpu_id: str,
    pricing: str,
) -> str:
    meeting = f"the {format_seconds(deadline)} deadline" if deadline else "no deadline"
    return (
        f"needs {_gated(format_usd(cost), format_usd(gated), quantile)}, budget {format_usd(budget)}; cheapest meeting {meeting}: "
        f"{gpus} × {gpu_id} {pricing}, {format_usd(cost)}"
    )


def model_choice(name: str, params_total: float, params_active: float) -> str:
    return f"{name}: {params_total / 1e9:.2f}B parameters ({params_active / 1e9:.2f}B active)"


# --- reasons, by code ---------------------------------------------------------------------------------------

SENTENCES: dict[str, Callable[..., str]] = {
    # --- catalog and hardware (both searches) ---------------------------------------------------------------
    "not-in-catalog": lambda: "not in the GPU catalog",
    "no-price": lambda pricing: f"no {pricing} price in the catalog",
    "not-in-catalog-or-no-price": lambda: "not in the GPU catalog or no price for this pricing",
    "no-tensor-cores": lambda gpu_name, precision: f"{gpu_name} has no {precision} tensor cores",
    # --- serving: replica shapes (serve_shapes.py) --------------------------------------------------------------
    "tp-spans-nodes": lambda tp, per_node: f"TP{tp} spans nodes of {per_node} GPUs (TP stays within NVLink)",
    "heads-do-not-split": lambda heads, tp: f"{heads} attention heads do not split over TP{tp}",
    "pp-exceeds-layers": lambda pp, layers: f"PP{pp} exceeds {layers} layers",
    "no-gpu-link": lambda gpu_name: f"{gpu_name} has no GPU-to-GPU link for TP",
    "no-gpu-link-training": lambda gpu_name: (
        f"{gpu_name} has no GPU-to-GPU link in the catalog (intra_node_bandwidth_bytes_per_second 0): a training "
        "collective over more than one GPU cannot be priced; give the link's rate (its PCIe rate where there is no NVLink)"
    ),
    "one-stage-per-node": lambda per_node: f"a replica over nodes runs one PP stage of TP{per_node} per node",
    "tgi-no-pp": lambda: "TGI shards a replica with TP on one node (no PP)",
    "triton-one-node": lambda: "Triton's vLLM backend runs a replica on one node",
    "attention-dp-spans-nodes": lambda dp, tp, per_node: (
        f"attention DP{dp} × TP{tp} spans nodes of {per_node} GPUs (the experts' all-gather stays within NVLink)"
    ),
    # --- serving: one LLM configuration (serve_llm_config.py) ---------------------------------------------------
    "kv-below-context": _kv_below_context,
    "no-batch-meets-slo": _no_batch_meets_slo,
    "mmc-queue": _worded_facts(_MmcQueue),
    # --- serving: the LLM search (serve_llm_search.py) ----------------------------------------------------------
    "int4-weight-only": lambda: "int4 (AWQ/GPTQ) is weight-only: matmuls run at the 16-bit rate",
    "latency-over-budget": lambda cheapest: f"optimising latency exceeded the budget; chose the cheapest: {cheapest}",
    "few-requests-in-kv": lambda concurrency, gpu_id: (
        f"KV cache holds only {concurrency} requests per replica on {gpu_id}"
    ),
    "slo-config-over-budget": lambda cheapest, usd, budget: (
        f"the cheapest configuration meeting the SLO, {cheapest}, costs ${usd:,.0f}/month > budget ${budget:,.0f}/month"
    ),
    "no-config-meets-slo": lambda closest, ttft, tpot: (
        f"no configuration meets the SLO; closest is {closest} with TTFT p99 {_ms(ttft, 0)} ms, TPOT p99 {_ms(tpot, 1)} ms"
    ),
    "fits-outside-allowed": lambda model_id, allowed, fit: (
        f"{model_id} does not fit the allowed GPUs ({', '.join(allowed) or 'none'}) and pins; smallest fit: {_smallest_fit(fit)}"
    ),
    "no-gpu-for-precision": lambda precisions, rejection, fit: (
        f"no allowed GPU runs precision {', '.join(precisions)}: {_rejection(rejection)}"
        + (f"; smallest fit: {_smallest_fit(fit)}" if fit else "")
    ),
    "fits-no-gpu": lambda model_id, rejection: (
        f"{model_id} does not fit any GPU configuration; e.g. {_rejection(rejection)}"
    ),
    "no-gpu-to-evaluate": lambda model_id, allowed: (
        f"{model_id}: no GPU to evaluate (allowed: {', '.join(allowed) or 'none'})"
    ),
    # --- serving: non-generative models and edge devices (vision.py) --------------------------------------------
    "vision-weights-exceed": lambda weights, usable: (
        f"weights {weights / GIB:.2f} GiB exceed {usable / GIB:.2f} GiB usable"
    ),
    "batch-one-over-slo": lambda batch_seconds, slo: (
        f"batch 1 takes {_ms(batch_seconds, 2)} ms; 2 × that exceeds the p99 SLO {_ms(slo, 1)} ms"
    ),
    "over-power-budget": lambda devices, tdp, power, budget: (
        f"{devices} devices × {tdp:g} W = {power:g} W > {budget:g} W"
    ),
    "vision-no-gpu": _vision_no_gpu,
    "config-over-budget": lambda cheapest, usd, budget: (
        f"the cheapest configuration, {cheapest}, costs ${usd:,.0f}/month > budget ${budget:,.0f}/month"
    ),
    "dynamic-batching": lambda batch, batch_seconds, delay, roofline=None: (
        f"dynamic batching: batch {batch} takes {_ms(batch_seconds, 2)} ms"
        f"{' (' + words(roofline) + ')' if roofline else ''}; worst case = queue delay {_ms(delay, 2)} ms + 2 batches"
    ),
    "cnn-roofline": lambda layers, memory_bound_layers, traffic_bytes_per_item, compute_seconds, memory_seconds, fusion, fixed_seconds=0.0: (
        f"per-layer roofline over {layers} layers, {memory_bound_layers} of them bandwidth-bound; "
        f"{traffic_bytes_per_item / 1e6:.1f} MB moved per image "
        f"({FUSION_WORDS[fusion]}); "
        f"the layers' compute terms sum to {_ms(compute_seconds, 2)} ms, their traffic terms to {_ms(memory_seconds, 2)} ms"
        + (
            f"; plus {_ms(fixed_seconds, 2)} ms fixed ({fixed_seconds / layers * 1e6:.1f} µs per TensorRT layer on an "
            f"edge device, from MLPerf SingleStream ResNet-50 on Jetson Orin)"
            if fixed_seconds
            else ""
        )
    ),
    # --- serving: multi-stage services (serve_stages.py) --------------------------------------------------------
    "stages-infeasible": lambda failures: "; ".join(f"stage {name}: {words(why)}" for name, why in failures),
    # --- training: the search (training.py) ---------------------------------------------------------------------
    "too-big": lambda total, usable, weights, gradients, optimizer, activations, other: (
        f"{_gib(total)} per GPU > {_gib(usable)} usable (weights {_gib(weights)}, gradients {_gib(gradients)}, "
        f"optimizer {_gib(optimizer)}, activations {_gib(activations)}, runtime {_gib(other)})"
    ),
    "host-memory": lambda needed, host: f"offload needs {_gib(needed)} of host memory per GPU, more than {_gib(host)}",
    "no-tensor-cores-datasheet": lambda dtype: f"no {dtype} tensor cores (datasheet)",
    "edge-not-for-training": lambda: "edge device: not for training",
    "nodes-not-filled": lambda gpus, per_node: f"{gpus} GPUs do not fill nodes of {per_node}",
    "misses-deadline": lambda wall, gated, quantile, deadline: (
        f"{_gated(format_seconds(wall), format_seconds(gated), quantile)} misses the {format_seconds(deadline)} deadline"
    ),
    "over-budget": lambda cost, gated, quantile, budget: (
        f"{_gated(format_usd(cost), format_usd(gated), quantile)} exceeds the {format_usd(budget)} budget"
    ),
    "no-fit-memory": _no_fit_memory,
    "no-framework-path": lambda layout, framework, detail, vp: FRAMEWORK_GAPS[layout](framework, detail, vp),
    "only-unrunnable-fit": lambda rejection: (
        f"the layouts that fit have no framework path (e.g. {_rejection(rejection)})"
    ),
    "no-runnable-layout": lambda rejection: (
        f"no framework path runs the layouts asked for (e.g. {_rejection(rejection)})"
    ),
    "vp-needs-microbatches": lambda pp, vp: (
        f"VP{vp} needs the micro-batches of a step to be a multiple of PP{pp} (Megatron-LM's interleaved schedule "
        f"runs them in groups of PP)"
    ),
    "fsdp-selective-needs-fsdp2": lambda zero, offload, method: (
        f"selective recompute under framework fsdp is torchtitan's op-level SAC, which only the FSDP2 script "
        f"(fsdp/fsdp_tp.py) applies: it needs ZeRO-3 without offload, full weights, no EP, CP only alone "
        f"(here ZeRO-{zero}{', offload' if offload else ''}, {method}); Accelerate's FSDP1 plugin checkpoints whole "
        f"blocks only (recompute full)"
    ),
    "fsdp-pp-needs-microbatches": lambda pp, microbatches: (
        f"{microbatches} micro-batch(es) per step under PP{pp}: torch.distributed.pipelining's 1F1B needs at least "
        f"one per stage"
    ),
    "no-pipeline-split": lambda pp, layers, first, last: (
        f"{layers} layers have no split over PP{pp}"
        + (
            " with "
            + " and ".join(f"{end} stage {n}" for end, n in (("first", first), ("last", last)) if n)
            + " (the other stages must share the rest equally)"
            if first or last
            else ""
        )
    ),
    "vp-needs-pp": lambda vp: f"VP{vp} interleaves pipeline stages: it needs PP > 1",
    "hsdp-group-divides": lambda shard, ranks: (
        f"an HSDP shard group of {shard} does not tile the {ranks} data-parallel ranks: replicas × shard group must be "
        f"all of them (FSDP's [dp_replicate, dp_shard] mesh)"
    ),
    "ep-overlap-not-allowed": lambda ep, pp, vp, recompute: (
        f"EP all-to-all overlap (parallelism.ep_overlap) needs an MoE model with EP > 1, VP when PP > 1 and no full "
        f"recompute (Megatron-Core's checks of --overlap-moe-expert-parallel-comm); here EP{ep} PP{pp} VP{vp}, "
        f"recompute {recompute}"
    ),
    "ep-needs-moe": lambda ep: (
        f"EP{ep} splits routed experts; this model has none (expert parallelism is for MoE models)"
    ),
    # every GPU refused for a reason other than memory: the first of the reasons in sentence order
    "every-gpu-refused": lambda reasons: min(words(r) for r in reasons),
    "deadline-unreachable": lambda wall, gated, quantile, gpus, gpu_id, pricing, cost, deadline: (
        f"needs {_gated(format_seconds(wall), format_seconds(gated), quantile)} on the fastest configuration "
        f"({gpus} × {gpu_id} {pricing}, {format_usd(cost)}), deadline {format_seconds(deadline)}"
    ),
    "over-budget-cheapest": _over_budget_cheapest,
    "cnn-no-activations": lambda: (
        "no activation_bytes_per_sample for this model (and no layer_table to time it kernel by kernel): its step time "
        "counts FLOPs only and its memory no activations (optimistic; CNN training is mostly memory-bound)"
    ),
    "network-bound": lambda share, interconnect, limit, needed: (
        f"network-bound: the exposed gradient all-reduce is {share:.0%} of the step on {interconnect}; keeping it under "
        f"{limit:.0%} needs {needed / 1e9:.1f} GB/s of NIC per GPU"
    ),
    "storage-too-slow": lambda read, storage, nodes: (
        f"the data loader needs {read / 1e9:.2f} GB/s, more than {storage} gives {nodes} node(s)"
    ),
    # --- training: the framework rule (training.resolve_framework) ----------------------------------------------
    "framework-pinned": lambda: "pinned by the plan",
    "megatron-for-model-parallel": lambda: "tensor/pipeline parallelism needs Megatron-LM's model-parallel layers",
    "deepspeed-for-offload": lambda: "CPU offload of the optimizer (ZeRO-Offload) is DeepSpeed's",
    "ddp-unsharded": lambda: "the model states fit unsharded: plain DDP has the least overhead",
    "fsdp-full-shard": lambda: "full sharding (ZeRO-3) is native in PyTorch FSDP (FULL_SHARD)",
    "fsdp2-tensor-parallel": lambda tp, pp=1, vp=1, cp=1: (
        (
            f"CP{cp} with full sharding (ZeRO-3): FSDP2 on a DeviceMesh [dp_shard, cp, tp] sharding over dp_shard × cp, "
            f"K/V all-gathered over the CP ranks (Llama 3 §3.3.2; fsdp/fsdp_tp.py); Megatron-LM shards only optimizer "
            f"states"
        )
        if cp > 1
        else (
            f"TP{tp} with full sharding (ZeRO-3): FSDP2 × TP on a 2-D DeviceMesh [dp_shard, tp] (torchtitan's "
            f"composition); Megatron-LM shards only optimizer states"
        )
        if pp == 1
        else (
            f"TP{tp} PP{pp} with full sharding (ZeRO-3): FSDP2 × TP × PP on a 3-D DeviceMesh [pp, dp_shard, tp] with "
            f"torch.distributed.pipelining's {'interleaved 1F1B' if vp > 1 else '1F1B'} (torchtitan's composition); "
            f"Megatron-LM shards only optimizer states"
        )
    ),
    "fsdp-hybrid-shard": lambda shard: (
        f"ZeRO-3 inside a shard group of {shard} GPUs, replicated across groups: FSDP HYBRID_SHARD (Accelerate's FSDP1 "
        f"within a node; FSDP2's 2-D mesh [dp_replicate, dp_shard] for other groups)"
    ),
    "deepspeed-zero": lambda zero: (
        f"ZeRO-{zero} sharding of the optimizer{' and gradients' if zero == 2 else ''} (DeepSpeed)"
    ),
    # --- the passes: what the plan asks that no engine or method can do --------------------------------------
    "adapters-need-transformer": lambda method, targets, model: (
        f"{method} adapts transformer projections ({', '.join(targets)}); {model} is a CNN: use method full"
    ),
    "engine-serves-decoders": lambda where, engine, model, kind: (
        f"{where}engine {engine} serves decoder LLMs only; {model} is a {kind}: use engine triton"
    ),
    "tgi-no-fp32": lambda where: f"{where}TGI does not serve fp32 (--dtype takes float16 or bfloat16)",
    "fp32-serving-not-modelled": lambda where: (
        f"{where}serving in fp32 is not modelled (16-bit, fp8, int8 and int4 are): use bf16 or fp16"
    ),
    # --- the model's shape (resolve_model) ---------------------------------------------------------------------
    "preset": lambda preset, source: f"preset {preset} ({source})",
    "architecture-given": lambda: "architecture given in the plan",
    "shape-from-count": lambda layers, hidden, aspect_ratio: (
        f"only a parameter count was given: assumed a Llama-2-like shape with {layers} layers × hidden {hidden} "
        f"(N ≈ 12·L·d², d/L = {aspect_ratio}; Kaplan et al. 2020)"
    ),
    "shape-assumed": lambda why: f"model shape assumed from a parameter count: {words(why)}",
    "checkpoint-shipped": lambda preset, repository, quantization, block, source: (
        f"model.quantization not given: {repository}, the repository of preset {preset}, ships {quantization} "
        f"weights ({source}); vLLM reads the method from its config.json (no --quantization), and the weights are "
        f"sized at their stored bytes"
        + (f" with one fp32 scale per {block}×{block} block (+{4 / block**2:.2e} B per weight)" if block else "")
        + "; give model.quantization none with model.hf_id of a 16-bit conversion to serve 16-bit weights"
    ),
    "precision-from-checkpoint": lambda quantization, precision: (
        f"precision not given: the {quantization} checkpoint serves in {precision} only (vLLM keeps its stored "
        f"weights whatever --dtype says), so {precision}, not the default bf16"
    ),
}
