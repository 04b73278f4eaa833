"""Target: slurm/train.sbatch, one torchrun agent per node through srun.

Submit from the plan's output directory (`cd out/<plan> && sbatch slurm/train.sbatch`): the job finds
launch/torchrun.sh under $SLURM_SUBMIT_DIR (or $MLINFRA_OUT_DIR).

GPU request: `--gpus-per-node=N`, untyped. A typed `--gres=gpu:<type>:N` only matches when the site's
GRES type name equals ours, and sites differ (gres.conf AutoDetect=nvml names an H100
"nvidia_h100_80gb_hbm3", hand-written files say "h100"); a wrong type is rejected at submit time. The GPU
model is pinned by the partition / constraint the plan names instead.

Run length, chain and signal lead are decided in compiler/deployment/training/slurm.py (`plan.deployment.slurm`): a
run longer than one job becomes a job array throttled to one task at a time (`--array=0-K%1`), each link resuming from
the last checkpoint; `--signal=USR1@lead` warns the training processes before the time limit; `--requeue` puts a
link back in the queue after a node failure.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target
from .base import render as render_template


def applies(plan: ResolvedPlan) -> bool:
    return plan.deployment is not None and plan.deployment.slurm is not None


def _context(plan: ResolvedPlan) -> dict:
    job, launch = plan.deployment.slurm, plan.deployment.launcher
    return {
        "name": job.job_name,
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        "gpu": plan.hardware.gpu,
        "world_size": launch.world_size,
        "cpus_per_task": job.cpus_per_task,
        "memory": job.memory,
        "exclusive": job.exclusive,
        "cpus_per_gpu": job.cpus_per_gpu,
        "memory_per_gpu": job.memory_per_gpu,
        "time": job.time,
        "time_seconds": round(job.time_limit_seconds),
        "steps": plan.training.steps,
        "step_seconds": plan.training.step_seconds,
        "time_margin_percent": round(job.time_margin_fraction * 100),
        "chained": job.links > 1,
        "links": job.links,
        "last_link": job.links - 1,
        "steps_per_link": job.steps_per_link,
        "signal_lead": job.signal_lead_seconds,
        "checkpoint_write_seconds": plan.training.checkpoint_write_seconds,
        "runs_dir": plan.runs_dir,
        "output": f"{job.log_pattern}.out",
        "error": f"{job.log_pattern}.err",
        "optional": [(d.flag, d.value) for d in job.directives],
        "extra": list(job.extra_directives),
        "container": job.container_image is not None,
        "container_image": job.container_image or "",
        "container_mounts": ",".join(job.container_mounts),
        "has_container_mounts": bool(job.container_mounts),
        "rdzv_port": launch.rdzv_port,
        "launcher": plan.deployment.files.launcher,
        "create_dirs": list(launch.create_dirs),
    }


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    return [OutputFile(plan.deployment.files.sbatch, render_template("slurm/train.sbatch.j2", **_context(plan)), 0o755)]


TARGET = Target("slurm", applies, render)
