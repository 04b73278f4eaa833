"""The Megatron-LM arguments (megatron/args.sh) from the sized layout, the architecture and the recipe, spelled as the
image's Megatron release spells them (megatron_version, megatron_launch). Flag names are Megatron-LM's
(megatron/training/arguments.py)."""

from __future__ import annotations

from ..plan.deployment_training import Checkpoint, FrameworkArg
from ..plan.resolved import ResolvedPlan
from ..plan.spec import PlanSpec
from ..sizing.train.parallel import megatron_split
from . import megatron_arch, megatron_launch, megatron_version
from .recipe_flags import megatron_recipe_args

NORMALIZATION = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}


def pipeline_split(layers: int, pp: int) -> tuple[int, int] | None:
    """(first-stage, last-stage) layers when PP does not divide the layers, else None.

    Megatron-LM (TransformerConfig, "Uneven PP"): the layers left after the first and last stage must divide evenly
    over the PP-2 middle stages, and each end stage needs at least one layer. The middle stages take
    ceil(layers / PP) each and the ends share the rest (they also hold the embedding and the output layer + loss),
    the larger share on the first stage.
    """
    if pp <= 1 or layers % pp == 0:
        return None
    middle = -(-layers // pp)
    rest = layers - middle * (pp - 2)
    if rest < 2:  # too few left for the ends: floor instead
        middle = layers // pp
        rest = layers - middle * (pp - 2)
    last = rest // 2
    return rest - last, last


def megatron_args(plan: ResolvedPlan, checkpoint: Checkpoint) -> list[tuple[str, str | None]]:
    """(flag, value) pairs in Megatron-LM's order of argument groups; value None for switches."""
    return (
        _parallel_args(plan)
        + _shape_args(plan)
        + _architecture_args(plan)
        + _recompute_args(plan)
        + _precision_args(plan.spec.precision, plan.spec.train.megatron.grad_reduce if plan.spec.train else "fp32")
        + _data_args(plan)
        + megatron_recipe_args(plan.recipe)  # optimizer, LR schedule, weight decay, Adam, clip, init std, dropout
        + _run_args(plan, checkpoint)
    )


def _parallel_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """TP and PP sizes, the layouts, sequence parallelism and the distributed optimizer."""
    par = plan.parallelism
    args: list[tuple[str, str | None]] = [
        ("--tensor-model-parallel-size", str(par.tp)),
        ("--pipeline-model-parallel-size", str(par.pp)),
    ]
    args += layout_args(plan)
    if par.sequence_parallel and par.tp > 1:  # Megatron refuses sequence parallelism without TP
        args.append(("--sequence-parallel", None))
    if par.zero_stage >= 1:  # Megatron's distributed optimizer shards optimizer states over DP (ZeRO-1)
        args.append(("--use-distributed-optimizer", None))
    return args


def _shape_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """Batch sizes, sequence length and the transformer's sizes and attention heads."""
    par, arch, t = plan.parallelism, plan.model.architecture, plan.training
    args: list[tuple[str, str | None]] = [
        ("--micro-batch-size", str(par.micro_batch)),
        ("--global-batch-size", str(par.global_batch)),
        ("--seq-length", str(t.seq_len)),
        ("--max-position-embeddings", str(max(t.seq_len, arch.max_position))),
        ("--num-layers", str(arch.layers)),
        ("--hidden-size", str(arch.hidden)),
        ("--ffn-hidden-size", str(arch.ffn_hidden)),
        ("--num-attention-heads", str(arch.heads)),
    ]
    if arch.kv_heads and arch.kv_heads < arch.heads:
        args += [("--group-query-attention", None), ("--num-query-groups", str(arch.kv_heads))]
    if arch.head_dim and arch.head_dim != arch.hidden // arch.heads:
        args.append(("--kv-channels", str(arch.head_dim)))
    return args


def _architecture_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """MoE, MLA and MTP, position embedding, normalization, MLP and bias switches, RoPE, and an unsized uneven split."""
    par, arch = plan.parallelism, plan.model.architecture
    args = megatron_arch.moe_args(arch) + megatron_arch.mla_args(arch) + megatron_arch.mtp_args(arch)
    args += [
        ("--position-embedding-type", megatron_arch.position_type(arch)),
        ("--normalization", NORMALIZATION[arch.norm]),
    ]
    if arch.gated_mlp:
        args.append(("--swiglu", None))
    if not arch.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not arch.attention_bias and not arch.mlp_bias:
        args.append(("--disable-bias-linear", None))
    if arch.rope_theta:
        args.append(("--rotary-base", megatron_arch.rotary_base(arch)))
    if arch.rope_scaling_factor:
        args += [("--use-rope-scaling", None), ("--rope-scaling-factor", f"{arch.rope_scaling_factor:g}")]
    if arch.norm_eps:
        args.append(("--norm-epsilon", f"{arch.norm_eps:g}"))
    split = None if par.pp_stage_layers else pipeline_split(arch.layers, par.pp)  # a sized split: layout_args says it
    if split:
        args += [
            ("--decoder-first-pipeline-num-layers", str(split[0])),
            ("--decoder-last-pipeline-num-layers", str(split[1])),
        ]
    return args


def _recompute_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """Activation recomputation: its granularity, and for full recompute every layer from its input."""
    par = plan.parallelism
    args: list[tuple[str, str | None]] = []
    if par.recompute != "none":
        args.append(("--recompute-granularity", par.recompute))
        if par.recompute == "full":  # recompute every layer from its input
            args += [("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    return args


def _precision_args(precision: str, grad_reduce: str) -> list[tuple[str, str | None]]:
    """bf16 or fp16 switches; fp8 runs bf16 with Transformer Engine's hybrid format; bf16 gradients where the plan
    sized them (train.megatron.grad_reduce; Megatron keeps fp32 main_grad otherwise)."""
    args: list[tuple[str, str | None]] = []
    if precision in ("bf16", "fp8"):
        args.append(("--bf16", None))
        if grad_reduce == "bf16":
            args.append(("--grad-reduce-in-bf16", None))
    elif precision == "fp16":
        args.append(("--fp16", None))
    if precision == "fp8":
        args.append(("--fp8-format", "hybrid"))  # e4m3 forward, e5m2 gradients (Transformer Engine)
    return args


def _data_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """The tokenizer (the model's, or none with the catalog's vocabulary) and the data path."""
    spec, arch = plan.spec, plan.model.architecture
    args: list[tuple[str, str | None]] = []
    model_id = spec.model.hf_id if spec.model else None
    if model_id:
        args += [("--tokenizer-type", "HuggingFaceTokenizer"), ("--tokenizer-model", model_id)]
    else:  # no tokenizer named: ids as stored, vocabulary from the catalog
        args += [("--tokenizer-type", "NullTokenizer"), ("--vocab-size", str(arch.vocab))]
    if spec.train.data:
        args.append(("--data-path", spec.train.data))
    return args


def _run_args(plan: ResolvedPlan, checkpoint: Checkpoint) -> list[tuple[str, str | None]]:
    """Iterations, evaluation, checkpoint saving and loading, and the exit signal handler."""
    return [
        ("--train-iters", str(plan.training.steps)),
        # the plan names no validation set: no evaluation iterations. Megatron-LM has no default --eval-interval
        # (training_config.py @d98e8a6: None) and divides by it while building the datasets, so it is stated
        ("--eval-interval", str(checkpoint.interval_steps)),
        ("--eval-iters", "0"),
        ("--save-interval", str(checkpoint.interval_steps)),
        ("--save", checkpoint.dir),
        ("--load", checkpoint.dir),
        # finish the step, save, exit on the signal the launcher forwards before the time limit (SIGTERM, the
        # default of --exit-signal: the same in every Megatron-LM version that has the handler)
        ("--exit-signal-handler", None),
    ]


def layout_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """Context, expert, uneven and interleaved pipeline layouts as Megatron-LM states them (names checked against
    megatron/training/arguments.py and ModelParallelConfig @d98e8a6): --context-parallel-size,
    --expert-model-parallel-size (experts' TP left at its default, the TP size) with the alltoall token dispatcher and,
    when the sizing overlaps the all-to-alls, --overlap-moe-expert-parallel-comm (TransformerConfig field
    overlap_moe_expert_parallel_comm: needs EP > 1, VP with PP, no full recompute); an uneven split as
    --decoder-first/last-pipeline-num-layers, or, interleaved with first and last one layer lighter, as the
    embedding and loss each counted as a layer (--account-for-embedding-in-pipeline-split,
    --account-for-loss-in-pipeline-split); interleaving as --num-layers-per-virtual-pipeline-stage on even splits and
    --num-virtual-stages-per-pipeline-rank with first/last counts (arguments.py asserts that pairing)."""
    par = plan.parallelism
    args: list[tuple[str, str | None]] = []
    if par.cp > 1:
        args.append(("--context-parallel-size", str(par.cp)))
    if par.ep > 1:  # the all-to-all dispatcher the sizing times (Megatron-Core's default is allgather)
        args += [("--expert-model-parallel-size", str(par.ep)), ("--moe-token-dispatcher-type", "alltoall")]
    if par.ep_overlap:
        args.append(("--overlap-moe-expert-parallel-comm", None))
    split, vp = tuple(par.pp_stage_layers), max(1, par.vp)
    if par.pp <= 1 or not split:
        return args
    form = megatron_split(split, vp)
    if form == "first-last":
        args += [
            ("--decoder-first-pipeline-num-layers", str(split[0])),
            ("--decoder-last-pipeline-num-layers", str(split[-1])),
        ]
        if vp > 1:
            args.append(("--num-virtual-stages-per-pipeline-rank", str(vp)))
    elif form == "account-embedding-loss":
        args += [
            ("--account-for-embedding-in-pipeline-split", None),
            ("--account-for-loss-in-pipeline-split", None),
            ("--num-layers-per-virtual-pipeline-stage", str((split[1]) // vp)),
        ]
    elif form == "even" and vp > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", str(split[0] // vp)))
    return args


def uses_megatron(plan: ResolvedPlan) -> bool:
    """Megatron arguments are emitted when TP or PP > 1 (unless FSDP2 × TP runs the TP), or the framework is megatron
    (transformers only)."""
    par = plan.parallelism
    transformer = plan.model is not None and plan.model.architecture.layers > 0
    return transformer and ((par.tp > 1 or par.pp > 1) and par.framework != "fsdp" or par.framework == "megatron")


def megatron_versioned(plan: ResolvedPlan, checkpoint: Checkpoint, spec: PlanSpec, kind: str):
    """megatron/args.sh as the image's release spells it, with retention, and what was decided about it."""
    runs_megatron = kind == "megatron"
    if runs_megatron or plan.parallelism.framework == "megatron":
        megatron_arch.refuse_unexpressible(plan.model.architecture)
    rel = megatron_version.release(spec, strict=runs_megatron)
    kept, _, how = megatron_launch.retention(rel, checkpoint, plan.training.steps)
    args, older = megatron_launch.gate(megatron_args(plan, checkpoint) + kept, rel)
    if runs_megatron:
        megatron_launch.check_user_args(spec, rel)
    target = megatron_launch.target(plan, spec, rel, older, how, runs_megatron)
    return [FrameworkArg(flag=f, value=v) for f, v in args], target
