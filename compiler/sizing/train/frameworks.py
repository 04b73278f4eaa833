"""Which framework runs a training layout, with the rule, and why none does when none does.

The paths are the configs the compiler emits (compiler/deployment/frameworks.py):
- Megatron-LM: TP, PP (uneven stages and interleaving as its arguments state them, parallel.megatron_split), CP, EP,
  VP; ZeRO-0 or its distributed optimizer (ZeRO-1), full weights, no offload, no HSDP group;
- the FSDP2 script (fsdp/fsdp_tp.py, torchtitan's composition): TP, PP, CP at ZeRO-3 without offload, no EP, full
  weights or LoRA (`fsdp_tp_runs`), an HSDP group or not; also 1-D FSDP with selective recompute or an HSDP group
  other than one node (`runs_on_fsdp2`);
- Accelerate's FSDP1 config: ZeRO-3 (FULL_SHARD), HYBRID_SHARD within one node;
- DeepSpeed: ZeRO-1/2/3 and offload (offload from ZeRO-2);
- PyTorch DDP: ZeRO-0.

`AUTO_RULES` is the rule for `framework: auto`: the first row whose condition holds names the framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..reasons import Reason, because
from .layout import Layout
from .parallel import megatron_split

# The FSDP2 script's gradient reduction dtype (MixedPrecisionPolicy reduce_dtype; torchtitan's
# mixed_precision_reduce default "float32"): fsdp_tp.json carries it, step_time prices its bytes (memory's).
FSDP2_REDUCE_DTYPE = "float32"


def model_parallel(layout: Layout) -> bool:
    lay = layout
    return lay.tp > 1 or lay.pp > 1 or lay.cp > 1 or lay.ep > 1 or lay.vp > 1 or lay.uneven


def sequence_parallel(layout: Layout, framework: str, seq_len: int) -> bool:
    """Sequence parallelism with TP, the one decision the sizing credits (activations and norms split over TP,
    Korthikanti et al. 2022 §4.2.2) and the deployment emits (plan.json parallelism.sequence_parallel). Both paths
    split each rank's sequence evenly over the TP ranks, so it is on only where that divides:
    - Megatron-LM (--sequence-parallel): the embedding output is scattered, and each o/down output reduce-scattered,
      along the sequence dimension of the rank's s/CP tokens (CP hands each rank 2 of 2·CP chunks), and
      megatron/core/tensor_parallel/mappings.py (_split_along_first_dim, _reduce_scatter_along_first_dim @d98e8a6)
      asserts "First dimension of the tensor should be divisible by tensor parallel size": seq_len % (CP·TP) == 0.
      validate_args does not check it, so a layout that breaks it would fail at the first forward;
    - the FSDP2 × TP path (torchtitan's SP plan, compiler/deployment/fsdp_tp.py): seq_len % TP == 0 (its pipeline
      stages exchange equal sequence shards); LoRA adapters follow it (fsdp/lora_tp.py: the row-parallel adapter's
      output reduce-scattered over the sequence as its base's)."""
    if layout.tp <= 1:
        return False
    if framework == "fsdp":
        return seq_len % layout.tp == 0
    return seq_len % (layout.cp * layout.tp) == 0


def run_by(layout: Layout, framework: str, seq_len: int) -> Layout:
    """The layout with the framework that runs it, and the sequence parallelism that framework gives it."""
    return layout.with_changes(framework=framework, sequence_parallel=sequence_parallel(layout, framework, seq_len))


def fsdp_cp_runs(method: str, layout: Layout) -> bool:
    """CP on the FSDP2 script: K/V all-gathered over the CP ranks, load-balanced 2·cp chunks (Llama 3 §3.3.2,
    parallel.py docstring; fsdp/fsdp_tp.py), proven on CPU gloo ranks against one process
    (tests/test_fsdp_cp_real.py) for full weights without TP or PP; CP × TP, CP × PP and adapters with CP are not
    built (Megatron-LM has CP with TP and PP)."""
    return layout.cp == 1 or (layout.tp == 1 and layout.pp == 1 and method == "full")


def fsdp2_runs(method: str, layout: Layout) -> bool:
    """Whether the FSDP2 script (fsdp/fsdp_tp.py) can run the layout, model-parallel or not: `fsdp_tp_runs` without
    its TP, PP or CP condition."""
    lay = layout
    return (
        fsdp_cp_runs(method, lay)
        and (lay.cp == 1 or not lay.shard_group)
        and lay.ep == 1
        and lay.zero == 3
        and not lay.offload
        and (method == "full" or (method == "lora" and lay.tp > 1))  # fsdp/lora_tp.py shards adapters as TP does
        and (not lay.stage_layers or min(lay.stage_layers) >= lay.vp)
    )


def fsdp_tp_runs(method: str, layout: Layout) -> bool:
    """Whether the FSDP2 × TP × PP path runs the layout (compiler/deployment/fsdp_tp.py, the way torchtitan composes
    them: a DeviceMesh [pp, dp_replicate, dp_shard, cp, tp], the model split into pipeline stages run by
    torch.distributed.pipelining's 1F1B or interleaved 1F1B, `parallelize_module` over tp, `fully_shard` over dp_shard
    (× cp)): TP, PP or CP > 1 (any stage split; VP as interleaved 1F1B; CP as `fsdp_cp_runs`, without an HSDP group),
    no EP, ZeRO-3 (fully_shard) without offload, an HSDP shard group or not (fully_shard over [dp_replicate, dp_shard];
    the search checks `hsdp_group_divides`), full weights or LoRA with TP (fsdp/lora_tp.py: 16-bit frozen base, adapters
    sharded as their base layers; QLoRA's 4-bit base has no DTensor TP path)."""
    return (layout.tp > 1 or layout.pp > 1 or layout.cp > 1) and fsdp2_runs(method, layout)


def runs_on_fsdp2(
    framework: str, tp: int, pp: int, recompute: str, shard: int | None, per_node: int, cp: int = 1
) -> bool:
    """Whether a sized FSDP layout runs on the FSDP2 script (fsdp/fsdp_tp.py) rather than Accelerate's FSDP1 config:
    TP, PP or CP, selective recompute (torchtitan's op-level SAC), or an HSDP group other than one node."""
    return framework == "fsdp" and (
        tp > 1 or pp > 1 or cp > 1 or recompute == "selective" or hsdp_on_fsdp2(shard, per_node)
    )


def hsdp_on_fsdp2(shard: int | None, per_node: int) -> bool:
    """Whether 1-D FSDP's HSDP runs on the FSDP2 script rather than Accelerate's FSDP1 config: Accelerate's HYBRID_SHARD
    shards within one node (FSDP1 builds its shard group from the node's ranks), so every other group size takes
    FSDP2's 2-D mesh [dp_replicate, dp_shard] (fsdp/fsdp_tp.py)."""
    return bool(shard) and shard != per_node


def hsdp_group_divides(layout: Layout) -> bool:
    """An HSDP shard group tiles the dp·cp ranks into whole replicas (FSDP2's 2-D mesh [dp_replicate, dp_shard] and
    FSDP1's HYBRID_SHARD process groups both need replicate × shard = dp·cp)."""
    return not layout.shard_group or layout.data_ranks % layout.shard_group == 0


def fsdp_pipeline_microbatches_ok(pp: int, microbatches: int) -> bool:
    """torch.distributed.pipelining's Schedule1F1B refuses fewer micro-batches than stages (schedules.py: "Number of
    microbatches ... must be greater than or equal to the number of stages"); interleaving already asks for a
    multiple of PP (search.py)."""
    return pp == 1 or microbatches >= pp


def selective_offered(pinned: bool, method: str, framework: str, layout: Layout) -> bool:
    """Whether the search tries "selective" (the framework's own selective recompute, memory.recompute_kind):
    under Megatron-LM always (--recompute-granularity selective); under FSDP where the FSDP2 script runs the layout
    (fsdp/fsdp_tp.py applies torchtitan's op-level SAC; Accelerate's FSDP1 plugin only checkpoints whole blocks):
    searched on the FSDP2 × TP × PP × CP path, and on 1-D FSDP only when `pinned`, since it moves the job from
    Accelerate to the FSDP2 script's launch contract; other frameworks checkpoint whole layers or nothing (DeepSpeed
    activation_checkpointing), so only a pinned selective is sized there, as Megatron's."""
    if framework == "megatron":
        return True
    if framework == "fsdp":
        lay = layout
        return fsdp2_runs(method, lay) and (pinned or lay.tp > 1 or lay.pp > 1 or lay.cp > 1)
    return pinned


class AutoRule(NamedTuple):
    """One row of the rule for `framework: auto`: when `applies`, `framework` runs the layout, for `reason`."""

    framework: str
    reason: str
    applies: Callable[[str, Layout], bool]  # (method, layout)
    facts: Callable[[Layout], dict]


AUTO_RULES: tuple[AutoRule, ...] = (
    AutoRule(
        "fsdp",
        "fsdp2-tensor-parallel",
        fsdp_tp_runs,
        lambda lay: {"tp": lay.tp, "pp": lay.pp, "vp": lay.vp, "cp": lay.cp},
    ),
    AutoRule("megatron", "megatron-for-model-parallel", lambda method, lay: model_parallel(lay), lambda lay: {}),
    AutoRule(
        "fsdp", "fsdp-hybrid-shard", lambda method, lay: bool(lay.shard_group), lambda lay: {"shard": lay.shard_group}
    ),
    AutoRule("deepspeed", "deepspeed-for-offload", lambda method, lay: lay.offload, lambda lay: {}),
    AutoRule("ddp", "ddp-unsharded", lambda method, lay: lay.zero == 0, lambda lay: {}),
    AutoRule("fsdp", "fsdp-full-shard", lambda method, lay: lay.zero == 3, lambda lay: {}),
    AutoRule("deepspeed", "deepspeed-zero", lambda method, lay: True, lambda lay: {"zero": lay.zero}),
)


def resolve_framework(framework: str, method: str, layout: Layout, per_node: int = 8) -> tuple[str, Reason] | None:
    """The framework that runs a layout, with the rule, or None when the requested framework cannot run it
    (`framework_gap` says why). A pinned framework runs what it can; "auto" takes the first row of `AUTO_RULES`:
    FSDP2 × TP × PP (× CP) where it runs the layout, else Megatron-LM for any model parallelism, else FSDP for an
    HSDP group, DeepSpeed for offload, DDP at ZeRO-0, FSDP at ZeRO-3 and DeepSpeed at ZeRO-1/2."""
    if framework_gap(framework, method, layout, per_node) is not None:
        return None
    if framework != "auto":
        return framework, because("framework-pinned")
    rule = next(row for row in AUTO_RULES if row.applies(method, layout))
    return rule.framework, because(rule.reason, **rule.facts(layout))


def fsdp_tp_missing(method: str, layout: Layout) -> str:
    """The first thing a model-parallel layout asks of the FSDP2 path that `fsdp_tp_runs` refuses: a capability it
    lacks ("cp": CP with TP, PP, adapters or an HSDP group, `fsdp_cp_runs`; "ep") before a setting it does not take
    ("adapters", "lora-without-tp", "offload", "zero", "vp-chunks")."""
    lay = layout
    cp_missing = not fsdp_cp_runs(method, lay) or (lay.cp > 1 and bool(lay.shard_group))
    missing = (
        ("cp", cp_missing),
        ("ep", lay.ep > 1),
        ("adapters", method not in ("full", "lora")),
        ("lora-without-tp", method == "lora" and lay.tp == 1),
        ("offload", lay.offload),
        ("zero", lay.zero != 3),
        ("vp-chunks", bool(lay.stage_layers) and min(lay.stage_layers) < lay.vp),
    )
    return next((name for name, lacking in missing if lacking), "")


def _gap(layout_kind: str, framework: str, detail: str, vp: int) -> Reason:
    return because("no-framework-path", layout=layout_kind, framework=framework, detail=detail, vp=vp)


def _zero_detail(layout: Layout) -> str:
    return f"ZeRO-{layout.zero}{' offload' if layout.offload else ''}"


def _model_parallel_gap(framework: str, method: str, layout: Layout) -> Reason | None:
    """Why no framework runs a model-parallel layout (or one pinned to Megatron-LM); None when Megatron-LM does."""
    lay = layout
    if lay.pp > 1 and lay.stage_layers and megatron_split(lay.stage_layers, lay.vp) is None:
        return _gap("uneven-split", framework, "/".join(map(str, lay.stage_layers)), lay.vp)
    if framework == "fsdp":
        return _gap("fsdp-model-parallel", framework, fsdp_tp_missing(method, lay), lay.vp)
    if framework in ("ddp", "deepspeed"):
        return _gap("model-parallel", framework, "", lay.vp)
    if method != "full":
        return _gap("adapters-model-parallel", framework, method, lay.vp)
    if lay.shard_group:
        return _gap("hsdp-megatron", framework, "", lay.vp)
    if lay.zero not in (0, 1) or lay.offload:
        return _gap("megatron-zero", framework, _zero_detail(lay), lay.vp)
    return None


def _data_parallel_gap(framework: str, method: str, layout: Layout, per_node: int) -> Reason | None:
    """Why the requested framework cannot shard a data-parallel layout as asked; None when it can."""
    lay = layout
    if lay.shard_group and (
        framework not in ("auto", "fsdp")
        or lay.zero != 3
        or lay.offload
        or (hsdp_on_fsdp2(lay.shard_group, per_node) and not fsdp2_runs(method, lay))
    ):
        return _gap("hsdp", framework, str(lay.shard_group), lay.vp)
    if framework == "ddp" and (lay.zero or lay.offload):
        return _gap("ddp-sharding", framework, f"ZeRO-{lay.zero}", 1)
    if framework == "fsdp" and (lay.zero == 1 or (lay.offload and lay.zero != 3)):
        return _gap("fsdp-stage", framework, _zero_detail(lay), 1)
    if framework in ("deepspeed", "auto") and lay.offload and lay.zero < 2:
        return _gap("offload-stage", framework, f"ZeRO-{lay.zero}", 1)
    return None


def framework_gap(framework: str, method: str, layout: Layout, per_node: int = 8) -> Reason | None:
    """Why no framework path runs this layout, as a reason naming the constraint and the capability behind it;
    None when one does."""
    if framework in ("fsdp", "auto") and fsdp_tp_runs(method, layout):
        return None
    mp = model_parallel(layout)
    if layout.pp > 1 and layout.stage_layers and megatron_split(layout.stage_layers, layout.vp) is None:
        return _model_parallel_gap(framework, method, layout)
    if mp and framework in ("fsdp", "ddp", "deepspeed"):
        return _model_parallel_gap(framework, method, layout)
    if framework == "megatron" or (framework == "auto" and mp):
        return _model_parallel_gap(framework, method, layout)
    return _data_parallel_gap(framework, method, layout, per_node)
