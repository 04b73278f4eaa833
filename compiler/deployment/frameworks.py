"""Framework configuration decisions: the DeepSpeed config, the Accelerate (FSDP) config and the Megatron-LM
arguments, built from the sized parallelism and the plan's precision. Moved here from the deepspeed, fsdp and
megatron targets, which now only write them out (`plan.deployment.frameworks`).

DeepSpeed batch identity (DeepSpeedConfig._batch_assertion): train_batch_size = train_micro_batch_size_per_gpu ×
gradient_accumulation_steps × data-parallel size. Bucket sizes follow the "auto" rules of the Hugging Face
integration, which fills them from the model's hidden size h (transformers/integrations/deepspeed.py,
HfTrainerDeepSpeedConfig.trainer_config_finalize): reduce_bucket_size = h², stage3_prefetch_bucket_size = 0.9·h²,
stage3_param_persistence_threshold = 10·h. Accelerate keys are those `accelerate config` writes for FSDP1
(accelerate/commands/config/cluster.py). Megatron flag names are Megatron-LM's (megatron/training/arguments.py).
"""

from __future__ import annotations

from ..plan.deployment_fields import DeploymentDecision
from ..plan.deployment_training import Checkpoint, Frameworks
from ..plan.framework_configs import (
    AccelerateConfig,
    AccelerateFsdpConfig,
    ActivationCheckpointing,
    Bf16,
    DeepSpeedConfig,
    Fp16,
    FsdpTpSettings,
    Offload,
    ZeroOptimization,
)
from ..plan.resolved import ResolvedPlan
from ..plan.spec import PlanSpec
from . import megatron_launch
from .fsdp_tp import describe as describe_fsdp_tp
from .fsdp_tp import describe_context_parallel, describe_hsdp, describe_sequence_parallel, uses_fsdp_tp
from .fsdp_tp import settings as fsdp_tp_settings
from .lora_tp import describe as describe_lora_tp
from .megatron_args import megatron_versioned, uses_megatron
from .recipe_flags import deepspeed_optimizer, deepspeed_scheduler

# DeepSpeed's own bucket default (elements), used when the model has no hidden size (CNNs):
# deepspeed/runtime/zero/config.py ZERO_REDUCE_BUCKET_SIZE / allgather_bucket_size default 5e8.
DEEPSPEED_DEFAULT_BUCKET_ELEMENTS = 500_000_000
# HF "auto" rule factors (see module docstring).
PREFETCH_BUCKET_FRACTION = 0.9
PERSISTENCE_THRESHOLD_PER_HIDDEN = 10
# fp16 dynamic loss scaling: loss_scale 0 = dynamic; start at 2^16, halve on overflow, double after
# 1000 clean steps (DeepSpeed config docs, "fp16 training options" defaults written out).
FP16_INITIAL_SCALE_POWER = 16
FP16_LOSS_SCALE_WINDOW = 1000
FP16_HYSTERESIS = 2
FP16_MIN_LOSS_SCALE = 1


def bucket_sizes(hidden: int) -> dict[str, int]:
    """Elements per communication bucket from the hidden size (HF "auto" rules); DeepSpeed's default without one."""
    if hidden <= 0:
        return {
            "reduce": DEEPSPEED_DEFAULT_BUCKET_ELEMENTS,
            "allgather": DEEPSPEED_DEFAULT_BUCKET_ELEMENTS,
            "prefetch": DEEPSPEED_DEFAULT_BUCKET_ELEMENTS,
            "persistence": 0,
        }
    square = hidden * hidden
    return {
        "reduce": square,
        "allgather": square,  # ZeRO-1/2 all-gather of updated partitions: same size as the reduce bucket
        "prefetch": int(PREFETCH_BUCKET_FRACTION * square),
        "persistence": PERSISTENCE_THRESHOLD_PER_HIDDEN * hidden,
    }


def _precision(precision: str) -> dict[str, Bf16 | Fp16]:
    """The bf16 or fp16 block (ds_config key → block); none for fp32."""
    if precision in ("bf16", "fp8"):  # fp8 matmuls run inside Transformer Engine on top of bf16 weights
        return {"bf16": Bf16(enabled=True)}
    if precision == "fp16":
        fp16 = Fp16(
            enabled=True,
            loss_scale=0,
            initial_scale_power=FP16_INITIAL_SCALE_POWER,
            loss_scale_window=FP16_LOSS_SCALE_WINDOW,
            hysteresis=FP16_HYSTERESIS,
            min_loss_scale=FP16_MIN_LOSS_SCALE,
        )
        return {"fp16": fp16}
    return {}


def _zero(plan: ResolvedPlan) -> ZeroOptimization:
    par = plan.parallelism
    stage = par.zero_stage
    if stage == 0:
        return ZeroOptimization(stage=0)
    buckets = bucket_sizes(plan.model.architecture.hidden if plan.model else 0)
    offload = Offload(device="cpu", pin_memory=True)
    return ZeroOptimization(
        stage=stage,
        overlap_comm=True,
        contiguous_gradients=True,
        reduce_bucket_size=buckets["reduce"],
        allgather_bucket_size=buckets["allgather"] if stage < 3 else None,
        stage3_prefetch_bucket_size=buckets["prefetch"] if stage == 3 else None,
        stage3_param_persistence_threshold=buckets["persistence"] if stage == 3 else None,
        offload_optimizer=offload if par.offload_optimizer else None,
        offload_param=offload if par.offload_params and stage == 3 else None,
    )


def ds_config(plan: ResolvedPlan) -> DeepSpeedConfig:
    par = plan.parallelism
    checkpointing = None
    if par.recompute != "none":
        # Used by models that checkpoint through deepspeed.checkpointing (Megatron-DeepSpeed); splitting
        # the saved activations only helps when tensor parallelism replicates them.
        checkpointing = ActivationCheckpointing(
            partition_activations=par.tp > 1,
            contiguous_memory_optimization=False,
            cpu_checkpointing=False,
            synchronize_checkpoint_boundary=False,
            profile=False,
        )
    return DeepSpeedConfig(
        train_batch_size=par.micro_batch * par.grad_accum * par.dp,
        train_micro_batch_size_per_gpu=par.micro_batch,
        gradient_accumulation_steps=par.grad_accum,
        gradient_clipping=plan.recipe.grad_clip_norm,
        optimizer=deepspeed_optimizer(plan.recipe),
        # the hf-trainer kind schedules with the Trainer's own scheduler (its flags), beside DeepSpeed's optimizer
        scheduler=deepspeed_scheduler(plan.recipe) if plan.spec.train.entrypoint.kind != "hf-trainer" else None,
        zero_optimization=_zero(plan),
        wall_clock_breakdown=False,
        activation_checkpointing=checkpointing,
        **_precision(plan.spec.precision),
    )


# ZeRO stage → FSDP sharding strategy (PyTorch FSDP docs, ShardingStrategy): FSDP has no
# optimizer-only sharding, so ZeRO-1 maps to SHARD_GRAD_OP like ZeRO-2.
SHARDING_BY_ZERO_STAGE = {0: "NO_SHARD", 1: "SHARD_GRAD_OP", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
# Accelerate's mixed_precision values: "no", "fp16", "bf16", "fp8". fp8 in Accelerate needs a separate
# fp8 backend section; the plan's fp8 runs matmuls in fp8 over bf16 master weights, so bf16 here.
MIXED_PRECISION = {"fp32": "no", "fp16": "fp16", "bf16": "bf16", "fp8": "bf16"}


def sharding_strategy(zero_stage: int) -> str:
    return SHARDING_BY_ZERO_STAGE[zero_stage]


def fsdp1_strategy(zero_stage: int, hybrid: bool, reshard_after_forward: bool) -> str:
    """FSDP1 sharding strategy (accelerate's fsdp_sharding_strategy for fsdp_version 1). train.reshard_after_forward
    false keeps the gathered weights from the forward to the backward, as the memory sizing counts them: FSDP2's
    reshard_after_forward=False, FSDP1's SHARD_GRAD_OP (fully_shard docs: "this corresponds to ... SHARD_GRAD_OP"),
    and HYBRID_SHARD_ZERO2 inside HSDP (accelerate's FSDP_SHARDING_STRATEGY names)."""
    keep_gathered = zero_stage >= 3 and not reshard_after_forward
    if hybrid:
        return "HYBRID_SHARD_ZERO2" if keep_gathered else "HYBRID_SHARD"
    return "SHARD_GRAD_OP" if keep_gathered else sharding_strategy(zero_stage)


def accelerate_config(plan: ResolvedPlan) -> AccelerateConfig:
    par = plan.parallelism
    strategy = fsdp1_strategy(par.zero_stage, bool(par.shard_group_gpus), plan.spec.train.reshard_after_forward)
    fsdp = AccelerateFsdpConfig(
        fsdp_version=1,
        # HSDP: shard inside a node, replicate across nodes (FSDP ShardingStrategy.HYBRID_SHARD). Both keys: accelerate
        # 1.15 launch always exports FSDP_SHARDING_STRATEGY (its --fsdp_sharding_strategy defaults to FULL_SHARD) and
        # its FSDP1 plugin prefers it to FSDP_RESHARD_AFTER_FORWARD, so the strategy in the second key alone is ignored
        # (found by the real FSDP step in tests/test_launch_real.py); the second is what `accelerate config` writes.
        fsdp_sharding_strategy=strategy,
        fsdp_reshard_after_forward=strategy,
        # wrap each transformer block (the model's _no_split_modules): one all-gather per block
        fsdp_auto_wrap_policy="TRANSFORMER_BASED_WRAP",
        fsdp_backward_prefetch="BACKWARD_PRE",
        fsdp_forward_prefetch=False,
        fsdp_offload_params=par.offload_params or par.offload_optimizer,
        fsdp_activation_checkpointing=par.recompute != "none",
        fsdp_state_dict_type="SHARDED_STATE_DICT",
        fsdp_cpu_ram_efficient_loading=True,
        fsdp_sync_module_states=True,
        # QLoRA: false, as PEFT's "Use PEFT QLoRA and FSDP" sets it (the frozen NF4 base holds no gradients; the
        # script wraps with PEFT's fsdp_auto_wrap_policy, launcher.lora.quant_storage_reason)
        fsdp_use_orig_params=plan.spec.train.method != "qlora",
    )
    return AccelerateConfig(
        compute_environment="LOCAL_MACHINE",
        distributed_type="FSDP",
        debug=False,
        fsdp_config=fsdp,
        mixed_precision=MIXED_PRECISION[plan.spec.precision],
        num_machines=plan.hardware.nodes,
        num_processes=plan.hardware.nodes * plan.hardware.gpus_per_node,
        machine_rank=0,
        rdzv_backend="c10d",
        same_network=True,
        main_training_function="main",
        use_cpu=False,
    )


def frameworks(plan: ResolvedPlan, checkpoint: Checkpoint, spec: PlanSpec, kind: str = "") -> Frameworks:
    """kind: the launch kind (megatron: torchrun starts Megatron-LM's own script with args.sh)."""
    framework, tensor_parallel = plan.parallelism.framework, uses_fsdp_tp(plan)
    args, target = megatron_versioned(plan, checkpoint, spec, kind) if uses_megatron(plan) else (None, None)
    return Frameworks(
        deepspeed_config=ds_config(plan) if framework == "deepspeed" else None,
        accelerate_config=accelerate_config(plan) if framework == "fsdp" and not tensor_parallel else None,
        fsdp_tp=fsdp_tp_settings(plan, spec) if tensor_parallel else None,
        megatron_args=args,
        megatron=target,
    )


def decisions(files: Frameworks) -> list[DeploymentDecision]:
    """The FSDP2 × TP mesh, when the layout runs on it, and the Megatron-LM release (the other frameworks' files speak
    for themselves)."""
    if files.megatron is not None:
        return megatron_launch.decisions(files.megatron)
    if files.fsdp_tp is None:
        return []
    return (
        [
            DeploymentDecision(
                topic="FSDP × TP mesh",
                choice=describe_fsdp_tp(files.fsdp_tp),
                reason=_mesh_reason(files.fsdp_tp) + "; fsdp/fsdp_tp.py applies fsdp/fsdp_tp.json",
            )
        ]
        + _sequence_parallel(files.fsdp_tp)
        + _context_parallel(files.fsdp_tp)
        + _hsdp_decision(files.fsdp_tp)
        + _lora_tp_decision(files)
    )


def _mesh_reason(settings: FsdpTpSettings) -> str:
    """Why the layout runs on the FSDP2 script (compiler/deployment/fsdp_tp.py uses_fsdp_tp)."""
    if settings.pp is not None:
        return (
            "TP/PP at ZeRO-3: torchtitan's FSDP2 × TP × PP composition, PP outermost, TP innermost so its ranks share "
            "a node; the pipeline schedule runs the decided stages with the plan's gradient accumulation as "
            "micro-batches, its bubble (p−1)/(v·m) as sized"
        )
    if settings.mesh_shape[-1] > 1:
        return "TP at ZeRO-3: torchtitan's FSDP2 × TP composition, TP innermost so its ranks share a node"
    if settings.cp is not None:
        return "CP at ZeRO-3: FSDP2 over dp_shard × cp, the attention's K/V all-gathered over the CP ranks"
    if settings.activation_checkpoint == "selective-op":
        return (
            "selective recompute under FSDP: torchtitan's op-level selective AC, which Accelerate's FSDP1 plugin "
            "cannot apply, on FSDP2's fully_shard over a 1-D mesh as torchtitan runs it"
        )
    return (
        "an HSDP shard group other than one node: Accelerate's FSDP1 HYBRID_SHARD shards within a node only, FSDP2's "
        "fully_shard takes any [dp_replicate, dp_shard] mesh"
    )


def _hsdp_decision(settings: FsdpTpSettings) -> list[DeploymentDecision]:
    described = describe_hsdp(settings)
    return [DeploymentDecision(topic="FSDP HSDP groups", choice=described[0], reason=described[1])] if described else []


def _context_parallel(settings: FsdpTpSettings) -> list[DeploymentDecision]:
    if settings.cp is None:
        return []
    choice, reason = describe_context_parallel(settings)
    return [DeploymentDecision(topic="FSDP × CP attention", choice=choice, reason=reason)]


def _sequence_parallel(settings: FsdpTpSettings) -> list[DeploymentDecision]:
    if settings.mesh_shape[-1] == 1:  # PP alone: no TP to run it with
        return []
    choice, reason = describe_sequence_parallel(settings)
    return [DeploymentDecision(topic="FSDP × TP sequence parallelism", choice=choice, reason=reason)]


def _lora_tp_decision(files: Frameworks) -> list[DeploymentDecision]:
    if files.fsdp_tp.lora is None:
        return []
    return [
        DeploymentDecision(
            topic="LoRA × TP adapters",
            choice=describe_lora_tp(files.fsdp_tp.lora),
            reason="train.lora; sharded as PEFT's LoraParallelLinear shards Megatron's layers (column-"
            "parallel base: A whole, B split on its output; row-parallel: A split on its input, "
            "B whole, the rank-wide product summed over TP); dropout PEFT's default 0.0; "
            "fsdp/lora_tp.py applies it",
        )
    ]
