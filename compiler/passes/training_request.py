"""What the training search is asked, from the plan: the request (model, batch, GPUs, fabric, pins, memory
choices, the gate and memory factors) and the refusals of what no layout can honour (an uneven CP split, adapters
without transformer layers)."""

from __future__ import annotations

import math

from ..catalog.catalog import Catalog
from ..catalog.params import count_params
from ..deployment.megatron_version import megatron_ep_overlap
from ..diagnostics import FieldRefused, InfeasiblePlan
from ..plan.resolved import ResolvedPlan
from ..recipe.decide import decide_dropout
from ..sizing.reasons import because
from ..sizing.train.activations import EAGER_LOSS_LAUNCH_KINDS, loss_for
from ..sizing.train.layout import MemoryOptions
from ..sizing.train.search import TrainPins, TrainRequest
from .training_families import gate_factors, memory_factor
from .wording import words

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


def request_for(plan: ResolvedPlan, catalog: Catalog) -> TrainRequest:
    spec, train, pins = plan.spec, plan.spec.train, plan.spec.parallelism
    arch = plan.model.architecture
    links = catalog.site_links
    return TrainRequest(
        pods_on_catalog_nodes=spec.cluster.scheduler in ("kubernetes", "both"),
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
        gate_factors=gate_factors(catalog, spec.workload, train.gate_quantile, arch, _gpu_choices(plan, catalog)),
        gate_quantile=train.gate_quantile.upper(),
        memory_factor=memory_factor(catalog, train.method, train.memory_quantile),
        memory=_memory_options(train),
        dropout=float(decide_dropout(plan)[0]),
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
        bf16_gradients=train.megatron.grad_reduce == "bf16",
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


def refuse_adapters_without_layers(plan: ResolvedPlan) -> None:
    """LoRA and QLoRA adapt a transformer's linear layers; a CNN has none to adapt."""
    train = plan.spec.train
    if train.method != "full" and plan.model.architecture.kind == "cnn":
        reason = because(
            "adapters-need-transformer", method=train.method, targets=tuple(train.lora.targets), model=plan.model.name
        )
        raise InfeasiblePlan(words(reason))
