"""The framework files a compile writes, typed: deepspeed/ds_config.json (DeepSpeed), fsdp/accelerate_config.yaml
(Accelerate's FSDP1 plugin) and fsdp/fsdp_tp.json (the FSDP2 × TP × PP script). The values are decided in
compiler/deployment/frameworks.py and fsdp_tp.py; the targets write `as_written()`, plan.json carries the same under
deployment.frameworks.

Field names are the keys of the files (DeepSpeed's config documentation, the keys `accelerate config` writes in
accelerate/commands/config/cluster.py, the keys fsdp/fsdp_tp.py reads). An optional key the decision leaves out is
None here and absent from the file and from plan.json.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class FileSection(BaseModel):
    """A mapping of a framework file: unknown keys refused, None-valued keys left out when dumped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler):
        return {key: value for key, value in handler(self).items() if value is not None}

    def as_written(self) -> dict[str, Any]:
        """The mapping the file holds (JSON types, keys in field order)."""
        return self.model_dump(mode="json", by_alias=True)


# --- deepspeed/ds_config.json ---------------------------------------------------------------------------------------


class Offload(FileSection):
    device: Literal["cpu", "nvme"]
    pin_memory: bool = Field(description="page-locked host buffers")


class ZeroOptimization(FileSection):
    stage: int = Field(ge=0, le=3, description="0 off; 1 optimizer states, 2 and gradients, 3 and parameters sharded")
    overlap_comm: bool | None = None
    contiguous_gradients: bool | None = None
    reduce_bucket_size: int | None = Field(None, description="elements per gradient reduce bucket")
    allgather_bucket_size: int | None = Field(None, description="ZeRO-1/2: elements per all-gather bucket")
    stage3_prefetch_bucket_size: int | None = Field(None, description="ZeRO-3: elements prefetched ahead")
    stage3_param_persistence_threshold: int | None = Field(
        None, description="ZeRO-3: parameters at or below this many elements stay unsharded"
    )
    offload_optimizer: Offload | None = None
    offload_param: Offload | None = Field(None, description="ZeRO-3 only")


class AdamWParams(FileSection):
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float


class DeepSpeedOptimizer(FileSection):
    type: Literal["AdamW"]
    params: AdamWParams


class WarmupParams(FileSection):
    warmup_num_steps: int = Field(ge=1)
    warmup_type: Literal["linear", "log"]


class WarmupLRParams(WarmupParams):
    warmup_min_lr: float
    warmup_max_lr: float


class WarmupDecayLRParams(WarmupLRParams):
    total_num_steps: int


class WarmupCosineLRParams(WarmupParams):
    total_num_steps: int
    warmup_min_ratio: float
    cos_min_ratio: float = Field(description="final learning rate / peak")


class WarmupLR(FileSection):
    type: Literal["WarmupLR"]
    params: WarmupLRParams


class WarmupDecayLR(FileSection):
    type: Literal["WarmupDecayLR"]
    params: WarmupDecayLRParams


class WarmupCosineLR(FileSection):
    type: Literal["WarmupCosineLR"]
    params: WarmupCosineLRParams


DeepSpeedScheduler = Annotated[WarmupLR | WarmupDecayLR | WarmupCosineLR, Field(discriminator="type")]


class Bf16(FileSection):
    enabled: bool


class Fp16(FileSection):
    enabled: bool
    loss_scale: int = Field(description="0: dynamic loss scaling")
    initial_scale_power: int = Field(description="dynamic scaling starts at 2^this")
    loss_scale_window: int = Field(description="clean steps before the scale doubles")
    hysteresis: int
    min_loss_scale: int


class ActivationCheckpointing(FileSection):
    """deepspeed.checkpointing (Megatron-DeepSpeed's activation checkpointing)."""

    partition_activations: bool
    contiguous_memory_optimization: bool
    cpu_checkpointing: bool
    synchronize_checkpoint_boundary: bool
    profile: bool


class DeepSpeedConfig(FileSection):
    """deepspeed/ds_config.json."""

    train_batch_size: int = Field(description="micro batch × gradient accumulation × data-parallel size")
    train_micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    gradient_clipping: float
    optimizer: DeepSpeedOptimizer | None = Field(None, description="absent: the script builds its optimizer")
    scheduler: DeepSpeedScheduler | None = Field(None, description="absent: the script or the Trainer schedules")
    zero_optimization: ZeroOptimization
    wall_clock_breakdown: bool
    bf16: Bf16 | None = None
    fp16: Fp16 | None = None
    activation_checkpointing: ActivationCheckpointing | None = Field(None, description="absent without recompute")


# --- fsdp/accelerate_config.yaml ------------------------------------------------------------------------------------

ShardingStrategy = Literal["NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"]


class AccelerateFsdpConfig(FileSection):
    """The fsdp_config block (FSDP1 plugin)."""

    fsdp_version: Literal[1]
    fsdp_sharding_strategy: ShardingStrategy
    fsdp_reshard_after_forward: ShardingStrategy = Field(description="FSDP1: the same strategy again")
    fsdp_auto_wrap_policy: Literal["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"]
    fsdp_backward_prefetch: Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"]
    fsdp_forward_prefetch: bool
    fsdp_offload_params: bool
    fsdp_activation_checkpointing: bool
    fsdp_state_dict_type: Literal["FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"]
    fsdp_cpu_ram_efficient_loading: bool
    fsdp_sync_module_states: bool
    fsdp_use_orig_params: bool


class AccelerateConfig(FileSection):
    """fsdp/accelerate_config.yaml (keys in the order written)."""

    compute_environment: Literal["LOCAL_MACHINE"]
    distributed_type: Literal["FSDP"]
    debug: bool
    fsdp_config: AccelerateFsdpConfig
    mixed_precision: Literal["no", "fp16", "bf16", "fp8"]
    num_machines: int
    num_processes: int = Field(description="world size")
    machine_rank: int
    rdzv_backend: str
    same_network: bool
    main_training_function: str
    use_cpu: bool


# --- fsdp/fsdp_tp.json ----------------------------------------------------------------------------------------------

MeshDim = Literal["pp", "dp_replicate", "dp_shard", "cp", "tp"]


class LoraTp(FileSection):
    """The "lora" block: adapters sharded as their base layers (fsdp/lora_tp.py)."""

    rank: int
    alpha: int | float = Field(description="train.lora.alpha as given")
    scaling: float = Field(description="alpha / rank")
    dropout: float
    modules: dict[str, str] = Field(description="adapted module → its base layer's TP style")
    placements: dict[str, tuple[str, str]] = Field(description="adapted module → (lora_A, lora_B) placement over TP")


class FsdpTpSettings(FileSection):
    """fsdp/fsdp_tp.json: what fsdp/fsdp_tp.py applies."""

    mesh_dim_names: list[MeshDim] = Field(description="DeviceMesh dims, outermost first")
    mesh_shape: list[int]
    fsdp_mesh_dims: list[str] = Field(description="the dims fully_shard shards over")
    flatten_mesh_dims: dict[str, list[str]] = Field(description="flattened dim → the dims it joins (CP)")
    data_parallel_mesh_dims: list[str] = Field(description="the dims that index the sequences a rank reads")
    world_size: int
    block_tp_plan: dict[str, str] = Field(description="module of a block → TP style ({} without TP)")
    model_tp_plan: dict[str, str] = Field(description="module outside the blocks → TP style ({} without TP)")
    sequence_parallel: bool
    loss_parallel: bool
    reshard_after_forward: bool
    param_dtype: Literal["bfloat16", "float16", "float32"]
    reduce_dtype: Literal["bfloat16", "float16", "float32"]
    activation_checkpoint: Literal["none", "full", "selective-op"]
    activation_checkpoint_save_ops: list[str] | None = Field(None, description="selective-op: ops whose outputs stay")
    activation_checkpoint_mm_recompute_every: int | None = Field(None, description="selective-op: every n-th mm")
    micro_batch: int
    grad_accum: int
    seq_len: int
    pp: int | None = Field(None, description="PP > 1 only")
    vp: int | None = Field(None, description="stages per PP rank")
    pipeline_schedule: Literal["1F1B", "Interleaved1F1B"] | None = None
    pipeline_microbatches: int | None = None
    pp_stage_layers: list[int] | None = Field(None, description="layers per PP rank")
    stage_layers: list[int] | None = Field(None, description="layers per stage, pp·vp stages")
    stage_modules: list[list[str]] | None = None
    cp: int | None = Field(None, description="CP > 1 only")
    context_parallel: Literal["allgather-kv"] | None = None
    cp_rank_chunks: list[list[int]] | None = Field(None, description="the sequence chunks each CP rank keeps")
    lora: LoraTp | None = None
