"""Target: deepspeed/ds_config.json, a dict dumped with sorted keys.

Batch identity (DeepSpeed asserts it in DeepSpeedConfig._batch_assertion):
train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel size.
With TP/PP the data-parallel size comes from the model-parallel unit (mpu) the script passes to
deepspeed.initialize; without one DeepSpeed takes the whole world, so plain runs need TP = PP = 1.

Bucket sizes follow the "auto" rules of the Hugging Face integration, which fills them from the
model's hidden size h (transformers/integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_finalize):
reduce_bucket_size = h², stage3_prefetch_bucket_size = 0.9·h², stage3_param_persistence_threshold = 10·h.
"""

from __future__ import annotations

from typing import Mapping

from ..resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json

# Clip the global gradient norm at 1.0: GPT-3 (Brown et al. 2020, appendix B) and Llama 3
# (Dubey et al. 2024, section 3.4) both train with this value.
GRADIENT_CLIP_NORM = 1.0
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


def applies(plan: ResolvedPlan) -> bool:
    return plan.deployment is not None and plan.deployment.launcher is not None and plan.parallelism.framework == "deepspeed"


def bucket_sizes(hidden: int) -> dict[str, int]:
    """Elements per communication bucket from the hidden size (HF "auto" rules); DeepSpeed's default without one."""
    if hidden <= 0:
        return {"reduce": DEEPSPEED_DEFAULT_BUCKET_ELEMENTS, "allgather": DEEPSPEED_DEFAULT_BUCKET_ELEMENTS,
                "prefetch": DEEPSPEED_DEFAULT_BUCKET_ELEMENTS, "persistence": 0}
    square = hidden * hidden
    return {
        "reduce": square,
        "allgather": square,  # ZeRO-1/2 all-gather of updated partitions: same size as the reduce bucket
        "prefetch": int(PREFETCH_BUCKET_FRACTION * square),
        "persistence": PERSISTENCE_THRESHOLD_PER_HIDDEN * hidden,
    }


def _precision(precision: str) -> dict:
    if precision in ("bf16", "fp8"):  # fp8 matmuls run inside Transformer Engine on top of bf16 weights
        return {"bf16": {"enabled": True}}
    if precision == "fp16":
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": FP16_INITIAL_SCALE_POWER,
                         "loss_scale_window": FP16_LOSS_SCALE_WINDOW, "hysteresis": FP16_HYSTERESIS,
                         "min_loss_scale": FP16_MIN_LOSS_SCALE}}
    return {}


def _zero(plan: ResolvedPlan) -> dict:
    par = plan.parallelism
    stage = par.zero_stage
    zero: dict = {"stage": stage}
    if stage == 0:
        return zero
    buckets = bucket_sizes(plan.model.architecture.hidden if plan.model else 0)
    zero.update({"overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": buckets["reduce"]})
    if stage < 3:
        zero["allgather_bucket_size"] = buckets["allgather"]
    else:
        zero["stage3_prefetch_bucket_size"] = buckets["prefetch"]
        zero["stage3_param_persistence_threshold"] = buckets["persistence"]
    if par.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if par.offload_params and stage == 3:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return zero


def ds_config(plan: ResolvedPlan) -> dict:
    par = plan.parallelism
    config: dict = {
        "train_batch_size": par.micro_batch * par.grad_accum * par.dp,
        "train_micro_batch_size_per_gpu": par.micro_batch,
        "gradient_accumulation_steps": par.grad_accum,
        "gradient_clipping": GRADIENT_CLIP_NORM,
        "zero_optimization": _zero(plan),
        "wall_clock_breakdown": False,
        **_precision(plan.deployment.launcher.precision),
    }
    if par.recompute != "none":
        # Used by models that checkpoint through deepspeed.checkpointing (Megatron-DeepSpeed); splitting
        # the saved activations only helps when tensor parallelism replicates them.
        config["activation_checkpointing"] = {
            "partition_activations": par.tp > 1, "contiguous_memory_optimization": False,
            "cpu_checkpointing": False, "synchronize_checkpoint_boundary": False, "profile": False,
        }
    return config


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    return [OutputFile(plan.deployment.files.ds_config, dump_json(ds_config(plan)))]


TARGET = Target("deepspeed", applies, render)
