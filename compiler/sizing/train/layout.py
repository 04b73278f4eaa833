"""The three values every training sizing function reads: the `Workload` (model and what is trained), the `Layout`
(how it is split over GPUs, and the framework that runs it) and the `Links` (the bandwidths between those GPUs).

A layout is decided once by the search (search.py) and carried whole: memory (memory.py), step time (time.py), the
framework rules (frameworks.py), the description in REPORT.md and plan.json's `parallelism` section all read this
one value."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...catalog.params import ParamCounts
from ...catalog.types import Architecture
from .activations import UNSTATED_DROPOUT
from .parallel import is_even

# The frameworks whose launch trains the architecture's multi-token-prediction modules: megatron/args.sh passes
# --mtp-num-layers architecture.mtp_layers (deployment/megatron_arch.mtp_args) and Megatron-LM builds them on the
# last pipeline stage (megatron/core/transformer/multi_token_prediction.py `mtp_on_this_rank`: without a custom
# pipeline layout "all of MTP layers on the last pipeline stage"). DeepSpeed, FSDP and DDP run the plan's own script,
# which the compiler does not build, so MTP stays out of their sizing.
MTP_FRAMEWORKS = ("megatron",)


@dataclass(frozen=True)
class MemoryOptions:
    """Where frameworks differ (memory.py docstring); each default is Megatron-LM's / DeepSpeed's / FSDP's."""

    master_weights: str = "fp32"  # fp32 | none (pure 16-bit, torchtune's default)
    loss: str = "standard"  # standard | chunked | fused (resolve "auto" with `loss_for`)
    eager_loss: bool = (
        False  # the script's loss is PyTorch's eager one whatever the framework (EAGER_LOSS_LAUNCH_KINDS)
    )
    optimizer_in_backward: bool = False
    activation_offload: bool = False
    reshard_after_forward: bool = True
    expandable_segments: bool = False
    bf16_gradients: bool = False  # Megatron-LM's --grad-reduce-in-bf16 (model_states.gradient_bytes_per_param)
    fp32_gradient_copy: bool = True  # its optimizer's fp32 copy of the owned gradients (model_states, above)


@dataclass(frozen=True)
class Workload:
    """The model and what is trained: everything memory and step time read that no layout changes."""

    arch: Architecture
    params: ParamCounts
    seq_len: int = 2048
    global_batch_sequences: int = 1
    precision: str = "bf16"
    optimizer: str = "adamw"
    method: str = "full"  # full | lora | qlora
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("q", "k", "v", "o")
    flash_attention: bool = True
    attention_kernel: str = "flash2"  # time.ATTENTION_KERNELS
    memory: MemoryOptions = field(default_factory=MemoryOptions)  # where frameworks differ (memory.py docstring)
    # attention and hidden dropout: the recipe's (recipe.decide.decide_dropout); > 0 keeps the masks (activations.py)
    dropout: float = UNSTATED_DROPOUT


@dataclass(frozen=True)
class Layout:
    """One training layout: the parallel degrees, the ZeRO stage and shard group, the micro-batch, recompute and
    offload, the layers of each pipeline stage, and the framework that runs it ("" until the search decides it).

    GPUs = TP × CP × PP × DP; EP is taken from the DP·CP ranks; VP model chunks per pipeline rank."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1
    stage_layers: tuple[int, ...] = ()  # layers of each pipeline stage, first to last; () where not split
    shard_group: int | None = None  # HSDP: data-parallel ranks of one ZeRO-3 shard group; None: all DP·CP ranks
    zero: int = 0
    micro_batch: int = 1
    recompute: str = "none"  # none | selective | full (memory.recompute_kind: what "selective" runs as)
    offload: bool = False  # the optimizer states and the gradient partition on the host (ZeRO-Offload)
    offload_params: bool = False  # the parameters on the host too (ZeRO-3; the search offloads both together)
    ep_overlap: bool = False  # EP all-to-alls overlapped with another micro-batch's compute (parallel.py)
    ep_dispatch: str = "bf16"  # the all-to-alls' dispatch dtype (parallel.ep_all_to_all_bytes_per_layer)
    framework: str = ""
    sequence_parallel: bool = False  # frameworks.sequence_parallel, set with the framework

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def data_ranks(self) -> int:
        """The ranks that reduce gradients together: DP and CP (parallel.py docstring)."""
        return self.dp * self.cp

    @property
    def uneven(self) -> bool:
        return len(self.stage_layers) > 1 and not is_even(self.stage_layers)

    def microbatches(self, workload: Workload) -> int:
        """Micro-batches per step (gradient accumulation): global batch = micro-batch × accumulation × DP."""
        return workload.global_batch_sequences // (self.micro_batch * self.dp)

    def mtp_layers(self, workload: Workload) -> int:
        """Multi-token-prediction modules this layout trains on its last stage (MTP_FRAMEWORKS; full weights)."""
        trained = self.framework in MTP_FRAMEWORKS and workload.method == "full"
        return workload.arch.mtp_layers if trained and workload.arch.layers else 0

    def with_changes(self, **changes) -> Layout:
        return replace(self, **changes)


@dataclass(frozen=True)
class Links:
    """The links between a layout's GPUs: the node size, the inter-node fabric per GPU, and the achieved shares of the
    intra-node link and the NICs (published, or a site calibration's measured ones)."""

    gpus_per_node: int
    inter_node_bytes_per_second: float
    inter_node_latency_seconds: float
    nvlink_fraction: float  # time.NVLINK_ACHIEVABLE_FRACTION where no site measured it
    nic_fraction: float  # time.INTER_NODE_ACHIEVABLE_FRACTION where no site measured it


def describe(gpu_id: str, layout: Layout) -> str:
    """`8 × h100 TP2 PP2 DP2 ZeRO-1 mb1 none`; CP, EP, VP, an uneven split ([first/middle/last] layers) and an HSDP
    shard group only when used."""
    lay = layout
    extra = f" CP{lay.cp}" if lay.cp > 1 else ""
    extra += f" EP{lay.ep}" if lay.ep > 1 else ""
    extra += f" VP{lay.vp}" if lay.vp > 1 else ""
    if lay.uneven:
        split = lay.stage_layers
        middle = sorted(set(split[1:-1]))
        extra += (
            f" [{split[0]}/{middle[0]}/{split[-1]}]" if len(middle) == 1 else " [" + "/".join(map(str, split)) + "]"
        )
    extra += f" HSDP{lay.shard_group}" if lay.shard_group else ""
    extra += " A2A-overlap" if lay.ep_overlap else ""
    extra += " FP8-dispatch" if lay.ep_dispatch == "fp8" else ""
    offload = " offload" if lay.offload else ""
    return (
        f"{lay.gpus} × {gpu_id} TP{lay.tp} PP{lay.pp} DP{lay.dp} ZeRO-{lay.zero} mb{lay.micro_batch} "
        f"{lay.recompute}{offload}{extra}"
    )
