"""Target: fsdp/accelerate_config.yaml, an Accelerate (>= 1.x) config for PyTorch FSDP.

Use it with `accelerate launch --config_file fsdp/accelerate_config.yaml`, or read it from a script started
by launch/torchrun.sh ($MLINFRA_ACCELERATE_CONFIG). Keys are those `accelerate config` writes for FSDP1
(accelerate/commands/config/cluster.py); Accelerate refuses unknown top-level keys
(ClusterConfig.from_yaml_file). The sharding strategy sits under `fsdp_reshard_after_forward`, the name
Accelerate uses since it deprecated `fsdp_sharding_strategy` (same values).
"""

from __future__ import annotations

from typing import Mapping

from ..resolved import ResolvedPlan
from .base import OutputFile, Target, dump_yaml_documents

# ZeRO stage → FSDP sharding strategy (PyTorch FSDP docs, ShardingStrategy): FSDP has no
# optimizer-only sharding, so ZeRO-1 maps to SHARD_GRAD_OP like ZeRO-2.
SHARDING_BY_ZERO_STAGE = {0: "NO_SHARD", 1: "SHARD_GRAD_OP", 2: "SHARD_GRAD_OP", 3: "FULL_SHARD"}
# Accelerate's mixed_precision values: "no", "fp16", "bf16", "fp8". fp8 in Accelerate needs a separate
# fp8 backend section; the plan's fp8 runs matmuls in fp8 over bf16 master weights, so bf16 here.
MIXED_PRECISION = {"fp32": "no", "fp16": "fp16", "bf16": "bf16", "fp8": "bf16"}


def applies(plan: ResolvedPlan) -> bool:
    return plan.deployment is not None and plan.deployment.launcher is not None and plan.parallelism.framework == "fsdp"


def sharding_strategy(zero_stage: int) -> str:
    return SHARDING_BY_ZERO_STAGE[zero_stage]


def accelerate_config(plan: ResolvedPlan) -> dict:
    par = plan.parallelism
    return {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "debug": False,
        "fsdp_config": {
            "fsdp_version": 1,
            "fsdp_reshard_after_forward": sharding_strategy(par.zero_stage),
            # wrap each transformer block (the model's _no_split_modules): one all-gather per block
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_forward_prefetch": False,
            "fsdp_offload_params": par.offload_params or par.offload_optimizer,
            "fsdp_activation_checkpointing": par.recompute != "none",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_sync_module_states": True,
            "fsdp_use_orig_params": True,
        },
        "mixed_precision": MIXED_PRECISION[plan.deployment.launcher.precision],
        "num_machines": plan.hardware.nodes,
        "num_processes": plan.deployment.launcher.world_size,
        "machine_rank": 0,
        "rdzv_backend": "c10d",
        "same_network": True,
        "main_training_function": "main",
        "use_cpu": False,
    }


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    return [OutputFile(plan.deployment.files.accelerate_config, dump_yaml_documents([accelerate_config(plan)]))]


TARGET = Target("fsdp", applies, render)
