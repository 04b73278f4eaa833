"""Serving search: GPU type × TP × PP × precision × batch meeting a latency SLO at a traffic, at least cost.

Pure: `search_serving(req, gpus)` reads only its arguments. One set of types serves LLMs and
non-generative models (CNN, ViT, encoders — see `vision.py`): for those, `ttft_seconds` is the request
latency p99, `tpot_seconds` is 0, the "tokens" rates count items (images or sequences) and the KV
fields are 0; `max_queue_delay_seconds` and `preferred_batch_sizes` configure the dynamic batcher.

Replica count: traffic at peak ÷ (capacity × target utilisation), rounded up; the autoscaler runs
between the same figure at average traffic (min) and at peak (max). Cost is for the peak count,
730 h a month; $/million tokens counts output tokens at average traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .serve_latency import BatchPoint, ReplicaModel, compute_dtype, evaluate_batch
from .serve_memory import (
    DEFAULT_GPU_MEMORY_UTILIZATION, GIB, kv_bytes_per_token, kv_element_bytes, replica_memory, weights_bytes_total,
)

if TYPE_CHECKING:
    from ..catalog.params import ParamCounts
    from ..catalog.types import Architecture, GpuSpec

# Utilisation a replica is sized for: Vertex AI online prediction's autoscaling target defaults to 60%
# (google.cloud.aiplatform AutoscalingMetricSpec.target: "The default value is 60").
DEFAULT_TARGET_UTILIZATION = 0.6
HOURS_PER_MONTH = 730  # 8760 h / 12
TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)
MAX_REJECTED = 24  # rejections kept in a result (sorted, so deterministic)
MAX_PARETO = 12
VISION_KINDS = ("cnn", "vision-transformer", "encoder")
# vLLM's batch defaults (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER):
# GPUs with ≥ 70 GiB that are not A100: max_num_seqs 1024, max_num_batched_tokens 8192; others 256 / 2048.
VLLM_LARGE_GPU_BYTES = 70 * GIB
VLLM_MAX_NUM_SEQS = (1024, 256)
VLLM_MAX_NUM_BATCHED_TOKENS = (8192, 2048)
# TensorRT-LLM behind Triton: trtllm-bench caps max batch at 4096 (tensorrt_llm/bench/build/tuning.py
# finetune_setting: "min(kv_cache_max_requests, 4096)"); KVCacheManager's default max_num_tokens 8192.
TRTLLM_MAX_BATCH = 4096
TRTLLM_MAX_NUM_TOKENS = 8192
# TGI: text-generation-launcher `--max-batch-prefill-tokens` default 4096; `--max-batch-size` has no
# default (the token budget bounds it), so the search caps it with vLLM's figure.
TGI_MAX_BATCH_PREFILL_TOKENS = 4096


@dataclass(frozen=True)
class ServeRequest:
    arch: Architecture
    params: ParamCounts
    model_id: str
    precisions: tuple[str, ...]  # allowed: bf16 | fp16 | fp8 | int8 | int4
    kv_cache_dtype: str  # 'auto' | 'fp8'
    engine: str  # 'vllm' | 'triton' | 'tgi'
    context_len: int
    requests_per_second: float
    prompt_tokens: int
    output_tokens: int
    peak_factor: float
    ttft_p99_seconds: float | None
    tpot_p99_seconds: float | None
    latency_p99_seconds: float | None  # non-generative models (CV, encoders)
    gpu_ids: tuple[str, ...]
    gpu_count: int | None  # pinned GPUs per replica
    tp: int | None
    pp: int | None
    gpus_per_node: int | None
    pricing: str
    optimize: str  # 'cost' | 'latency'
    budget_usd_per_month: float | None
    target_utilization: float = DEFAULT_TARGET_UTILIZATION
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION  # engine 'triton': share of free memory
    max_num_batched_tokens: int | None = None  # None: the engine's default
    max_batch: int | None = None  # cap on concurrency; None: the engine's default
    power_budget_watts: float | None = None  # edge deployments


@dataclass(frozen=True)
class ServeMemory:
    """Bytes per GPU."""

    weights: int
    kv_cache: int
    activations: int
    other: int
    total: int
    usable: int


@dataclass(frozen=True)
class ServeCandidate:
    gpu_id: str
    precision: str
    tp: int
    pp: int
    gpus_per_replica: int
    nodes_per_replica: int
    max_concurrency: int  # max_num_seqs / max batch
    max_num_batched_tokens: int
    kv_cache_tokens: int
    kv_bytes_per_token: int  # whole model, all layers and KV heads
    kv_bytes_per_token_per_gpu: int
    memory: ServeMemory
    weights_bytes_total: int
    ttft_seconds: float  # p99 at target utilisation (request latency for non-generative models)
    tpot_seconds: float  # p99 at target utilisation
    latency_seconds: float  # ttft + output_tokens × tpot
    step_bound: str  # 'memory' | 'compute'
    tokens_per_second_per_replica: float  # capacity (output tokens, or items)
    requests_per_second_per_replica: float  # capacity
    queue_target_per_replica: float
    replicas: int
    min_replicas: int
    max_replicas: int
    usd_per_hour: float
    usd_per_month: float
    usd_per_million_tokens: float
    gpu_memory_utilization: float
    target_utilization: float
    queueing: str
    max_queue_delay_seconds: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()
    power_watts: float = 0.0

    @property
    def batch(self) -> int:
        return self.max_concurrency

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def description(self) -> str:
        return (f"{self.replicas} × ({self.gpus_per_replica} × {self.gpu_id}) {self.precision} TP{self.tp} PP{self.pp} "
                f"batch {self.max_concurrency}")


@dataclass(frozen=True)
class ServeRejection:
    description: str
    reason: str


@dataclass(frozen=True)
class ServeSearchResult:
    chosen: ServeCandidate | None
    pareto: tuple[ServeCandidate, ...]
    rejected: tuple[ServeRejection, ...]
    evaluated: int
    infeasible_reason: str | None
    nearest: ServeCandidate | None
    warnings: tuple[str, ...]


# --- engine defaults -------------------------------------------------------------------------------------

def engine_limits(req: ServeRequest, gpu: GpuSpec) -> tuple[int, int]:
    """(max concurrency, max tokens per step) the engine runs with unless the request pins them."""
    large = gpu.memory_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in gpu.id.lower()
    vllm_seqs, vllm_tokens = VLLM_MAX_NUM_SEQS[0 if large else 1], VLLM_MAX_NUM_BATCHED_TOKENS[0 if large else 1]
    batch, tokens = {
        "vllm": (vllm_seqs, vllm_tokens),
        "triton": (TRTLLM_MAX_BATCH, TRTLLM_MAX_NUM_TOKENS),
        "tgi": (vllm_seqs, TGI_MAX_BATCH_PREFILL_TOKENS),
    }[req.engine]
    return req.max_batch or batch, req.max_num_batched_tokens or tokens


# --- shapes ----------------------------------------------------------------------------------------------

def parallel_shapes(req: ServeRequest, gpu: GpuSpec) -> tuple[list[tuple[int, int]], list[ServeRejection]]:
    """TP × PP pairs to try, PP 1 first. TP stays within a node; PP is only added once TP fills a node, and
    (in the search) only when no PP-1 shape holds the model (Megatron's guideline, formulas.md §7), unless
    pinned. vLLM needs the attention heads divisible by TP."""
    per_node = req.gpus_per_node or gpu.gpus_per_node
    shapes, rejected = [], []
    for tp in (req.tp,) if req.tp else TP_DEGREES:
        for pp in (req.pp,) if req.pp else PP_DEGREES:
            if req.gpu_count and tp * pp != req.gpu_count:
                continue
            if pp > 1 and not req.pp and tp < per_node:
                continue
            where = f"{gpu.id} TP{tp} PP{pp}"
            if tp > per_node:
                rejected.append(ServeRejection(where, f"TP{tp} spans nodes of {per_node} GPUs (TP stays within NVLink)"))
            elif req.arch.heads % tp:
                rejected.append(ServeRejection(where, f"{req.arch.heads} attention heads do not split over TP{tp}"))
            elif pp > req.arch.layers:
                rejected.append(ServeRejection(where, f"PP{pp} exceeds {req.arch.layers} layers"))
            elif tp > 1 and gpu.intra_node_bandwidth_bytes_per_second <= 0:
                rejected.append(ServeRejection(where, f"{gpu.name} has no GPU-to-GPU link for TP"))
            elif tp * pp > per_node and tp < per_node:
                rejected.append(ServeRejection(where, f"a replica over nodes runs one PP stage of TP{per_node} per node"))
            elif req.engine == "tgi" and pp > 1:
                rejected.append(ServeRejection(where, "TGI shards a replica with TP on one node (no PP)"))
            elif req.engine == "triton" and tp * pp > per_node:
                rejected.append(ServeRejection(where, "Triton's vLLM backend runs a replica on one node"))
            else:
                shapes.append((tp, pp))
    return shapes, rejected


# --- one configuration -----------------------------------------------------------------------------------

def batch_grid(limit: int) -> list[int]:
    """Powers of two below the limit, and the limit itself."""
    grid = [b for b in (2**i for i in range(13)) if b < limit]
    return grid + [limit]


def meets_slo(req: ServeRequest, p: BatchPoint) -> bool:
    return ((req.ttft_p99_seconds is None or p.ttft_p99_seconds <= req.ttft_p99_seconds)
            and (req.tpot_p99_seconds is None or p.tpot_p99_seconds <= req.tpot_p99_seconds))


def slo_ratio(req: ServeRequest, p: BatchPoint) -> float:
    """How far a point is from the SLO: the worst of latency / target (≤ 1 meets it)."""
    ratios = [p.ttft_p99_seconds / req.ttft_p99_seconds if req.ttft_p99_seconds else 0.0,
              p.tpot_p99_seconds / req.tpot_p99_seconds if req.tpot_p99_seconds else 0.0]
    return max(ratios)


def replica_counts(rate: float, peak_factor: float, capacity: float, utilization: float) -> tuple[int, int]:
    """(min at average traffic, max at peak) = ceil(rate / (capacity × ρ))."""
    per_replica = capacity * utilization
    return max(1, math.ceil(rate / per_replica - 1e-9)), max(1, math.ceil(rate * peak_factor / per_replica - 1e-9))


def build_candidate(req: ServeRequest, gpu: GpuSpec, precision: str, tp: int, pp: int, mem, point: BatchPoint,
                    chunk: int) -> ServeCandidate:
    min_replicas, replicas = replica_counts(req.requests_per_second, req.peak_factor, point.requests_per_second,
                                            req.target_utilization)
    per_node = req.gpus_per_node or gpu.gpus_per_node
    usd_per_hour = replicas * tp * pp * gpu.price_usd_per_gpu_hour[req.pricing]
    million_tokens_per_hour = req.requests_per_second * req.output_tokens * 3600 / 1e6
    if req.ttft_p99_seconds:
        slack = max(0.0, req.ttft_p99_seconds - point.step.seconds - point.prefill_latency_seconds)
        queue_target = max(1.0, math.floor(slack * point.requests_per_second))
    else:
        queue_target = float(point.batch)
    return ServeCandidate(
        gpu_id=gpu.id, precision=precision, tp=tp, pp=pp, gpus_per_replica=tp * pp,
        nodes_per_replica=math.ceil(tp * pp / per_node), max_concurrency=point.batch, max_num_batched_tokens=chunk,
        kv_cache_tokens=mem.kv_cache_tokens,
        kv_bytes_per_token=kv_bytes_per_token(req.arch, kv_element_bytes(req.kv_cache_dtype)),
        kv_bytes_per_token_per_gpu=mem.kv_bytes_per_token,
        memory=ServeMemory(weights=mem.weights, kv_cache=mem.kv_cache, activations=mem.activations, other=mem.other,
                           total=mem.total, usable=mem.usable),
        weights_bytes_total=weights_bytes_total(req.params, req.arch, precision),
        ttft_seconds=point.ttft_p99_seconds, tpot_seconds=point.tpot_p99_seconds,
        latency_seconds=point.ttft_p99_seconds + req.output_tokens * point.tpot_p99_seconds,
        step_bound=point.step.bound, tokens_per_second_per_replica=point.tokens_per_second,
        requests_per_second_per_replica=point.requests_per_second, queue_target_per_replica=queue_target,
        replicas=replicas, min_replicas=min_replicas, max_replicas=replicas, usd_per_hour=usd_per_hour,
        usd_per_month=usd_per_hour * HOURS_PER_MONTH, usd_per_million_tokens=usd_per_hour / million_tokens_per_hour,
        gpu_memory_utilization=req.gpu_memory_utilization, target_utilization=req.target_utilization,
        queueing=(f"M/M/c slot wait, c = {point.batch}, ρ = {req.target_utilization:g}: p99 wait "
                  f"{point.wait_p99_seconds * 1e3:.1f} ms; decode step {point.step.seconds * 1e3:.2f} ms "
                  f"({point.step.bound}-bound) = GEMMs {point.step.gemm_seconds * 1e3:.2f} + attention "
                  f"{point.step.attention_seconds * 1e3:.2f} + elementwise {point.step.elementwise_seconds * 1e3:.2f} "
                  f"+ TP/PP comm {point.step.comm_seconds * 1e3:.2f} ms"),
    )


def memory_for(req: ServeRequest, gpu: GpuSpec, precision: str, tp: int, pp: int, max_num_seqs: int, chunk: int):
    """Per-GPU memory; Triton (TensorRT-LLM) reads the utilisation as a share of free memory."""
    return replica_memory(
        req.params, req.arch, precision=precision, kv_cache_dtype=req.kv_cache_dtype, tp=tp, pp=pp,
        gpu_memory_bytes=gpu.memory_bytes, gpu_memory_utilization=req.gpu_memory_utilization,
        max_num_batched_tokens=chunk, max_num_seqs=max_num_seqs, context_len=req.context_len,
        request_tokens=req.prompt_tokens + req.output_tokens, share_of_free_memory=req.engine == "triton",
    )


def evaluate_config(req: ServeRequest, gpu: GpuSpec, precision: str, dtype: str, tp: int, pp: int):
    """→ (candidate meeting the SLO or None, rejection or None, closest-to-SLO candidate or None)."""
    where = f"{gpu.id} {precision} TP{tp} PP{pp}"
    cap, chunk = engine_limits(req, gpu)
    mem = memory_for(req, gpu, precision, tp, pp, cap, chunk)
    if mem.max_seqs_at_request < cap:  # the sampler's logits are sized by the concurrency that fits
        mem = memory_for(req, gpu, precision, tp, pp, max(1, mem.max_seqs_at_request), chunk)
        cap = min(cap, max(1, mem.max_seqs_at_request))
    if mem.kv_cache_tokens < req.context_len:
        need = mem.weights + mem.activations + mem.other
        return None, ServeRejection(where, (
            f"weights {mem.weights / GIB:.1f} GiB + workspace {(mem.activations + mem.other) / GIB:.1f} GiB of "
            f"{mem.usable / GIB:.1f} GiB usable leave KV for {mem.kv_cache_tokens} tokens < context {req.context_len}"
            if need < mem.usable else
            f"weights {mem.weights / GIB:.1f} GiB + workspace {(mem.activations + mem.other) / GIB:.1f} GiB exceed "
            f"{mem.usable / GIB:.1f} GiB usable per GPU")), None
    limit = max(1, min(cap, mem.max_seqs_at_request))  # KV reserved for whole requests (no preemption)
    model = ReplicaModel(gpu=gpu, arch=req.arch, params=req.params, precision=precision, dtype=dtype, tp=tp, pp=pp,
                         weights_bytes_per_gpu=mem.weights, kv_bytes_per_token_per_gpu=mem.kv_bytes_per_token)
    points = [evaluate_batch(model, b, prompt_tokens=req.prompt_tokens, output_tokens=req.output_tokens,
                             chunk_tokens=chunk, utilization=req.target_utilization) for b in batch_grid(limit)]
    meeting = [p for p in points if meets_slo(req, p)]
    if meeting:
        best = max(meeting, key=lambda p: (round(p.requests_per_second, 9), -p.batch))
        return build_candidate(req, gpu, precision, tp, pp, mem, best, chunk), None, None
    closest = min(points, key=lambda p: (slo_ratio(req, p), p.batch))
    parts = []
    if req.ttft_p99_seconds and closest.ttft_p99_seconds > req.ttft_p99_seconds:
        parts.append(f"TTFT p99 {closest.ttft_p99_seconds * 1e3:.0f} ms > {req.ttft_p99_seconds * 1e3:.0f} ms")
    if req.tpot_p99_seconds and closest.tpot_p99_seconds > req.tpot_p99_seconds:
        parts.append(f"TPOT p99 {closest.tpot_p99_seconds * 1e3:.1f} ms > {req.tpot_p99_seconds * 1e3:.1f} ms")
    reason = f"no batch meets the SLO; best at batch {closest.batch}: " + ", ".join(parts)
    return None, ServeRejection(where, reason), build_candidate(req, gpu, precision, tp, pp, mem, closest, chunk)


# --- choice ----------------------------------------------------------------------------------------------

def rank_key(req: ServeRequest, c: ServeCandidate):
    tie = (c.gpu_id, c.precision, c.tp, c.pp, c.max_concurrency)
    if req.optimize == "latency":
        return (round(c.latency_seconds, 9), round(c.usd_per_month, 6), *tie)
    return (round(c.usd_per_month, 6), round(c.latency_seconds, 9), *tie)


def pareto_front(candidates: list[ServeCandidate]) -> tuple[ServeCandidate, ...]:
    """Candidates no other beats on both monthly cost and request latency, cheapest first."""
    ordered = sorted(candidates, key=lambda c: (c.usd_per_month, c.latency_seconds, c.gpu_id, c.precision, c.tp, c.pp))
    front, best_latency = [], math.inf
    for c in ordered:
        if c.latency_seconds < best_latency:
            front.append(c)
            best_latency = c.latency_seconds
    return tuple(front[:MAX_PARETO])


def smallest_fit(req: ServeRequest, gpus: dict[str, GpuSpec]) -> str | None:
    """The fewest GPUs of any catalog type (then the cheapest) whose memory holds the model and one
    context — also outside the plan's allowed GPUs and pins, to say what would fit."""
    fits = []
    for gpu in sorted(gpus.values(), key=lambda g: g.id):
        if gpu.edge:
            continue
        per_node = gpu.gpus_per_node
        for precision in req.precisions:
            if compute_dtype(precision, gpu) is None:
                continue
            cap, chunk = engine_limits(req, gpu)
            shapes = [(tp, 1) for tp in TP_DEGREES if tp <= per_node]
            if req.engine == "vllm":  # TGI and Triton run a replica on one node (parallel_shapes)
                shapes += [(per_node, pp) for pp in PP_DEGREES[1:]]
            for tp, pp in shapes:
                if req.arch.heads % tp:
                    continue
                mem = memory_for(req, gpu, precision, tp, pp, 1, chunk)
                if mem.kv_cache_tokens >= req.context_len:
                    fits.append((tp * pp, tp * pp * gpu.price_usd_per_gpu_hour.get(req.pricing, math.inf),
                                 f"{tp * pp} × {gpu.id} (TP{tp} PP{pp}, {precision})"))
                    break
    return min(fits)[2] if fits else None


def search_serving(req: ServeRequest, gpus: dict[str, GpuSpec]) -> ServeSearchResult:
    if req.arch.kind in VISION_KINDS:
        from .vision import search_vision

        return search_vision(req, gpus)
    candidates, rejected, near, warnings, evaluated = [], [], [], [], 0
    for gpu_id in req.gpu_ids:
        gpu = gpus.get(gpu_id)
        if gpu is None:
            rejected.append(ServeRejection(gpu_id, "not in the GPU catalog"))
            continue
        if req.pricing not in gpu.price_usd_per_gpu_hour:
            rejected.append(ServeRejection(gpu_id, f"no {req.pricing} price in the catalog"))
            continue
        shapes, shape_rejections = parallel_shapes(req, gpu)
        rejected += shape_rejections
        for precision in req.precisions:
            dtype = compute_dtype(precision, gpu)
            if dtype is None:
                rejected.append(ServeRejection(f"{gpu.id} {precision}", f"{gpu.name} has no {precision} tensor cores"))
                continue
            fitted_without_pp = False
            for tp, pp in shapes:
                if pp > 1 and not req.pp and fitted_without_pp:
                    continue  # PP only when a node's TP group cannot hold the model (formulas.md §7)
                evaluated += 1
                fit, rejection, closest = evaluate_config(req, gpu, precision, dtype, tp, pp)
                fitted_without_pp |= pp == 1 and bool(fit or closest)
                if fit:
                    candidates.append(fit)
                if rejection:
                    rejected.append(rejection)
                if closest:
                    near.append(closest)
    if "int4" in req.precisions:
        warnings.append("int4 (AWQ/GPTQ) is weight-only: matmuls run at the 16-bit rate")
    kept = tuple(sorted(rejected, key=lambda r: (r.description, r.reason))[:MAX_REJECTED])
    if not candidates:
        return ServeSearchResult(None, (), kept, evaluated, no_fit_reason(req, gpus, rejected, near), nearest_of(req, near),
                                 tuple(warnings))
    chosen = min(candidates, key=lambda c: rank_key(req, c))
    pareto = pareto_front(candidates)
    if req.budget_usd_per_month is not None and chosen.usd_per_month > req.budget_usd_per_month:
        cheapest = min(candidates, key=lambda c: (c.usd_per_month, rank_key(req, c)))
        reason = (f"the cheapest configuration meeting the SLO, {cheapest.description}, costs "
                  f"${cheapest.usd_per_month:,.0f}/month > budget ${req.budget_usd_per_month:,.0f}/month")
        if cheapest.usd_per_month <= req.budget_usd_per_month:
            chosen = cheapest
            warnings.append(f"optimising latency exceeded the budget; chose the cheapest: {cheapest.description}")
        else:
            return ServeSearchResult(None, pareto, kept, evaluated, reason, cheapest, tuple(warnings))
    if chosen.max_concurrency < 8 and req.ttft_p99_seconds is None and req.tpot_p99_seconds is None:
        warnings.append(f"KV cache holds only {chosen.max_concurrency} requests per replica on {chosen.gpu_id}")
    return ServeSearchResult(chosen, pareto, kept, evaluated, None, None, tuple(warnings))


def nearest_of(req: ServeRequest, near: list[ServeCandidate]) -> ServeCandidate | None:
    def ratio(c: ServeCandidate) -> float:
        return max(c.ttft_seconds / req.ttft_p99_seconds if req.ttft_p99_seconds else 0.0,
                   c.tpot_seconds / req.tpot_p99_seconds if req.tpot_p99_seconds else 0.0)

    return min(near, key=lambda c: (round(ratio(c), 9), rank_key(req, c))) if near else None


def no_fit_reason(req: ServeRequest, gpus: dict[str, GpuSpec], rejected: list[ServeRejection],
                  near: list[ServeCandidate]) -> str:
    if near:
        best = nearest_of(req, near)
        return (f"no configuration meets the SLO; closest is {best.description} with TTFT p99 "
                f"{best.ttft_seconds * 1e3:.0f} ms, TPOT p99 {best.tpot_seconds * 1e3:.1f} ms")
    fit = smallest_fit(req, gpus)
    allowed = ", ".join(req.gpu_ids) or "none"
    if fit:
        return f"{req.model_id} does not fit the allowed GPUs ({allowed}) and pins; smallest fit: {fit}"
    if rejected:
        return f"{req.model_id} does not fit any GPU configuration; e.g. {rejected[0].description}: {rejected[0].reason}"
    return f"{req.model_id}: no GPU to evaluate (allowed: {allowed})"


# --- multi-stage services --------------------------------------------------------------------------------

@dataclass(frozen=True)
class PipelineStage:
    """One stage of a service: its own request (model, SLO, GPUs) and the items it handles per request
    entering the service (e.g. 1 image → 1 caption)."""

    name: str
    request: ServeRequest
    items_per_request: float = 1.0


@dataclass(frozen=True)
class PipelineResult:
    stages: tuple[tuple[str, ServeSearchResult], ...]
    gpus: tuple[tuple[str, int], ...]  # GPUs per stage (at peak)
    gpu_ratio: tuple[tuple[str, float], ...]  # stage GPUs per GPU of the last stage
    usd_per_month: float
    infeasible_reason: str | None


def size_pipeline(stages: tuple[PipelineStage, ...], gpus: dict[str, GpuSpec], requests_per_second: float,
                  peak_factor: float = 1.0) -> PipelineResult:
    """Size each stage for the rate it receives (stages are decoupled by queues, so each meets its own
    SLO at its own rate) and report the GPU ratio between stages."""
    results = []
    for stage in stages:
        req = replace(stage.request, requests_per_second=requests_per_second * stage.items_per_request,
                      peak_factor=peak_factor)
        results.append((stage.name, search_serving(req, gpus)))
    failed = [(name, r.infeasible_reason) for name, r in results if r.chosen is None]
    counts = tuple((name, r.chosen.gpus if r.chosen else 0) for name, r in results)
    last = counts[-1][1] if counts else 0
    ratio = tuple((name, n / last if last else 0.0) for name, n in counts)
    cost = sum(r.chosen.usd_per_month for _, r in results if r.chosen)
    reason = "; ".join(f"stage {n}: {why}" for n, why in failed) or None
    return PipelineResult(tuple(results), counts, ratio, cost, reason)
