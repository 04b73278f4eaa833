"""A layout timed and costed: the one result type of the training search (`TrainCandidate`), and what a search
computes once for all of its layouts (`SearchContext`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...catalog.fabrics import Interconnect, Storage
from ...catalog.params import mtp_params
from ...catalog.types import Architecture, GpuSpec
from ...deployment.pod_price import NodePrice, node_price, training_pod
from ..reasons import Reason
from .activations import recompute_kind
from .communication import ZERO3_VOLUME_FACTOR, dp_ranks_per_node
from .flops import COMPUTE_DTYPE, frozen_base_flops_saved_per_token, hardware_flops_per_token, model_flops_per_token
from .frameworks import runs_on_fsdp2
from .goodput import WholeRun, whole_run
from .layout import Layout, Links, describe
from .memory import MemoryBreakdown, memory_per_gpu
from .model_states import FSDP2_REDUCE_BYTES, checkpoint_bytes, lora_trainable_params
from .parallel import moe_layer_share, routed_expert_params
from .request import TrainRequest, links_for
from .step_rates import GRADIENT_BYTES, StepTraffic
from .time import StepTime, step_time

# DP communication beyond this share of the step marks the plan network-bound; the bandwidth "needed" is what
# keeps the gradient all-reduce under this share (a planning threshold, stated in the report).
NETWORK_SHARE_OF_STEP = 0.10
# Token ids on storage: Megatron's indexed datasets store uint16 below 65,500 tokens of vocabulary, int32 above
# (megatron/core/datasets/indexed_dataset.py, DType.optimal_dtype).
TOKEN_ID_BYTES_SMALL_VOCAB, TOKEN_ID_BYTES, SMALL_VOCAB = 2, 4, 65500


def stored_bytes_per_token(arch: Architecture, stated: float | None) -> float:
    """Bytes one training token takes on storage: the plan's `train.bytes_per_token`, else the token-id width
    Megatron's indexed datasets pick for the vocabulary. The one figure behind the dataset read rate (the
    candidate's `dataset_read_bytes_per_second`, which plan.json and the storage warning both show)."""
    if stated is not None:
        return stated
    return TOKEN_ID_BYTES_SMALL_VOCAB if 0 < arch.vocab < SMALL_VOCAB else TOKEN_ID_BYTES


def checkpoint_write_bandwidth(storage, nodes: int) -> float:
    """Bytes/s a checkpoint is written at: every node writes its shard at the per-node client rate, up to the
    filesystem's aggregate ceiling (fabrics.yaml aggregate_write_bytes_per_second, sourced there)."""
    per_nodes = storage.write_bytes_per_second * nodes
    ceiling = storage.aggregate_write_bytes_per_second
    return per_nodes if ceiling is None else min(per_nodes, ceiling)


@dataclass(frozen=True)
class TrainCandidate:
    """A layout on `gpu_id` that fits, timed and costed."""

    gpu_id: str
    layout: Layout
    framework_reason: Reason
    nodes: int
    gpus_per_node: int
    memory: MemoryBreakdown
    usable_memory_bytes: int
    grad_accum: int
    step: StepTime
    steps: int
    tokens_per_second: float
    wall_seconds: float
    gpu_hours: float
    whole_run: WholeRun
    usd_per_gpu_hour: float  # the price of the node the trainer pod lands on (node_price)
    node_price: NodePrice
    cost_usd: float
    description: str  # formatted once: every ordering of the choice compares it
    flops_per_token_model: float
    flops_per_token_hardware: float
    flops_total: float
    mfu: float
    hfu: float
    checkpoint_bytes: int
    checkpoint_write_seconds: float
    dataset_read_bytes_per_second: float
    allreduce_bytes_per_step: float
    network_bytes_per_second_needed: float
    network_bound: bool

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def framework(self) -> str:
        return self.layout.framework

    @property
    def goodput(self) -> float:
        return self.whole_run.goodput

    @property
    def checkpoint_interval_seconds(self) -> float:
        return self.whole_run.checkpoint_interval_seconds

    @property
    def usd_per_day(self) -> float:
        return self.gpus * self.usd_per_gpu_hour * 24

    @property
    def usd_per_million_tokens(self) -> float:
        tokens = self.tokens_per_second * self.wall_seconds * self.goodput
        return self.cost_usd / tokens * 1e6 if tokens else 0.0


@dataclass(frozen=True)
class SearchContext:
    """What one search computes once. The memo tables hold pure functions of their keys: memory does not depend
    on the GPU type, so each layout's memory is computed once however many GPU types share it."""

    req: TrainRequest
    fabric: Interconnect
    storage: Storage
    tokens_per_step: int
    flops_model: float
    checkpoint: int
    # the same where the framework's launch trains the architecture's MTP modules (Layout.mtp_layers)
    flops_model_mtp: float
    checkpoint_mtp: int
    memory: dict[Layout, MemoryBreakdown] = field(default_factory=dict)
    hardware_flops: dict[tuple[str, int], float] = field(default_factory=dict)
    whole_run: dict[tuple[int, float, str], WholeRun] = field(default_factory=dict)
    node_prices: dict[tuple[str, int, int], NodePrice] = field(default_factory=dict)


def search_context(req: TrainRequest) -> SearchContext:
    lora = lora_trainable_params(req.arch, req.lora_rank, req.lora_targets) if req.method != "full" else 0
    mtp = req.arch.mtp_layers if req.method == "full" else 0  # Layout.mtp_layers: full weights only
    return SearchContext(
        req,
        req.interconnect,
        req.storage,
        req.global_batch_sequences * req.seq_len,
        model_flops_per_token(req.arch, req.params, req.seq_len) - _frozen_saving(req, lora),
        checkpoint_bytes(req.params, req.optimizer, req.method, lora, req.memory.master_weights),
        model_flops_per_token(req.arch, req.params, req.seq_len, mtp) - _frozen_saving(req, lora),
        checkpoint_bytes(
            req.params, req.optimizer, req.method, lora, req.memory.master_weights, mtp_params(req.arch) if mtp else 0
        ),
    )


def layout_memory(ctx: SearchContext, layout: Layout) -> MemoryBreakdown:
    """The layout's peak memory per GPU (memory.memory_per_gpu), once per layout in a search."""
    found = ctx.memory.get(layout)
    if found is None:
        found = ctx.memory[layout] = memory_per_gpu(ctx.req.workload, layout)
    return found


def _frozen_saving(req: TrainRequest, adapters: float) -> float:
    """LoRA and QLoRA compute no weight gradients for the base: 4·N, not 6·N, plus 6 per adapter parameter."""
    return frozen_base_flops_saved_per_token(req.arch, req.params, adapters) if req.method != "full" else 0.0


def _hardware_flops(ctx: SearchContext, recompute: str, mtp: int) -> float:
    if (recompute, mtp) not in ctx.hardware_flops:
        req = ctx.req
        hardware = hardware_flops_per_token(req.arch, req.params, req.seq_len, recompute, mtp)
        adapters = lora_trainable_params(req.arch, req.lora_rank, req.lora_targets) if req.method != "full" else 0
        ctx.hardware_flops[recompute, mtp] = hardware - _frozen_saving(req, adapters)
    return ctx.hardware_flops[recompute, mtp]


def layout_node_price(ctx: SearchContext, gpu: GpuSpec, gpus_per_node: int, nodes: int) -> NodePrice:
    """What a GPU-hour of the layout costs: on Kubernetes the price of the node its trainer pods land on
    (deployment/pod_price.py, the pod the deployment pass places), else the GPU's catalog price."""
    req = ctx.req
    if not req.pods_on_catalog_nodes:
        return NodePrice(gpu.price_usd_per_gpu_hour[req.pricing], None)
    key = (gpu.id, gpus_per_node, min(nodes, 2))  # one node, or several: the fabric decides among nodes
    if key not in ctx.node_prices:
        pod = training_pod(gpus_per_node, nodes, req.interconnect.id)
        ctx.node_prices[key] = node_price(gpu, pod, req.pricing)
    return ctx.node_prices[key]


def _whole_run(ctx: SearchContext, gpus: int, write_seconds: float, framework: str) -> WholeRun:
    key = (gpus, write_seconds, framework)
    if key not in ctx.whole_run:
        ctx.whole_run[key] = whole_run(gpus, write_seconds, framework, ctx.req.mtbf_gpu_hours)
    return ctx.whole_run[key]


def trainable_params_per_replica(req: TrainRequest, layout: Layout) -> float:
    """Parameters one GPU trains, before any ZeRO sharding: routed experts are split over EP (a GPU reduces the
    gradients of the experts it holds), the rest over TP and PP, the MTP modules the layout trains (Layout.mtp_layers)
    with them (exact without PP; with PP they are the last stage's); LoRA's adapters as memory.lora_trainable_params."""
    lay = layout
    if req.method != "full":
        return lora_trainable_params(req.arch, req.lora_rank, req.lora_targets, lay.tp) / lay.pp
    arch, mtp = req.arch, lay.mtp_layers(req.workload)
    experts = routed_expert_params(arch, req.params) * (moe_layer_share(arch) * arch.layers + mtp)
    return (req.params.total + (mtp_params(arch) if mtp else 0) - experts * (1 - 1 / lay.ep)) / (lay.tp * lay.pp)


def gradient_bytes_per_replica(req: TrainRequest, layout: Layout, mem: MemoryBreakdown) -> float:
    """Bytes one DP replica reduces a step: 16-bit gradients of what it trains; ZeRO-3 LoRA gathers the frozen base
    twice per micro-batch (forward, backward): one all-reduce's volume, given net of the 1.5× that step_time applies
    to stage 3; FSDP2 stages under PP: the base's 16-bit bytes, which step_time gathers m + 1 times a step (and
    reduces once, an over-count of the adapters' gradients)."""
    if req.method != "full" and layout.zero == 3:
        return (mem.weights - mem.gathered) * layout.dp / (1 if mem.accumulating else ZERO3_VOLUME_FACTOR)
    return trainable_params_per_replica(req, layout) * GRADIENT_BYTES


def layout_step_time(req: TrainRequest, gpu: GpuSpec, layout: Layout, links: Links, mem: MemoryBreakdown) -> StepTime:
    """step_time for a sized layout: what the memory breakdown says stays on the GPU, is offloaded or accumulates."""
    lay, full = layout, req.method == "full"
    trainable = trainable_params_per_replica(req, lay)
    fsdp2 = runs_on_fsdp2(lay.framework, lay.tp, lay.pp, lay.recompute, lay.shard_group, links.gpus_per_node, lay.cp)
    traffic = StepTraffic(
        state_bytes_on_gpu=mem.model_states - mem.gathered - mem.accumulating
        if full
        else mem.gradients + mem.optimizer,
        offloaded_bytes=mem.cpu_offload_bytes,
        trainable_params_per_gpu=trainable / max(1, lay.dp),
        trainable_params_per_replica=trainable,
        gradient_bytes_per_replica=gradient_bytes_per_replica(req, lay, mem),
        reduce_bytes_per_gradient=FSDP2_REDUCE_BYTES if full and fsdp2 else GRADIENT_BYTES,
        reduce_once_per_step=mem.accumulating > 0,
    )
    return step_time(req.workload, lay, gpu, links, traffic)


def _network(req: TrainRequest, layout: Layout, links: Links, gradient_bytes: float, step: StepTime):
    """(bytes all-reduced a step, NIC bytes/s per GPU that keep it under NETWORK_SHARE_OF_STEP). The ring moves at
    NIC × the group's ranks on each node (time.dp_collective_bandwidth); 0 where the group stays inside a node."""
    ranks = layout.data_ranks  # CP ranks reduce gradients with DP
    ring = 2 * (ranks - 1) / ranks if ranks > 1 else 0.0
    allreduce = gradient_bytes * (ZERO3_VOLUME_FACTOR if layout.zero == 3 else 1.0) * ring
    ranks_per_node = dp_ranks_per_node(layout.tp, ranks, links.gpus_per_node)
    if not allreduce or ranks <= ranks_per_node:
        return allreduce, 0.0
    return allreduce, allreduce / (NETWORK_SHARE_OF_STEP * step.total) / (ranks_per_node * links.nic_fraction)


def price_layout(
    ctx: SearchContext, gpu: GpuSpec, layout: Layout, reason: Reason, mem: MemoryBreakdown, usable: int
) -> TrainCandidate:
    """The layout timed (time.step_time), its whole run (failures, checkpoints, stragglers) and its cost."""
    req, lay = ctx.req, layout
    per_node = req.gpus_per_node or gpu.gpus_per_node
    links = links_for(req, gpu.id, per_node)
    step = layout_step_time(req, gpu, lay, links, mem)
    steps = max(1, math.ceil(req.tokens / ctx.tokens_per_step))
    tokens_per_second = ctx.tokens_per_step / step.total
    nodes = max(1, math.ceil(lay.gpus / per_node))
    mtp = lay.mtp_layers(req.workload)
    flops_model, checkpoint = (ctx.flops_model_mtp, ctx.checkpoint_mtp) if mtp else (ctx.flops_model, ctx.checkpoint)
    write_seconds = checkpoint / checkpoint_write_bandwidth(ctx.storage, nodes)
    terms = _whole_run(ctx, lay.gpus, write_seconds, lay.framework)
    wall = steps * step.total / terms.goodput
    gpu_hours = wall * lay.gpus / 3600
    priced = layout_node_price(ctx, gpu, min(per_node, lay.gpus), nodes)
    price = priced.usd_per_gpu_hour
    peak = gpu.peak_flops_per_second(COMPUTE_DTYPE[req.precision])
    hardware = _hardware_flops(ctx, recompute_kind(lay.recompute, lay.framework), mtp)
    allreduce, needed = _network(req, lay, links, gradient_bytes_per_replica(req, lay, mem), step)
    return TrainCandidate(
        gpu_id=gpu.id,
        layout=lay,
        framework_reason=reason,
        nodes=nodes,
        gpus_per_node=min(per_node, lay.gpus),
        memory=mem,
        usable_memory_bytes=usable,
        grad_accum=lay.microbatches(req.workload),
        step=step,
        steps=steps,
        tokens_per_second=tokens_per_second,
        wall_seconds=wall,
        gpu_hours=gpu_hours,
        whole_run=terms,
        usd_per_gpu_hour=price,
        node_price=priced,
        cost_usd=gpu_hours * price,
        description=describe(gpu.id, lay),
        flops_per_token_model=flops_model,
        flops_per_token_hardware=hardware,
        flops_total=flops_model * req.tokens,
        mfu=tokens_per_second * flops_model / (lay.gpus * peak),
        hfu=tokens_per_second * hardware / (lay.gpus * peak),
        checkpoint_bytes=checkpoint,
        checkpoint_write_seconds=write_seconds,
        dataset_read_bytes_per_second=tokens_per_second * stored_bytes_per_token(req.arch, req.bytes_per_token),
        allreduce_bytes_per_step=allreduce,
        network_bytes_per_second_needed=needed,
        network_bound=step.dp_comm_exposed > NETWORK_SHARE_OF_STEP * step.total,
    )
