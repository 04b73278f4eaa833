"""Alert timing decisions for the monitoring target (moved from targets/monitoring.py)."""

from __future__ import annotations

import math

from ..plan.deployment import Alerting, BurnWindow, TrainingAlerts
from ..plan.deployment_fields import DeploymentDecision
from ..plan.resolved import ResolvedPlan

# Policy thresholds (ours, stated in the alerts): a GPU under 10 % for 15 minutes is idle. No GPU of the job busy
# for a checkpoint write plus 5 planned steps, and at least 10 minutes, is a stall: a synchronous checkpoint write,
# an evaluation pause or a restart's NCCL setup idles the GPUs for less.
IDLE_UTIL_PERCENT = 10
IDLE_MIN_SECONDS = 900
STALL_STEPS = 5
STALL_MIN_SECONDS = 600


def training_alerts(plan: ResolvedPlan) -> TrainingAlerts:
    train = plan.training
    stall = max(STALL_MIN_SECONDS, math.ceil(train.checkpoint_write_seconds + STALL_STEPS * train.step_seconds))
    # Slurm spend window: as long as the budget lasts at the planned $/hour (at least a day)
    window = (
        max(1, math.ceil(plan.cost.budget_usd / plan.cost.usd_per_hour / 24))
        if plan.cost.usd_per_hour and plan.cost.budget_usd
        else 1
    )
    return TrainingAlerts(
        idle_util_percent=IDLE_UTIL_PERCENT,
        idle_seconds=max(IDLE_MIN_SECONDS, stall),
        stall_steps=STALL_STEPS,
        stall_seconds=stall,
        spend_window_days=window,
    )


def decisions(alerts: TrainingAlerts) -> list[DeploymentDecision]:
    return [
        DeploymentDecision(
            topic="alerts",
            choice=f"stalled after {alerts.stall_seconds} s, GPU idle after {alerts.idle_seconds} s",
            reason=f"a checkpoint write + {alerts.stall_steps} planned steps, at least {STALL_MIN_SECONDS} s; "
            f"idle: under {alerts.idle_util_percent} % for at least {IDLE_MIN_SECONDS} s",
        )
    ]


# Prometheus' default TSDB retention (prometheus --storage.tsdb.retention.time, docs: "Defaults to 15d").
PROMETHEUS_DEFAULT_RETENTION_DAYS = 15


def assumptions(plan: ResolvedPlan, on_slurm: bool, on_kubernetes: bool, alerts: TrainingAlerts | None) -> list[str]:
    """What the rules need from the site's monitoring, said where the rules are installed (file header, report)."""
    said = ["GPU series from NVIDIA dcgm-exporter (DCGM_FI_DEV_GPU_UTIL, in its default counters)"]
    if on_kubernetes:
        said.append(
            "dcgm-exporter scraped with honorLabels, so namespace/pod name the workload's pod; "
            "kube-state-metrics for pod phases and ConfigMap creation times"
        )
    if on_slurm and plan.training is not None:
        said.append(
            f'the job\'s nodes scraped under job="{plan.name}" while the job runs (e.g. a file_sd list written at allocation)'
        )
    if alerts is not None and on_slurm and alerts.spend_window_days > PROMETHEUS_DEFAULT_RETENTION_DAYS:
        said.append(
            f"Prometheus retention of at least {alerts.spend_window_days} days for the spend rule "
            f"(the default is {PROMETHEUS_DEFAULT_RETENTION_DAYS} days)"
        )
    elif alerts is not None and on_slurm:
        said.append(
            f"Prometheus retention of at least {alerts.spend_window_days} days for the spend rule (the default 15 days covers it)"
        )
    if plan.serving is not None:
        said.append("the engine's own /metrics scraped (vLLM, TGI or Triton histograms named in the rules)")
    return said


def assumption_decision(assumed: list[str]) -> DeploymentDecision:
    return DeploymentDecision(
        topic="monitoring assumes",
        choice="; ".join(assumed),
        reason="the alert rules read these series; stated at the top of the rules file too",
    )


# A p99 target lets 1 % of requests be slower than the threshold: that 1 % is the error budget.
ERROR_BUDGET_FRACTION = 0.01
# Multiwindow, multi-burn-rate alerts, the recommended parameters of the Google SRE Workbook, "Alerting on SLOs"
# (2 % of a 30-day budget in 1 h, 5 % in 6 h: page; 10 % in 3 d: ticket).
BURN_WINDOWS = (("1h", "5m", 14.4, "critical"), ("6h", "30m", 6.0, "critical"), ("3d", "6h", 1.0, "warning"))
# Serving spend is averaged over a day: the autoscaler follows the daily traffic cycle, so a shorter window alarms
# every peak.
SERVING_SPEND_WINDOW = "1d"
# Slurm spend: GPU counts sampled every 5 minutes (Prometheus subquery step), each standing for its step.
SPEND_STEP_SECONDS = 300


def alerting() -> Alerting:
    return Alerting(
        error_budget_fraction=ERROR_BUDGET_FRACTION,
        burn_windows=[BurnWindow(long=a, short=b, burn_rate=r, severity=v) for a, b, r, v in BURN_WINDOWS],
        serving_spend_window=SERVING_SPEND_WINDOW,
        spend_step_seconds=SPEND_STEP_SECONDS,
    )


def alerting_decision(policy: Alerting) -> DeploymentDecision:
    windows = ", ".join(f"{w.long}/{w.short} × {w.burn_rate:g} ({w.severity})" for w in policy.burn_windows)
    return DeploymentDecision(
        topic="alert policy",
        choice=f"error budget {policy.error_budget_fraction:.0%}; burn windows {windows}",
        reason="Google SRE Workbook, 'Alerting on SLOs' (multiwindow, multi-burn-rate); serving spend "
        f"averaged over {policy.serving_spend_window} (the daily traffic cycle), Slurm spend "
        f"sampled every {policy.spend_step_seconds} s",
    )
