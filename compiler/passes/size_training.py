"""Pass: size a train/finetune plan — the search over GPU type, count and parallelism (compiler/sizing/training.py)."""

from __future__ import annotations

import math
from dataclasses import replace

from ..catalog.catalog import Catalog
from ..catalog.params import count_params
from ..catalog.types import Architecture
from ..deployment.megatron_version import megatron_ep_overlap
from ..diagnostics import FieldRefused, InfeasiblePlan
from ..plan.resolved import (
    Alternative,
    Cost,
    Decision,
    Hardware,
    MemoryPerGpu,
    Parallelism,
    Rejection,
    ResolvedPlan,
    Training,
)
from ..sizing.reasons import because
from ..sizing.train.activations import EAGER_LOSS_LAUNCH_KINDS, loss_for
from ..sizing.train.candidate import TrainCandidate
from ..sizing.train.layout import Layout, MemoryOptions
from ..sizing.train.search import TrainPins, TrainRequest, search_training
from ..units import format_seconds
from .context import PassContext
from .wording import rejection_rows, words
from .wording_training import training_decisions

# Without a stated batch: about 1M tokens per step, inside GPT-3's range of 0.5M-3.2M tokens
# (Brown et al. 2020, Table 2.1).
DEFAULT_GLOBAL_BATCH_TOKENS = 2**20


def _global_batch_sequences(plan: ResolvedPlan) -> int:
    train = plan.spec.train
    if train.global_batch:
        return train.global_batch
    tokens = train.global_batch_tokens or DEFAULT_GLOBAL_BATCH_TOKENS
    # A batch given in tokens becomes the nearest power-of-two number of sequences, so that every
    # power-of-two DP × micro-batch divides it (the report states the rounding).
    sequences = max(1.0, tokens / train.seq_len)
    return 2 ** round(math.log2(sequences))


def _gpu_choices(plan: ResolvedPlan, catalog: Catalog) -> tuple[str, ...]:
    chosen = plan.spec.cluster.gpu_choices
    if chosen:
        return tuple(chosen)
    return tuple(sorted(g.id for g in catalog.gpus.values() if not g.edge))


STEP_FAMILY = "train-step-time"  # residuals.yaml: published runs' step time ÷ ours
WHOLE_RUN_FAMILY = "train-whole-run"  # published whole pre-training runs' GPU-hours ÷ ours


CNN_TRAIN_FAMILY = "train-cnn"  # published CNN training images/s ÷ ours (benchmarks/accuracy_cnn_train.py)


def _cnn_with_table(arch: Architecture | None) -> bool:
    return arch is not None and arch.kind == "cnn" and bool(arch.layer_table)


def step_family(arch: Architecture | None) -> str:
    """The published family a plan's step time and throughput are judged by: CNN training rows for a CNN sized layer
    by layer, the transformer training rows otherwise."""
    return CNN_TRAIN_FAMILY if _cnn_with_table(arch) else STEP_FAMILY


def time_family(workload: str, arch: Architecture | None = None) -> str:
    """The published family a plan's wall time, GPU-hours and cost are judged by: whole pre-training runs for a
    pre-training plan (they pay what a steady step leaves out), steady steps for a fine-tune (no published whole
    run resembles one) and for a CNN with a layer table (its own steady-step rows; no published whole CNN run)."""
    if _cnn_with_table(arch):
        return CNN_TRAIN_FAMILY
    return WHOLE_RUN_FAMILY if workload == "train" else STEP_FAMILY


def gate_factor(catalog: Catalog, workload: str, quantile: str, arch: Architecture | None = None) -> float:
    """What deadline and budget check time and cost with: the plan's family's actual ÷ predicted at the plan's
    quantile, never below 1 (a pessimistic prediction is not relaxed). The same family gives the report's range, so
    a plan never passes its gate with a P90 beyond its deadline."""
    return max(1.0, getattr(catalog.residuals[time_family(workload, arch)], quantile))


MEMORY_FAMILY = {"full": "memory-full", "lora": "memory-lora", "qlora": "memory-qlora"}


def memory_factor(catalog: Catalog, method: str, quantile: str) -> float:
    """The memory margin: measured ÷ predicted peak of the method's published rows at the plan's quantile, or for
    full training the site's own measured ÷ predicted peak (a site calibration file's memory), never below 1 (a
    prediction that runs high is not trimmed)."""
    if quantile == "none":
        return 1.0
    if method == "full" and catalog.site_memory_factor is not None:
        return max(1.0, catalog.site_memory_factor)
    return max(1.0, getattr(catalog.residuals[MEMORY_FAMILY[method]], quantile))


def memory_source(catalog: Catalog, method: str, quantile: str) -> str:
    """Where memory_factor's number comes from, in words for the report."""
    if method == "full" and catalog.site_memory_factor is not None:
        return catalog.site_memory_source + "; cluster.calibration"
    return f"measured ÷ predicted at {quantile.upper()} of {catalog.residuals[MEMORY_FAMILY[method]].rows} published peaks; train.memory_quantile"


def request_for(plan: ResolvedPlan, catalog: Catalog) -> TrainRequest:
    spec, train, pins = plan.spec, plan.spec.train, plan.spec.parallelism
    arch = plan.model.architecture
    links = catalog.site_links
    return TrainRequest(
        site_intra_node=(links.gpu, links.intra_node_fraction)
        if links and links.intra_node_fraction is not None
        else None,
        inter_node_fraction=links.inter_node_fraction
        if links and links.interconnect == spec.cluster.interconnect
        else None,
        arch=arch,
        params=count_params(arch),
        precision=spec.precision,
        optimizer=train.optimizer,
        method=train.method,
        lora_rank=train.lora.rank,
        lora_targets=tuple(train.lora.targets),
        tokens=train.total_tokens,
        seq_len=train.seq_len,
        global_batch_sequences=_global_batch_sequences(plan),
        framework=train.framework,
        deadline_seconds=train.deadline,
        budget_usd=spec.budget.usd,
        gpu_ids=_gpu_choices(plan, catalog),
        gpu_count=spec.cluster.count,
        gpus_per_node=spec.cluster.gpus_per_node,
        max_gpus=spec.cluster.max_gpus,
        pricing=spec.cluster.pricing,
        interconnect=catalog.interconnects[spec.cluster.interconnect],
        storage=catalog.storage[spec.cluster.storage],
        pins=_pins(pins, spec),
        optimize="cost" if spec.optimize == "cost" else "time",
        mtbf_gpu_hours=train.mtbf_gpu_hours,
        flash_attention=train.flash_attention,
        bytes_per_token=train.bytes_per_token,
        gate_factor=gate_factor(catalog, spec.workload, train.gate_quantile, arch),
        gate_quantile=train.gate_quantile.upper(),
        memory_factor=memory_factor(catalog, train.method, train.memory_quantile),
        memory=_memory_options(train),
    )


def _pins(pins, spec) -> TrainPins:
    """The plan's `parallelism` section as the search's pins (None: searched); MoE all-to-all overlap defaults to
    what the plan's Megatron-LM release can launch."""
    return TrainPins(
        **{
            k: v
            for k, v in {
                "tp": pins.tp,
                "pp": pins.pp,
                "dp": pins.dp,
                "zero_stage": pins.zero_stage,
                "micro_batch": pins.micro_batch,
                "recompute": pins.recompute,
                "offload": pins.offload,
                "cp": pins.cp,
                "ep": pins.ep,
                "vp": pins.vp,
                "pp_first_stage_layers": pins.pp_first_stage_layers,
                "pp_last_stage_layers": pins.pp_last_stage_layers,
                "pp_stage_layers": tuple(pins.pp_stage_layers) if pins.pp_stage_layers else None,
                "shard_group": pins.shard_group_gpus,
                "ep_overlap": pins.ep_overlap if pins.ep_overlap is not None else megatron_ep_overlap(spec),
            }.items()
            if v is not None
        }
    )


def _memory_options(train) -> MemoryOptions:
    """Where frameworks differ in memory (layout.MemoryOptions), from the plan's `train` fields of the same names."""
    return MemoryOptions(
        master_weights=train.master_weights,
        loss=loss_for(train.loss, train.method),
        eager_loss=train.entrypoint.kind in EAGER_LOSS_LAUNCH_KINDS,
        optimizer_in_backward=train.optimizer_in_backward,
        activation_offload=train.activation_offload,
        reshard_after_forward=train.reshard_after_forward,
        expandable_segments=train.expandable_segments,
    )


# Load-balanced context parallelism cuts each sequence into 2·CP chunks and hands every rank two (the first and last
# unfinished ones); Megatron-LM's validate_args asserts "seq-length should be a multiple of 2 * context-parallel-size
# if context-parallel-size > 1" (megatron/training/arguments.py @d98e8a6). The search only tries such degrees
# (train_layout.cp_choices); a pinned one that breaks it is refused where it was given.
CP_CHUNKS_PER_RANK = 2


def refuse_uneven_cp(plan: ResolvedPlan) -> None:
    cp, seq_len = plan.spec.parallelism.cp, plan.spec.train.seq_len
    if cp and cp > 1 and seq_len % (CP_CHUNKS_PER_RANK * cp):
        raise FieldRefused(
            ("parallelism", "cp"),
            f"context parallelism {cp} cuts each sequence into {CP_CHUNKS_PER_RANK}·CP = "
            f"{CP_CHUNKS_PER_RANK * cp} equal chunks, and train.seq_len {seq_len} is not a multiple of "
            f"{CP_CHUNKS_PER_RANK * cp} (Megatron-LM's validate_args asserts seq-length % (2 × "
            "context-parallel-size) == 0); pin a CP whose 2·CP divides the sequence length, or leave cp "
            "to the search",
            "cp-sequence-split",
        )


def parallelism_of(layout: Layout, grad_accum: int) -> Parallelism:
    """plan.json's `parallelism` section: the chosen layout as the search decided it."""
    lay = layout
    return Parallelism(
        tp=lay.tp,
        pp=lay.pp,
        dp=lay.dp,
        zero_stage=lay.zero,
        micro_batch=lay.micro_batch,
        grad_accum=grad_accum,
        global_batch=lay.micro_batch * grad_accum * lay.dp,
        recompute=lay.recompute,
        sequence_parallel=lay.sequence_parallel,
        offload_optimizer=lay.offload,
        offload_params=lay.offload_params,
        framework=lay.framework,
        cp=lay.cp,
        ep=lay.ep,
        vp=lay.vp,
        pp_stage_layers=list(lay.stage_layers),
        shard_group_gpus=lay.shard_group,
        ep_overlap=lay.ep_overlap,
    )


def refuse_adapters_without_layers(plan: ResolvedPlan) -> None:
    """LoRA and QLoRA adapt a transformer's linear layers; a CNN has none to adapt."""
    train = plan.spec.train
    if train.method != "full" and plan.model.architecture.kind == "cnn":
        reason = because(
            "adapters-need-transformer", method=train.method, targets=tuple(train.lora.targets), model=plan.model.name
        )
        raise InfeasiblePlan(words(reason))


def _hardware(c: TrainCandidate, spec, gpu) -> Hardware:
    return Hardware(
        gpu=c.gpu_id,
        gpus=c.gpus,
        nodes=c.nodes,
        gpus_per_node=c.gpus_per_node,
        gpu_memory_bytes=gpu.memory_bytes,
        interconnect=spec.cluster.interconnect,
        storage=spec.cluster.storage,
        pricing=spec.cluster.pricing,
        usd_per_gpu_hour=gpu.price_usd_per_gpu_hour[spec.cluster.pricing],
        gpu_spec=gpu,
    )


def _memory_section(c: TrainCandidate) -> MemoryPerGpu:
    m = c.memory
    return MemoryPerGpu(
        weights=m.weights,
        gradients=m.gradients,
        optimizer=m.optimizer,
        activations=m.activations,
        other=m.other,
        total=m.total,
        usable=c.usable_memory_bytes,
        cpu_offload=m.cpu_offload_bytes,
        allocated=m.allocated,
        reserved=m.reserved,
    )


def _training_section(c: TrainCandidate, spec) -> Training:
    tokens = spec.train.total_tokens
    s = c.step
    return Training(
        tokens=tokens,
        seq_len=spec.train.seq_len,
        gate_quantile=spec.train.gate_quantile,
        memory_quantile=spec.train.memory_quantile,
        flops_per_token=c.flops_per_token_model,
        flops_total=c.flops_total,
        steps=c.steps,
        step_seconds=s.total,
        step_compute_seconds=s.compute,
        step_tp_comm_seconds=s.tp_comm,
        step_pp_bubble_seconds=s.pp_bubble,
        step_dp_comm_seconds=s.dp_comm_exposed,
        step_matmul_seconds=s.matmul,
        step_attention_seconds=s.attention,
        step_memory_bound_seconds=s.memory_bound,
        step_weight_traffic_seconds=s.weights,
        step_optimizer_seconds=s.optimizer + s.offload,
        mfu=c.mfu,
        hfu=c.hfu,
        tokens_per_second=c.tokens_per_second,
        wall_seconds=c.wall_seconds,
        gpu_hours=c.gpu_hours,
        goodput=c.goodput,
        deadline_seconds=spec.train.deadline,
        checkpoint_bytes=c.checkpoint_bytes,
        checkpoint_write_seconds=c.checkpoint_write_seconds,
        checkpoint_interval_seconds=c.checkpoint_interval_seconds,
        checkpoint_keep=spec.train.checkpoint.keep,
        checkpoint_dir=spec.train.checkpoint.dir,
        dataset_read_bytes_per_second=c.dataset_read_bytes_per_second,
        allreduce_bytes_per_step=c.allreduce_bytes_per_step,
        network_bytes_per_second_needed=c.network_bytes_per_second_needed,
        step_cp_comm_seconds=s.cp_comm,
        step_ep_comm_seconds=s.ep_comm,
        step_pp_p2p_seconds=s.pp_p2p,
        whole_run_failures_share=c.whole_run.failures,
        whole_run_checkpoints_share=c.whole_run.checkpoints,
        whole_run_stragglers_share=c.whole_run.stragglers,
        whole_run_evaluation_share=c.whole_run.evaluation,
    )


def _alternatives(c: TrainCandidate, pareto) -> list[Alternative]:
    """The cost/time Pareto front, the chosen layout marked (added where the front does not hold it)."""
    alternatives = [
        Alternative(description=a.description, usd=a.cost_usd, seconds=a.wall_seconds, chosen=a == c) for a in pareto
    ]
    if not any(a.chosen for a in alternatives):
        alternatives.append(Alternative(description=c.description, usd=c.cost_usd, seconds=c.wall_seconds, chosen=True))
    return alternatives


def size_training(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    catalog = ctx.catalog
    if plan.workload == "serve":
        return plan
    refuse_adapters_without_layers(plan)
    refuse_uneven_cp(plan)
    arch = plan.model.architecture
    request = request_for(plan, catalog)
    result = search_training(request, catalog.gpus, ctx.searches)
    if result.chosen is None:
        raise InfeasiblePlan(words(result.infeasible_reason) if result.infeasible_reason else "no configuration fits")
    c, spec = result.chosen, plan.spec
    gpu = catalog.gpus[c.gpu_id]
    hardware = _hardware(c, spec, gpu)
    parallelism = parallelism_of(c.layout, c.grad_accum)
    memory = _memory_section(c)
    training = _training_section(c, spec)
    cost = Cost(
        usd_per_hour=c.gpus * hardware.usd_per_gpu_hour,
        usd_total=c.cost_usd,
        usd_per_million_tokens=c.cost_usd / spec.train.total_tokens * 1e6,
        budget_usd=spec.budget.usd,
        alert_at=spec.budget.alert_at,
    )
    alternatives = _alternatives(c, result.pareto)
    decisions = training_decisions(
        spec,
        c,
        result.evaluated,
        hardware,
        parallelism,
        spec.train.global_batch_tokens or DEFAULT_GLOBAL_BATCH_TOKENS,
        gate=(
            gate_factor(ctx.catalog, spec.workload, spec.train.gate_quantile, arch),
            ctx.catalog.residuals[time_family(spec.workload, arch)].rows,
            time_family(spec.workload, arch),
        ),
        memory=(
            memory_factor(ctx.catalog, spec.train.method, spec.train.memory_quantile),
            memory_source(ctx.catalog, spec.train.method, spec.train.memory_quantile),
        ),
    )
    return plan.model_copy(
        update={
            "hardware": hardware,
            "parallelism": parallelism,
            "memory_per_gpu_bytes": memory,
            "training": training,
            "cost": cost,
            "alternatives": alternatives,
            "rejected": [Rejection(description=d, reason=r) for d, r in rejection_rows(result.rejected)],
            "decisions": plan.decisions + decisions + links_decision(request, c, catalog, ctx),
            "warnings": plan.warnings + [words(w) for w in result.warnings],
            "search_evaluated": result.evaluated,
        }
    )


# the step's communication terms, as the report names them
COMM_TERMS = (
    ("dp_comm", "DP all-reduce"),
    ("dp_comm_exposed", "its exposed part"),
    ("tp_comm", "TP all-reduces"),
    ("cp_comm", "CP K/V exchange"),
    ("ep_comm", "EP all-to-alls"),
    ("pp_p2p", "PP sends"),
)


def links_decision(request: TrainRequest, chosen, catalog: Catalog, ctx: PassContext) -> list[Decision]:
    """With a site's measured link shares: the chosen layout's communication terms as the published shares predict
    them (the same search without the site's shares) and as the site's do."""
    if request.site_intra_node is None and request.inter_node_fraction is None:
        return []
    before = search_training(
        replace(request, site_intra_node=None, inter_node_fraction=None), catalog.gpus, ctx.searches
    ).chosen
    if before is None:
        return []
    old, new = before.step, chosen.step
    terms = [
        f"{name} {_seconds(getattr(old, key))} → {_seconds(getattr(new, key))}"
        for key, name in COMM_TERMS
        if getattr(old, key) or getattr(new, key)
    ]
    layout = (
        ""
        if before.description == chosen.description
        else f"; the published shares chose {before.description}, the site's {chosen.description}"
    )
    return [
        Decision(
            topic="site interconnect shares in this plan",
            choice=f"step {_seconds(old.total)} → {_seconds(new.total)}",
            reason="communication predicted with the published link shares → with the site's measured ones "
            "(cluster.calibration): " + (", ".join(terms) or "no collective in this layout") + layout,
        )
    ]


def _seconds(value: float) -> str:
    """format_seconds, below a millisecond in µs to 3 digits (a small plan's collectives)."""
    return format_seconds(value) if value >= 1e-3 or value == 0 else f"{value * 1e6:.3g} µs"
