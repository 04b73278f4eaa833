"""Target: launch/torchrun.sh, the per-node launcher that Slurm (srun) and Kubernetes (JobSet/PyTorchJob) both run,
and for the hf-trainer and accelerate kinds launch/mlinfra_signal.py, the module their scripts checkpoint on the signal with.

One torchrun agent per node; c10d rendezvous at $MASTER_ADDR:$MASTER_PORT (or the first argument HOST:PORT),
so the same file works under srun, a PyTorchJob (which sets MASTER_ADDR/MASTER_PORT) and a JobSet.
Every value comes from `plan.deployment.launcher` (compiler/deployment/training/launcher.py decides them).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..deployment.recipe_flags import recipe_env
from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, runtime_script
from .base import render as render_template


def applies(plan: ResolvedPlan) -> bool:
    return plan.deployment is not None and plan.deployment.launcher is not None


def _exports(plan: ResolvedPlan) -> list[tuple[str, str]]:
    """What the plan decided beyond the batch, for the training script to read (values shell-quoted by the template)."""
    launch = plan.deployment.launcher
    ck = launch.checkpoint
    env = [
        ("MLINFRA_CHECKPOINT_INTERVAL_SECONDS", f"{ck.interval_seconds:.0f}"),
        ("MLINFRA_CHECKPOINT_INTERVAL_STEPS", str(ck.interval_steps)),
        ("MLINFRA_CHECKPOINT_KEEP", str(ck.keep)),
    ]
    if launch.data:
        env.append(("MLINFRA_DATA", launch.data))
    if launch.model_weights:
        env.append(("MLINFRA_WEIGHTS", launch.model_weights))
    if launch.model_id:
        env.append(("MLINFRA_MODEL_ID", launch.model_id))
    if launch.lora:
        env += [
            ("MLINFRA_LORA_METHOD", launch.lora.method),  # qlora: the script loads the base in NF4
            ("MLINFRA_LORA_RANK", str(launch.lora.rank)),
            ("MLINFRA_LORA_ALPHA", f"{launch.lora.alpha:g}"),
            ("MLINFRA_LORA_TARGETS", ",".join(launch.lora.targets)),
        ]
        if launch.lora.quant_storage:  # QLoRA under FSDP: bnb_4bit_quant_storage, and the dtype the model loads in
            env.append(("MLINFRA_LORA_QUANT_STORAGE", launch.lora.quant_storage))
    return env + (recipe_env(plan.recipe) if plan.recipe else [])


def _context(plan: ResolvedPlan) -> dict:
    launch, files = plan.deployment.launcher, plan.deployment.files
    return {
        "name": plan.name,
        "interconnect": plan.hardware.interconnect,
        "nodes": launch.nodes,
        "nnodes": launch.nnodes,
        "nproc_per_node": launch.nproc_per_node,
        "world_size": launch.world_size,
        "elastic": launch.elastic,
        "restart_reason": launch.restart_reason,
        "max_restarts": launch.max_restarts,
        "rdzv_port": launch.rdzv_port,
        "omp_threads": launch.omp_threads,
        "fabric_env": [e.model_dump() for e in launch.fabric_env],
        "framework_env": [e.model_dump() for e in launch.framework_env],
        "user_env": [(e.name, e.value) for e in launch.user_env],
        "has_user_env": bool(launch.user_env),
        "script": launch.script,
        "python_script": launch.python_script,
        "args": list(launch.framework_args) + list(launch.args),
        "deepspeed": launch.framework == "deepspeed",
        "accelerate": launch.kind == "accelerate",
        "megatron": launch.megatron_args,
        "megatron_args_path": files.megatron_args,
        "config_flag": launch.config_flag,
        "config_path": launch.framework_config,
        "no_python_flag": "--no_python" if launch.kind == "accelerate" else "--no-python",
        "checkpoint_signal": launch.checkpoint_signal,
        "checkpoint_helper_dir": launch.checkpoint_helper.rpartition("/")[0],
        "checkpoint_usage": launch.checkpoint_usage,
        "ds_config_path": files.ds_config,
        "fsdp": launch.framework == "fsdp" and plan.deployment.frameworks.fsdp_tp is None,
        "accelerate_config_path": files.accelerate_config,
        "fsdp_tp": plan.deployment.frameworks.fsdp_tp is not None,
        "fsdp_tp_config_path": files.fsdp_tp_config,
        "fsdp_tp_script_path": files.fsdp_tp_script,
        "global_batch": plan.parallelism.global_batch,
        "micro_batch": plan.parallelism.micro_batch,
        "grad_accum": plan.parallelism.grad_accum,
        "precision": launch.precision,
        "checkpoint_dir": launch.checkpoint.dir,
        "prune_keep": launch.checkpoint_prune_keep,
        "prune_every_seconds": max(1, round(launch.checkpoint.interval_seconds)),
        "exports": _exports(plan),
    }


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    launch = plan.deployment.launcher
    files = [
        OutputFile(plan.deployment.files.launcher, render_template("torchrun/torchrun.sh.j2", **_context(plan)), 0o755)
    ]
    if launch.checkpoint_helper:
        files.append(OutputFile(launch.checkpoint_helper, runtime_script("mlinfra_signal.py")))
    return files


TARGET = Target("torchrun", applies, render)
