"""Wall time of a training run beyond its steady steps: failures, checkpoints, stragglers and evaluation.

Goodput (Young 1974, Daly 2006): per-GPU MTBF from Llama 3 (Dubey et al. 2024, §3.3.4: 419 unexpected
interruptions in 54 days on 16,384 H100s); a job on n GPUs fails every MTBF/n, checkpoints every
τ = √(2·δ·M), δ the checkpoint write time, and loses δ/τ + (τ/2 + restart)/M of its time.
Whole run (`whole_run`): the steady steps plus, per useful second, the failures and checkpoint writes above, the
stragglers a synchronous step waits for (the slowest of n GPUs, STRAGGLER_SIGMA) and the evaluation pauses of the
framework's defaults (EVALUATION_SHARE); wall time = steady time ÷ goodput, goodput = 1 / (1 + their sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MTBF_GPU_HOURS = 54 * 24 * 16384 / 419  # Llama 3 paper §3.3.4: 50,677 GPU-hours between interruptions per GPU
# Restart after a failure: Llama 3 (§3.3.4) reports automated recovery handling most interruptions; relaunch,
# NCCL init and checkpoint load take minutes at scale — 10 minutes, the launch allowance used elsewhere. No source
# gives the figure: it is checked against Llama 3's "higher than 90% effective training time" on 16K GPUs
# (tests/test_accuracy_whole_runs.py), and the whole-run range carries what it leaves open.
RESTART_SECONDS = 600
# Stragglers: a synchronous step waits for its slowest GPU. Sinha et al. 2022 ("Not All GPUs Are Created Equal",
# SC22, arXiv 2208.11035 abstract): 8% average performance variation between GPUs of one SKU within a cluster, over
# clusters of up to 27,648 GPUs (Summit), outliers 1.5x the median. Read as a normal spread whose range over the
# cluster's N GPUs is 2σ·√(2 ln N) (the expected extreme of N normal draws), σ = 0.08 / (2·√(2 ln 27648)) = 0.89%;
# the slowest of a job's n GPUs then runs σ·√(2 ln n) behind the median GPU the step model prices.
STRAGGLER_VARIATION, STRAGGLER_CLUSTER_GPUS = 0.08, 27648
STRAGGLER_SIGMA = STRAGGLER_VARIATION / (2 * math.sqrt(2 * math.log(STRAGGLER_CLUSTER_GPUS)))
# Evaluation pauses under Megatron-LM's defaults, which megatron/args.sh leaves in place (megatron/training/
# arguments.py _add_validation_args: --eval-iters 100 every --eval-interval 1000 steps): 100 forward-only passes
# over a global batch per 1000 steps, a forward being 2N of a step's 6N FLOPs. Other frameworks evaluate as the
# script says (Hugging Face Trainer's default eval_strategy is "no"): none counted.
MEGATRON_EVAL_ITERS, MEGATRON_EVAL_INTERVAL = 100, 1000
EVALUATION_SHARE = {"megatron": MEGATRON_EVAL_ITERS / MEGATRON_EVAL_INTERVAL * 2 / 6}


def job_mtbf_seconds(gpus: int, mtbf_gpu_hours: float | None = None) -> float:
    return (mtbf_gpu_hours or MTBF_GPU_HOURS) * 3600 / max(1, gpus)


def checkpoint_interval_seconds(checkpoint_write_seconds: float, job_mtbf: float) -> float:
    """Young–Daly optimum τ = √(2·δ·M)."""
    return math.sqrt(2 * max(checkpoint_write_seconds, 1e-3) * job_mtbf)


def _failures_and_checkpoints(
    gpus: int, checkpoint_write_seconds: float, mtbf_gpu_hours: float | None
) -> tuple[float, float, float]:
    """(seconds lost to failures and restarts, to checkpoint writes, per second of steps; the Young–Daly interval)."""
    mtbf = job_mtbf_seconds(gpus, mtbf_gpu_hours)
    delta = max(checkpoint_write_seconds, 1e-3)
    interval = checkpoint_interval_seconds(delta, mtbf)
    return (interval / 2 + RESTART_SECONDS) / mtbf, delta / interval, interval


def goodput(gpus: int, checkpoint_write_seconds: float, mtbf_gpu_hours: float | None = None) -> tuple[float, float]:
    """(share of wall time doing useful steps, checkpoint interval in seconds) with failures and checkpoints alone."""
    failures, checkpoints, interval = _failures_and_checkpoints(gpus, checkpoint_write_seconds, mtbf_gpu_hours)
    return 1 / (1 + failures + checkpoints), interval


@dataclass(frozen=True)
class WholeRun:
    """A run's wall time beyond its steady steps: each term the seconds it adds per second of steady steps."""

    goodput: float  # steady time ÷ wall time = 1 / (1 + failures + checkpoints + stragglers + evaluation)
    failures: float  # work lost since the last checkpoint and the restart, at the job's MTBF
    checkpoints: float  # synchronous checkpoint writes, δ/τ
    stragglers: float  # the slowest of the job's GPUs against the median one
    evaluation: float  # the framework's default evaluation passes
    checkpoint_interval_seconds: float


def straggler_slowdown(gpus: int) -> float:
    """σ·√(2 ln n): how far the slowest of n GPUs runs behind the median (STRAGGLER_SIGMA); 0 for one GPU."""
    return STRAGGLER_SIGMA * math.sqrt(2 * math.log(gpus)) if gpus > 1 else 0.0


def whole_run(
    gpus: int, checkpoint_write_seconds: float, framework: str = "", mtbf_gpu_hours: float | None = None
) -> WholeRun:
    """The whole-run terms of a job on `gpus` GPUs whose checkpoint takes `checkpoint_write_seconds` to write."""
    failures, checkpoints, interval = _failures_and_checkpoints(gpus, checkpoint_write_seconds, mtbf_gpu_hours)
    stragglers, evaluation = straggler_slowdown(gpus), EVALUATION_SHARE.get(framework, 0.0)
    share = 1 / (1 + failures + checkpoints + stragglers + evaluation)
    return WholeRun(share, failures, checkpoints, stragglers, evaluation, interval)
