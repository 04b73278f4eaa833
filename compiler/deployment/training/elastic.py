"""Spot capacity: the node range torchrun may restart on, and why a launch restarts only at its full size."""

from __future__ import annotations

import math

from ...plan.resolved import ResolvedPlan
from ..fsdp_tp import uses_fsdp_tp

# Spot pricing makes the job elastic: torchrun keeps running while at least this share of the
# planned nodes is alive (a policy choice: below half the throughput the deadline is lost anyway).
SPOT_MIN_NODE_FRACTION = 0.5
# Restarts torchrun may do per job on spot capacity (each reloads the last checkpoint); on
# on-demand/reserved capacity a failure ends the job and Slurm/Kubernetes requeue it instead.
SPOT_MAX_RESTARTS = 10


def nnodes_range(plan: ResolvedPlan, elastic: bool) -> tuple[int, int]:
    """(minimum, maximum) nodes: N:N, or on spot capacity MIN:N, where every count from MIN to N keeps whole model
    replicas (TP×CP×PP GPUs each) and the global batch a whole number of micro-batches per data-parallel rank: torchrun's
    elastic rendezvous restarts on any count in the range, and Megatron-LM (validate_args: world size % model-parallel
    size, global batch % (micro-batch × DP)) and the plain-script contract (MLINFRA_GLOBAL_BATCH kept by scaling the
    accumulation) need both. N:N when no smaller count qualifies."""
    nodes = plan.hardware.nodes
    if not elastic:
        return nodes, nodes
    fits = [_restartable(plan, n) for n in range(nodes + 1)]
    minimum = nodes
    while minimum > max(1, math.ceil(nodes * SPOT_MIN_NODE_FRACTION)) and fits[minimum - 1]:
        minimum -= 1
    return minimum, nodes


def _restartable(plan: ResolvedPlan, nodes: int) -> bool:
    """A layout runs on `nodes` nodes with the plan's model parallelism and global batch."""
    par = plan.parallelism
    replica_gpus = par.tp * par.cp * par.pp
    gpus = nodes * plan.hardware.gpus_per_node
    if nodes < 1 or gpus % replica_gpus:
        return False
    return par.global_batch % (par.micro_batch * (gpus // replica_gpus)) == 0


# Why a spot job restarts only at its full size, per launch: the program (or its config) fixes the world size.
FIXED_SIZE_REASONS = {
    "accelerate": "accelerate launch takes a fixed --num_machines (it sets torchrun's --nnodes to it, accelerate 1.15 "
    "utils/launch.py prepare_multi_gpu_env; no node range)",
    "fsdp_tp": "fsdp/fsdp_tp.py builds the decided mesh and stops at another world size (its step splits the decided "
    "per-rank batch, and a smaller DeviceMesh would change the global batch the plan was sized for)",
    "deepspeed": "deepspeed/ds_config.json fixes train_batch_size = micro-batch × accumulation × DP, which DeepSpeed "
    "asserts at start (DeepSpeedConfig._batch_assertion): fewer ranks stop the job",
    "hf-trainer": "the Trainer's --per_device_train_batch_size and --gradient_accumulation_steps are fixed: fewer ranks "
    "would train a smaller global batch than sized",
}


def restart_policy(plan: ResolvedPlan, kind: str, elastic: bool) -> tuple[bool, str]:
    """(node range or not, why) for a spot job: a range only where what runs re-derives its data parallelism from the
    live world size and keeps the global batch: Megatron-LM (DP = world / model-parallel size, micro-batches per step
    = global batch / (micro × DP); its default torch_dist checkpoints reshard over DP on load) and a plain torchrun
    script (the launch contract: MLINFRA_GLOBAL_BATCH kept by scaling the accumulation)."""
    if not elastic:
        return False, "fixed node count; the scheduler requeues a failed job"
    if kind == "accelerate":
        fixed = FIXED_SIZE_REASONS["accelerate"]
    elif uses_fsdp_tp(plan):
        fixed = FIXED_SIZE_REASONS["fsdp_tp"]
    elif plan.parallelism.framework == "deepspeed":
        fixed = FIXED_SIZE_REASONS["deepspeed"]
    elif kind == "hf-trainer":
        fixed = FIXED_SIZE_REASONS["hf-trainer"]
    elif (minimum := nnodes_range(plan, True)[0]) < plan.hardware.nodes:
        return True, (
            f"spot capacity: torchrun restarts on {minimum} to {plan.hardware.nodes} nodes, up to "
            f"{SPOT_MAX_RESTARTS} times from the last checkpoint; "
            + (
                "Megatron-LM re-derives DP from the world size and keeps the global batch"
                if kind == "megatron" or plan.parallelism.framework == "megatron"
                else "the script keeps the global batch ($MLINFRA_GLOBAL_BATCH) by scaling its accumulation"
            )
            + f"; every count in the range keeps whole model replicas and divides the global batch "
            f"{plan.parallelism.global_batch} into whole micro-batches of {plan.parallelism.micro_batch} per DP rank"
        )
    else:
        fixed = (
            f"no smaller node count (down to half) that torchrun may restart on keeps whole model replicas and "
            f"the global batch {plan.parallelism.global_batch} in whole micro-batches of {plan.parallelism.micro_batch} "
            "per data-parallel rank at every count in between"
        )
    return (
        False,
        f"spot capacity: the job restarts at its full size, up to {SPOT_MAX_RESTARTS} times from the last checkpoint: {fixed}",
    )
