"""The serving plan's sections (hardware, serving, memory per GPU) from the chosen serving candidate."""

from __future__ import annotations

from ..catalog.catalog import Catalog
from ..plan.resolved import (
    Hardware,
    MemoryPerGpu,
    Serving,
)
from ..plan.spec import PlanSpec
from ..plan.spec_serve import SloSpec
from ..sizing.serve.speculative import tokens_per_round
from ..sizing.serve.types import ServeCandidate


def sections(
    spec: PlanSpec, engine: str, slo: SloSpec, c: ServeCandidate, catalog: Catalog
) -> tuple[Hardware, Serving, MemoryPerGpu]:
    """The hardware, serving and memory-per-GPU sections of the chosen candidate."""
    return _hardware(spec, c, catalog), _serving(spec, engine, slo, c, catalog), _memory(c)


def _hardware(spec: PlanSpec, c: ServeCandidate, catalog: Catalog) -> Hardware:
    """The chosen GPUs: how many, on how many nodes, and their price."""
    gpu = catalog.gpus[c.gpu_id]
    return Hardware(
        gpu=c.gpu_id,
        gpus=c.gpus,
        nodes=c.replicas * c.nodes_per_replica,
        gpus_per_node=c.gpus_per_replica // c.nodes_per_replica,
        gpu_memory_bytes=gpu.memory_bytes,
        interconnect=spec.cluster.interconnect,
        storage=spec.cluster.storage,
        pricing=spec.cluster.pricing,
        usd_per_gpu_hour=c.node_price.usd_per_gpu_hour,  # the node its pods land on (deployment/pod_price.py)
        gpu_spec=gpu,
    )


def _serving(spec: PlanSpec, engine: str, slo: SloSpec, c: ServeCandidate, catalog: Catalog) -> Serving:
    """The engine's settings, the replicas and the latencies the chosen candidate was sized at."""
    storage = catalog.storage[spec.cluster.storage]
    return Serving(
        engine=engine,
        precision=c.precision,
        kv_cache_dtype=spec.serve.kv_cache_dtype,
        replicas=c.replicas,
        min_replicas=c.min_replicas,
        max_replicas=c.max_replicas,
        replicas_needed=c.replicas_needed,
        replica_floor=c.replica_floor,
        tp=c.tp,
        pp=c.pp,
        attention_dp=c.attention_dp,
        **_speculation_fields(c),
        gpus_per_replica=c.gpus_per_replica,
        nodes_per_replica=c.nodes_per_replica,
        context_len=spec.serve.context_len,
        max_concurrency=c.max_concurrency,
        max_num_batched_tokens=c.max_num_batched_tokens,
        kv_cache_tokens=c.kv_cache_tokens,
        kv_bytes_per_token=c.kv_bytes_per_token,
        gpu_memory_utilization=c.gpu_memory_utilization,
        ttft_seconds=c.ttft_seconds,
        tpot_seconds=c.tpot_seconds,
        tokens_per_second_per_replica=c.tokens_per_second_per_replica,
        requests_per_second_per_replica=c.requests_per_second_per_replica,
        queue_target_per_replica=c.queue_target_per_replica,
        weights_bytes=c.weights_bytes_total,
        startup_seconds=c.weights_bytes_total / storage.read_bytes_per_second,
        ttft_slo_seconds=slo.ttft_p99,
        tpot_slo_seconds=slo.tpot_p99,
        latency_slo_seconds=slo.latency_p99,
        max_queue_delay_seconds=c.max_queue_delay_seconds,
        preferred_batch_sizes=list(c.preferred_batch_sizes),
        ttft_p50_seconds=c.ttft_p50_seconds,
        tpot_p50_seconds=c.tpot_p50_seconds,
        utilization_at_peak=c.utilization_at_peak,
        target_utilization=c.target_utilization,
        load_point_pinned=spec.serve.target_utilization is not None,
        in_flight_at_peak=c.in_flight_at_peak,
        ttft_batch1_seconds=c.ttft_batch1_seconds,
        tpot_batch1_seconds=c.tpot_batch1_seconds,
        ttft_at_capacity_seconds=c.ttft_at_capacity_seconds,
        tpot_at_capacity_seconds=c.tpot_at_capacity_seconds,
        concurrency=spec.serve.traffic.concurrency,
        requests_per_second=c.requests_per_second,
        requests_per_second_at_peak=c.requests_per_second_at_peak,
        itl_p50_seconds=c.itl_p50_seconds,
    )


def _memory(c: ServeCandidate) -> MemoryPerGpu:
    """The memory per GPU of the chosen candidate."""
    m = c.memory
    return MemoryPerGpu(
        weights=m.weights, kv_cache=m.kv_cache, activations=m.activations, other=m.other, total=m.total, usable=m.usable
    )


def _speculation_fields(c: ServeCandidate) -> dict:
    s = c.speculation
    if s is None:
        return {}
    return {
        "speculative_method": "mtp",
        "speculative_tokens": s.draft_tokens,
        "acceptance_rate": s.acceptance_rate,
        "tokens_per_step": tokens_per_round(s.acceptance_rate, s.draft_tokens),
    }
