"""The training search: GPU type × count × TP × PP × ZeRO × micro-batch × recompute × offload.

Every candidate that fits usable memory is timed (step_time) and costed; the choice is the cheapest that
meets the deadline and budget (optimize: cost) or the fastest within the budget (optimize: time), ties
broken by fewer GPUs, then the description. Pins fix a dimension. The Pareto front (cost vs wall time)
over the best candidate of each GPU type and count is kept for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..catalog.fabrics import load_fabrics
from ..catalog.params import ParamCounts
from ..catalog.types import Architecture, GpuSpec
from ..units import format_seconds, format_usd
from .fit_memory import MemoryBreakdown, memory_per_gpu, usable_memory_bytes
from .step_time import COMPUTE_DTYPE, StepTime, goodput, model_flops_per_token, step_time

TP_CHOICES = (1, 2, 4, 8)
MICRO_BATCHES = (1, 2, 4, 8, 16)
RECOMPUTE_ORDER = ("none", "selective", "full")
MAX_PP = 16
MAX_REJECTIONS = 20
# Checkpoint bytes per parameter: 16-bit weights + fp32 master + two fp32 Adam moments (what
# torch.save / DeepSpeed write for mixed-precision Adam; ZeRO paper's 2 + 12).
CHECKPOINT_BYTES_PER_PARAM = {"adamw": 14, "adamw-8bit": 8, "sgd": 10, "adafactor": 6}
# DP communication should stay under this share of the step for the network not to bound the plan
# (a planning threshold, stated in the report when exceeded).
NETWORK_SHARE_OF_STEP = 0.25


@dataclass(frozen=True)
class TrainRequest:
    arch: Architecture
    params: ParamCounts
    precision: str
    optimizer: str
    method: str
    lora_rank: int
    lora_targets: tuple[str, ...]
    tokens: float
    seq_len: int
    global_batch_sequences: int
    framework: str
    deadline_seconds: float | None
    budget_usd: float | None
    gpu_ids: tuple[str, ...]
    gpu_count: int | None
    gpus_per_node: int | None
    max_gpus: int
    pricing: str
    interconnect: str
    storage: str
    pins: dict = field(default_factory=dict)
    optimize: str = "cost"
    mtbf_gpu_hours: float | None = None
    flash_attention: bool = True


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
    framework_reason: str
    memory: MemoryBreakdown
    usable_memory_bytes: int
    step: StepTime
    flops_per_token_model: float
    flops_total: float
    mfu: float
    hfu: float
    tokens_per_second: float
    steps: int
    wall_seconds: float
    gpu_hours: float
    goodput: float
    cost_usd: float
    checkpoint_bytes: int
    checkpoint_write_seconds: float
    checkpoint_interval_seconds: float
    allreduce_bytes_per_step: float
    network_bytes_per_second_needed: float

    @property
    def description(self) -> str:
        return (f"{self.gpus} × {self.gpu_id} TP{self.tp} PP{self.pp} DP{self.dp} ZeRO-{self.zero_stage} "
                f"mb{self.micro_batch} {self.recompute}{' offload' if self.offload_optimizer else ''}")


@dataclass(frozen=True)
class Rejection:
    description: str
    reason: str


@dataclass(frozen=True)
class TrainSearchResult:
    chosen: TrainCandidate | None
    pareto: tuple[TrainCandidate, ...]
    rejected: tuple[Rejection, ...]
    evaluated: int
    infeasible_reason: str | None
    nearest: TrainCandidate | None
    warnings: tuple[str, ...]


def resolve_framework(req: TrainRequest, tp: int, pp: int, zero: int) -> tuple[str, str] | None:
    """The framework a layout runs on, or None when the plan's framework cannot run it."""
    fw = req.framework
    if fw == "ddp":
        return ("ddp", "pinned by the plan") if tp == pp == 1 and zero == 0 else None
    if fw == "fsdp":
        return ("fsdp", "pinned by the plan") if tp == pp == 1 and zero in (0, 2, 3) else None
    if fw == "megatron":
        return ("megatron", "pinned by the plan") if zero in (0, 1) else None
    if fw == "deepspeed":
        return ("deepspeed", "pinned by the plan") if tp == pp == 1 else None
    if tp > 1 or pp > 1:
        return ("megatron", "tensor/pipeline parallelism needs Megatron-LM's model-parallel layers") if zero in (0, 1) else None
    if zero == 0:
        return "ddp", "the model states fit unsharded: plain DDP has the least overhead"
    if zero == 3:
        return "fsdp", "full sharding (ZeRO-3) is native in PyTorch FSDP"
    return "deepspeed", f"ZeRO-{zero} sharding of optimizer{' and gradients' if zero == 2 else ''} (DeepSpeed)"


def _divisors_up_to(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _gpu_counts(req: TrainRequest, per_node: int) -> list[int]:
    if req.gpu_count:
        return [req.gpu_count]
    counts, nodes = [], 1
    while nodes * per_node <= req.max_gpus:
        counts.append(nodes * per_node)
        nodes *= 2
    small = [c for c in (1, 2, 4) if c < per_node]
    return small + counts


def _evaluate(req: TrainRequest, gpu: GpuSpec, per_node: int, gpus: int, tp: int, pp: int, zero: int, offload: bool,
              mb: int, recompute: str, fabric, storage, usable: int, framework: str = ""):
    dp = gpus // (tp * pp)
    if req.global_batch_sequences % (mb * dp):
        return None, "global batch not divisible by micro-batch × DP"
    grad_accum = req.global_batch_sequences // (mb * dp)
    sp = tp > 1
    mem = memory_per_gpu(req.arch, req.params, precision=req.precision, optimizer=req.optimizer, method=req.method,
                         lora_rank=req.lora_rank, lora_targets=req.lora_targets, tp=tp, pp=pp, dp=dp, zero_stage=zero,
                         offload_optimizer=offload, offload_params=offload and zero == 3, seq_len=req.seq_len,
                         micro_batch=mb, microbatches=grad_accum, recompute=recompute, sequence_parallel=sp,
                         flash_attention=req.flash_attention, framework=framework)
    if mem.total > usable:
        return None, mem
    per_layer_act = mem.activations / max(1, min(pp, grad_accum) * -(-req.arch.layers // pp))
    layers_on_stage = -(-req.arch.layers // pp)
    trainable_fraction = 1.0 if req.method == "full" else (mem.gradients / max(1.0, mem.weights))
    grad_bytes = mem.gradients * (dp if zero >= 2 else 1)
    step = step_time(req.arch, req.params, gpu, precision=req.precision, seq_len=req.seq_len, micro_batch=mb,
                     grad_accum=grad_accum, tp=tp, pp=pp, dp=dp, zero_stage=zero, recompute=recompute,
                     offloaded_bytes=mem.cpu_offload_bytes, trainable_params_per_gpu=mem.gradients / 2,
                     activation_bytes=per_layer_act * layers_on_stage,
                     state_bytes=mem.weights + mem.gradients + mem.optimizer, gradient_bytes_per_gpu=grad_bytes,
                     inter_node_bytes_per_second=fabric.bytes_per_second_per_gpu, inter_node_latency=fabric.latency_seconds,
                     gpus_per_node=per_node)
    del trainable_fraction
    tokens_per_step = req.global_batch_sequences * req.seq_len
    steps = max(1, round(req.tokens / tokens_per_step))
    flops_token = model_flops_per_token(req.arch, req.params, req.seq_len)
    from .step_time import hardware_flops_per_token
    hw_token = hardware_flops_per_token(req.arch, req.params, req.seq_len, recompute)
    tokens_per_second = tokens_per_step / step.total
    peak = gpu.peak_flops_per_second(COMPUTE_DTYPE[req.precision])
    mfu = tokens_per_second * flops_token / (gpus * peak)
    hfu = tokens_per_second * hw_token / (gpus * peak)
    nodes = max(1, gpus // per_node)
    ckpt_params = req.params.total if req.method == "full" else req.params.total
    ckpt_bytes = int(ckpt_params * CHECKPOINT_BYTES_PER_PARAM[req.optimizer]) if req.method == "full" else int(req.params.total * 2)
    write_seconds = ckpt_bytes / (storage.write_bytes_per_second * (nodes if storage.shared else nodes))
    share, interval = goodput(gpus, write_seconds, req.mtbf_gpu_hours)
    wall = steps * step.total / share
    gpu_hours = wall * gpus / 3600
    cost = gpu_hours * gpu.price_usd_per_gpu_hour[req.pricing]
    allreduce = grad_bytes * (1.5 if zero == 3 else 1.0)
    needed = allreduce / (NETWORK_SHARE_OF_STEP * step.total) / max(1, gpus)
    return (mem, step, grad_accum, dp, flops_token, mfu, hfu, tokens_per_second, steps, wall, gpu_hours, share, cost,
            ckpt_bytes, write_seconds, interval, allreduce, needed), None


def search_training(req: TrainRequest, gpus: Mapping[str, GpuSpec]) -> TrainSearchResult:
    fabrics = load_fabrics()
    fabric, storage = fabrics.interconnects[req.interconnect], fabrics.storage[req.storage]
    pins = {k: v for k, v in req.pins.items() if v is not None}
    feasible: list[TrainCandidate] = []
    rejected: dict[str, Rejection] = {}
    evaluated = 0
    warnings: list[str] = []
    for gpu_id in req.gpu_ids:
        gpu = gpus[gpu_id]
        dtype = COMPUTE_DTYPE[req.precision]
        if gpu.edge or req.pricing not in gpu.price_usd_per_gpu_hour or dtype not in gpu.dense_tflops:
            if dtype not in gpu.dense_tflops:
                rejected.setdefault(f"dtype{gpu_id}", Rejection(gpu_id, f"no {dtype} tensor cores (datasheet)"))
            continue
        per_node = req.gpus_per_node or gpu.gpus_per_node
        usable = usable_memory_bytes(gpu.memory_bytes)
        for count in _gpu_counts(req, per_node):
            best_for_count = None
            for tp in [t for t in TP_CHOICES if t <= min(per_node, count) and req.arch.heads % t == 0]:
                if pins.get("tp") and tp != pins["tp"]:
                    continue
                # Megatron splits layers unevenly when pp does not divide them (ceil per stage), so powers of
                # two are always candidates besides the divisors.
                pp_choices = sorted(set(_divisors_up_to(req.arch.layers, MAX_PP)) | {p for p in (1, 2, 4, 8, 16) if p <= req.arch.layers}
                                    | ({pins["pp"]} if pins.get("pp") else set())) if req.arch.layers else [1]
                for pp in pp_choices:
                    if pins.get("pp") and pp != pins["pp"] or count % (tp * pp):
                        continue
                    dp = count // (tp * pp)
                    if pins.get("dp") and dp != pins["dp"] or dp > req.global_batch_sequences:
                        continue
                    for zero in (0, 1, 2, 3):
                        if "zero_stage" in pins and zero != pins["zero_stage"]:
                            continue
                        framework = resolve_framework(req, tp, pp, zero)
                        if framework is None or (zero and dp == 1):
                            continue
                        for offload in (False, True):
                            if ("offload" in pins and offload != pins["offload"]) or (offload and zero == 0):
                                continue
                            for mb in MICRO_BATCHES:
                                if pins.get("micro_batch") and mb != pins["micro_batch"]:
                                    continue
                                for recompute in RECOMPUTE_ORDER:
                                    if pins.get("recompute") and recompute != pins["recompute"]:
                                        continue
                                    evaluated += 1
                                    result, why = _evaluate(req, gpu, per_node, count, tp, pp, zero, offload, mb,
                                                            recompute, fabric, storage, usable, framework[0])
                                    desc = f"{count} × {gpu_id} TP{tp} PP{pp} ZeRO-{zero} mb{mb} {recompute}"
                                    if result is None:
                                        if isinstance(why, MemoryBreakdown):
                                            rejected.setdefault(f"mem{gpu_id}{count}{tp}{pp}", Rejection(
                                                desc, f"{why.total / 2**30:.1f} GiB > {usable / 2**30:.1f} GiB usable"))
                                        continue
                                    (mem, step, ga, dp_, ft, mfu, hfu, tps, steps, wall, gh, share, cost, ck, ws, iv,
                                     ar, need) = result
                                    cand = TrainCandidate(
                                        gpu_id, count, max(1, count // per_node), min(per_node, count), tp, pp, dp_, zero, mb,
                                        ga, recompute, offload, offload and zero == 3, tp > 1, framework[0], framework[1],
                                        mem, usable, step, ft, ft * req.tokens, mfu, hfu, tps, steps, wall, gh, share, cost,
                                        ck, ws, iv, ar, need)
                                    feasible.append(cand)
                                    if best_for_count is None or cand.wall_seconds < best_for_count.wall_seconds:
                                        best_for_count = cand
                                    break  # less recompute is always faster: stop at the first that fits
    if not feasible:
        reason = "no configuration fits in GPU memory"
        if rejected:
            smallest = min(rejected.values(), key=lambda r: float(r.reason.split()[0]))
            reason += f" (closest: {smallest.description}: {smallest.reason})"
        return TrainSearchResult(None, (), tuple(list(rejected.values())[:MAX_REJECTIONS]), evaluated, reason, None, ())
    meets_deadline = [c for c in feasible if not req.deadline_seconds or c.wall_seconds <= req.deadline_seconds]
    within = [c for c in meets_deadline if not req.budget_usd or c.cost_usd <= req.budget_usd]
    key_cost = lambda c: (round(c.cost_usd, 2), c.wall_seconds, c.gpus, c.description)  # noqa: E731
    key_time = lambda c: (round(c.wall_seconds, 1), c.cost_usd, c.gpus, c.description)  # noqa: E731
    pareto = _pareto(feasible)
    reasons = []
    for c in sorted(feasible, key=key_cost)[:3]:
        if req.deadline_seconds and c.wall_seconds > req.deadline_seconds:
            reasons.append(Rejection(c.description, f"{format_seconds(c.wall_seconds)} misses the {format_seconds(req.deadline_seconds)} deadline"))
    all_rejected = tuple((list(rejected.values()) + reasons)[:MAX_REJECTIONS])
    if not within:
        if not meets_deadline:
            fastest = min(feasible, key=key_time)
            reason = (f"no configuration meets the {format_seconds(req.deadline_seconds)} deadline; fastest: "
                      f"{fastest.description}, {format_seconds(fastest.wall_seconds)}, {format_usd(fastest.cost_usd)}")
            return TrainSearchResult(None, pareto, all_rejected, evaluated, reason, fastest, ())
        cheapest = min(meets_deadline, key=key_cost)
        reason = (f"needs {format_usd(cheapest.cost_usd)}, budget {format_usd(req.budget_usd)}; cheapest meeting the "
                  f"deadline: {cheapest.description}, {format_usd(cheapest.cost_usd)}")
        return TrainSearchResult(None, pareto, all_rejected, evaluated, reason, cheapest, ())
    chosen = min(within, key=key_cost if req.optimize == "cost" else key_time)
    if chosen.step.dp_comm_exposed > NETWORK_SHARE_OF_STEP * chosen.step.total:
        warnings.append(f"network-bound: exposed gradient all-reduce is {chosen.step.dp_comm_exposed / chosen.step.total:.0%} "
                        f"of the step on {req.interconnect}")
    return TrainSearchResult(chosen, pareto, all_rejected, evaluated, None, None, tuple(warnings))


def _pareto(cands: list[TrainCandidate]) -> tuple[TrainCandidate, ...]:
    best: dict[tuple, TrainCandidate] = {}
    for c in cands:
        key = (c.gpu_id, c.gpus)
        if key not in best or c.wall_seconds < best[key].wall_seconds:
            best[key] = c
    front = []
    for c in sorted(best.values(), key=lambda c: (c.cost_usd, c.wall_seconds)):
        if not front or c.wall_seconds < front[-1].wall_seconds:
            front.append(c)
    return tuple(front)
