"""The training search: GPU type × count × TP × CP × PP (split, VP) × DP (EP) × ZeRO × micro-batch × recompute × offload.

Enumeration (pins fix a dimension):
* GPU counts: 1, 2, 4 (less than a node), then whole nodes in power-of-two numbers up to `max_gpus`, and the
  pinned count;
* TP within a node, dividing the query and key/value heads; PP dividing the layers, tried only once TP
  fills what the model allows in a node (Narayanan et al. 2021 §3.3: TP inside the node, PP across nodes);
* PP that does not divide the layers: the Llama 3 split (first and last stages lighter, train_layout.pipeline_split);
* CP where each rank keeps ≥ 4096 tokens of a sequence (train_layout.cp_choices); EP for MoE models, dividing the
  experts and DP·CP; VP ∈ {1, 2, 4} chunks per rank when PP > 1, where Megatron-LM can state the split with them
  and the micro-batches are a multiple of PP (its interleaved schedule's groups);
* DP = GPUs / (TP·CP·PP), and global batch = micro-batch × accumulation × DP exactly;
* ZeRO 0-3 and offload as the framework allows (`resolve_framework`); offload is only tried when the
  layout does not fit without it;
* HSDP shard groups (train_layout.hsdp_groups) beside a ZeRO-3 FSDP layout that fits fully sharded with DP across
  nodes: a node's data-parallel ranks, larger groups only where memory needs them (`_search_hsdp`); or the pin;
* recompute none → selective → full: the first that fits is kept (less recompute is never slower); selective is
  the framework's own (Megatron-LM's core-attention recompute; torchtitan's op-level SAC on the FSDP2 script), tried
  where the framework's files can ask for it (`selective_offered`).
A layout no framework can run is not chosen; when only such layouts fit memory, the refusal names the missing
framework path (`framework_gap`), not memory.
Every fitting candidate is timed (train_time) and costed; the choice is the cheapest that meets the deadline
and budget (optimize: cost) or the fastest within the budget (optimize: time), ties broken by wall time or
cost, then fewer GPUs, then the description.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from ..catalog.fabrics import Interconnect, Storage
from ..catalog.params import ParamCounts
from ..catalog.types import Architecture, GpuSpec
from .reasons import Reason, because
from .search_cache import SearchCache
from .train_layout import (
    VP_CHOICES,
    cp_by_allgather,
    cp_choices,
    ep_choices,
    ep_overlap_allowed,
    hsdp_groups,
    is_even,
    megatron_split,
    moe_layer_share,
    pipeline_split,
    routed_expert_params,
)
from .train_memory import (
    FSDP2_REDUCE_BYTES,
    MemoryBreakdown,
    MemoryOptions,
    checkpoint_bytes,
    lora_trainable_params,
    memory_per_gpu,
    recompute_kind,
    usable_memory_bytes,
)
from .train_time import (
    COMPUTE_DTYPE,
    GRADIENT_BYTES,
    INTER_NODE_ACHIEVABLE_FRACTION,
    NVLINK_ACHIEVABLE_FRACTION,
    ZERO3_VOLUME_FACTOR,
    StepTime,
    WholeRun,
    dp_ranks_per_node,
    hardware_flops_per_token,
    model_flops_per_token,
    step_time,
    whole_run,
)

TP_CHOICES = (1, 2, 4, 8)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
RECOMPUTE_ORDER = ("none", "selective", "full")
SUB_NODE_COUNTS = (1, 2, 4)
MAX_PP = 128  # Megatron-LM 2021 ran 1T parameters on PP 64 (Narayanan et al. 2021, Table 1)
MAX_REJECTIONS = 20
FSDP_PP_GAP = "fsdp-pp"  # the gap key of a pipelined FSDP layout with too few micro-batches
FSDP_SELECTIVE_GAP = "fsdp-sac"  # the key of a pinned selective recompute the FSDP layout cannot run
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
    cp: int | None = None
    ep: int | None = None
    vp: int | None = None
    pp_first_stage_layers: int | None = None
    pp_last_stage_layers: int | None = None
    pp_stage_layers: tuple[int, ...] | None = None
    shard_group: int | None = None  # ZeRO-3 / FSDP shard group (HSDP) when smaller than DP·CP
    ep_overlap: bool | None = (
        None  # EP all-to-alls under another micro-batch's compute; None: where Megatron-Core allows it
    )
    ep_dispatch: str | None = None  # "fp8": FP8 dispatch (DeepSeek-V3); no emitted framework states it, so only priced


class Shape(NamedTuple):
    """The model-parallel shape of a layout: degrees and the layers of each pipeline stage."""

    tp: int
    cp: int
    pp: int
    ep: int
    vp: int
    split: tuple[int, ...]
    shard: int | None = None  # HSDP shard group; None: all of DP·CP
    ep_overlap: bool = False  # EP all-to-alls overlapped with another micro-batch's compute (train_layout)
    ep_dispatch: str = "bf16"  # the all-to-alls' dispatch dtype (train_layout.ep_all_to_all_bytes_per_layer)

    @property
    def uneven(self) -> bool:
        return len(self.split) > 1 and not is_even(self.split)


def sequence_parallel(shape: Shape, framework: str, seq_len: int) -> bool:
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
    if shape.tp <= 1:
        return False
    if framework == "fsdp":
        return seq_len % shape.tp == 0
    return seq_len % (shape.cp * shape.tp) == 0


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
    # deadline and budget are checked with time and cost × this factor: the published runs' actual ÷ predicted step
    # time at the plan's gate quantile (compiler/catalog/residuals.yaml); 1.0 checks the prediction itself
    gate_factor: float = 1.0
    gate_quantile: str = "P50"
    # a layout fits when its predicted memory × this factor fits: measured ÷ predicted peak memory of the method's
    # family at the plan's quantile (residuals.yaml); 1.0 fits the prediction itself
    memory_factor: float = 1.0
    memory: MemoryOptions = field(default_factory=MemoryOptions)  # where frameworks differ (train_memory docstring)
    # a site calibration file's measured interconnect shares (site_calibration.py): (GPU id, intra-node share) for that
    # GPU's links, and the inter-node share of `interconnect`; None: train_time's published shares
    site_intra_node: tuple[str, float] | None = None
    inter_node_fraction: float | None = None

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
    whole_run: WholeRun
    checkpoint_bytes: int
    checkpoint_write_seconds: float
    checkpoint_interval_seconds: float
    dataset_read_bytes_per_second: float
    allreduce_bytes_per_step: float
    network_bytes_per_second_needed: float
    network_bound: bool
    cp: int = 1
    ep: int = 1
    vp: int = 1
    pp_stage_layers: tuple[int, ...] = ()
    shard_group: int | None = None
    ep_overlap: bool = False
    ep_dispatch: str = "bf16"

    @property
    def description(self) -> str:
        return describe(
            self.gpus,
            self.gpu_id,
            self.tp,
            self.pp,
            self.dp,
            self.zero_stage,
            self.micro_batch,
            self.recompute,
            self.offload_optimizer,
            Shape(
                self.tp,
                self.cp,
                self.pp,
                self.ep,
                self.vp,
                self.pp_stage_layers,
                self.shard_group,
                self.ep_overlap,
                self.ep_dispatch,
            ),
        )

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


def describe(
    gpus: int,
    gpu_id: str,
    tp: int,
    pp: int,
    dp: int,
    zero: int,
    mb: int,
    recompute: str,
    offload: bool,
    shape: Shape | None = None,
) -> str:
    """`8 × h100 TP2 PP2 DP2 ZeRO-1 mb1 none`; CP, EP, VP, an uneven split ([first/middle/last] layers) and an HSDP
    shard group only when used."""
    extra = ""
    if shape is not None:
        extra += f" CP{shape.cp}" if shape.cp > 1 else ""
        extra += f" EP{shape.ep}" if shape.ep > 1 else ""
        extra += f" VP{shape.vp}" if shape.vp > 1 else ""
        if shape.uneven:
            first, last = shape.split[0], shape.split[-1]
            middle = sorted(set(shape.split[1:-1]))
            extra += (
                f" [{first}/{middle[0]}/{last}]" if len(middle) == 1 else " [" + "/".join(map(str, shape.split)) + "]"
            )
        extra += f" HSDP{shape.shard}" if shape.shard else ""
        extra += " A2A-overlap" if shape.ep_overlap else ""
        extra += " FP8-dispatch" if shape.ep_dispatch == "fp8" else ""
    return (
        f"{gpus} × {gpu_id} TP{tp} PP{pp} DP{dp} ZeRO-{zero} mb{mb} {recompute}{' offload' if offload else ''}{extra}"
    )


def resolve_framework(
    framework: str,
    method: str,
    tp: int,
    pp: int,
    zero: int,
    offload: bool,
    shape: Shape | None = None,
    per_node: int = 8,
) -> tuple[str, Reason] | None:
    """The framework that runs a layout, with the rule, or None when the requested framework cannot run it
    (`framework_gap` says why).

    Rule for "auto": TP, PP, CP, EP or VP → Megatron-LM (its model-parallel layers; ZeRO-1 is its distributed
    optimizer; uneven stages and interleaving as its arguments can state them, train_layout.megatron_split), except
    TP and/or PP, or CP alone, at ZeRO-3 without EP → FSDP2 × TP × PP (× CP) (`fsdp_tp_runs`); otherwise ZeRO-0 → PyTorch
    DDP, ZeRO-3 without offload → FSDP FULL_SHARD (HYBRID_SHARD for a shard group: Accelerate's FSDP1 within one node,
    else FSDP2's 2-D mesh), offload or ZeRO-1/2 → DeepSpeed.
    """
    if framework_gap(framework, method, tp, pp, zero, offload, shape, per_node) is not None:
        return None
    beyond = shape is not None and (shape.cp > 1 or shape.ep > 1 or shape.vp > 1 or shape.uneven)
    if framework != "auto":
        return framework, because("framework-pinned")
    if fsdp_tp_runs(method, tp, pp, zero, offload, shape):
        return "fsdp", because(
            "fsdp2-tensor-parallel", tp=tp, pp=pp, vp=shape.vp if shape else 1, cp=shape.cp if shape else 1
        )
    if tp > 1 or pp > 1 or beyond:
        return "megatron", because("megatron-for-model-parallel")
    if shape is not None and shape.shard:
        return "fsdp", because("fsdp-hybrid-shard", shard=shape.shard)
    if offload:
        return "deepspeed", because("deepspeed-for-offload")
    if zero == 0:
        return "ddp", because("ddp-unsharded")
    if zero == 3:
        return "fsdp", because("fsdp-full-shard")
    return "deepspeed", because("deepspeed-zero", zero=zero)


def selective_offered(req: TrainRequest, framework: str, zero: int, offload: bool, shape: Shape) -> bool:
    """Whether the search tries "selective" (the framework's own selective recompute, train_memory.recompute_kind):
    under Megatron-LM always (--recompute-granularity selective); under FSDP where the FSDP2 script runs the layout
    (fsdp/fsdp_tp.py applies torchtitan's op-level SAC; Accelerate's FSDP1 plugin only checkpoints whole blocks):
    searched on the FSDP2 × TP × PP × CP path, and on 1-D FSDP only when pinned, since it moves the job from Accelerate to
    the FSDP2 script's launch contract; other frameworks checkpoint whole layers or nothing (DeepSpeed
    activation_checkpointing), so only a pinned selective is sized there, as Megatron's."""
    pinned = req.pins.recompute == "selective"
    if framework == "megatron":
        return True
    if framework == "fsdp":
        runs = fsdp2_runs(req.method, zero, offload, shape)
        return runs and (pinned or shape.tp > 1 or shape.pp > 1 or shape.cp > 1)
    return pinned


def fsdp2_runs(method: str, zero: int, offload: bool, shape: Shape) -> bool:
    """Whether the FSDP2 script (fsdp/fsdp_tp.py) can run the layout, model-parallel or not: `fsdp_tp_runs` without
    its TP, PP or CP condition."""
    return (
        fsdp_cp_runs(method, shape.tp, shape.pp, shape.cp)
        and (shape.cp == 1 or not shape.shard)
        and shape.ep == 1
        and zero == 3
        and not offload
        and method in ("full", "lora")
        and (not shape.split or min(shape.split) >= shape.vp)
    )


def fsdp_cp_runs(method: str, tp: int, pp: int, cp: int) -> bool:
    """CP on the FSDP2 script: K/V all-gathered over the CP ranks, load-balanced 2·cp chunks (Llama 3 §3.3.2,
    train_layout docstring; fsdp/fsdp_tp.py), proven on CPU gloo ranks against one process
    (tests/test_fsdp_cp_real.py) for full weights without TP or PP; CP × TP, CP × PP and adapters with CP are not
    built (Megatron-LM has CP with TP and PP)."""
    return cp == 1 or (tp == 1 and pp == 1 and method == "full")


def fsdp_tp_runs(method: str, tp: int, pp: int, zero: int, offload: bool, shape: Shape | None = None) -> bool:
    """Whether the FSDP2 × TP × PP path runs the layout (compiler/deployment/fsdp_tp.py, the way torchtitan composes
    them: a DeviceMesh [pp, dp_replicate, dp_shard, cp, tp], the model split into pipeline stages run by
    torch.distributed.pipelining's 1F1B or interleaved 1F1B, `parallelize_module` over tp, `fully_shard` over dp_shard
    (× cp)): TP, PP or CP > 1 (any stage split; VP as interleaved 1F1B; CP as `fsdp_cp_runs`, without an HSDP group),
    no EP, ZeRO-3 (fully_shard) without offload, an HSDP shard group or not (fully_shard over [dp_replicate, dp_shard];
    the search checks `hsdp_group_divides`), full weights or LoRA (fsdp/lora_tp.py: 16-bit frozen base, adapters
    sharded as their base layers; QLoRA's 4-bit base has no DTensor TP path)."""
    shape = (shape or Shape(tp, 1, pp, 1, 1, ()))._replace(tp=tp, pp=pp)
    return (tp > 1 or pp > 1 or shape.cp > 1) and fsdp2_runs(method, zero, offload, shape)


# The FSDP2 script's gradient reduction dtype (MixedPrecisionPolicy reduce_dtype; torchtitan's
# mixed_precision_reduce default "float32"): fsdp_tp.json carries it, step_time prices its bytes (train_memory's).
FSDP2_REDUCE_DTYPE = "float32"


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


def hsdp_group_divides(shape: Shape, dp: int) -> bool:
    """An HSDP shard group of `shape.shard` data-parallel ranks tiles the dp·cp ranks into whole replicas (FSDP2's
    2-D mesh [dp_replicate, dp_shard] and FSDP1's HYBRID_SHARD process groups both need replicate × shard = dp·cp)."""
    return not shape.shard or (dp * shape.cp) % shape.shard == 0


def fsdp_tp_missing(method: str, zero: int, offload: bool, shape: Shape) -> str:
    """The first thing a model-parallel layout asks of the FSDP2 path that `fsdp_tp_runs` refuses: a capability it
    lacks ("cp": CP with TP, PP, adapters or an HSDP group, `fsdp_cp_runs`; "ep") before a setting it does not take
    ("adapters", "offload", "zero", "vp-chunks")."""
    cp_missing = not fsdp_cp_runs(method, shape.tp, shape.pp, shape.cp) or (shape.cp > 1 and bool(shape.shard))
    missing = (
        ("cp", cp_missing),
        ("ep", shape.ep > 1),
        ("adapters", method not in ("full", "lora")),
        ("offload", offload),
        ("zero", zero != 3),
        ("vp-chunks", bool(shape.split) and min(shape.split) < shape.vp),
    )
    return next((name for name, lacking in missing if lacking), "")


def fsdp_pipeline_microbatches_ok(pp: int, microbatches: int) -> bool:
    """torch.distributed.pipelining's Schedule1F1B refuses fewer micro-batches than stages (schedules.py: "Number of
    microbatches ... must be greater than or equal to the number of stages"); interleaving already asks for a
    multiple of PP (`_search_layout`)."""
    return pp == 1 or microbatches >= pp


def framework_gap(
    framework: str,
    method: str,
    tp: int,
    pp: int,
    zero: int,
    offload: bool,
    shape: Shape | None = None,
    per_node: int = 8,
) -> Reason | None:
    """Why no framework path runs this layout, as a reason naming the constraint and the capability behind it;
    None when one does. The paths are the configs the compiler emits (compiler/deployment/frameworks.py)."""
    shape = shape or Shape(tp, 1, pp, 1, 1, ())
    model_parallel = tp > 1 or pp > 1 or shape.cp > 1 or shape.ep > 1 or shape.vp > 1 or shape.uneven
    megatron_can = zero in (0, 1) and not offload and method == "full" and not shape.shard
    if framework in ("fsdp", "auto") and fsdp_tp_runs(method, tp, pp, zero, offload, shape):
        return None
    if shape.pp > 1 and shape.split and megatron_split(shape.split, shape.vp) is None:
        return because(
            "no-framework-path",
            layout="uneven-split",
            framework=framework,
            detail="/".join(map(str, shape.split)),
            vp=shape.vp,
        )
    if framework == "fsdp" and model_parallel:
        return because(
            "no-framework-path",
            layout="fsdp-model-parallel",
            framework=framework,
            detail=fsdp_tp_missing(method, zero, offload, shape),
            vp=shape.vp,
        )
    if framework in ("ddp", "deepspeed") and model_parallel:
        return because("no-framework-path", layout="model-parallel", framework=framework, detail="", vp=shape.vp)
    if framework == "megatron" or (framework == "auto" and model_parallel):
        if method != "full":
            return because(
                "no-framework-path", layout="adapters-model-parallel", framework=framework, detail=method, vp=shape.vp
            )
        if shape.shard:
            return because("no-framework-path", layout="hsdp-megatron", framework=framework, detail="", vp=shape.vp)
        if not megatron_can:
            return because(
                "no-framework-path",
                layout="megatron-zero",
                framework=framework,
                detail=f"ZeRO-{zero}{' offload' if offload else ''}",
                vp=shape.vp,
            )
        return None
    if shape.shard and (
        framework not in ("auto", "fsdp")
        or zero != 3
        or offload
        or (hsdp_on_fsdp2(shape.shard, per_node) and not fsdp2_runs(method, zero, offload, shape))
    ):
        return because("no-framework-path", layout="hsdp", framework=framework, detail=str(shape.shard), vp=shape.vp)
    if framework == "ddp" and (zero or offload):
        return because("no-framework-path", layout="ddp-sharding", framework=framework, detail=f"ZeRO-{zero}", vp=1)
    if framework == "fsdp" and (zero == 1 or (offload and zero != 3)):
        return because(
            "no-framework-path",
            layout="fsdp-stage",
            framework=framework,
            detail=f"ZeRO-{zero}{' offload' if offload else ''}",
            vp=1,
        )
    if (framework in ("deepspeed", "auto")) and offload and zero < 2:
        return because("no-framework-path", layout="offload-stage", framework=framework, detail=f"ZeRO-{zero}", vp=1)
    return None


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
    """PP degrees: the pin, or (once TP fills what the model allows) every depth that divides the GPUs left and has
    a split of the layers — even, or the Llama 3 split with lighter first and last stages."""
    if pinned:
        return [pinned]
    # MoE: expert parallelism takes the place of TP inside a node (DeepSeek-V3: TP1 EP64 PP16), so PP is tried
    # at every TP degree
    if not arch.layers or (tp < tp_max and not arch.is_moe):
        return [1]
    return [
        p
        for p in range(1, min(arch.layers, MAX_PP, count // tp) + 1)
        if (count // tp) % p == 0 and pipeline_split(arch.layers, p) is not None
    ]


def _split(req: TrainRequest, pp: int) -> tuple[int, ...] | None:
    """The layers of each stage: as pinned (first/last counts or a list), else train_layout.pipeline_split."""
    pins = req.pins
    if not req.arch.layers:
        return ()
    return pipeline_split(
        req.arch.layers, pp, pins.pp_first_stage_layers, pins.pp_last_stage_layers, pins.pp_stage_layers
    )


def _vp_choices(req: TrainRequest, split: tuple[int, ...]) -> list[int]:
    """Interleaving degrees: the pin, or VP_CHOICES where Megatron-LM can state the split with them."""
    pinned = req.pins.vp
    if pinned:
        return [pinned] if pinned == 1 or len(split) > 1 else []  # interleaving needs pipeline stages
    if len(split) <= 1:
        return [1]
    return [v for v in VP_CHOICES if v == 1 or megatron_split(split, v) is not None]


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
    whole_run: dict[tuple[int, float, str], WholeRun] = field(default_factory=dict)


def _context(req: TrainRequest) -> _Context:
    lora = lora_trainable_params(req.arch, req.lora_rank, req.lora_targets) if req.method != "full" else 0
    return _Context(
        req,
        req.interconnect,
        req.storage,
        req.global_batch_sequences * req.seq_len,
        model_flops_per_token(req.arch, req.params, req.seq_len),
        lora,
        checkpoint_bytes(req.params, req.optimizer, req.method, lora, req.memory.master_weights),
    )


def _hardware_flops(ctx: _Context, recompute: str) -> float:
    if recompute not in ctx.hardware_flops:
        req = ctx.req
        ctx.hardware_flops[recompute] = hardware_flops_per_token(req.arch, req.params, req.seq_len, recompute)
    return ctx.hardware_flops[recompute]


def _whole_run(ctx: _Context, gpus: int, write_seconds: float, framework: str) -> WholeRun:
    key = (gpus, write_seconds, framework)
    if key not in ctx.whole_run:
        ctx.whole_run[key] = whole_run(gpus, write_seconds, framework, ctx.req.mtbf_gpu_hours)
    return ctx.whole_run[key]


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
    whole_run: WholeRun
    wall_seconds: float
    gpu_hours: float
    price: float
    cost_usd: float
    description: str  # formatted once: every ordering of the choice compares it
    shape: Shape

    @property
    def gpu_id(self) -> str:
        return self.gpu.id


def _fit(
    ctx: _Context,
    gpu: GpuSpec,
    per_node: int,
    gpus: int,
    shape: Shape,
    zero: int,
    offload: bool,
    mb: int,
    recompute: str,
    framework: tuple[str, Reason],
    mem: MemoryBreakdown,
    usable: int,
) -> _Fit:
    req = ctx.req
    tp, pp = shape.tp, shape.pp
    dp = gpus // (tp * pp * shape.cp)
    grad_accum = req.global_batch_sequences // (mb * dp)
    # routed experts are split over EP: a GPU reduces the gradients of the experts it holds
    experts = routed_expert_params(req.arch, req.params) * moe_layer_share(req.arch) * req.arch.layers
    full = req.params.total - experts * (1 - 1 / shape.ep)
    trainable_per_gpu = (
        full / (tp * pp)
        if req.method == "full"
        else lora_trainable_params(req.arch, req.lora_rank, req.lora_targets, tp) / pp
    )
    gradient_bytes = trainable_per_gpu * GRADIENT_BYTES
    if req.method != "full" and zero == 3:
        # ZeRO-3 gathers the frozen base twice per micro-batch (forward, backward): one all-reduce's volume,
        # given here net of the 1.5× that step_time applies to stage 3; FSDP2 stages under PP: the base's 16-bit bytes,
        # which step_time gathers m + 1 times a step (and reduces once, an over-count of the adapters' gradients)
        gradient_bytes = (mem.weights - mem.gathered) * dp / (1 if mem.accumulating else ZERO3_VOLUME_FACTOR)
    step = step_time(
        req.arch,
        req.params,
        gpu,
        precision=req.precision,
        seq_len=req.seq_len,
        micro_batch=mb,
        grad_accum=grad_accum,
        tp=tp,
        pp=pp,
        dp=dp,
        zero_stage=zero,
        recompute=recompute_kind(recompute, framework[0]),
        flash_attention=req.flash_attention,
        attention_kernel=req.attention_kernel,
        sequence_parallel=sequence_parallel(shape, framework[0], req.seq_len),
        state_bytes_on_gpu=(
            mem.model_states - mem.gathered - mem.accumulating
            if req.method == "full"
            else mem.gradients + mem.optimizer
        ),
        offloaded_bytes=mem.cpu_offload_bytes,
        trainable_params_per_gpu=trainable_per_gpu / max(1, dp),
        trainable_params_per_replica=trainable_per_gpu,
        gradient_bytes_per_replica=gradient_bytes,
        inter_node_bytes_per_second=ctx.fabric.bytes_per_second_per_gpu,
        inter_node_latency_seconds=ctx.fabric.latency_seconds,
        gpus_per_node=per_node,
        cp=shape.cp,
        ep=shape.ep,
        vp=shape.vp,
        split=shape.split or None,
        zero_shard_ranks=shape.shard,
        ep_overlap=shape.ep_overlap,
        ep_dispatch=shape.ep_dispatch,
        cp_allgather=cp_by_allgather(framework[0]),
        reduce_once_per_step=mem.accumulating > 0,
        reshard_after_forward=req.memory.reshard_after_forward,
        reduce_bytes_per_gradient=(
            FSDP2_REDUCE_BYTES
            if req.method == "full" and runs_on_fsdp2(framework[0], tp, pp, recompute, shape.shard, per_node, shape.cp)
            else GRADIENT_BYTES
        ),
        **link_fractions(req, gpu.id),
    )
    steps = max(1, math.ceil(req.tokens / ctx.tokens_per_step))
    tokens_per_second = ctx.tokens_per_step / step.total
    nodes = max(1, math.ceil(gpus / per_node))
    write_seconds = ctx.checkpoint / checkpoint_write_bandwidth(ctx.storage, nodes)
    terms = _whole_run(ctx, gpus, write_seconds, framework[0])
    wall = steps * step.total / terms.goodput
    gpu_hours = wall * gpus / 3600
    price = gpu.price_usd_per_gpu_hour[req.pricing]
    return _Fit(
        gpu,
        per_node,
        gpus,
        tp,
        pp,
        dp,
        zero,
        offload,
        mb,
        grad_accum,
        recompute,
        framework,
        mem,
        usable,
        gradient_bytes,
        step,
        steps,
        tokens_per_second,
        nodes,
        write_seconds,
        terms,
        wall,
        gpu_hours,
        price,
        gpu_hours * price,
        describe(gpus, gpu.id, tp, pp, dp, zero, mb, recompute, offload, shape),
        shape,
    )


def link_fractions(req: TrainRequest, gpu_id: str) -> dict[str, float]:
    """step_time's link shares for one GPU type: the site's measured ones where the request carries them."""
    intra = (
        req.site_intra_node[1]
        if req.site_intra_node and req.site_intra_node[0] == gpu_id
        else NVLINK_ACHIEVABLE_FRACTION
    )
    nic = INTER_NODE_ACHIEVABLE_FRACTION if req.inter_node_fraction is None else req.inter_node_fraction
    return {"nvlink_fraction": intra, "nic_fraction": nic}


def _candidate(ctx: _Context, f: _Fit) -> TrainCandidate:
    req, gpu, gpus, dp, zero, step = ctx.req, f.gpu, f.gpus, f.dp, f.zero, f.step
    peak = gpu.peak_flops_per_second(COMPUTE_DTYPE[req.precision])
    hardware = _hardware_flops(ctx, recompute_kind(f.recompute, f.framework[0]))
    mfu = f.tokens_per_second * ctx.flops_model / (gpus * peak)
    hfu = f.tokens_per_second * hardware / (gpus * peak)
    ranks = dp * f.shape.cp  # CP ranks reduce gradients with DP
    allreduce = (
        f.gradient_bytes * (ZERO3_VOLUME_FACTOR if zero == 3 else 1.0) * (2 * (ranks - 1) / ranks if ranks > 1 else 0.0)
    )
    # the NIC rate per GPU that keeps it under the share: the ring moves at NIC × the group's ranks on each node
    # (train_time.dp_collective_bandwidth); 0 where the group stays inside a node
    ranks_per_node = dp_ranks_per_node(f.tp, ranks, f.per_node)
    needed = (
        allreduce
        / (NETWORK_SHARE_OF_STEP * step.total)
        / (ranks_per_node * link_fractions(req, gpu.id)["nic_fraction"])
        if allreduce and ranks > ranks_per_node
        else 0.0
    )
    token_bytes = stored_bytes_per_token(req.arch, req.bytes_per_token)
    return TrainCandidate(
        gpu_id=gpu.id,
        gpus=gpus,
        nodes=f.nodes,
        gpus_per_node=min(f.per_node, gpus),
        tp=f.tp,
        pp=f.pp,
        dp=dp,
        zero_stage=zero,
        micro_batch=f.mb,
        grad_accum=f.grad_accum,
        recompute=f.recompute,
        offload_optimizer=f.offload,
        offload_params=f.offload and zero == 3,
        sequence_parallel=sequence_parallel(f.shape, f.framework[0], req.seq_len),
        framework=f.framework[0],
        framework_reason=f.framework[1],
        memory=f.mem,
        usable_memory_bytes=f.usable,
        step=step,
        flops_per_token_model=ctx.flops_model,
        flops_per_token_hardware=hardware,
        flops_total=ctx.flops_model * req.tokens,
        mfu=mfu,
        hfu=hfu,
        tokens_per_second=f.tokens_per_second,
        steps=f.steps,
        wall_seconds=f.wall_seconds,
        gpu_hours=f.gpu_hours,
        goodput=f.whole_run.goodput,
        usd_per_gpu_hour=f.price,
        cost_usd=f.cost_usd,
        whole_run=f.whole_run,
        checkpoint_bytes=ctx.checkpoint,
        checkpoint_write_seconds=f.write_seconds,
        checkpoint_interval_seconds=f.whole_run.checkpoint_interval_seconds,
        dataset_read_bytes_per_second=f.tokens_per_second * token_bytes,
        allreduce_bytes_per_step=allreduce,
        network_bytes_per_second_needed=needed,
        network_bound=step.dp_comm_exposed > NETWORK_SHARE_OF_STEP * step.total,
        cp=f.shape.cp,
        ep=f.shape.ep,
        vp=f.shape.vp,
        pp_stage_layers=tuple(f.shape.split),
        shard_group=f.shape.shard,
        ep_overlap=f.shape.ep_overlap,
        ep_dispatch=f.shape.ep_dispatch,
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
        self.gaps: dict[str, tuple[Rejection, bool]] = {}  # layouts no framework runs, and whether they fit memory
        self.evaluated = 0

    def gap(self, key: str, description: str, reason: Reason, fits: bool) -> None:
        if key not in self.gaps or (fits and not self.gaps[key][1]):
            self.gaps[key] = (Rejection(description, reason), fits)

    def too_big(self, gpu_id: str, gpus: int, layout: tuple, mem: MemoryBreakdown, usable: int) -> None:
        """`layout` is (tp, pp, dp, zero, mb, recompute, offload, shape); described only when it is kept."""
        key = (gpu_id, gpus)
        if key not in self.memory or mem.total < self.memory[key][0]:
            description = describe(gpus, gpu_id, *layout)
            reason = because(
                "too-big",
                total=mem.total,
                usable=usable,
                weights=mem.weights,
                gradients=mem.gradients,
                optimizer=mem.optimizer,
                activations=mem.activations,
                other=mem.other,
            )
            self.memory[key] = (mem.total, Rejection(description, reason))

    def rejections(self, fitting_counts: set[tuple[str, int]], extra: list[Rejection]) -> tuple[Rejection, ...]:
        # memory rejections only where nothing of that GPU and count fit, smallest counts first
        memory = [
            r
            for key, (_, r) in sorted(self.memory.items(), key=lambda kv: (kv[0][0], kv[0][1]))
            if key not in fitting_counts
        ]
        # layouts without a framework path are listed when nothing was chosen (else every plan would list them)
        gaps = [r for _, (r, _) in sorted(self.gaps.items())] if not self.feasible else []
        return tuple((list(self.other.values()) + gaps + extra + memory)[:MAX_REJECTIONS])


def _memory(
    ctx: _Context,
    shape: Shape,
    dp: int,
    zero: int,
    offload: bool,
    mb: int,
    microbatches: int,
    recompute: str,
    framework: str,
) -> MemoryBreakdown:
    key = (shape, dp, zero, offload, mb, microbatches, recompute, framework)
    found = ctx.memory.get(key)
    if found is None:
        found = ctx.memory[key] = _memory_per_gpu(
            ctx.req, shape, dp, zero, offload, mb, microbatches, recompute, framework
        )
    return found


def _memory_per_gpu(
    req: TrainRequest,
    shape: Shape,
    dp: int,
    zero: int,
    offload: bool,
    mb: int,
    microbatches: int,
    recompute: str,
    framework: str,
) -> MemoryBreakdown:
    return memory_per_gpu(
        req.arch,
        req.params,
        precision=req.precision,
        optimizer=req.optimizer,
        method=req.method,
        lora_rank=req.lora_rank,
        lora_targets=req.lora_targets,
        tp=shape.tp,
        pp=shape.pp,
        dp=dp,
        zero_stage=zero,
        zero_shard_ranks=shape.shard,
        offload_optimizer=offload,
        offload_params=offload and zero == 3,
        seq_len=req.seq_len,
        micro_batch=mb,
        microbatches=microbatches,
        recompute=recompute,
        sequence_parallel=sequence_parallel(shape, framework, req.seq_len),
        flash_attention=req.flash_attention,
        framework=framework,
        options=req.memory,
        cp=shape.cp,
        ep=shape.ep,
        vp=shape.vp,
        split=shape.split or None,
    )


def _search_layout(
    ctx: _Context, out: _Collector, gpu: GpuSpec, per_node: int, count: int, shape: Shape, usable: int
) -> None:
    req, pins = ctx.req, ctx.req.pins
    tp, pp = shape.tp, shape.pp
    dp = count // (tp * pp * shape.cp)
    zeros = [pins.zero_stage] if pins.zero_stage is not None else [0, 1, 2, 3]
    offloads = [pins.offload] if pins.offload is not None else [False, True]
    mbs = [pins.micro_batch] if pins.micro_batch else list(MICRO_BATCHES)
    mbs = [m for m in mbs if req.global_batch_sequences % (m * dp) == 0]
    if shape.vp > 1:  # Megatron's interleaved schedule runs micro-batches in groups of PP (schedules.py)
        mbs = [m for m in mbs if (req.global_batch_sequences // (m * dp)) % pp == 0]
        if not mbs:
            out.gap(
                f"vp:{gpu.id}:{count}",
                describe(count, gpu.id, tp, pp, dp, 0, 1, "none", False, shape),
                because("vp-needs-microbatches", pp=pp, vp=shape.vp),
                fits=False,
            )
            return
    if not hsdp_group_divides(shape, dp):
        out.other.setdefault(
            f"sg:{gpu.id}:{count}:{dp}",
            Rejection(  # an HSDP shard group that does not tile DP
                describe(count, gpu.id, tp, pp, dp, 3, 1, "none", False, shape),
                because("hsdp-group-divides", shard=shape.shard, ranks=dp * shape.cp),
            ),
        )
        return
    recomputes = [pins.recompute] if pins.recompute else list(RECOMPUTE_ORDER)
    for offload in offloads:
        fitted = False
        for zero in zeros:
            if zero and dp * shape.cp == 1 and not offload and not _fsdp_tp_unsharded(req, shape, zero):
                continue  # nothing to shard over
            framework = resolve_framework(req.framework, req.method, tp, pp, zero, offload, shape, per_node)
            if framework is None:
                _record_gap(ctx, out, gpu, count, shape, dp, zero, offload, mbs, recomputes, usable, per_node)
                continue
            kinds = [
                r for r in recomputes if r != "selective" or selective_offered(req, framework[0], zero, offload, shape)
            ]
            if not kinds:  # the pinned selective has no path under this framework and layout
                out.other.setdefault(
                    FSDP_SELECTIVE_GAP + f":{gpu.id}:{count}",
                    Rejection(
                        describe(count, gpu.id, tp, pp, dp, zero, mbs[0] if mbs else 1, "selective", offload, shape),
                        because("fsdp-selective-needs-fsdp2", zero=zero, offload=offload, method=req.method),
                    ),
                )
            for mb in mbs:
                microbatches = req.global_batch_sequences // (mb * dp)
                if framework[0] == "fsdp" and not fsdp_pipeline_microbatches_ok(pp, microbatches):
                    out.gap(
                        FSDP_PP_GAP + f":{gpu.id}:{count}",
                        describe(count, gpu.id, tp, pp, dp, zero, mb, "none", offload, shape),
                        because("fsdp-pp-needs-microbatches", pp=pp, microbatches=microbatches),
                        fits=False,
                    )
                    continue
                for recompute in kinds:
                    timed = _ep_options(req, shape, recompute)
                    if timed is None:
                        out.other.setdefault(
                            f"a2a:{shape.pp}:{shape.vp}:{recompute}",
                            Rejection(
                                describe(count, gpu.id, tp, pp, dp, zero, mb, recompute, offload, shape),
                                because(
                                    "ep-overlap-not-allowed", ep=shape.ep, pp=shape.pp, vp=shape.vp, recompute=recompute
                                ),
                            ),
                        )
                        continue
                    out.evaluated += 1
                    mem = _memory(ctx, shape, dp, zero, offload, mb, microbatches, recompute, framework[0])
                    if mem.total > usable:
                        out.too_big(gpu.id, count, (tp, pp, dp, zero, mb, recompute, offload, shape), mem, usable)
                        continue
                    if mem.cpu_offload_bytes > HOST_MEMORY_BYTES_PER_GPU:
                        description = describe(count, gpu.id, tp, pp, dp, zero, mb, recompute, offload, shape)
                        out.other.setdefault(
                            f"host:{gpu.id}:{count}",
                            Rejection(
                                description,
                                because("host-memory", needed=mem.cpu_offload_bytes, host=HOST_MEMORY_BYTES_PER_GPU),
                            ),
                        )
                        continue
                    out.feasible.append(
                        _fit(ctx, gpu, per_node, count, timed, zero, offload, mb, recompute, framework, mem, usable)
                    )
                    fitted = True
                    if _hsdp_searched(req, framework[0], zero, offload, timed):
                        _search_hsdp(
                            ctx,
                            out,
                            gpu,
                            per_node,
                            count,
                            timed,
                            dp,
                            mb,
                            microbatches,
                            kinds[kinds.index(recompute) :],
                            usable,
                        )
                    break  # less recompute is never slower: keep the first that fits
        if fitted and pins.offload is None:
            return  # offload is only worth its PCIe traffic when nothing fits without it


def _pinned_group(pins: TrainPins, ranks: int) -> int | None:
    """The pinned HSDP shard group; a group of all `ranks` data-parallel ranks is full sharding (no replicas), the way
    a plan states a published fully sharded layout and keeps the search from trying groups."""
    return None if pins.shard_group == ranks else pins.shard_group


def _hsdp_searched(req: TrainRequest, framework: str, zero: int, offload: bool, shape: Shape) -> bool:
    """Whether the search tries HSDP groups beside a fitting fully sharded layout: FSDP at ZeRO-3 without offload, full
    weights (ZeRO-3 LoRA's gather volume is priced as a base all-reduce, not its adapters' replica all-reduce), no
    pinned group and no CP (train_layout.hsdp_groups)."""
    return (
        framework == "fsdp"
        and zero == 3
        and not offload
        and req.method == "full"
        and req.pins.shard_group is None
        and shape.shard is None
        and shape.cp == 1
    )


def _search_hsdp(
    ctx: _Context,
    out: _Collector,
    gpu: GpuSpec,
    per_node: int,
    count: int,
    shape: Shape,
    dp: int,
    mb: int,
    microbatches: int,
    recomputes: list[str],
    usable: int,
) -> None:
    """The HSDP variants of a layout that fits fully sharded at `recomputes[0]` (a shard group holds more per GPU, so
    none fits where full sharding does not, nor with less recompute): groups smallest first (train_layout.hsdp_groups),
    each at the least recompute that fits; a larger group only while the smaller ones needed more recompute than full
    sharding or did not fit, since beyond that it only adds cross-node traffic per micro-batch."""
    req = ctx.req
    for group in hsdp_groups(dp, shape.tp, shape.cp, per_node):
        hybrid = shape._replace(shard=group)
        framework = resolve_framework(req.framework, req.method, shape.tp, shape.pp, 3, False, hybrid, per_node)
        if framework is None or framework[0] != "fsdp":
            continue
        for recompute in recomputes:
            if recompute == "selective" and not selective_offered(req, "fsdp", 3, False, hybrid):
                continue
            out.evaluated += 1
            mem = _memory(ctx, hybrid, dp, 3, False, mb, microbatches, recompute, "fsdp")
            if mem.total > usable:
                continue
            out.feasible.append(
                _fit(ctx, gpu, per_node, count, hybrid, 3, False, mb, recompute, framework, mem, usable)
            )
            if recompute == recomputes[0]:
                return  # as little recompute as full sharding: a larger group would only cross more nodes
            break


def _fsdp_tp_unsharded(req: TrainRequest, shape: Shape, zero: int) -> bool:
    """LoRA with TP/PP on one DP rank: Megatron-LM's arguments train full weights only, so FSDP2 × TP × PP runs it,
    fully_shard over a dp_shard of one (ZeRO-3 that shards nothing: the memory of ZeRO-0)."""
    return zero == 3 and req.method == "lora" and fsdp_tp_runs(req.method, shape.tp, shape.pp, zero, False, shape)


def _ep_options(req: TrainRequest, shape: Shape, recompute: str) -> Shape | None:
    """The shape with its EP all-to-all options: overlap where Megatron-Core allows it unless the plan pins it off
    (it is never slower: train_layout.ep_exposed_seconds), the pinned dispatch dtype; None when a pinned overlap is
    not allowed for this layout and recompute."""
    pins = req.pins
    if shape.ep == 1 and pins.ep_overlap is None and pins.ep_dispatch is None:
        return shape  # nothing to overlap (the common case, kept cheap)
    allowed = req.arch.is_moe and ep_overlap_allowed(shape.ep, shape.pp, shape.vp, recompute)
    if pins.ep_overlap and not allowed:
        return None
    overlap = allowed if pins.ep_overlap is None else pins.ep_overlap
    return shape._replace(ep_overlap=overlap, ep_dispatch=pins.ep_dispatch or "bf16")


def _record_gap(
    ctx: _Context,
    out: _Collector,
    gpu: GpuSpec,
    count: int,
    shape: Shape,
    dp: int,
    zero: int,
    offload: bool,
    mbs: list[int],
    recomputes: list[str],
    usable: int,
    per_node: int,
) -> None:
    """A layout no framework runs: kept (one per reason) with whether it would have fit memory, so that a search
    where only such layouts fit says so instead of "does not fit"."""
    req = ctx.req
    reason = framework_gap(req.framework, req.method, shape.tp, shape.pp, zero, offload, shape, per_node)
    if reason is None or not mbs:
        return
    key = f"{reason.code}:{dict(reason.facts)['layout']}"
    if key in out.gaps and out.gaps[key][1]:
        return
    mb, recompute = mbs[0], recomputes[-1]
    mem = _memory(ctx, shape, dp, zero, offload, mb, req.global_batch_sequences // (mb * dp), recompute, "megatron")
    fits = mem.total <= usable and mem.cpu_offload_bytes <= HOST_MEMORY_BYTES_PER_GPU
    out.gap(key, describe(count, gpu.id, shape.tp, shape.pp, dp, zero, mb, recompute, offload, shape), reason, fits)


def search_training(
    req: TrainRequest, gpus: Mapping[str, GpuSpec], searches: SearchCache | None = None
) -> TrainSearchResult:
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
    if not req.arch.layers and not req.arch.activation_bytes_per_sample and not req.arch.layer_table:
        warnings.append(because("cnn-no-activations"))
    dtype = COMPUTE_DTYPE[req.precision]
    if pins.ep and pins.ep > 1 and not req.arch.is_moe:
        reason = because("ep-needs-moe", ep=pins.ep)
        return TrainSearchResult(None, (), (), 0, reason, None, ())
    cps, eps = cp_choices(req.seq_len, pins.cp) if req.arch.layers else [1], ep_choices(req.arch, pins.ep)
    for gpu_id in req.gpu_ids:
        gpu = gpus[gpu_id]
        if dtype not in gpu.dense_tflops:
            out.other[f"dtype:{gpu_id}"] = Rejection(gpu_id, because("no-tensor-cores-datasheet", dtype=dtype))
            continue
        if gpu.edge or req.pricing not in gpu.price_usd_per_gpu_hour:
            out.other[f"price:{gpu_id}"] = Rejection(
                gpu_id, because("no-price", pricing=req.pricing) if not gpu.edge else because("edge-not-for-training")
            )
            continue
        per_node = req.gpus_per_node or gpu.gpus_per_node
        usable = int(usable_memory_bytes(gpu.memory_bytes) / req.memory_factor)  # the memory margin, as less room
        for count in gpu_counts(req, per_node):
            if count > per_node and count % per_node:  # launchers start the same number of ranks on every node
                out.other[f"nodes:{gpu_id}:{count}"] = Rejection(
                    f"{count} × {gpu_id}", because("nodes-not-filled", gpus=count, per_node=per_node)
                )
                continue
            tps = _tp_choices(req.arch, per_node, count, pins.tp)
            for tp in tps:
                for cp in cps:
                    for pp in _pp_choices(req.arch, tp, max(tps), count // cp, pins.pp):
                        if count % (tp * cp * pp):
                            continue
                        dp = count // (tp * cp * pp)
                        if (pins.dp and dp != pins.dp) or dp > req.global_batch_sequences:
                            continue
                        split = _split(req, pp)
                        if split is None:
                            out.other.setdefault(
                                f"pp:{pp}",
                                Rejection(
                                    f"PP{pp}",
                                    because(
                                        "no-pipeline-split",
                                        pp=pp,
                                        layers=req.arch.layers,
                                        first=pins.pp_first_stage_layers,
                                        last=pins.pp_last_stage_layers,
                                    ),
                                ),
                            )
                            continue
                        for ep in eps:
                            if (dp * cp) % ep:
                                continue  # EP ranks come from the data-parallel ranks
                            vps = _vp_choices(req, split)
                            if not vps:
                                out.other.setdefault(
                                    f"vp:{pp}", Rejection(f"PP{pp}", because("vp-needs-pp", vp=pins.vp))
                                )
                            for vp in vps:
                                shape = Shape(tp, cp, pp, ep, vp, split, _pinned_group(pins, dp * cp))
                                _search_layout(ctx, out, gpu, per_node, count, shape, usable)
    fitting = {(c.gpu_id, c.gpus) for c in out.feasible}
    if not out.feasible:
        closest = min((entry for entry in out.memory.values()), key=lambda e: e[0], default=None)
        fitting_gap = next((r for r, fits in out.gaps.values() if fits), None)
        overlap = next((r for key, r in out.other.items() if key.startswith("a2a:")), None)
        selective = next((r for key, r in out.other.items() if key.startswith(FSDP_SELECTIVE_GAP)), None)
        if overlap is not None and not out.memory:  # the plan pinned an overlap no layout it allows can take
            reason = overlap.reason
        elif selective is not None and not out.memory:  # the plan pinned a selective its framework cannot run
            reason = selective.reason
        elif fitting_gap is not None:
            reason = because("only-unrunnable-fit", rejection=fitting_gap)
        elif out.gaps and not out.memory:  # no layout asked for has a framework path (none checked to fit)
            reason = because("no-runnable-layout", rejection=next(iter(out.gaps.values()))[0])
        elif out.memory or not out.other:
            reason = because("no-fit-memory", closest=closest[1] if closest else None)
        else:
            reason = because("every-gpu-refused", reasons=tuple(r.reason for r in out.other.values()))
        return TrainSearchResult(None, (), out.rejections(fitting, []), out.evaluated, reason, None, ())
    return _choose(ctx, out, fitting, warnings)


def _choose(ctx: _Context, out: _Collector, fitting: set, warnings: list[Reason]) -> TrainSearchResult:
    req, feasible = ctx.req, out.feasible
    pareto = tuple(_candidate(ctx, f) for f in pareto_front(feasible))
    f, q = req.gate_factor, req.gate_quantile
    meets_deadline = [c for c in feasible if not req.deadline_seconds or c.wall_seconds * f <= req.deadline_seconds]
    within = [c for c in meets_deadline if not req.budget_usd or c.cost_usd * f <= req.budget_usd]
    extra: list[Rejection] = []
    if req.deadline_seconds:
        for c in sorted((c for c in feasible if c.wall_seconds * f > req.deadline_seconds), key=_key_cost)[:3]:
            extra.append(
                Rejection(
                    c.description,
                    because(
                        "misses-deadline",
                        wall=c.wall_seconds,
                        gated=c.wall_seconds * f,
                        quantile=q,
                        deadline=req.deadline_seconds,
                    ),
                )
            )
    if req.budget_usd:
        for c in sorted((c for c in meets_deadline if c.cost_usd * f > req.budget_usd), key=_key_time)[:3]:
            extra.append(
                Rejection(
                    c.description,
                    because("over-budget", cost=c.cost_usd, gated=c.cost_usd * f, quantile=q, budget=req.budget_usd),
                )
            )
    rejected = out.rejections(fitting, extra)
    if not within:
        if not meets_deadline:
            fastest = _candidate(ctx, min(feasible, key=_key_time))
            reason = because(
                "deadline-unreachable",
                wall=fastest.wall_seconds,
                gated=fastest.wall_seconds * f,
                quantile=q,
                gpus=fastest.gpus,
                gpu_id=fastest.gpu_id,
                pricing=req.pricing,
                cost=fastest.cost_usd,
                deadline=req.deadline_seconds,
            )
            return TrainSearchResult(None, pareto, rejected, out.evaluated, reason, fastest, ())
        cheapest = _candidate(ctx, min(meets_deadline, key=_key_cost))
        reason = because(
            "over-budget-cheapest",
            cost=cheapest.cost_usd,
            gated=cheapest.cost_usd * f,
            quantile=q,
            budget=req.budget_usd,
            deadline=req.deadline_seconds,
            gpus=cheapest.gpus,
            gpu_id=cheapest.gpu_id,
            pricing=req.pricing,
        )
        return TrainSearchResult(None, pareto, rejected, out.evaluated, reason, cheapest, ())
    chosen = _candidate(ctx, min(within, key=_key_cost if req.optimize == "cost" else _key_time))
    if chosen.network_bound:
        warnings.append(
            because(
                "network-bound",
                share=chosen.step.dp_comm_exposed / chosen.step.total,
                interconnect=req.interconnect.id,
                limit=NETWORK_SHARE_OF_STEP,
                needed=chosen.network_bytes_per_second_needed,
            )
        )
    if chosen.dataset_read_bytes_per_second > req.storage.read_bytes_per_second * chosen.nodes:
        warnings.append(
            because(
                "storage-too-slow",
                read=chosen.dataset_read_bytes_per_second,
                storage=req.storage.id,
                nodes=chosen.nodes,
            )
        )
    return TrainSearchResult(chosen, pareto, rejected, out.evaluated, None, None, tuple(warnings))


def pareto_front(candidates: Sequence[C]) -> tuple[C, ...]:
    """Cost vs wall time: sorted by cost, each entry strictly faster than every cheaper one."""
    front: list[C] = []
    for c in sorted(candidates, key=_key_cost):
        if not front or c.wall_seconds < front[-1].wall_seconds:
            front.append(c)
    return tuple(front)


def evaluate_layout(
    req: TrainRequest,
    gpu: GpuSpec,
    shape: Shape,
    zero: int,
    micro_batch: int,
    recompute: str,
    framework: str,
    offload: bool = False,
) -> TrainCandidate:
    """One fully stated layout, timed and sized without the search's framework gate or memory check (the caller reads
    `memory.total` against `usable_memory_bytes`): how benchmarks/accuracy.py prices a published layout that a
    framework the compiler does not emit ran (NeMo's LoRA with TP/PP, torchtitan's FSDP × TP × PP)."""
    ctx = _context(req)
    per_node = req.gpus_per_node or gpu.gpus_per_node
    count = req.gpu_count or shape.tp * shape.cp * shape.pp
    dp = count // (shape.tp * shape.cp * shape.pp)
    microbatches = req.global_batch_sequences // (micro_batch * dp)
    mem = _memory(ctx, shape, dp, zero, offload, micro_batch, microbatches, recompute, framework)
    fit = _fit(
        ctx,
        gpu,
        per_node,
        count,
        shape,
        zero,
        offload,
        micro_batch,
        recompute,
        (framework, because("framework-pinned")),
        mem,
        usable_memory_bytes(gpu.memory_bytes),
    )
    return _candidate(ctx, fit)


def checkpoint_write_bandwidth(storage, nodes: int) -> float:
    """Bytes/s a checkpoint is written at: every node writes its shard at the per-node client rate, up to the
    filesystem's aggregate ceiling (fabrics.yaml aggregate_write_bytes_per_second, sourced there)."""
    per_nodes = storage.write_bytes_per_second * nodes
    ceiling = storage.aggregate_write_bytes_per_second
    return per_nodes if ceiling is None else min(per_nodes, ceiling)
