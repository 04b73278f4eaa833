"""One LLM replica configuration (GPU, precision, TP, PP): its memory, the batch that meets the SLO at the most
requests per second, and the candidate (or rejection) it gives the search (serve_llm_search.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...catalog.params import count_params
from ...deployment.pod_price import node_price, serving_pod
from ..reasons import Reason, because
from .closed_loop import closed_loop_point
from .engine_limits import engine_limits
from .latency import BatchPoint, LoadPoint, evaluate_batch, operating_point
from .memory import (
    MemoryBudget,
    MemoryLayout,
    embedding_weight_bytes,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    kv_element_bytes,
    replica_memory,
    weights_bytes_per_gpu,
    weights_bytes_total,
)
from .replica import ReplicaModel, inter_node_link
from .speculative import PUBLISHED_MTP_ACCEPTANCE, Speculation, draft_architecture
from .types import (
    HOURS_PER_MONTH,
    ServeCandidate,
    ServeMemory,
    ServeRejection,
    ServeRequest,
    floored_replicas,
    replica_counts,
)

if TYPE_CHECKING:
    from ...catalog.types import GpuSpec


def batch_grid(limit: int) -> list[int]:
    """Powers of two below the limit, and the limit itself."""
    grid = [b for b in (2**i for i in range(13)) if b < limit]
    return grid + [limit]


def meets_slo(req: ServeRequest, p: BatchPoint | LoadPoint) -> bool:
    return (req.ttft_p99_seconds is None or p.ttft_p99_seconds <= req.ttft_p99_seconds) and (
        req.tpot_p99_seconds is None or p.tpot_p99_seconds <= req.tpot_p99_seconds
    )


def slo_ratio(req: ServeRequest, p: BatchPoint | LoadPoint) -> float:
    """How far a point is from the SLO: the worst of latency / target (≤ 1 meets it)."""
    ratios = [
        p.ttft_p99_seconds / req.ttft_p99_seconds if req.ttft_p99_seconds else 0.0,
        p.tpot_p99_seconds / req.tpot_p99_seconds if req.tpot_p99_seconds else 0.0,
    ]
    return max(ratios)


@dataclass(frozen=True)
class Traffic:
    """What the plan's load does to one batch choice: replicas at average and peak, the operating point at peak, and
    the service's average request rate."""

    min_replicas: int
    replicas: int
    at_peak: LoadPoint
    requests_per_second: float


def traffic_at(req: ServeRequest, model: ReplicaModel, point: BatchPoint, chunk: int) -> Traffic:
    """Open loop: λ = peak rate ÷ the replicas sized for it (M/M/c, Little's-law fixed point). Closed loop: the
    clients at peak spread over ceil(clients ÷ max concurrency) replicas (serve_closed_loop.py)."""
    lengths = {"prompt_tokens": req.prompt_tokens, "output_tokens": req.output_tokens, "chunk_tokens": chunk}
    if req.concurrency is None:
        low, high = replica_counts(
            req.requests_per_second, req.peak_factor, point.requests_per_second, req.target_utilization
        )
        at_peak = operating_point(
            model, point.batch, **lengths, arrival_rate=req.requests_per_second * req.peak_factor / high
        )
        return Traffic(low, high, at_peak, req.requests_per_second)
    low, high = (
        max(1, math.ceil(clients / point.batch - 1e-9))
        for clients in (req.concurrency, req.concurrency * req.peak_factor)
    )
    at_peak = closed_loop_point(model, point.batch, **lengths, clients=req.concurrency * req.peak_factor / high)
    average = closed_loop_point(model, point.batch, **lengths, clients=req.concurrency / low)
    return Traffic(low, high, at_peak, average.arrival_rate * low)


@dataclass(frozen=True)
class ReplicaShape:
    """One replica configuration the search tries: the GPU, the precision and the TP × PP split (per DP rank)."""

    gpu: GpuSpec
    precision: str
    tp: int
    pp: int


def build_candidate(
    req: ServeRequest, shape: ReplicaShape, mem, point: BatchPoint, chunk: int, traffic: Traffic, idle: LoadPoint
) -> ServeCandidate:
    """`point` is the replica at its capacity limit (max concurrency, the autoscaler's target utilisation); `traffic`
    the operating point at peak traffic over the replicas sized for it (the headline latencies); `idle` one request
    alone (batch 1)."""
    gpu, precision, tp, pp = shape.gpu, shape.precision, shape.tp, shape.pp
    counts = floored_replicas(req, traffic.min_replicas, traffic.replicas, gpu.edge)
    replicas = counts.replicas
    per_node = req.gpus_per_node or gpu.gpus_per_node
    dp = req.attention_dp
    nodes_per_replica = math.ceil(dp * tp * pp / per_node)
    weights_total = weights_bytes_total(req.params, req.arch, precision, req.weight_block)
    pod = serving_pod(dp * tp * pp, tp, nodes_per_replica, weights_total, gpu.edge, req.interconnect.family)
    priced = node_price(gpu, pod, req.pricing)  # the node its pods land on, as the deployment places them
    usd_per_hour = replicas * dp * tp * pp * priced.usd_per_gpu_hour
    million_tokens_per_hour = traffic.requests_per_second * req.output_tokens * 3600 / 1e6
    return ServeCandidate(
        gpu_id=gpu.id,
        precision=precision,
        tp=tp,
        pp=pp,
        gpus_per_replica=dp * tp * pp,
        attention_dp=dp,
        speculation=speculation_for(req, precision, tp, pp),
        nodes_per_replica=nodes_per_replica,
        max_concurrency=point.batch,
        max_num_batched_tokens=chunk,
        kv_cache_tokens=mem.kv_cache_tokens * dp,
        kv_bytes_per_token=kv_bytes_per_token(req.arch, kv_element_bytes(req.kv_cache_dtype)),
        kv_bytes_per_token_per_gpu=mem.kv_bytes_per_token,
        memory=serve_memory(mem),
        weights_bytes_total=weights_total,
        **latency_fields(req, point, traffic.at_peak, idle),
        requests_per_second=traffic.requests_per_second,
        step_bound=point.step.bound,
        tokens_per_second_per_replica=point.tokens_per_second,
        requests_per_second_per_replica=point.requests_per_second,
        queue_target_per_replica=queue_target(req, point),
        replicas=replicas,
        min_replicas=counts.min_replicas,
        max_replicas=replicas,
        usd_per_hour=usd_per_hour,
        replicas_needed=counts.needed,
        replica_floor=counts.floor,
        usd_per_month=usd_per_hour * HOURS_PER_MONTH,
        usd_per_million_tokens=usd_per_hour / million_tokens_per_hour,
        gpu_memory_utilization=req.gpu_memory_utilization,
        target_utilization=req.target_utilization,
        queueing=queueing_reason(req, point),
        node_price=priced,
    )


def serve_memory(mem) -> ServeMemory:
    """The per-GPU memory terms a candidate reports."""
    return ServeMemory(
        weights=mem.weights,
        kv_cache=mem.kv_cache,
        activations=mem.activations,
        other=mem.other,
        total=mem.total,
        usable=mem.usable,
    )


def latency_fields(req: ServeRequest, point: BatchPoint, at_peak: LoadPoint, idle: LoadPoint) -> dict[str, float]:
    """A candidate's latencies: at peak traffic (the headline), one request alone, and at the capacity limit."""
    return {
        "ttft_seconds": at_peak.ttft_p99_seconds,
        "tpot_seconds": at_peak.tpot_p99_seconds,
        "latency_seconds": at_peak.ttft_p99_seconds + req.output_tokens * at_peak.tpot_p99_seconds,
        "ttft_p50_seconds": at_peak.ttft_p50_seconds,
        "ttft_mean_seconds": at_peak.ttft_mean_seconds,
        "tpot_p50_seconds": at_peak.tpot_p50_seconds,
        "utilization_at_peak": at_peak.utilization,
        "in_flight_at_peak": at_peak.in_flight,
        "ttft_batch1_seconds": idle.ttft_p99_seconds,
        "tpot_batch1_seconds": idle.tpot_p99_seconds,
        "ttft_at_capacity_seconds": point.ttft_p99_seconds,
        "tpot_at_capacity_seconds": point.tpot_p99_seconds,
        "requests_per_second_at_peak": at_peak.arrival_rate,
        "itl_p50_seconds": at_peak.step_seconds,
    }


def queue_target(req: ServeRequest, point: BatchPoint) -> float:
    """Requests a replica may hold waiting before the autoscaler adds one: what the TTFT SLO's slack drains at the
    replica's rate, else one batch."""
    if req.ttft_p99_seconds:
        slack = max(0.0, req.ttft_p99_seconds - point.step.seconds - point.prefill_latency_seconds)
        return max(1.0, math.floor(slack * point.requests_per_second))
    return float(point.batch)


def queueing_reason(req: ServeRequest, point: BatchPoint) -> Reason:
    """How the latency at the capacity limit comes about: the M/M/c wait and the decode step's terms."""
    return because(
        "mmc-queue",
        batch=point.batch,
        utilization=req.target_utilization,
        wait=point.wait_p99_seconds,
        step=point.step.seconds,
        bound=point.step.bound,
        gemm=point.step.gemm_seconds,
        attention=point.step.attention_seconds,
        elementwise=point.step.elementwise_seconds,
        comm=point.step.comm_seconds,
        fixed=point.step.fixed_seconds,
    )


def speculation_for(req: ServeRequest, precision: str, tp: int, pp: int) -> Speculation | None:
    """The MTP draft on one GPU of this shape (serve_speculative.py); None without speculative decoding."""
    if not req.speculative_tokens:
        return None
    arch = draft_architecture(req.arch)
    params = count_params(arch)
    acceptance = (req.acceptance_rate, req.acceptance_rate) if req.acceptance_rate else PUBLISHED_MTP_ACCEPTANCE
    return Speculation(
        draft_tokens=req.speculative_tokens,
        acceptance_rate=acceptance[0],
        acceptance_range=acceptance,
        draft_arch=arch,
        draft_params=params,
        draft_weights_bytes_per_gpu=weights_bytes_per_gpu(
            params, arch, precision, tp, 1, req.attention_dp, req.weight_block
        ),
        draft_kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(arch, kv_element_bytes(req.kv_cache_dtype), tp, 1),
    )


def memory_for(req: ServeRequest, gpu: GpuSpec, precision: str, tp: int, pp: int, max_num_seqs: int, chunk: int):
    """Per-GPU memory; Triton (TensorRT-LLM) reads the utilisation as a share of free memory. A draft adds its layers
    (its embedding and LM head are the target's) and their KV."""
    draft = speculation_for(req, precision, tp, pp)
    draft_weights = (
        draft.draft_weights_bytes_per_gpu - int(embedding_weight_bytes(draft.draft_params, precision) / tp)
        if draft
        else 0
    )
    return replica_memory(
        req.params,
        req.arch,
        MemoryLayout(precision, req.kv_cache_dtype, tp, pp, dp=req.attention_dp),
        MemoryBudget(
            gpu_memory_bytes=gpu.memory_bytes,
            gpu_memory_utilization=req.gpu_memory_utilization,
            max_num_batched_tokens=chunk,
            max_num_seqs=max_num_seqs,
            context_len=req.context_len,
            request_tokens=req.prompt_tokens + req.output_tokens,
            share_of_free_memory=req.engine == "triton",
        ),
        draft_weights=draft_weights,
        draft_kv_bytes_per_token=draft.draft_kv_bytes_per_token_per_gpu if draft else 0,
        weight_block=req.weight_block,
    )


def evaluate_config(req: ServeRequest, gpu: GpuSpec, precision: str, dtype: str, tp: int, pp: int):
    """→ (candidate meeting the SLO or None, rejection or None, closest-to-SLO candidate or None)."""
    shape = ReplicaShape(gpu, precision, tp, pp)
    where = f"{gpu.id} {precision} TP{tp} PP{pp}"
    mem, cap, chunk = fitted_memory(req, shape)
    if mem.kv_cache_tokens < req.context_len:
        return None, ServeRejection(where, kv_below_context(req, mem)), None
    limit = max(1, min(cap, mem.max_seqs_at_request))  # KV reserved for whole requests (no preemption)
    model = replica_model(req, shape, dtype, mem)
    # a pinned max_num_seqs is the only batch tried; with attention DP, batches are per rank × the ranks
    grid = [req.attention_dp * b for b in ([limit] if req.max_batch else batch_grid(limit))]
    points = [
        evaluate_batch(
            model,
            b,
            prompt_tokens=req.prompt_tokens,
            output_tokens=req.output_tokens,
            chunk_tokens=chunk,
            utilization=req.target_utilization,
        )
        for b in grid
    ]
    at_peak = {p.batch: traffic_at(req, model, p, chunk) for p in points}
    idle = operating_point(
        model, 1, prompt_tokens=req.prompt_tokens, output_tokens=req.output_tokens, chunk_tokens=chunk, arrival_rate=0.0
    )
    meeting = [p for p in points if meets_slo(req, at_peak[p.batch].at_peak)]  # the SLO holds where the traffic puts it
    if meeting:
        best = max(meeting, key=lambda p: (round(p.requests_per_second, 9), -p.batch))
        return build_candidate(req, shape, mem, best, chunk, at_peak[best.batch], idle), None, None
    closest = min(points, key=lambda p: (slo_ratio(req, at_peak[p.batch].at_peak), p.batch))
    reason = no_batch_meets_slo(req, closest.batch, at_peak[closest.batch].at_peak)
    return (
        None,
        ServeRejection(where, reason),
        build_candidate(req, shape, mem, closest, chunk, at_peak[closest.batch], idle),
    )


def fitted_memory(req: ServeRequest, shape: ReplicaShape):
    """→ (per-GPU memory, the engine's max concurrency, its chunk): the memory at the engine's limit, recomputed at
    the concurrency that fits when fewer sequences fit (the sampler's logits are sized by it)."""
    gpu, precision, tp, pp = shape.gpu, shape.precision, shape.tp, shape.pp
    cap, chunk = engine_limits(req, gpu)
    mem = memory_for(req, gpu, precision, tp, pp, cap, chunk)
    if mem.max_seqs_at_request < cap:  # the sampler's logits are sized by the concurrency that fits
        mem = memory_for(req, gpu, precision, tp, pp, max(1, mem.max_seqs_at_request), chunk)
        cap = min(cap, max(1, mem.max_seqs_at_request))
    return mem, cap, chunk


def kv_below_context(req: ServeRequest, mem) -> Reason:
    """The rejection of a shape whose KV cache does not hold one request of the full context."""
    return because(
        "kv-below-context",
        weights=mem.weights,
        workspace=mem.activations + mem.other,
        usable=mem.usable,
        kv_tokens=mem.kv_cache_tokens,
        context=req.context_len,
    )


def replica_model(req: ServeRequest, shape: ReplicaShape, dtype: str, mem) -> ReplicaModel:
    """The replica the latency model times: the shape, its per-GPU weights and KV, and the link between nodes."""
    gpu, precision, tp, pp = shape.gpu, shape.precision, shape.tp, shape.pp
    spans_nodes = tp * pp > (req.gpus_per_node or gpu.gpus_per_node)
    return ReplicaModel(
        gpu=gpu,
        arch=req.arch,
        params=req.params,
        precision=precision,
        dtype=dtype,
        tp=tp,
        pp=pp,
        weights_bytes_per_gpu=mem.weights,
        kv_bytes_per_token_per_gpu=mem.kv_bytes_per_token,
        inter_node=inter_node_link(req.interconnect) if spans_nodes else None,
        dp=req.attention_dp,
        speculation=speculation_for(req, precision, tp, pp),
        weight_block=req.weight_block,
    )


def no_batch_meets_slo(req: ServeRequest, batch: int, peak: LoadPoint) -> Reason:
    """The rejection of a shape no batch of which meets the SLO, at the batch closest to it."""
    return because(
        "no-batch-meets-slo",
        batch=batch,
        ttft=peak.ttft_p99_seconds,
        ttft_slo=req.ttft_p99_seconds,
        tpot=peak.tpot_p99_seconds,
        tpot_slo=req.tpot_p99_seconds,
    )
