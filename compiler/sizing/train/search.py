"""The training search: GPU type × count × TP × CP × PP (split, VP) × DP (EP) × ZeRO × micro-batch × recompute × offload.

Enumeration (pins fix a dimension):
* GPU counts: 1, 2, 4 (less than a node), then whole nodes in power-of-two numbers up to `max_gpus`, and the
  pinned count;
* TP within a node, dividing the query and key/value heads; PP dividing the layers, tried only once TP
  fills what the model allows in a node (Narayanan et al. 2021 §3.3: TP inside the node, PP across nodes);
* PP that does not divide the layers: the Llama 3 split (first and last stages lighter, parallel.pipeline_split);
* CP where each rank keeps ≥ 4096 tokens of a sequence (parallel.cp_choices); EP for MoE models, dividing the
  experts and DP·CP; VP ∈ {1, 2, 4} chunks per rank when PP > 1, where Megatron-LM can state the split with them
  and the micro-batches are a multiple of PP (its interleaved schedule's groups);
* DP = GPUs / (TP·CP·PP), and global batch = micro-batch × accumulation × DP exactly;
* ZeRO 0-3 and offload as the framework allows (frameworks.resolve_framework); offload is only tried when the
  layout does not fit without it;
* HSDP shard groups (parallel.hsdp_groups) beside a ZeRO-3 FSDP layout that fits fully sharded with DP across
  nodes: a node's data-parallel ranks, larger groups only where memory needs them (`_search_hsdp`); or the pin;
* recompute none → selective → full: the first that fits is kept (less recompute is never slower); selective is
  the framework's own (Megatron-LM's core-attention recompute; torchtitan's op-level SAC on the FSDP2 script), tried
  where the framework's files can ask for it (frameworks.selective_offered).
A layout no framework can run is not chosen; when only such layouts fit memory, the refusal names the missing
framework path (frameworks.framework_gap), not memory.
Every fitting layout is timed and costed (candidate.price_layout); the choice is the cheapest that meets the deadline
and budget (optimize: cost) or the fastest within the budget (optimize: time), ties broken by wall time or
cost, then fewer GPUs, then the description (choice.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...catalog.types import GpuSpec
from ..reasons import Reason, because
from ..search_cache import SearchCache
from .candidate import SearchContext, TrainCandidate, layout_memory, price_layout, search_context
from .choice import FSDP_PP_GAP, FSDP_SELECTIVE_GAP, Collector, Rejection, TrainSearchResult, choose, pareto_front
from .flops import ATTENTION_DTYPE, COMPUTE_DTYPE
from .frameworks import (
    framework_gap,
    fsdp_pipeline_microbatches_ok,
    fsdp_tp_runs,
    hsdp_group_divides,
    resolve_framework,
    run_by,
    selective_offered,
)
from .layout import Layout, describe
from .memory import usable_memory_bytes
from .parallel import (
    cp_choices,
    ep_choices,
    ep_overlap_allowed,
    hsdp_groups,
)
from .request import TrainPins, TrainRequest
from .shapes import gpu_counts, shapes

__all__ = [
    "Rejection",
    "TrainCandidate",
    "TrainPins",
    "TrainRequest",
    "TrainSearchResult",
    "evaluate_layout",
    "gpu_counts",
    "pareto_front",
    "search_training",
]

MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
RECOMPUTE_ORDER = ("none", "selective", "full")
# Host memory that CPU offload may fill per GPU: DGX H100 has 2 TB of system memory for 8 GPUs (NVIDIA DGX H100
# datasheet); DGX A100 80GB the same 2 TB.
HOST_MEMORY_BYTES_PER_GPU = 2e12 / 8


def _micro_batches(req: TrainRequest, out: Collector, gpu: GpuSpec, layout: Layout) -> list[int] | None:
    """Micro-batch sizes that divide the global batch over DP; under interleaving, whose schedule runs micro-batches in
    groups of PP (Megatron's schedules.py), those that leave a multiple of PP. None (recorded) when none does."""
    pins, lay = req.pins, layout
    mbs = [pins.micro_batch] if pins.micro_batch else list(MICRO_BATCHES)
    mbs = [m for m in mbs if req.global_batch_sequences % (m * lay.dp) == 0]
    if lay.vp > 1:
        mbs = [m for m in mbs if (req.global_batch_sequences // (m * lay.dp)) % lay.pp == 0]
        if not mbs:
            reason = because("vp-needs-microbatches", pp=lay.pp, vp=lay.vp)
            out.gap(f"vp:{gpu.id}:{lay.gpus}", describe(gpu.id, lay), reason, fits=False)
            return None
    return mbs


def _search_layout(ctx: SearchContext, out: Collector, gpu: GpuSpec, layout: Layout, usable: int) -> None:
    """One model-parallel shape: ZeRO stages × micro-batches × recompute, offload only where nothing fits without."""
    req, pins = ctx.req, ctx.req.pins
    mbs = _micro_batches(req, out, gpu, layout)
    if mbs is None:
        return
    if not hsdp_group_divides(layout):  # an HSDP shard group that does not tile DP
        reason = because("hsdp-group-divides", shard=layout.shard_group, ranks=layout.data_ranks)
        rejection = Rejection(describe(gpu.id, layout.with_changes(zero=3)), reason)
        out.other.setdefault(f"sg:{gpu.id}:{layout.gpus}:{layout.dp}", rejection)
        return
    zeros = [pins.zero_stage] if pins.zero_stage is not None else [0, 1, 2, 3]
    offloads = [pins.offload] if pins.offload is not None else [False, True]
    recomputes = [pins.recompute] if pins.recompute else list(RECOMPUTE_ORDER)
    for offload in offloads:
        fitted = False
        for zero in zeros:
            staged = layout.with_changes(zero=zero, offload=offload, offload_params=offload and zero == 3)
            if zero and layout.data_ranks == 1 and not offload and not _fsdp_tp_unsharded(req, staged):
                continue  # nothing to shard over
            fitted = _search_stage(ctx, out, gpu, staged, mbs, recomputes, usable) or fitted
        if fitted and pins.offload is None:
            return  # offload is only worth its PCIe traffic when nothing fits without it


def _search_stage(
    ctx: SearchContext, out: Collector, gpu: GpuSpec, staged: Layout, mbs: list[int], recomputes: list[str], usable: int
) -> bool:
    """A shape at one ZeRO stage and offload: each micro-batch at the least recompute that fits. Whether one fit."""
    req = ctx.req
    per_node = req.gpus_per_node or gpu.gpus_per_node
    framework = resolve_framework(req.framework, req.method, staged, per_node)
    if framework is None:
        _record_gap(ctx, out, gpu, staged, mbs, recomputes, usable)
        return False
    pinned = req.pins.recompute == "selective"
    kinds = [r for r in recomputes if r != "selective" or selective_offered(pinned, req.method, framework[0], staged)]
    if not kinds:  # the pinned selective has no path under this framework and layout
        asked = staged.with_changes(micro_batch=mbs[0] if mbs else 1, recompute="selective")
        reason = because("fsdp-selective-needs-fsdp2", zero=staged.zero, offload=staged.offload, method=req.method)
        out.other.setdefault(
            FSDP_SELECTIVE_GAP + f":{gpu.id}:{staged.gpus}", Rejection(describe(gpu.id, asked), reason)
        )
    fitted = False
    for mb in mbs:
        sized = staged.with_changes(micro_batch=mb)
        microbatches = sized.microbatches(req.workload)
        if framework[0] == "fsdp" and not fsdp_pipeline_microbatches_ok(sized.pp, microbatches):
            reason = because("fsdp-pp-needs-microbatches", pp=sized.pp, microbatches=microbatches)
            out.gap(FSDP_PP_GAP + f":{gpu.id}:{sized.gpus}", describe(gpu.id, sized), reason, fits=False)
            continue
        for recompute in kinds:
            if _try_layout(ctx, out, gpu, sized.with_changes(recompute=recompute), framework, kinds, usable):
                fitted = True
                break  # less recompute is never slower: keep the first that fits
    return fitted


def _try_layout(
    ctx: SearchContext,
    out: Collector,
    gpu: GpuSpec,
    layout: Layout,
    framework: tuple[str, Reason],
    kinds: list[str],
    usable: int,
) -> bool:
    """One fully stated layout: sized, and priced when it fits (then its HSDP variants). Whether it fit."""
    req, lay = ctx.req, layout
    timed = _ep_options(req, lay)
    if timed is None:
        reason = because("ep-overlap-not-allowed", ep=lay.ep, pp=lay.pp, vp=lay.vp, recompute=lay.recompute)
        out.other.setdefault(f"a2a:{lay.pp}:{lay.vp}:{lay.recompute}", Rejection(describe(gpu.id, lay), reason))
        return False
    out.evaluated += 1
    run = run_by(lay, framework[0], req.seq_len)
    mem = layout_memory(ctx, run)
    if mem.total > usable:
        out.too_big(gpu.id, lay, mem, usable)
        return False
    if mem.cpu_offload_bytes > HOST_MEMORY_BYTES_PER_GPU:
        reason = because("host-memory", needed=mem.cpu_offload_bytes, host=HOST_MEMORY_BYTES_PER_GPU)
        out.other.setdefault(f"host:{gpu.id}:{lay.gpus}", Rejection(describe(gpu.id, lay), reason))
        return False
    timed = run_by(timed, framework[0], req.seq_len)
    out.feasible.append(price_layout(ctx, gpu, timed, framework[1], mem, usable))
    if _hsdp_searched(req, timed):
        _search_hsdp(ctx, out, gpu, timed, kinds[kinds.index(lay.recompute) :], usable)
    return True


def _hsdp_searched(req: TrainRequest, layout: Layout) -> bool:
    """Whether the search tries HSDP groups beside a fitting fully sharded layout: FSDP at ZeRO-3 without offload, full
    weights (ZeRO-3 LoRA's gather volume is priced as a base all-reduce, not its adapters' replica all-reduce), no
    pinned group and no CP (parallel.hsdp_groups)."""
    lay = layout
    return (
        lay.framework == "fsdp"
        and lay.zero == 3
        and not lay.offload
        and req.method == "full"
        and req.pins.shard_group is None
        and lay.shard_group is None
        and lay.cp == 1
    )


def _search_hsdp(
    ctx: SearchContext, out: Collector, gpu: GpuSpec, layout: Layout, recomputes: list[str], usable: int
) -> None:
    """The HSDP variants of a layout that fits fully sharded at `recomputes[0]` (a shard group holds more per GPU, so
    none fits where full sharding does not, nor with less recompute): groups smallest first (parallel.hsdp_groups),
    each at the least recompute that fits; a larger group only while the smaller ones needed more recompute than full
    sharding or did not fit, since beyond that it only adds cross-node traffic per micro-batch."""
    req = ctx.req
    per_node = req.gpus_per_node or gpu.gpus_per_node
    pinned = req.pins.recompute == "selective"
    for group in hsdp_groups(layout.dp, layout.tp, layout.cp, per_node):
        hybrid = layout.with_changes(shard_group=group, zero=3, offload=False, offload_params=False)
        framework = resolve_framework(req.framework, req.method, hybrid, per_node)
        if framework is None or framework[0] != "fsdp":
            continue
        for recompute in recomputes:
            candidate = run_by(hybrid.with_changes(recompute=recompute), "fsdp", req.seq_len)
            if recompute == "selective" and not selective_offered(pinned, req.method, "fsdp", candidate):
                continue
            out.evaluated += 1
            mem = layout_memory(ctx, candidate)
            if mem.total > usable:
                continue
            out.feasible.append(price_layout(ctx, gpu, candidate, framework[1], mem, usable))
            if recompute == recomputes[0]:
                return  # as little recompute as full sharding: a larger group would only cross more nodes
            break


def _fsdp_tp_unsharded(req: TrainRequest, layout: Layout) -> bool:
    """LoRA with TP/PP on one DP rank: Megatron-LM's arguments train full weights only, so FSDP2 × TP × PP runs it,
    fully_shard over a dp_shard of one (ZeRO-3 that shards nothing: the memory of ZeRO-0)."""
    return layout.zero == 3 and req.method == "lora" and fsdp_tp_runs(req.method, layout.with_changes(offload=False))


def _ep_options(req: TrainRequest, layout: Layout) -> Layout | None:
    """The layout with its EP all-to-all options: overlap where Megatron-Core allows it unless the plan pins it off
    (it is never slower: parallel.ep_exposed_seconds), the pinned dispatch dtype; None when a pinned overlap is
    not allowed for this layout and recompute."""
    pins, lay = req.pins, layout
    if lay.ep == 1 and pins.ep_overlap is None and pins.ep_dispatch is None:
        return lay  # nothing to overlap (the common case, kept cheap)
    allowed = req.arch.is_moe and ep_overlap_allowed(lay.ep, lay.pp, lay.vp, lay.recompute)
    if pins.ep_overlap and not allowed:
        return None
    overlap = allowed if pins.ep_overlap is None else pins.ep_overlap
    return lay.with_changes(ep_overlap=overlap, ep_dispatch=pins.ep_dispatch or "bf16")


def _record_gap(
    ctx: SearchContext, out: Collector, gpu: GpuSpec, staged: Layout, mbs: list[int], recomputes: list[str], usable: int
) -> None:
    """A layout no framework runs: kept (one per reason) with whether it would have fit memory, so that a search
    where only such layouts fit says so instead of "does not fit"."""
    req = ctx.req
    reason = framework_gap(req.framework, req.method, staged, req.gpus_per_node or gpu.gpus_per_node)
    if reason is None or not mbs:
        return
    key = f"{reason.code}:{dict(reason.facts)['layout']}"
    if key in out.gaps and out.gaps[key][1]:
        return
    probe = staged.with_changes(micro_batch=mbs[0], recompute=recomputes[-1])
    mem = layout_memory(ctx, run_by(probe, "megatron", req.seq_len))
    fits = mem.total <= usable and mem.cpu_offload_bytes <= HOST_MEMORY_BYTES_PER_GPU
    out.gap(key, describe(gpu.id, probe), reason, fits)


def search_training(
    req: TrainRequest, gpus: Mapping[str, GpuSpec], searches: SearchCache | None = None
) -> TrainSearchResult:
    """The search for `req` over the catalog entries `gpus`; with `searches` (one per run, the pipeline's), a question
    asked before in the run gets the earlier result. Without it every call searches (the tests of determinism
    compare two real searches)."""
    if searches is None:
        return _search(req, gpus)
    return searches.get_or_search((req, [gpus.get(gpu_id) for gpu_id in req.gpu_ids]), lambda: _search(req, gpus))


def _gpu_refused(req: TrainRequest, gpu: GpuSpec, out: Collector) -> bool:
    """A GPU type the search cannot use (no tensor-core rate for the precision, no price, an edge part), recorded."""
    missing = next(
        (d for d in (COMPUTE_DTYPE[req.precision], ATTENTION_DTYPE[req.precision]) if d not in gpu.dense_tflops), None
    )
    if missing is not None:  # the GEMMs' dtype, and flash attention's
        out.other[f"dtype:{gpu.id}"] = Rejection(gpu.id, because("no-tensor-cores-datasheet", dtype=missing))
        return True
    if gpu.edge or req.pricing not in gpu.price_usd_per_gpu_hour:
        reason = because("no-price", pricing=req.pricing) if not gpu.edge else because("edge-not-for-training")
        out.other[f"price:{gpu.id}"] = Rejection(gpu.id, reason)
        return True
    return False


def _search(req: TrainRequest, gpus: Mapping[str, GpuSpec]) -> TrainSearchResult:
    ctx = search_context(req)
    pins = req.pins
    out = Collector()
    warnings: list[Reason] = []
    if not req.arch.layers and not req.arch.activation_bytes_per_sample and not req.arch.layer_table:
        warnings.append(because("cnn-no-activations"))
    if pins.ep and pins.ep > 1 and not req.arch.is_moe:
        return TrainSearchResult(None, (), (), 0, because("ep-needs-moe", ep=pins.ep), None, ())
    choices = (cp_choices(req.seq_len, pins.cp) if req.arch.layers else [1], ep_choices(req.arch, pins.ep))
    for gpu_id in req.gpu_ids:
        gpu = gpus[gpu_id]
        if _gpu_refused(req, gpu, out):
            continue
        per_node = req.gpus_per_node or gpu.gpus_per_node
        usable = int(usable_memory_bytes(gpu.memory_bytes) / req.memory_factor)  # the memory margin, as less room
        for count in gpu_counts(req, per_node):
            if count > 1 and gpu.intra_node_bandwidth_bytes_per_second <= 0:
                out.other[f"link:{gpu_id}"] = Rejection(
                    f"{count} × {gpu_id}", because("no-gpu-link-training", gpu_name=gpu.name)
                )
                continue
            if count > per_node and count % per_node:  # launchers start the same number of ranks on every node
                reason = because("nodes-not-filled", gpus=count, per_node=per_node)
                out.other[f"nodes:{gpu_id}:{count}"] = Rejection(f"{count} × {gpu_id}", reason)
                continue
            for layout in shapes(req, out, count, per_node, choices):
                _search_layout(ctx, out, gpu, layout, usable)
    return choose(req, out, warnings)


def evaluate_layout(req: TrainRequest, gpu: GpuSpec, layout: Layout) -> TrainCandidate:
    """One fully stated layout (its framework named), timed and sized without the search's framework gate or memory
    check (the caller reads `memory.total` against `usable_memory_bytes`): how benchmarks/accuracy.py prices a
    published layout that a framework the compiler does not emit ran (NeMo's LoRA with TP/PP, torchtitan's
    FSDP × TP × PP). DP is what the request's GPU count leaves."""
    ctx = search_context(req)
    lay = layout
    count = req.gpu_count or lay.tp * lay.cp * lay.pp
    lay = run_by(lay.with_changes(dp=count // (lay.tp * lay.cp * lay.pp)), lay.framework, req.seq_len)
    mem = layout_memory(ctx, lay)
    return price_layout(ctx, gpu, lay, because("framework-pinned"), mem, usable_memory_bytes(gpu.memory_bytes))
