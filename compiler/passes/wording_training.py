"""The decisions the training sizing pass records, in words: hardware, parallelism, framework, memory choices,
batch, time and cost, each with its reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..plan.resolved import Decision
from ..sizing.train.activations import EAGER_LOSS_LAUNCH_KINDS, loss_for
from ..units import format_count, format_seconds, format_usd
from .wording import words

if TYPE_CHECKING:
    from ..plan.resolved import Hardware, Parallelism
    from ..plan.spec import PlanSpec
    from ..sizing.train.candidate import TrainCandidate
    from ..sizing.train.goodput import WholeRun


def _dropout_words(dropout: float) -> str:
    """What the activations keep of dropout (compiler/sizing/train/activations.py docstring)."""
    if dropout > 0:
        return f"dropout {dropout:g}: its masks kept for the backward"
    return "dropout 0: no dropout masks kept"


def _dropout_reason(dropout: float, source: str) -> str:
    """Where the dropout the activations assume comes from, and why it matters to them."""
    given = source.startswith("the plan's")
    return (
        f"; dropout {dropout:g} ({source}{'' if given else '; train.recipe.dropout says otherwise'}): Korthikanti et "
        "al. 2022 Table 2's dropout masks are kept only with dropout > 0 (ATen's dropout returns its input at p = 0)"
    )


def _memory_choices(spec: PlanSpec, dropout: float = 0.0) -> str:
    """The plan's memory choices in words (compiler/sizing/train/memory.py docstring has their sources)."""
    train = spec.train
    loss = {
        "standard": "cross-entropy on fp32 logits",
        "chunked": "chunked cross-entropy",
        "fused": "fused cross-entropy",
        "flash-attn": "flash-attn's cross-entropy on 16-bit logits",
    }[loss_for(train.loss, train.method)]
    eager = loss_for(train.loss, train.method) == "standard" and train.entrypoint.kind in EAGER_LOSS_LAUNCH_KINDS
    loss += " (the Hugging Face Trainer's eager loss, 12 B per logit, whatever the framework)" if eager else ""
    parts = [
        loss + (" (auto)" if train.loss == "auto" else ""),
        "fp32 master weights" if train.master_weights == "fp32" else "pure 16-bit weights and optimizer states",
    ]
    if train.optimizer_in_backward:
        parts.append("optimizer step in the backward")
    if train.activation_offload:
        parts.append("checkpointed activations on the host")
    if not train.reshard_after_forward:
        parts.append("FSDP keeps gathered weights to the backward")
    parts.append("expandable segments" if train.expandable_segments else "15% caching-allocator fragmentation reserve")
    parts.append(_dropout_words(dropout))
    return ", ".join(parts)


def _pipeline_unsharded_words(m) -> str:
    """FSDP2 stages under PP: what stays unsharded between micro-batches (train_memory.pipeline_without_sync)."""
    if not m.accumulating:
        return ""
    whole = m.gathered or m.weights  # without reshard_after_forward the weights are whole throughout
    return (
        f", of which {whole / 2**30:.1f} GiB the rank's stages gathered whole and {m.accumulating / 2**30:.1f} "
        "GiB their unsharded fp32 gradients: torch.distributed.pipelining runs every backward without gradient "
        "sync and reduce-scatters once per step (torch 2.13 pipelining/stage.py backward_maybe_with_nosync)"
    )


def _layout_words(c: TrainCandidate) -> str:
    """CP, EP, VP, an uneven split and an HSDP shard group, only where the layout uses them."""
    lay = c.layout
    parts = [f"CP={lay.cp}"] if lay.cp > 1 else []
    parts += [f"EP={lay.ep}"] if lay.ep > 1 else []
    parts += (
        [
            "(all-to-alls overlapped with another micro-batch's compute: DeepSeek-V3 DualPipe §3.2.1, "
            "Megatron-Core --overlap-moe-expert-parallel-comm)"
        ]
        if lay.ep_overlap
        else []
    )
    parts += ["FP8 dispatch (DeepSeek-V3 §3.3.3)"] if lay.ep_dispatch == "fp8" else []
    parts += [f"VP={lay.vp} (interleaved 1F1B)"] if lay.vp > 1 else []
    split = lay.stage_layers
    if len(split) > 1 and len(set(split)) > 1:
        middle = sorted(set(split[1:-1]))
        parts.append(
            f"layers per stage {split[0]} first, {middle[0]} middle, {split[-1]} last"
            if len(middle) == 1
            else "layers per stage " + "/".join(map(str, split))
        )
    parts += [f"FSDP shard group {lay.shard_group} GPUs"] if lay.shard_group else []
    return "".join(" " + p for p in parts)


class Margins(NamedTuple):
    """What the decisions quote beside the chosen layout. `gate`: the factor time and cost were checked with against
    deadline and budget, the rows behind it and their family; `memory`: the memory margin and where it comes from
    (training_families.memory_source); `dropout`: the recipe's dropout and its source (recipe.decide.decide_dropout),
    which decides whether the activations keep dropout masks."""

    gate: tuple[float, int, str] = (1.0, 0, "")
    memory: tuple[float, str] = (1.0, "")
    dropout: tuple[float, str] = (0.0, "")


NO_MARGINS = Margins()


def training_decisions(
    spec: PlanSpec,
    c: TrainCandidate,
    evaluated: int,
    hardware: Hardware,
    parallelism: Parallelism,
    batch_tokens: float,
    margins: Margins = NO_MARGINS,
) -> list[Decision]:
    """`batch_tokens`: the tokens per step the plan gave or the default, when it gave no batch in sequences."""
    gate, memory, dropout = margins
    return [
        _hardware_decision(spec, c, evaluated, gate),
        _parallelism_decision(c, memory),
        Decision(topic="framework", choice=c.framework, reason=words(c.framework_reason)),
        Decision(
            topic="memory",
            choice=_memory_choices(spec, dropout[0]),
            reason="what the memory per GPU assumes of the training script: train.loss, train.master_weights, "
            "train.optimizer_in_backward, train.activation_offload and train.expandable_segments say otherwise"
            + (_dropout_reason(*dropout) if dropout[1] else ""),
        ),
        _batch_decision(spec, parallelism, batch_tokens),
        _time_decision(spec, c),
        Decision(
            topic="cost",
            choice=f"roofline {format_usd(c.cost_usd)}",
            reason=f"{format_count(c.gpu_hours)} GPU-hours × {format_usd(hardware.usd_per_gpu_hour)} ({spec.cluster.pricing})",
        ),
    ]


def _hardware_decision(spec: PlanSpec, c: TrainCandidate, evaluated: int, gate: tuple[float, int, str]) -> Decision:
    """The chosen GPUs: cheapest or fastest of the fitting configurations, against deadline, budget and the gate."""
    deadline = f"deadline {format_seconds(spec.train.deadline)}" if spec.train.deadline else "no deadline"
    return Decision(
        topic="hardware",
        choice=f"{c.gpus} × {c.gpu_id} ({c.nodes} nodes)",
        reason=f"{'cheapest' if spec.optimize == 'cost' else 'fastest'} of {evaluated} configurations that fit memory and meet the {deadline}"
        + (f" and budget {format_usd(spec.budget.usd)}" if spec.budget.usd else "")
        + (
            f", with time and cost at {spec.train.gate_quantile.upper()} of {gate[2]} ({gate[1]} published rows, "
            f"× {gate[0]:.2f}; train.gate_quantile)"
            if gate[1] and (spec.train.deadline or spec.budget.usd)
            else ""
        ),
    )


def _parallelism_decision(c: TrainCandidate, memory: tuple[float, str]) -> Decision:
    """The layout, with the memory per GPU it needs of the usable memory and the roofline step."""
    m, s = c.memory, c.step
    return Decision(
        topic="parallelism",
        choice=f"TP={c.layout.tp} PP={c.layout.pp} DP={c.layout.dp}{_layout_words(c)} ZeRO-{c.layout.zero}, micro-batch {c.layout.micro_batch} × {c.grad_accum} accumulation, recompute {c.layout.recompute}",
        reason=f"{m.total / 2**30:.1f} GiB per GPU of {c.usable_memory_bytes / 2**30:.1f} GiB usable"
        + (f" (the device's ÷ {memory[0]:.2f}: {memory[1]})" if memory[0] > 1 else "")
        + " "
        f"({m.allocated / 2**30:.1f} GiB allocated, {m.reserved / 2**30:.1f} GiB reserved by the caching "
        f"allocator, the rest CUDA context and NCCL)"
        + _pipeline_unsharded_words(m)
        + f"; roofline step {format_seconds(s.total)}",
    )


def _batch_decision(spec: PlanSpec, parallelism: Parallelism, batch_tokens: float) -> Decision:
    """Sequences × tokens per step: as given, or the tokens rounded to a power-of-two number of sequences."""
    return Decision(
        topic="batch",
        choice=f"{parallelism.global_batch} sequences × {spec.train.seq_len} tokens = {format_count(parallelism.global_batch * spec.train.seq_len)} tokens per step",
        reason="as given"
        if spec.train.global_batch
        else f"{format_count(batch_tokens)} tokens rounded to a power-of-two number of sequences so DP × micro-batch divide it",
    )


def _time_decision(spec: PlanSpec, c: TrainCandidate) -> Decision:
    """Roofline time, GPU-hours and MFU, from the tokens, the throughput and the goodput."""
    return Decision(
        topic="time",
        choice=f"roofline {format_seconds(c.wall_seconds)}, {format_count(c.gpu_hours)} GPU-hours, MFU {100 * c.mfu:.1f}%",
        reason=f"{format_count(spec.train.total_tokens)} tokens at {format_count(c.tokens_per_second)} tokens/s, goodput {100 * c.goodput:.1f}% "
        f"({_whole_run_words(c.whole_run)})",
    )


def _whole_run_words(w: WholeRun) -> str:
    """The whole-run terms as the time decision states them: each one's seconds per 100 seconds of steps."""
    terms = (
        ("failures and restarts", w.failures),
        ("checkpoint writes", w.checkpoints),
        ("stragglers", w.stragglers),
        ("evaluation", w.evaluation),
    )
    return "per 100 s of steps: " + ", ".join(f"{name} {100 * share:.1f} s" for name, share in terms)
