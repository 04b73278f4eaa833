"""The serving search's shared vocabulary: what is asked (`ServeRequest`), what a configuration gives
(`ServeCandidate`, `ServeMemory`), why one is refused (`ServeRejection`), what a search returns
(`ServeSearchResult`), and the rules both searches (LLM: serve_llm_search.py, non-generative: vision.py)
choose by: replica counts, rank, Pareto front.

One set of types serves LLMs and non-generative models (CNN, ViT, encoders): for those, `ttft_seconds` is
the request latency p99, `tpot_seconds` is 0, the "tokens" rates count items (images or sequences) and the
KV fields are 0; `max_queue_delay_seconds` and `preferred_batch_sizes` configure the dynamic batcher.

Replica count: traffic at peak ÷ (capacity × target utilisation), rounded up; the autoscaler runs
between the same figure at average traffic (min) and at peak (max), never below the availability floor
(serve.min_replicas, or the default policy where an autoscaler deploys the service). Load stated as closed-loop
clients (`concurrency`): clients at peak ÷ max concurrency, rounded up, so every client holds a slot and none
queues (serve_closed_loop.py); the request rate is then what those clients produce. Cost is for the replicas
deployed at peak, max(peak need, floor), 730 h a month; $/million tokens counts output tokens at average
traffic. Latencies stay those of the capacity-sized count (the floor's extra replicas only lower them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..reasons import Reason
from .memory import DEFAULT_GPU_MEMORY_UTILIZATION

if TYPE_CHECKING:
    from ...catalog.fabrics import Interconnect
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture
    from ...deployment.pod_price import NodePrice

# Utilisation a replica is sized for: Vertex AI online prediction's autoscaling target defaults to 60%
# (google.cloud.aiplatform AutoscalingMetricSpec.target: "The default value is 60").
DEFAULT_TARGET_UTILIZATION = 0.6
HOURS_PER_MONTH = 730  # 8760 h / 12
MAX_REJECTED = 24  # rejections the resolved plan keeps (sorted, so deterministic)
MAX_PARETO = 12
# Availability floor where an autoscaler deploys the service and the plan gives no serve.min_replicas: two
# replicas, so a node drain or a crash (the PodDisruptionBudget lets one pod go at a time) never takes the whole
# service down; one on an edge device (one device, nowhere to fail over). A policy, not a measurement.
DEFAULT_MIN_REPLICAS = 2
EDGE_MIN_REPLICAS = 1
VISION_KINDS = ("cnn", "vision-transformer", "encoder")


@dataclass(frozen=True)
class ServeRequest:
    arch: Architecture
    params: ParamCounts
    model_id: str
    precisions: tuple[str, ...]  # allowed: bf16 | fp16 | fp8 | int8 | int4
    kv_cache_dtype: str  # 'auto' | 'fp8'
    engine: str  # 'vllm' | 'triton' | 'tgi'
    context_len: int
    requests_per_second: float  # open loop; with `concurrency`, unused (the clients set the rate)
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
    interconnect: Interconnect  # the plan's fabric: what PP stages on different nodes send over
    pricing: str
    optimize: str  # 'cost' | 'latency'
    budget_usd_per_month: float | None
    target_utilization: float = DEFAULT_TARGET_UTILIZATION
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION  # engine 'triton': share of free memory
    max_num_batched_tokens: int | None = None  # None: the engine's default
    max_batch: int | None = None  # cap on concurrency; None: the engine's default
    power_budget_watts: float | None = None  # edge deployments
    concurrency: float | None = None  # closed-loop clients at average traffic (× peak_factor at peak); None: open loop
    min_replicas: int | None = (
        None  # serve.min_replicas as given (the autoscaler's floor, kept even below the average need)
    )
    replica_floor: bool = False  # an autoscaler deploys the service: without min_replicas the default floor applies
    attention_dp: int = 1  # attention data-parallel ranks per replica (serve_attention_dp.py); max_batch is per rank
    speculative_tokens: int = 0  # MTP draft tokens per step (serve_speculative.py); 0 = off
    acceptance_rate: float | None = None  # per draft token; None: the published MTP range, sized at its low end
    weight_block: int = 0  # the checkpoint's fp8 scale blocks (block × block weights per fp32 scale); 0: none counted


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
    ttft_seconds: float  # p99 at the operating point at peak traffic (request latency for non-generative models)
    tpot_seconds: float  # p99 at the operating point at peak traffic
    latency_seconds: float  # ttft + output_tokens × tpot
    step_bound: str  # 'memory' | 'compute'
    tokens_per_second_per_replica: float  # capacity (output tokens, or items)
    requests_per_second_per_replica: float  # capacity
    queue_target_per_replica: float
    replicas: int  # deployed at peak: max(replicas_needed, replica_floor); what cost and GPU counts use
    min_replicas: int
    max_replicas: int
    usd_per_hour: float
    usd_per_month: float
    usd_per_million_tokens: float
    gpu_memory_utilization: float
    target_utilization: float
    queueing: Reason  # how the latency at the operating point comes about
    max_queue_delay_seconds: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()
    power_watts: float = 0.0
    replicas_needed: int = 0  # capacity need at peak traffic, before the floor
    replica_floor: int = 1  # the availability floor applied (1 = none)
    # LLMs: the same latencies at other load points (0 where not modelled, e.g. vision)
    ttft_p50_seconds: float = 0.0  # at the operating point at peak traffic
    ttft_mean_seconds: float = 0.0  # the same requests' mean (a closed loop's prefill queue puts it above the p50)
    tpot_p50_seconds: float = 0.0
    utilization_at_peak: float = 0.0
    in_flight_at_peak: float = 0.0  # sequences a replica runs at peak (Little's law)
    ttft_batch1_seconds: float = 0.0  # one request alone
    tpot_batch1_seconds: float = 0.0
    ttft_at_capacity_seconds: float = 0.0  # max concurrency at the autoscaler's target utilisation
    tpot_at_capacity_seconds: float = 0.0
    requests_per_second_at_peak: float = 0.0  # a replica's request rate at the operating point at peak traffic
    itl_p50_seconds: float = 0.0  # one decode step at that point: the inter-token latency most tokens see
    requests_per_second: float = 0.0  # the service's average request rate (closed loop: what its clients produce)
    attention_dp: int = 1  # DP ranks per replica, each of tp × pp GPUs; max_concurrency counts all ranks' sequences
    speculation: object = None  # serve_speculative.Speculation when speculative decoding is on
    # the price per GPU-hour of the node a pod lands on (deployment/pod_price.py); usd_per_hour is at this price
    node_price: NodePrice | None = None

    @property
    def batch(self) -> int:
        return self.max_concurrency

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def description(self) -> str:
        dp = f" DP{self.attention_dp}" if self.attention_dp > 1 else ""
        return (
            f"{self.replicas} × ({self.gpus_per_replica} × {self.gpu_id}) {self.precision} TP{self.tp} PP{self.pp}{dp} "
            f"batch {self.max_concurrency}"
        )


@dataclass(frozen=True)
class ServeRejection:
    description: str
    reason: Reason


@dataclass(frozen=True)
class ServeSearchResult:
    chosen: ServeCandidate | None
    pareto: tuple[ServeCandidate, ...]
    rejected: tuple[ServeRejection, ...]  # all, in the order met; the pass keeps a sorted sample of MAX_REJECTED
    evaluated: int
    infeasible_reason: Reason | None
    nearest: ServeCandidate | None
    warnings: tuple[Reason, ...]


def replica_counts(rate: float, peak_factor: float, capacity: float, utilization: float) -> tuple[int, int]:
    """(min at average traffic, max at peak) = ceil(rate / (capacity × ρ))."""
    per_replica = capacity * utilization
    return max(1, math.ceil(rate / per_replica - 1e-9)), max(1, math.ceil(rate * peak_factor / per_replica - 1e-9))


@dataclass(frozen=True)
class ReplicaPlan:
    needed_min: int  # capacity need at average traffic
    needed: int  # capacity need at peak traffic
    floor: int  # availability floor (1 = none)
    min_replicas: int  # autoscaler minimum
    replicas: int  # deployed at peak (= autoscaler maximum); cost counts these


def replica_floor(req: ServeRequest, edge: bool) -> int:
    if req.min_replicas is not None:
        return req.min_replicas
    if not req.replica_floor:
        return 1
    return EDGE_MIN_REPLICAS if edge else DEFAULT_MIN_REPLICAS


def replica_plan(req: ServeRequest, capacity: float, edge: bool) -> ReplicaPlan:
    """Replicas an open-loop configuration deploys: the capacity need at `capacity` requests/s per replica, raised
    to the availability floor."""
    low, high = replica_counts(req.requests_per_second, req.peak_factor, capacity, req.target_utilization)
    return floored_replicas(req, low, high, edge)


def floored_replicas(req: ServeRequest, low: int, high: int, edge: bool) -> ReplicaPlan:
    """The capacity need at average (`low`) and peak (`high`) raised to the availability floor. A given
    serve.min_replicas is the autoscaler's minimum as given; the default floor only raises it."""
    floor = replica_floor(req, edge)
    minimum = floor if req.min_replicas is not None else max(low, floor)
    return ReplicaPlan(needed_min=low, needed=high, floor=floor, min_replicas=minimum, replicas=max(high, minimum))


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
