"""Training outputs agree with each other and with the plan: nodes, GPUs per node, world size, batch sizes
and precision, as written in the sbatch, torchrun.sh and the Megatron arguments (shell text, parsed back), and as
decided in the typed framework configs the targets dump (plan.deployment.frameworks: ds_config.json, the accelerate
config and the FSDP × TP mesh). `check` raises AssertionError on the first disagreement (a target bug, never a user
error).
"""

from __future__ import annotations

import math
import re
import shlex

from .deployment.frameworks import MIXED_PRECISION
from .deployment.fsdp_tp import ACTIVATION_CHECKPOINT
from .plan.framework_configs import AccelerateConfig, DeepSpeedConfig, FsdpTpSettings
from .plan.resolved import ResolvedPlan
from .targets.base import OutputFile


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(f"training outputs disagree: {message}")


def _option(text: str, pattern: str, what: str) -> str:
    found = re.findall(pattern, text, re.M)
    _expect(len(found) >= 1, f"{what} missing")
    _expect(len(set(found)) == 1, f"{what} given with different values {sorted(set(found))}")
    return found[0]


def _check_sbatch(text: str, plan: ResolvedPlan) -> None:
    hw = plan.hardware
    _expect(
        int(_option(text, r"^#SBATCH --nodes=(\d+)$", "sbatch --nodes")) == hw.nodes, "sbatch --nodes != plan nodes"
    )
    _expect(
        int(_option(text, r"^#SBATCH --gpus-per-node=(\d+)$", "sbatch --gpus-per-node")) == hw.gpus_per_node,
        "sbatch --gpus-per-node != plan GPUs per node",
    )
    _expect(_option(text, r"^#SBATCH --ntasks-per-node=(\d+)$", "sbatch --ntasks-per-node") == "1", "one task per node")
    srun_nodes = _option(text, r"^srun_args=\(--nodes=(\d+) ", "srun --nodes")
    _expect(int(srun_nodes) == hw.nodes, "srun --nodes != sbatch --nodes")
    if re.search(r"^#SBATCH --cpus-per-gpu=", text, re.M):  # a job below a node: its CPUs are per GPU
        cpus = str(int(_option(text, r"^#SBATCH --cpus-per-gpu=(\d+)$", "sbatch --cpus-per-gpu")) * hw.gpus_per_node)
    else:
        cpus = _option(text, r"^#SBATCH --cpus-per-task=(\d+)$", "sbatch --cpus-per-task")
    _expect(
        _option(text, r" --cpus-per-task=(\d+) --kill-on-bad-exit", "srun --cpus-per-task") == cpus,
        "srun --cpus-per-task != the job's CPUs",
    )
    body = text.split("\nset -euo pipefail\n", 1)
    _expect(len(body) == 2 and "#SBATCH" not in body[1], "an #SBATCH line after the first command is ignored by sbatch")


def _check_launcher(text: str, plan: ResolvedPlan) -> None:
    hw, par = plan.hardware, plan.parallelism
    launch = plan.deployment.launcher
    if launch.kind == "accelerate":  # accelerate launch: machines and processes (its config file says the same)
        _expect(
            int(_option(text, r"^  --num_machines=(\d+) \\$", "accelerate --num_machines")) == hw.nodes,
            "accelerate --num_machines != plan nodes",
        )
        _expect(
            int(_option(text, r"^  --num_processes=(\d+) \\$", "accelerate --num_processes"))
            == hw.nodes * hw.gpus_per_node,
            "accelerate --num_processes != world size",
        )
    else:
        nnodes = _option(text, r"^  --nnodes=([0-9:]+) \\$", "torchrun --nnodes")
        _expect(int(nnodes.split(":")[-1]) == hw.nodes, f"torchrun --nnodes {nnodes} != plan nodes {hw.nodes}")
        _expect(
            int(_option(text, r"^  --nproc-per-node=(\d+) \\$", "torchrun --nproc-per-node")) == hw.gpus_per_node,
            "torchrun --nproc-per-node != plan GPUs per node",
        )
    exported = dict(re.findall(r"^export (MLINFRA_[A-Z_]+)=(\S+)$", text, re.M))
    _expect(
        int(exported["MLINFRA_WORLD_SIZE"]) == hw.nodes * hw.gpus_per_node,
        "MLINFRA_WORLD_SIZE != nodes × GPUs per node",
    )
    _expect(int(exported["MLINFRA_GLOBAL_BATCH"]) == par.global_batch, "MLINFRA_GLOBAL_BATCH != plan")
    _expect(int(exported["MLINFRA_MICRO_BATCH"]) == par.micro_batch, "MLINFRA_MICRO_BATCH != plan")
    _expect(int(exported["MLINFRA_GRAD_ACCUM"]) == par.grad_accum, "MLINFRA_GRAD_ACCUM != plan")
    _expect(
        shlex.split(exported["MLINFRA_PRECISION"]) == [plan.deployment.launcher.precision], "MLINFRA_PRECISION != plan"
    )
    if launch.config_flag:
        _expect(
            f' {launch.config_flag} "$OUT_DIR/{launch.framework_config}"' in text,
            "framework config not passed to the script",
        )
    _expect(
        ("megatron/args.sh" in text) == launch.megatron_args, "megatron/args.sh sourced iff the launch kind is megatron"
    )


def _check_ds_config(ds: DeepSpeedConfig, plan: ResolvedPlan) -> None:
    par = plan.parallelism
    _expect(
        ds.train_batch_size == ds.train_micro_batch_size_per_gpu * ds.gradient_accumulation_steps * par.dp,
        "ds_config train_batch_size != micro × grad-accum × DP",
    )
    _expect(ds.train_batch_size == par.global_batch, "ds_config train_batch_size != plan global batch")
    _expect(ds.train_micro_batch_size_per_gpu == par.micro_batch, "ds_config micro batch != plan")
    _expect(ds.gradient_accumulation_steps == par.grad_accum, "ds_config grad accumulation != plan")
    _expect(ds.zero_optimization.stage == par.zero_stage, "ds_config ZeRO stage != plan")
    bf16 = ds.bf16 is not None and ds.bf16.enabled
    fp16 = ds.fp16 is not None and ds.fp16.enabled
    _expect(
        bf16 == (plan.deployment.launcher.precision in ("bf16", "fp8"))
        and fp16 == (plan.deployment.launcher.precision == "fp16"),
        "ds_config precision != plan precision",
    )


def _check_accelerate(cfg: AccelerateConfig, plan: ResolvedPlan) -> None:
    hw = plan.hardware
    _expect(cfg.num_machines == hw.nodes, "accelerate num_machines != plan nodes")
    _expect(cfg.num_processes == hw.nodes * hw.gpus_per_node, "accelerate num_processes != world size")
    _expect(
        cfg.mixed_precision == MIXED_PRECISION[plan.deployment.launcher.precision],
        "accelerate mixed_precision != plan precision",
    )


def _check_megatron(text: str, plan: ResolvedPlan) -> None:
    par = plan.parallelism
    words = [w for line in text.splitlines() if line.startswith("  --") for w in shlex.split(line)]
    value = {words[i]: words[i + 1] for i in range(len(words) - 1) if not words[i + 1].startswith("--")}
    _expect(int(value["--tensor-model-parallel-size"]) == par.tp, "Megatron TP != plan")
    _expect(int(value["--pipeline-model-parallel-size"]) == par.pp, "Megatron PP != plan")
    _expect(int(value["--micro-batch-size"]) == par.micro_batch, "Megatron micro batch != plan")
    _expect(int(value["--global-batch-size"]) == par.global_batch, "Megatron global batch != plan")
    _expect(int(value["--seq-length"]) == plan.training.seq_len, "Megatron sequence length != plan")
    _expect(
        ("--bf16" in words) == (plan.deployment.launcher.precision in ("bf16", "fp8")),
        "Megatron --bf16 != plan precision",
    )
    _expect(("--fp16" in words) == (plan.deployment.launcher.precision == "fp16"), "Megatron --fp16 != plan precision")


def _check_fsdp_tp(cfg: FsdpTpSettings, plan: ResolvedPlan) -> None:
    par, hw = plan.parallelism, plan.hardware
    shard = par.shard_group_gpus or par.dp  # HSDP: DP = replicas × shard group
    mesh = [par.pp] * (par.pp > 1) + [par.dp // shard] * (shard < par.dp) + [shard] + [par.cp] * (par.cp > 1) + [par.tp]
    _expect(cfg.mesh_shape == mesh, "fsdp_tp.json mesh != plan [PP, DP replicas, DP shard group, CP, TP]")
    sizes = dict(zip(cfg.mesh_dim_names, cfg.mesh_shape))
    for name, dims in cfg.flatten_mesh_dims.items():  # dp_shard × cp under CP
        sizes[name] = math.prod(sizes[dim] for dim in dims)
    _expect(
        [sizes[name] for name in cfg.fsdp_mesh_dims] == [par.dp // shard] * (shard < par.dp) + [shard * par.cp],
        "fsdp_tp.json fully_shard mesh != plan [DP replicas, DP shard group × CP]",
    )
    if par.pp > 1:
        stages = cfg.stage_layers or []
        _expect(
            len(stages) == par.pp * par.vp and sum(stages) == sum(par.pp_stage_layers),
            "fsdp_tp.json pipeline stages != plan PP × VP over its layers",
        )
        _expect(
            cfg.pipeline_microbatches == par.grad_accum,
            "fsdp_tp.json pipeline micro-batches != plan grad accumulation",
        )
    _expect(cfg.world_size == hw.nodes * hw.gpus_per_node, "fsdp_tp.json world size != nodes × GPUs per node")
    _expect((cfg.micro_batch, cfg.grad_accum) == (par.micro_batch, par.grad_accum), "fsdp_tp.json batch != plan")
    _expect(cfg.sequence_parallel == par.sequence_parallel, "fsdp_tp.json sequence parallelism != plan (sized with it)")
    _expect(
        cfg.activation_checkpoint == ACTIVATION_CHECKPOINT[par.recompute],
        "fsdp_tp.json activation checkpointing != plan recompute (selective: torchtitan's op-level SAC)",
    )


_TEXT_CHECKS = {  # the shell file (a field of deployment.files) -> its check of the text
    "sbatch": _check_sbatch,
    "launcher": _check_launcher,
    "megatron_args": _check_megatron,
}


def _check_frameworks(plan: ResolvedPlan) -> None:
    """The framework configs as decided (plan.deployment.frameworks), which the targets write as they are."""
    frameworks = plan.deployment.frameworks
    if frameworks is None:
        return
    if frameworks.deepspeed_config is not None:
        _check_ds_config(frameworks.deepspeed_config, plan)
    if frameworks.accelerate_config is not None:
        _check_accelerate(frameworks.accelerate_config, plan)
    if frameworks.fsdp_tp is not None:
        _check_fsdp_tp(frameworks.fsdp_tp, plan)


def check(files: list[OutputFile] | dict[str, str], plan: ResolvedPlan) -> None:
    """Raise AssertionError when the training files disagree with each other or with the plan."""
    if plan.workload not in ("train", "finetune") or plan.hardware is None or plan.training is None:
        return
    texts = files if isinstance(files, dict) else {f.path: f.text for f in files}
    par, hw = plan.parallelism, plan.hardware
    _expect(
        par.micro_batch * par.grad_accum * par.dp == par.global_batch, "plan global batch != micro × grad-accum × DP"
    )
    _expect(
        par.tp * par.cp * par.pp * par.dp == hw.nodes * hw.gpus_per_node, "TP × CP × PP × DP != nodes × GPUs per node"
    )
    for field, check_file in _TEXT_CHECKS.items():
        path = getattr(plan.deployment.files, field)
        if path in texts:
            check_file(texts[path], plan)
    _check_frameworks(plan)
