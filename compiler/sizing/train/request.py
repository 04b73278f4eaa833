"""What the training search is asked: the plan's pins and the request built from the plan
(passes/training_request.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ...catalog.fabrics import Interconnect, Storage
from ...catalog.params import ParamCounts
from ...catalog.types import Architecture
from .activations import UNSTATED_DROPOUT
from .communication import INTER_NODE_ACHIEVABLE_FRACTION, NVLINK_ACHIEVABLE_FRACTION
from .layout import Links, MemoryOptions, Workload


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
    attention_kernel: str = "flash2"  # time.ATTENTION_KERNELS
    bytes_per_token: float | None = None  # stored bytes per token; None: from the vocabulary (stored_bytes_per_token)
    # deadline and budget are checked with time and cost × this factor on each GPU: the published runs' actual ÷
    # predicted step time at the plan's gate quantile (compiler/catalog/residuals.yaml), re-centred on a GPU a site
    # calibration measured; a GPU not listed: 1.0, the prediction itself
    gate_factors: tuple[tuple[str, float], ...] = ()
    gate_quantile: str = "P50"
    # a layout fits when its predicted memory × this factor fits: measured ÷ predicted peak memory of the method's
    # family at the plan's quantile (residuals.yaml); 1.0 fits the prediction itself
    memory_factor: float = 1.0
    memory: MemoryOptions = field(default_factory=MemoryOptions)  # where frameworks differ (memory.py docstring)
    dropout: float = UNSTATED_DROPOUT  # the recipe's attention and hidden dropout (recipe.decide.decide_dropout)
    # a site calibration file's measured interconnect shares (site_calibration.py): (GPU id, intra-node share) for that
    # GPU's links, and the inter-node share of `interconnect`; None: time.py's published shares
    site_intra_node: tuple[str, float] | None = None
    inter_node_fraction: float | None = None
    # Kubernetes places one trainer pod per node on a catalog node (deployment/pod_price.py): each layout pays the
    # price of the node its pod lands on; elsewhere (Slurm) the GPU's catalog price
    pods_on_catalog_nodes: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.pins, Mapping):  # a plain {"tp": 2, ...} mapping, None values meaning "search"
            object.__setattr__(self, "pins", TrainPins(**{k: v for k, v in self.pins.items() if v is not None}))

    def gate_factor(self, gpu_id: str) -> float:
        """The deadline and budget gate's factor on this GPU (gate_factors)."""
        return dict(self.gate_factors).get(gpu_id, 1.0)

    @cached_property
    def workload(self) -> Workload:
        return Workload(
            self.arch,
            self.params,
            seq_len=self.seq_len,
            global_batch_sequences=self.global_batch_sequences,
            precision=self.precision,
            optimizer=self.optimizer,
            method=self.method,
            lora_rank=self.lora_rank,
            lora_targets=self.lora_targets,
            flash_attention=self.flash_attention,
            attention_kernel=self.attention_kernel,
            memory=self.memory,
            dropout=self.dropout,
        )


def link_fractions(req: TrainRequest, gpu_id: str) -> dict[str, float]:
    """The link shares for one GPU type: the site's measured ones where the request carries them."""
    intra = (
        req.site_intra_node[1]
        if req.site_intra_node and req.site_intra_node[0] == gpu_id
        else NVLINK_ACHIEVABLE_FRACTION
    )
    nic = INTER_NODE_ACHIEVABLE_FRACTION if req.inter_node_fraction is None else req.inter_node_fraction
    return {"nvlink_fraction": intra, "nic_fraction": nic}


def links_for(req: TrainRequest, gpu_id: str, per_node: int) -> Links:
    """The links between the GPUs of a layout of `gpu_id` on the plan's interconnect."""
    fabric = req.interconnect
    return Links(per_node, fabric.bytes_per_second_per_gpu, fabric.latency_seconds, **link_fractions(req, gpu_id))
