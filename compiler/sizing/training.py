"""The training search: GPU type × count × TP × PP × DP × ZeRO × micro-batch × recompute × offload.

Enumeration (pins fix a dimension):
* GPU counts: 1, 2, 4 (less than a node), then whole nodes in power-of-two numbers up to `max_gpus`, and the
  pinned count;
* TP within a node, dividing the query and key/value heads; PP dividing the layers, tried only once TP
  fills what the model allows in a node (Narayanan et al. 2021 §3.3: TP inside the node, PP across nodes);
* DP = GPUs / (TP·PP), and global batch = micro-batch × accumulation × DP exactly;
* ZeRO 0-3 and offload as the framework allows (`resolve_framework`); offload is only tried when the
  layout does not fit without it;
* recompute none → selective → full: the first that fits is kept (less recompute is never slower); selective
  (Megatron's core-attention recompute) only under Megatron-LM, whose configs are the only ones that can ask for it.
Every fitting candidate is timed (train_time) and costed; the choice is the cheapest that meets the deadline
and budget (optimize: cost) or the fastest within the budget (optimize: time), ties broken by wall time or
cost, then fewer GPUs, then the description.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence, TypeVar

from ..catalog.fabrics import Interconnect, Storage
from ..catalog.params import ParamCounts
from ..catalog.types import Architecture, GpuSpec
from .reasons import Reason, because
from .search_cache import SearchCache
from .train_memory import (
    MemoryBreakdown, MemoryOptions, checkpoint_bytes, lora_trainable_params, memory_per_gpu, usable_memory_bytes,
)
from .train_time import (
    COMPUTE_DTYPE, GRADIENT_BYTES, INTER_NODE_ACHIEVABLE_FRACTION, ZERO3_VOLUME_FACTOR, StepTime, goodput,
    dp_ranks_per_node, hardware_flops_per_token, model_flops_per_token, step_time,
)

TP_CHOICES = (1, 2, 4, 8)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
RECOMPUTE_ORDER = ("none", "selective", "full")
SUB_NODE_COUNTS = (1, 2, 4)
MAX_PP = 128  # Megatron-LM 2021 ran 1T parameters on PP 64 (Narayanan et al. 2021, Table 1)
MAX_REJECTIONS = 20
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
# Host memory that CPU offload may fill per GPU: DGX H100 has 2 TB of system memory for 8 GPUs (NVIDIA DGX H100
# datasheet); DGX A100 80GB the same 2 TB.
HOST_MEMORY_BYTES_PER_GPU = 2e12 / 8


@dataclass(frozen=True)
class TrainPins:
    """Dimensions the plan fixes; None leaves them to the search."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    zero_stage: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    offload: bool | None = None


@dataclass(frozen=True)
class TrainRequest:
    arch: Architecture
    params: ParamCounts
    tokens: float
    seq_len: int
    global_batch_sequences: int
    gpu_ids: tuple[str, ...]
    interconnect: Interconnect  # the catalog entries the plan names: the search reads only its arguments
    storage: Storage
    precision: str = "bf16"
    optimizer: str = "adamw"
    method: str = "full"  # full | lora | qlora
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("q", "k", "v", "o")
    framework: str = "auto"  # auto | deepspeed | fsdp | megatron | ddp
    deadline_seconds: float | None = None
    budget_usd: float | None = None
    gpu_count: int | None = None
    gpus_per_node: int | None = None
    max_gpus: int = 1024
    pricing: str = "on-demand"
    pins: TrainPins = field(default_factory=TrainPins)
    optimize: str = "cost"  # cost | time
    mtbf_gpu_hours: float | None = None
    flash_attention: bool = True
    attention_kernel: str = "flash2"  # train_time.ATTENTION_KERNELS
    bytes_per_token: float | None = None  # stored bytes per token; None: from the vocabulary (stored_bytes_per_token)
    memory: MemoryOptions = field(default_factory=MemoryOptions)  # where frameworks differ (train_memory docstring)

    def __post_init__(self) -> None:
        if isinstance(self.pins, Mapping):  # a plain {"tp": 2, ...} mapping, None values meaning "search"
            object.__setattr__(self, "pins", TrainPins(**{k: v for k, v in self.pins.items() if v is not None}))


@dataclass(frozen=True)
class TrainCandidate:
    gpu_id: str
    gpus: int
    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    dp: int
    zero_stage: int
    micro_batch: int
    grad_accum: int
    recompute: str
    offload_optimizer: bool
    offload_params: bool
    sequence_parallel: bool
    framework: str
    framework_reason: Reason
    memory: MemoryBreakdown
    usable_memory_bytes: int
    step: StepTime
    flops_per_token_model: float
    flops_per_token_hardware: float
    flops_total: float
    mfu: float
    hfu: float
    tokens_per_second: float
    steps: int
    wall_seconds: float
    gpu_hours: float
    goodput: float
    usd_per_gpu_hour: float
    cost_usd: float
    checkpoint_bytes: int
    checkpoint_write_seconds: float
    checkpoint_interval_seconds: float
    dataset_read_bytes_per_second: float
    allreduce_bytes_per_step: float
    network_bytes_per_second_needed: float
    network_bound: bool

    @property
    def description(self) -> str:
        return describe(self.gpus, self.gpu_id, self.tp, self.pp, self.dp, self.zero_stage, self.micro_batch,
                        self.recompute, self.offload_optimizer)

    @property
    def usd_per_day(self) -> float:
        return self.gpus * self.usd_per_gpu_hour * 24

    @property
    def usd_per_million_tokens(self) -> float:
        tokens = self.tokens_per_second * self.wall_seconds * self.goodput
        return self.cost_usd / tokens * 1e6 if tokens else 0.0


@dataclass(frozen=True)
class Rejection:
    description: str
    reason: Reason


@dataclass(frozen=True)
class TrainSearchResult:
    chosen: TrainCandidate | None
    pareto: tuple[TrainCandidate, ...]
    rejected: tuple[Rejection, ...]
    evaluated: int
    infeasible_reason: Reason | None
    nearest: TrainCandidate | None
    warnings: tuple[Reason, ...]


def describe(gpus: int, gpu_id: str, tp: int, pp: int, dp: int, zero: int, mb: int, recompute: str, offload: bool) -> str:
    return (f"{gpus} × {gpu_id} TP{tp} PP{pp} DP{dp} ZeRO-{zero} mb{mb} {recompute}"
            f"{' offload' if offload else ''}")


def resolve_framework(framework: str, method: str, tp: int, pp: int, zero: int, offload: bool) -> tuple[str, Reason] | None:
    """The framework that runs a layout, with the rule, or None when the requested framework cannot run it.

    Rule for "auto": TP or PP → Megatron-LM (its model-parallel layers; ZeRO-1 is its distributed optimizer);
    otherwise ZeRO-0 → PyTorch DDP, ZeRO-3 without offload → FSDP FULL_SHARD, offload or ZeRO-1/2 → DeepSpeed.
    """
    pinned = because("framework-pinned")
    if framework == "ddp":
        return ("ddp", pinned) if tp == pp == 1 and zero == 0 and not offload else None
    if framework == "fsdp":  # FULL_SHARD (3), SHARD_GRAD_OP (2), NO_SHARD (0); CPUOffload needs FULL_SHARD
        ok = tp == pp == 1 and zero in (0, 2, 3) and (not offload or zero == 3)
        return ("fsdp", pinned) if ok else None
    if framework == "megatron":
        return ("megatron", pinned) if zero in (0, 1) and not offload and method == "full" else None
    if framework == "deepspeed":
        return ("deepspeed", pinned) if tp == pp == 1 and (not offload or zero >= 2) else None
    if tp > 1 or pp > 1:
        if zero not in (0, 1) or offload or method != "full":
            return None
        return "megatron", because("megatron-for-model-parallel")
    if offload:
        return ("deepspeed", because("deepspeed-for-offload")) if zero >= 2 else None
    if zero == 0:
        return "ddp", because("ddp-unsharded")
    if zero == 3:
        return "fsdp", because("fsdp-full-shard")
    return "deepspeed", because("deepspeed-zero", zero=zero)


def gpu_counts(req: TrainRequest, per_node: int) -> list[int]:
    """Candidate GPU counts: the pinned one, or sub-node counts and power-of-two numbers of whole nodes."""
    if req.gpu_count:
        return [req.gpu_count]
    counts = [c for c in SUB_NODE_COUNTS if c < per_node and c <= req.max_gpus]
    nodes = 1
    while nodes * per_node <= req.max_gpus:
        counts.append(nodes * per_node)
        nodes *= 2
    return counts


def _tp_choices(arch: Architecture, per_node: int, count: int, pinned: int | None) -> list[int]:
    if pinned:
        return [pinned] if pinned <= count else []
    heads, kv = arch.heads or 1, arch.kv_heads or arch.heads or 1
    return [t for t in TP_CHOICES if t <= min(per_node, count) and heads % t == 0 and kv % t == 0]


def _pp_choices(arch: Architecture, tp: int, tp_max: int, count: int, pinned: int | None) -> list[int]:
    if pinned:
        return [pinned]
    if not arch.layers or tp < tp_max:
        return [1]
    return [p for p in range(1, min(arch.layers, MAX_PP, count // tp) + 1) if arch.layers % p == 0]


@dataclass(frozen=True)
class _Context:
    """What one search computes once. The memo tables hold pure functions of their keys: memory does not depend
    on the GPU type, so each layout's memory is computed once however many GPU types share it."""

    req: TrainRequest
    fabric: Interconnect
    storage: Storage
    tokens_per_step: int
    flops_model: float
    lora_trainable: int
    checkpoint: int
    memory: dict[tuple, MemoryBreakdown] = field(default_factory=dict)
    hardware_flops: dict[str, float] = field(default_factory=dict)
    goodput: dict[tuple[int, float], tuple[float, float]] = field(default_factory=dict)


def _context(req: TrainRequest) -> _Context:
    lora = lora_trainable_params(req.arch, req.lora_rank, req.lora_targets) if req.method != "full" else 0
    return _Context(req, req.interconnect, req.storage,
                    req.global_batch_sequences * req.seq_len, model_flops_per_token(req.arch, req.params, req.seq_len),
                    lora, checkpoint_bytes(req.params, req.optimizer, req.method, lora, req.memory.master_weights))


def _hardware_flops(ctx: _Context, recompute: str) -> float:
    if recompute not in ctx.hardware_flops:
        req = ctx.req
        ctx.hardware_flops[recompute] = hardware_flops_per_token(req.arch, req.params, req.seq_len, recompute)
    return ctx.hardware_flops[recompute]


def _goodput(ctx: _Context, gpus: int, write_seconds: float) -> tuple[float, float]:
    key = (gpus, write_seconds)
    if key not in ctx.goodput:
        ctx.goodput[key] = goodput(gpus, write_seconds, ctx.req.mtbf_gpu_hours)
    return ctx.goodput[key]


class _Fit(NamedTuple):
    """A layout that fits, with what the choice compares (wall time and cost). Most never reach a result, so the
    rest of a TrainCandidate (MFU, network and storage figures) is completed by `_candidate` only for those that do."""

    gpu: GpuSpec
    per_node: int
    gpus: int
    tp: int
    pp: int
    dp: int
    zero: int
    offload: bool
    mb: int
    grad_accum: int
    recompute: str
    framework: tuple[str, Reason]
    mem: MemoryBreakdown
    usable: int
    gradient_bytes: float
    step: StepTime
    steps: int
    tokens_per_second: float
    nodes: int
    write_seconds: float
    goodput: float
    interval: float
    wall_seconds: float
    gpu_hours: float
    price: float
    cost_usd: float
    description: str  # formatted once: every ordering of the choice compares it

    @property
    def gpu_id(self) -> str:
        return self.gpu.id


def _fit(ctx: _Context, gpu: GpuSpec, per_node: int, gpus: int, tp: int, pp: int, zero: int, offload: bool,
         mb: int, recompute: str, framework: tuple[str, Reason], mem: MemoryBreakdown, usable: int) -> _Fit:
    req = ctx.req
    dp = gpus // (tp * pp)
    grad_accum = req.global_batch_sequences // (mb * dp)
    trainable_per_gpu = (req.params.total / (tp * pp) if req.method == "full" else ctx.lora_trainable / (tp * pp))
    gradient_bytes = trainable_per_gpu * GRADIENT_BYTES
    if req.method != "full" and zero == 3:
        # ZeRO-3 gathers the frozen base twice per micro-batch (forward, backward): one all-reduce's volume,
        # given here net of the 1.5× that step_time applies to stage 3
        gradient_bytes = (mem.weights - mem.gathered) * dp / ZERO3_VOLUME_FACTOR
    step = step_time(req.arch, req.params, gpu, precision=req.precision, seq_len=req.seq_len, micro_batch=mb,
                     grad_accum=grad_accum, tp=tp, pp=pp, dp=dp, zero_stage=zero,
                     recompute=recompute, flash_attention=req.flash_attention,
                     attention_kernel=req.attention_kernel, sequence_parallel=tp > 1,
                     state_bytes_on_gpu=(mem.model_states - mem.gathered if req.method == "full"
                                         else mem.gradients + mem.optimizer),
                     offloaded_bytes=mem.cpu_offload_bytes, trainable_params_per_gpu=trainable_per_gpu / max(1, dp),
                     trainable_params_per_replica=trainable_per_gpu,
                     gradient_bytes_per_replica=gradient_bytes, inter_node_bytes_per_second=ctx.fabric.bytes_per_second_per_gpu,
                     inter_node_latency_seconds=ctx.fabric.latency_seconds, gpus_per_node=per_node)
    steps = max(1, math.ceil(req.tokens / ctx.tokens_per_step))
    tokens_per_second = ctx.tokens_per_step / step.total
    nodes = max(1, math.ceil(gpus / per_node))
    write_seconds = ctx.checkpoint / checkpoint_write_bandwidth(ctx.storage, nodes)
    share, interval = _goodput(ctx, gpus, write_seconds)
    wall = steps * step.total / share
    gpu_hours = wall * gpus / 3600
    price = gpu.price_usd_per_gpu_hour[req.pricing]
    return _Fit(gpu, per_node, gpus, tp, pp, dp, zero, offload, mb, grad_accum, recompute, framework, mem, usable,
                gradient_bytes, step, steps, tokens_per_second, nodes, write_seconds, share, interval, wall, gpu_hours,
                price, gpu_hours * price, describe(gpus, gpu.id, tp, pp, dp, zero, mb, recompute, offload))


def _candidate(ctx: _Context, f: _Fit) -> TrainCandidate:
    req, gpu, gpus, dp, zero, step = ctx.req, f.gpu, f.gpus, f.dp, f.zero, f.step
    peak = gpu.peak_flops_per_second(COMPUTE_DTYPE[req.precision])
    hardware = _hardware_flops(ctx, f.recompute)
    mfu = f.tokens_per_second * ctx.flops_model / (gpus * peak)
    hfu = f.tokens_per_second * hardware / (gpus * peak)
    allreduce = f.gradient_bytes * (ZERO3_VOLUME_FACTOR if zero == 3 else 1.0) * (2 * (dp - 1) / dp if dp > 1 else 0.0)
    # the NIC rate per GPU that keeps it under the share: the ring moves at NIC × the group's ranks on each node
    # (train_time.dp_collective_bandwidth); 0 where the group stays inside a node
    ranks_per_node = dp_ranks_per_node(f.tp, dp, f.per_node)
    needed = (allreduce / (NETWORK_SHARE_OF_STEP * step.total) / (ranks_per_node * INTER_NODE_ACHIEVABLE_FRACTION)
              if allreduce and dp > ranks_per_node else 0.0)
    token_bytes = stored_bytes_per_token(req.arch, req.bytes_per_token)
    return TrainCandidate(
        gpu_id=gpu.id, gpus=gpus, nodes=f.nodes, gpus_per_node=min(f.per_node, gpus), tp=f.tp, pp=f.pp, dp=dp,
        zero_stage=zero, micro_batch=f.mb, grad_accum=f.grad_accum, recompute=f.recompute, offload_optimizer=f.offload,
        offload_params=f.offload and zero == 3, sequence_parallel=f.tp > 1, framework=f.framework[0],
        framework_reason=f.framework[1], memory=f.mem, usable_memory_bytes=f.usable, step=step,
        flops_per_token_model=ctx.flops_model, flops_per_token_hardware=hardware, flops_total=ctx.flops_model * req.tokens,
        mfu=mfu, hfu=hfu, tokens_per_second=f.tokens_per_second, steps=f.steps, wall_seconds=f.wall_seconds,
        gpu_hours=f.gpu_hours, goodput=f.goodput, usd_per_gpu_hour=f.price, cost_usd=f.cost_usd,
        checkpoint_bytes=ctx.checkpoint, checkpoint_write_seconds=f.write_seconds,
        checkpoint_interval_seconds=f.interval, dataset_read_bytes_per_second=f.tokens_per_second * token_bytes,
        allreduce_bytes_per_step=allreduce, network_bytes_per_second_needed=needed,
        network_bound=step.dp_comm_exposed > NETWORK_SHARE_OF_STEP * step.total,
    )


C = TypeVar("C", TrainCandidate, _Fit)


def _key_cost(c: TrainCandidate | _Fit) -> tuple:
    return (round(c.cost_usd, 2), round(c.wall_seconds, 1), c.gpus, c.description)


def _key_time(c: TrainCandidate | _Fit) -> tuple:
    return (round(c.wall_seconds, 1), round(c.cost_usd, 2), c.gpus, c.description)


class _Collector:
    """Feasible candidates and a bounded, deterministic sample of rejections (the closest per reason)."""

    def __init__(self) -> None:
        self.feasible: list[_Fit] = []
        self.memory: dict[tuple, tuple[int, Rejection]] = {}
        self.other: dict[str, Rejection] = {}
        self.evaluated = 0

    def too_big(self, gpu_id: str, gpus: int, layout: tuple, mem: MemoryBreakdown, usable: int) -> None:
        """`layout` is (tp, pp, dp, zero, mb, recompute, offload); described only when it is kept."""
        key = (gpu_id, gpus)
        if key not in self.memory or mem.total < self.memory[key][0]:
            description = describe(gpus, gpu_id, *layout)
            reason = because("too-big", total=mem.total, usable=usable, weights=mem.weights, gradients=mem.gradients,
                             optimizer=mem.optimizer, activations=mem.activations, other=mem.other)
            self.memory[key] = (mem.total, Rejection(description, reason))

    def rejections(self, fitting_counts: set[tuple[str, int]], extra: list[Rejection]) -> tuple[Rejection, ...]:
        # memory rejections only where nothing of that GPU and count fit, smallest counts first
        memory = [r for key, (_, r) in sorted(self.memory.items(), key=lambda kv: (kv[0][0], kv[0][1]))
                  if key not in fitting_counts]
        return tuple((list(self.other.values()) + extra + memory)[:MAX_REJECTIONS])


def _memory(ctx: _Context, tp: int, pp: int, dp: int, zero: int, offload: bool, mb: int, microbatches: int,
            recompute: str, framework: str) -> MemoryBreakdown:
    key = (tp, pp, dp, zero, offload, mb, microbatches, recompute, framework)
    found = ctx.memory.get(key)
    if found is None:
        found = ctx.memory[key] = _memory_per_gpu(ctx.req, tp, pp, dp, zero, offload, mb, microbatches, recompute, framework)
    return found


def _memory_per_gpu(req: TrainRequest, tp: int, pp: int, dp: int, zero: int, offload: bool, mb: int, microbatches: int,
                    recompute: str, framework: str) -> MemoryBreakdown:
    return memory_per_gpu(req.arch, req.params, precision=req.precision, optimizer=req.optimizer, method=req.method,
                          lora_rank=req.lora_rank, lora_targets=req.lora_targets, tp=tp, pp=pp, dp=dp, zero_stage=zero,
                          offload_optimizer=offload, offload_params=offload and zero == 3, seq_len=req.seq_len,
                          micro_batch=mb, microbatches=microbatches, recompute=recompute, sequence_parallel=tp > 1,
                          flash_attention=req.flash_attention, framework=framework, options=req.memory)


def _search_layout(ctx: _Context, out: _Collector, gpu: GpuSpec, per_node: int, count: int, tp: int, pp: int,
                   usable: int) -> None:
    req, pins = ctx.req, ctx.req.pins
    dp = count // (tp * pp)
    zeros = [pins.zero_stage] if pins.zero_stage is not None else [0, 1, 2, 3]
    offloads = [pins.offload] if pins.offload is not None else [False, True]
    mbs = [pins.micro_batch] if pins.micro_batch else list(MICRO_BATCHES)
    mbs = [m for m in mbs if req.global_batch_sequences % (m * dp) == 0]
    recomputes = [pins.recompute] if pins.recompute else list(RECOMPUTE_ORDER)
    for offload in offloads:
        fitted = False
        for zero in zeros:
            if zero and dp == 1 and not offload:
                continue  # nothing to shard over
            framework = resolve_framework(req.framework, req.method, tp, pp, zero, offload)
            if framework is None:
                continue
            # "selective" is Megatron's core-attention recompute; the other frameworks' configs checkpoint whole
            # layers or nothing (FSDP fsdp_activation_checkpointing, DeepSpeed activation_checkpointing), so they are
            # offered none and full unless the plan pins selective
            kinds = [r for r in recomputes if r != "selective" or framework[0] == "megatron" or pins.recompute]
            for mb in mbs:
                microbatches = req.global_batch_sequences // (mb * dp)
                for recompute in kinds:
                    out.evaluated += 1
                    mem = _memory(ctx, tp, pp, dp, zero, offload, mb, microbatches, recompute, framework[0])
                    if mem.total > usable:
                        out.too_big(gpu.id, count, (tp, pp, dp, zero, mb, recompute, offload), mem, usable)
                        continue
                    if mem.cpu_offload_bytes > HOST_MEMORY_BYTES_PER_GPU:
                        description = describe(count, gpu.id, tp, pp, dp, zero, mb, recompute, offload)
                        out.other.setdefault(f"host:{gpu.id}:{count}", Rejection(description, because(
                            "host-memory", needed=mem.cpu_offload_bytes, host=HOST_MEMORY_BYTES_PER_GPU)))
                        continue
                    out.feasible.append(_fit(ctx, gpu, per_node, count, tp, pp, zero, offload, mb, recompute,
                                             framework, mem, usable))
                    fitted = True
                    break  # less recompute is never slower: keep the first that fits
        if fitted and pins.offload is None:
            return  # offload is only worth its PCIe traffic when nothing fits without it


def search_training(req: TrainRequest, gpus: Mapping[str, GpuSpec], searches: SearchCache | None = None) -> TrainSearchResult:
    """The search for `req` over the catalog entries `gpus`; with `searches` (one per run, the pipeline's), a question
    asked before in the run gets the earlier result. Without it every call searches (the tests of determinism
    compare two real searches)."""
    if searches is None:
        return _search(req, gpus)
    return searches.get_or_search((req, [gpus.get(gpu_id) for gpu_id in req.gpu_ids]), lambda: _search(req, gpus))


def _search(req: TrainRequest, gpus: Mapping[str, GpuSpec]) -> TrainSearchResult:
    ctx = _context(req)
    pins = req.pins
    out = _Collector()
    warnings: list[Reason] = []
    if not req.arch.layers and not req.arch.activation_bytes_per_sample:
        warnings.append(because("cnn-no-activations"))
    dtype = COMPUTE_DTYPE[req.precision]
    for gpu_id in req.gpu_ids:
        gpu = gpus[gpu_id]
        if dtype not in gpu.dense_tflops:
            out.other[f"dtype:{gpu_id}"] = Rejection(gpu_id, because("no-tensor-cores-datasheet", dtype=dtype))
            continue
        if gpu.edge or req.pricing not in gpu.price_usd_per_gpu_hour:
            out.other[f"price:{gpu_id}"] = Rejection(gpu_id, because("no-price", pricing=req.pricing) if not gpu.edge
                                                     else because("edge-not-for-training"))
            continue
        per_node = req.gpus_per_node or gpu.gpus_per_node
        usable = usable_memory_bytes(gpu.memory_bytes)
        for count in gpu_counts(req, per_node):
            if count > per_node and count % per_node:  # launchers start the same number of ranks on every node
                out.other[f"nodes:{gpu_id}:{count}"] = Rejection(f"{count} × {gpu_id}", because("nodes-not-filled", gpus=count, per_node=per_node))
                continue
            tps = _tp_choices(req.arch, per_node, count, pins.tp)
            for tp in tps:
                for pp in _pp_choices(req.arch, tp, max(tps), count, pins.pp):
                    if count % (tp * pp):
                        continue
                    dp = count // (tp * pp)
                    if (pins.dp and dp != pins.dp) or dp > req.global_batch_sequences:
                        continue
                    _search_layout(ctx, out, gpu, per_node, count, tp, pp, usable)
    fitting = {(c.gpu_id, c.gpus) for c in out.feasible}
    if not out.feasible:
        closest = min((entry for entry in out.memory.values()), key=lambda e: e[0], default=None)
        if out.memory or not out.other:
            reason = because("no-fit-memory", closest=closest[1] if closest else None)
        else:
            reason = because("every-gpu-refused", reasons=tuple(r.reason for r in out.other.values()))
        return TrainSearchResult(None, (), out.rejections(fitting, []), out.evaluated, reason, None, ())
    return _choose(ctx, out, fitting, warnings)


def _choose(ctx: _Context, out: _Collector, fitting: set, warnings: list[Reason]) -> TrainSearchResult:
    req, feasible = ctx.req, out.feasible
    pareto = tuple(_candidate(ctx, f) for f in pareto_front(feasible))
    meets_deadline = [c for c in feasible if not req.deadline_seconds or c.wall_seconds <= req.deadline_seconds]
    within = [c for c in meets_deadline if not req.budget_usd or c.cost_usd <= req.budget_usd]
    extra: list[Rejection] = []
    if req.deadline_seconds:
        for c in sorted((c for c in feasible if c.wall_seconds > req.deadline_seconds), key=_key_cost)[:3]:
            extra.append(Rejection(c.description, because("misses-deadline", wall=c.wall_seconds, deadline=req.deadline_seconds)))
    if req.budget_usd:
        for c in sorted((c for c in meets_deadline if c.cost_usd > req.budget_usd), key=_key_time)[:3]:
            extra.append(Rejection(c.description, because("over-budget", cost=c.cost_usd, budget=req.budget_usd)))
    rejected = out.rejections(fitting, extra)
    if not within:
        if not meets_deadline:
            fastest = _candidate(ctx, min(feasible, key=_key_time))
            reason = because("deadline-unreachable", wall=fastest.wall_seconds, gpus=fastest.gpus, gpu_id=fastest.gpu_id,
                             pricing=req.pricing, cost=fastest.cost_usd, deadline=req.deadline_seconds)
            return TrainSearchResult(None, pareto, rejected, out.evaluated, reason, fastest, ())
        cheapest = _candidate(ctx, min(meets_deadline, key=_key_cost))
        reason = because("over-budget-cheapest", cost=cheapest.cost_usd, budget=req.budget_usd,
                         deadline=req.deadline_seconds, gpus=cheapest.gpus, gpu_id=cheapest.gpu_id, pricing=req.pricing)
        return TrainSearchResult(None, pareto, rejected, out.evaluated, reason, cheapest, ())
    chosen = _candidate(ctx, min(within, key=_key_cost if req.optimize == "cost" else _key_time))
    if chosen.network_bound:
        warnings.append(because("network-bound", share=chosen.step.dp_comm_exposed / chosen.step.total,
                                interconnect=req.interconnect.id, limit=NETWORK_SHARE_OF_STEP,
                                needed=chosen.network_bytes_per_second_needed))
    if chosen.dataset_read_bytes_per_second > req.storage.read_bytes_per_second * chosen.nodes:
        warnings.append(because("storage-too-slow", read=chosen.dataset_read_bytes_per_second, storage=req.storage.id,
                                nodes=chosen.nodes))
    return TrainSearchResult(chosen, pareto, rejected, out.evaluated, None, None, tuple(warnings))


def pareto_front(candidates: Sequence[C]) -> tuple[C, ...]:
    """Cost vs wall time: sorted by cost, each entry strictly faster than every cheaper one."""
    front: list[C] = []
    for c in sorted(candidates, key=_key_cost):
        if not front or c.wall_seconds < front[-1].wall_seconds:
            front.append(c)
    return tuple(front)


def checkpoint_write_bandwidth(storage, nodes: int) -> float:
    """Bytes/s a checkpoint is written at: every node writes its shard at the per-node client rate, up to the
    filesystem's aggregate ceiling (fabrics.yaml aggregate_write_bytes_per_second, sourced there)."""
    per_nodes = storage.write_bytes_per_second * nodes
    ceiling = storage.aggregate_write_bytes_per_second
    return per_nodes if ceiling is None else min(per_nodes, ceiling)
