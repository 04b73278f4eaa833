"""Target: monitoring/prometheus-rules.yaml — alert rules for budget burn, idle GPUs and a stalled job.

Kubernetes plans get a PrometheusRule (monitoring.coreos.com/v1, for the Prometheus Operator); Slurm-only
plans get a plain Prometheus rule file (the same groups). GPU metrics come from NVIDIA's dcgm-exporter.
Serving plans add the SLO-burn, idle and budget groups of serving_rules.py.
"""

from __future__ import annotations

from ..resolved import ResolvedPlan
from .base import OutputFile, dump_yaml_documents
from .k8s_serving import labels
from .serving_rules import serving_rule_groups

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# dcgm-exporter collects every 30 s by default (`-c 30000`, NVIDIA/dcgm-exporter README); Prometheus
# scrapes at that interval, so each sample stands for 30 GPU-seconds.
SCRAPE_INTERVAL_SECONDS = 30
# Policy thresholds (ours, stated in the alerts): a GPU under 10% for 15 minutes is idle; no GPU busy for
# 5 steps (at least 10 minutes) is a stall — longer than a checkpoint write or an evaluation pause.
IDLE_UTIL_PERCENT = 10
IDLE_FOR = "15m"
STALL_STEPS = 5
STALL_MIN_SECONDS = 600
BUDGET_WINDOW = "365d"


def applies(plan: ResolvedPlan) -> bool:
    return plan.training is not None or plan.serving is not None


def _selector(plan: ResolvedPlan) -> str:
    if plan.spec.cluster.scheduler == "slurm":
        return f'job="{plan.name}"'  # scrape dcgm-exporter on the allocation under this job label
    return f'namespace="{plan.spec.cluster.kubernetes.namespace}",pod=~"{plan.name}-.*"'


def _rule(alert: str, expr: str, for_: str, severity: str, summary: str) -> dict:
    return {"alert": alert, "expr": expr, "for": for_, "labels": {"severity": severity}, "annotations": {"summary": summary}}


def training_rule_groups(plan: ResolvedPlan) -> list[dict]:
    if plan.training is None:
        return []
    sel, cost = _selector(plan), plan.cost
    gpu_hours = f"sum(count_over_time({GPU_UTIL}{{{sel}}}[{BUDGET_WINDOW}])) * {SCRAPE_INTERVAL_SECONDS} / 3600"
    spend = f"{gpu_hours} * {plan.hardware.usd_per_gpu_hour:g}"
    stall_seconds = max(STALL_MIN_SECONDS, round(STALL_STEPS * plan.training.step_seconds))
    rules = [
        _rule(f"{plan.name}-gpu-idle", f"avg by (Hostname, gpu) ({GPU_UTIL}{{{sel}}}) < {IDLE_UTIL_PERCENT}", IDLE_FOR, "warning",
              f"a GPU of {plan.name} has been under {IDLE_UTIL_PERCENT}% utilisation for {IDLE_FOR}"),
        _rule(f"{plan.name}-stalled", f"max({GPU_UTIL}{{{sel}}}) < 1", f"{stall_seconds}s", "critical",
              f"no GPU of {plan.name} has worked for {stall_seconds} s ({STALL_STEPS} planned steps of {plan.training.step_seconds:.1f} s)"),
        _rule(f"{plan.name}-gone", f"absent({GPU_UTIL}{{{sel}}})", f"{stall_seconds}s", "warning",
              f"no GPU metrics from {plan.name} for {stall_seconds} s: the job is not running"),
    ]
    if cost.budget_usd:
        rules.append(_rule(f"{plan.name}-budget-burn", f"{spend} > {cost.alert_at * cost.budget_usd:.0f}", "0m", "warning",
                           f"{plan.name} has spent {cost.alert_at:.0%} of its ${cost.budget_usd:,.0f} budget"))
        rules.append(_rule(f"{plan.name}-over-budget", f"{spend} > {cost.budget_usd:.0f}", "0m", "critical",
                           f"{plan.name} has spent its whole ${cost.budget_usd:,.0f} budget"))
    return [{"name": f"{plan.name}.training", "rules": rules}]


def render(plan: ResolvedPlan) -> list[OutputFile]:
    groups = training_rule_groups(plan) + serving_rule_groups(plan)
    if not groups:
        return []
    if plan.spec.cluster.scheduler == "slurm":
        document = {"groups": groups}
    else:
        document = {
            "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": f"{plan.name}-alerts", "namespace": plan.spec.cluster.kubernetes.namespace,
                         "labels": labels(plan, "monitoring")},
            "spec": {"groups": groups},
        }
    return [OutputFile("monitoring/prometheus-rules.yaml", dump_yaml_documents([document]))]
