"""Target: monitoring/prometheus-rules.yaml — alert rules for a training job: budget burn, idle GPUs, a stalled job.

Kubernetes plans get a PrometheusRule (monitoring.coreos.com/v1, for the Prometheus Operator); Slurm-only plans get
a plain Prometheus rule file with the same groups. Serve plans get the SLO, idle and budget groups of
serving_rules.py in the same document; `rule()` builds one alerting rule for either.

Assumptions (each names where the series comes from):
* GPU series: NVIDIA dcgm-exporter's DCGM_FI_DEV_GPU_UTIL (percent of time a kernel ran; in its default counters).
  On Kubernetes it is scraped with honorLabels, so its `namespace`/`pod` labels name the training pod (the same
  assumption as serving_rules.py). On Slurm the job's nodes are scraped under `job="<plan name>"` for the job's
  lifetime (e.g. a file_sd target list written when the allocation starts).
* Spend on Kubernetes: wall time since the job's ConfigMap was created (kube-state-metrics `kube_configmap_created`,
  which survives job restarts; re-creating the ConfigMap restarts the clock) × the plan's $/hour for all its GPUs,
  counted only while a trainer pod runs. Pessimistic while pods wait for nodes; exact for a held node pool.
* Spend on Slurm: GPU-hours counted from the GPUs reporting in each 5-minute step of a window as long as the
  budget lasts at the planned rate; Prometheus must retain that long (its default retention is 15 days).
* A hung collective keeps a GPU "busy" (NCCL spins a kernel), so the stall rule sees an idle job, not a hang; the
  launcher's TORCH_NCCL_ASYNC_ERROR_HANDLING turns a hang into a failed pod that the restart policy handles.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, comment_text, dump_yaml_documents
from .k8s_common import labels
from .serving_rules import serving_rule_groups

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# Alert timings (idle, stall, spend window) are decided in compiler/deployment/monitoring.py.
SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86400


def applies(plan: ResolvedPlan) -> bool:
    return plan.deployment is not None and (plan.training is not None or plan.serving is not None)


def rule(alert: str, expr: str, for_: str, severity: str, summary: str, **extra_labels: str) -> dict:
    """One Prometheus alerting rule (`for_` is a Prometheus duration such as "10m" or "600s")."""
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": {**extra_labels, "severity": severity},
        "annotations": {"summary": summary},
    }


def _q(value: str) -> str:
    """A PromQL string literal (double-quoted; JSON escapes are valid Go escapes)."""
    return json.dumps(value)


def _on_kubernetes(plan: ResolvedPlan) -> bool:
    return plan.deployment.scheduler != "slurm"


def trainer_pod_regex(plan: ResolvedPlan) -> str:
    """Names of the trainer pods only: JobSet `<jobset>-<rjob>-<job>-<pod>-<suffix>`, PyTorchJob `<job>-master-0` /
    `<job>-worker-<i>` (a prefix match would also catch a plan named `<name>-v2`)."""
    return plan.deployment.kubernetes.training.trainer_pod_regex


def _gpu_series(plan: ResolvedPlan) -> str:
    if not _on_kubernetes(plan):
        return f"{GPU_UTIL}{{job={_q(plan.name)}}}"
    namespace = plan.deployment.kubernetes.namespace
    return f"{GPU_UTIL}{{namespace={_q(namespace)},pod=~{_q(trainer_pod_regex(plan))}}}"


def _trainer_running(plan: ResolvedPlan) -> str:
    namespace = plan.deployment.kubernetes.namespace
    pods = f'kube_pod_status_phase{{namespace={_q(namespace)},pod=~{_q(trainer_pod_regex(plan))},phase="Running"}}'
    return f"count({pods} == 1) > 0"


def stall_seconds(plan: ResolvedPlan) -> int:
    return plan.deployment.training_alerts.stall_seconds


def spend_usd_expr(plan: ResolvedPlan) -> str:
    """PromQL for the dollars spent so far (see the module docstring for what each form assumes)."""
    if _on_kubernetes(plan):
        namespace = plan.deployment.kubernetes.namespace
        created = f"kube_configmap_created{{namespace={_q(namespace)},configmap={_q(plan.name + '-launch')}}}"
        return f"(time() - max({created})) / {SECONDS_PER_HOUR} * {plan.cost.usd_per_hour:g}"
    step = plan.deployment.alerting.spend_step_seconds
    gpu_hours = (
        f"sum_over_time(count({_gpu_series(plan)})[{plan.deployment.training_alerts.spend_window_days}d:{step}s])"
        f" * {step} / {SECONDS_PER_HOUR}"
    )
    return f"{gpu_hours} * {plan.hardware.usd_per_gpu_hour:g}"


def _budget_rules(plan: ResolvedPlan, scope: dict[str, str]) -> list[dict]:
    cost = plan.cost
    if not cost.budget_usd:
        return []
    guard = f" and on() {_trainer_running(plan)}" if _on_kubernetes(plan) else ""
    rules = []
    for share, alert, severity in (
        (cost.alert_at, "TrainingBudgetAlert", "warning"),
        (1.0, "TrainingBudgetExceeded", "critical"),
    ):
        limit = share * cost.budget_usd
        rules.append(
            rule(
                alert,
                f"{spend_usd_expr(plan)} > {limit:.0f}{guard}",
                "0m",
                severity,
                f"{plan.name} has spent {share:.0%} of its ${cost.budget_usd:,.0f} budget (${limit:,.0f}) "
                f"at ${cost.usd_per_hour:,.2f}/hour; planned total ${cost.usd_total:,.0f}",
                **scope,
            )
        )
    return rules


def training_rule_groups(plan: ResolvedPlan) -> list[dict]:
    """PrometheusRule groups for a train/finetune plan (empty for other workloads)."""
    if plan.training is None:
        return []
    alerts = plan.deployment.training_alerts
    series, stall, idle = _gpu_series(plan), alerts.stall_seconds, alerts.idle_seconds
    scope = {"plan": plan.name}
    if _on_kubernetes(plan):
        scope["namespace"] = plan.deployment.kubernetes.namespace
    rules = [
        rule(
            "TrainingGpuIdle",
            f"{series} < {alerts.idle_util_percent}",
            f"{idle}s",
            "warning",
            f"{plan.name}: a GPU has been under {alerts.idle_util_percent} % utilisation for {idle} s "
            "(input pipeline, straggler or a rank that left)",
            **scope,
        ),
        rule(
            "TrainingStalled",
            f"max({series}) < 1",
            f"{stall}s",
            "critical",
            f"{plan.name}: no GPU has run a kernel for {stall} s (a {plan.training.checkpoint_write_seconds:.1f} s "
            f"checkpoint write + {alerts.stall_steps} planned steps of {plan.training.step_seconds:.1f} s)",
            **scope,
        ),
    ]
    if _on_kubernetes(plan):
        rules.append(
            rule(
                "TrainingGpuMetricsMissing",
                f"absent({series}) and on() {_trainer_running(plan)}",
                f"{stall}s",
                "warning",
                f"{plan.name}: trainer pods run but dcgm-exporter reports no GPU of theirs; the "
                "idle and stall alerts are blind (exporter down, or scraped without honorLabels)",
                **scope,
            )
        )
    rules += _budget_rules(plan, scope)
    return [{"name": f"{plan.name}.training", "rules": rules}]


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    groups = training_rule_groups(plan) + serving_rule_groups(plan)
    if not groups:
        return []
    if not _on_kubernetes(plan):
        document = {"groups": groups}
    else:
        document = {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": f"{plan.name}-alerts",
                "namespace": plan.deployment.kubernetes.namespace,
                "labels": labels(plan, "monitoring"),
            },
            "spec": {"groups": groups},
        }
    said = "".join(f"# Assumes: {comment_text(line)}\n" for line in plan.deployment.monitoring_assumptions)
    return [OutputFile(plan.deployment.files.monitoring_rules, said + dump_yaml_documents([document]))]


TARGET = Target("monitoring", applies, render)
