"""Target: slurm/train.sbatch, one torchrun agent per node through srun.

Submit from the plan's output directory (`cd out/<plan> && sbatch slurm/train.sbatch`): the job finds
launch/torchrun.sh under $SLURM_SUBMIT_DIR (or $MLINFRA_OUT_DIR).

GPU request: `--gpus-per-node=N`, untyped. A typed `--gres=gpu:<type>:N` only matches when the site's
GRES type name equals ours, and sites differ (gres.conf AutoDetect=nvml names an H100
"nvidia_h100_80gb_hbm3", hand-written files say "h100"); a wrong type is rejected at submit time. The GPU
model is pinned by the partition / constraint the plan names instead.

Run length: a job gets `steps × step time` plus a margin. A run longer than MAX_JOB_SECONDS becomes a
chain: a job array throttled to one task at a time (`--array=0-K%1`), each link resuming from the last
checkpoint. `--signal=USR1@lead` warns the training processes `lead` seconds before the time limit so they
can finish a step and write a checkpoint; `--requeue` puts a link back in the queue after a node failure.
"""

from __future__ import annotations

import math
import re

from ..resolved import ResolvedPlan
from . import torchrun
from .base import OutputFile, render as render_template

SBATCH_PATH = "slurm/train.sbatch"

# Longest single job. Slurm's own default is unlimited, but sites cap partitions; 24 h is at or below
# the common caps (NERSC Perlmutter regular QOS 48 h, many university partitions 24-72 h). Longer runs chain.
MAX_JOB_SECONDS = 24 * 3600
# Share added to the estimated training time of a job: step-time variance between the sizing model
# and the real run (the roofline-based step time is an estimate, not a measurement).
TIME_MARGIN_FRACTION = 0.10
# Fixed start-up cost of every job: container start, rendezvous, NCCL communicator set-up, data-loader
# warm-up (an assumption; restoring the checkpoint is counted separately from its write time).
LAUNCH_OVERHEAD_SECONDS = 600
# The time-limit warning must cover one in-flight step plus a checkpoint write; the write time is
# doubled for contention on the shared filesystem when every rank writes at once.
CHECKPOINT_WRITE_SAFETY = 2.0
# sbatch(1) --signal: "sig_time must be an integer between 0 and 65535".
MAX_SIGNAL_LEAD_SECONDS = 65535
# Slurm memory unit for --mem: MiB (sbatch(1): "Default units are megabytes").
BYTES_PER_MIB = 2**20

# Characters sbatch takes as-is in a directive value; anything else is double-quoted (sbatch's script
# parser strips double quotes and honours backslash escapes inside them).
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.,:@+%=/&|!*\[\]()-]+$")


def applies(plan: ResolvedPlan) -> bool:
    return torchrun.applies(plan) and plan.spec.cluster.scheduler in ("slurm", "both")


def directive_value(value: str) -> str:
    if _PLAIN_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _directive(flag: str) -> str:
    """A user's `--flag=value` with its value quoted for sbatch's directive parser."""
    name, sep, value = flag.partition("=")
    return f"{name}={directive_value(value)}" if sep else name


def slurm_time(seconds: float) -> str:
    """D-HH:MM:SS, rounded up to whole minutes."""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def signal_lead_seconds(plan: ResolvedPlan) -> int:
    """Seconds before the limit at which SIGUSR1 arrives: one step + CHECKPOINT_WRITE_SAFETY × write time."""
    t = plan.training
    lead = math.ceil(t.step_seconds + CHECKPOINT_WRITE_SAFETY * t.checkpoint_write_seconds)
    return min(MAX_SIGNAL_LEAD_SECONDS, lead)


def job_chain(plan: ResolvedPlan) -> tuple[int, int, float]:
    """(links, steps per link, time limit in seconds) for the run.

    Effective step = step time × (1 + checkpoint write / checkpoint interval) (periodic saves stall training);
    a link's limit = steps × effective step × (1 + TIME_MARGIN_FRACTION) + launch + restore + warning lead.
    """
    t = plan.training
    write_share = t.checkpoint_write_seconds / t.checkpoint_interval_seconds if t.checkpoint_interval_seconds > 0 else 0.0
    step = t.step_seconds * (1 + write_share) * (1 + TIME_MARGIN_FRACTION)
    overhead = LAUNCH_OVERHEAD_SECONDS + t.checkpoint_write_seconds + signal_lead_seconds(plan)
    steps = max(1, t.steps)
    if steps * step + overhead <= MAX_JOB_SECONDS:
        return 1, steps, steps * step + overhead
    per_link = max(1, math.floor((MAX_JOB_SECONDS - overhead) / step))
    links = math.ceil(steps / per_link)
    return links, per_link, per_link * step + overhead


def _memory_directive(plan: ResolvedPlan) -> str:
    given = plan.spec.cluster.slurm.memory_per_node
    return "0" if given is None else f"{given // BYTES_PER_MIB}M"


def _context(plan: ResolvedPlan) -> dict:
    slurm = plan.spec.cluster.slurm
    hw = plan.hardware
    links, steps_per_link, limit_seconds = job_chain(plan)
    chained = links > 1
    log_pattern = "%x-%A_%a" if chained else "%x-%j"
    optional = [
        (flag, directive_value(value))
        for flag, value in (("partition", slurm.partition), ("account", slurm.account), ("qos", slurm.qos),
                            ("reservation", slurm.reservation), ("constraint", slurm.constraint))
        if value is not None
    ]
    return {
        "name": plan.name,
        "nodes": hw.nodes,
        "gpus_per_node": hw.gpus_per_node,
        "gpu": hw.gpu,
        "world_size": torchrun.world_size(plan),
        "cpus_per_task": torchrun.cpus_per_node(plan),
        "memory": _memory_directive(plan),
        "time": slurm_time(limit_seconds),
        "time_seconds": round(limit_seconds),
        "steps": plan.training.steps,
        "step_seconds": plan.training.step_seconds,
        "time_margin_percent": round(TIME_MARGIN_FRACTION * 100),
        "chained": chained,
        "links": links,
        "last_link": links - 1,
        "steps_per_link": steps_per_link,
        "signal_lead": signal_lead_seconds(plan),
        "checkpoint_write_seconds": plan.training.checkpoint_write_seconds,
        "output": f"{log_pattern}.out",
        "error": f"{log_pattern}.err",
        "optional": optional,
        "extra": [_directive(d) for d in slurm.extra_directives],
        "container": slurm.container_image is not None,
        "container_image": slurm.container_image or "",
        "container_mounts": ",".join(slurm.container_mounts),
        "has_container_mounts": bool(slurm.container_mounts),
        "rdzv_port": torchrun.DEFAULT_RDZV_PORT,
        "launcher": torchrun.LAUNCHER_PATH,
    }


def render(plan: ResolvedPlan) -> list[OutputFile]:
    return [OutputFile(SBATCH_PATH, render_template("slurm/train.sbatch.j2", **_context(plan)), 0o755)]
