"""The Slurm job: its time limit and job-array chain, the signal lead before the limit, directives quoted for sbatch,
pyxis container mounts, and a job below a node sharing it."""

from __future__ import annotations

import math
import re

from ...diagnostics import InfeasiblePlan
from ...plan.deployment_training import Directive, Launcher, Slurm
from ...plan.resolved import ResolvedPlan
from ...plan.spec import PlanSpec
from ..images import check_image
from .launcher import is_local_path
from .node_share import partial_node, slurm_share

# Longest single job. Slurm's own default is unlimited, but sites cap partitions; 24 h is at or below
# the common caps (NERSC Perlmutter regular QOS 48 h, many university partitions 24-72 h). Longer runs chain.
MAX_JOB_SECONDS = 24 * 3600
# Share added to the estimated training time of a job: step-time variance between the sizing model
# and the real run. The step-time range's P90 over its P50 headline (published steps ÷ ours, attach_ranges) when it
# says more: a chain sized at the median would end before the run does on a site as slow as 1 in 10 published runs.
TIME_MARGIN_FRACTION = 0.10
STEP_RANGE = "training.step_seconds"


def time_margin_fraction(plan: ResolvedPlan) -> float:
    spread = next((r for r in plan.ranges if r.quantity == STEP_RANGE), None)
    return max(TIME_MARGIN_FRACTION, spread.p90 / spread.p50 - 1 if spread and spread.p50 else 0.0)


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


def directive_value(value: str) -> str:
    if _PLAIN_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _directive(flag: str) -> str:
    """A user's `--flag=value` with its value quoted for sbatch's directive parser."""
    name, sep, value = flag.partition("=")
    return f"{name}={directive_value(value)}" if sep else name


def pyxis_mountable(path: str) -> bool:
    """pyxis --container-mounts separates entries with ',' and source from target with ':'."""
    return "," not in path and ":" not in path


# pyxis writes each mount as the fstab line "SRC DST FLAGS" for enroot (pyxis args.c add_mount), which enroot-mount reads
# with glibc getmntent_r: fields split at blanks, and \040 \011 \012 \134 decode to space, tab, newline and backslash
# (getmntent(3)). A path with a space is mounted only in that spelling; the backslash is escaped first.
FSTAB_ESCAPES = (("\\", "\\134"), (" ", "\\040"), ("\t", "\\011"), ("\n", "\\012"))


def fstab_escape(path: str) -> str:
    for raw, escaped in FSTAB_ESCAPES:
        path = path.replace(raw, escaped)
    return path


def fstab_unescape(text: str) -> str:
    for raw, escaped in reversed(FSTAB_ESCAPES):
        text = text.replace(escaped, raw)
    return text


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


def job_chain(
    plan: ResolvedPlan, interval_seconds: float, max_job_seconds: float = MAX_JOB_SECONDS
) -> tuple[int, int, float]:
    """(links, steps per link, time limit in seconds) for the run.

    Effective step = step time × (1 + checkpoint write / checkpoint interval) (periodic saves stall training);
    a link's limit = steps × effective step × (1 + time margin) + launch + restore + warning lead; the
    links are sized with the same margin, so a run as slow as the step range's P90 still completes.
    """
    t = plan.training
    write_share = t.checkpoint_write_seconds / interval_seconds if interval_seconds > 0 else 0.0
    step = t.step_seconds * (1 + write_share) * (1 + time_margin_fraction(plan))
    overhead = LAUNCH_OVERHEAD_SECONDS + t.checkpoint_write_seconds + signal_lead_seconds(plan)
    steps = max(1, t.steps)
    if steps * step + overhead <= max_job_seconds:
        return 1, steps, steps * step + overhead
    if overhead + step > max_job_seconds:
        raise InfeasiblePlan(
            f"cluster.slurm.max_time {slurm_time(max_job_seconds)} cannot hold one step "
            f"({step:.0f} s) plus launch, restore and the checkpoint warning ({overhead:.0f} s)"
        )
    per_link = max(1, math.floor((max_job_seconds - overhead) / step))
    links = math.ceil(steps / per_link)
    return links, per_link, per_link * step + overhead


def job_paths(launch: Launcher) -> list[tuple[str, str]]:
    """(field, path) of every local path the job reads or writes besides the submit directory."""
    paths = [
        ("train.data", launch.data_mount),
        ("train.checkpoint.dir", launch.checkpoint.dir),
        ("model.weights", launch.model_weights),
    ]
    return [(f, p) for f, p in paths if p and is_local_path(p)]


def mount_targets(mounts: list[str]) -> list[str]:
    """The container side of pyxis mounts (SRC[:DST[:FLAGS]]; DST defaults to SRC)."""
    parts = [m.split(":") for m in mounts]
    return [fstab_unescape(p[1] if len(p) > 1 and p[1] else p[0]) for p in parts]


def covered(path: str, targets: list[str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets)


def slurm(plan: ResolvedPlan, spec: PlanSpec, launch: Launcher) -> Slurm:
    given = spec.cluster.slurm
    max_job = given.max_time if given.max_time is not None else MAX_JOB_SECONDS
    links, steps_per_link, limit = job_chain(plan, launch.checkpoint.interval_seconds, max_job)
    mounts = list(given.container_mounts)
    if given.container_image:
        check_image(plan, given.container_image, ("cluster", "slurm", "container_image"))
        for _, path in job_paths(launch):  # each at the same path inside the container, unless the plan mounts it
            if pyxis_mountable(path) and not covered(path, mount_targets(mounts)):
                mounts.append(f"{fstab_escape(path)}:{fstab_escape(path)}")
    share = partial_node(plan)
    cpus_per_gpu, memory_per_gpu_bytes, share_reason = slurm_share(plan, spec) if share else (0, 0, "")
    if share:
        memory = ""
    elif given.memory_per_node is not None:
        memory = f"{given.memory_per_node // BYTES_PER_MIB}M"
    else:
        memory = "0"
    return Slurm(
        job_name=plan.name,
        nodes=plan.hardware.nodes,
        gpus_per_node=plan.hardware.gpus_per_node,
        cpus_per_task=launch.cpus_per_node,
        memory=memory,
        exclusive=not share,
        cpus_per_gpu=cpus_per_gpu,
        memory_per_gpu=f"{memory_per_gpu_bytes // BYTES_PER_MIB}M" if share else "",
        share_reason=share_reason,
        max_job_seconds=max_job,
        time=slurm_time(limit),
        time_limit_seconds=limit,
        time_margin_fraction=time_margin_fraction(plan),
        launch_overhead_seconds=LAUNCH_OVERHEAD_SECONDS,
        links=links,
        steps_per_link=steps_per_link,
        signal_lead_seconds=signal_lead_seconds(plan),
        log_pattern="%x-%A_%a" if links > 1 else "%x-%j",
        directives=[
            Directive(flag=flag, value=directive_value(value))
            for flag, value in (
                ("partition", given.partition),
                ("account", given.account),
                ("qos", given.qos),
                ("reservation", given.reservation),
                ("constraint", given.constraint),
            )
            if value is not None
        ],
        extra_directives=[_directive(d) for d in given.extra_directives],
        container_image=given.container_image,
        container_mounts=mounts,
    )
