"""Autoscaling and disruption of a serving unit for the k8s_serving target: the HPA or KEDA ScaledObject on the
engine's queue metric, the PodDisruptionBudget and the Prometheus adapter's values. Not a target itself."""

from __future__ import annotations

from ..plan.resolved import ResolvedPlan
from .k8s_serving_unit import ANNOTATION, ServingUnit, object_meta, pod_selector, serving_units


def _decimal(value: float) -> str:
    """A Kubernetes quantity / KEDA threshold for a plain number: 4 -> "4", 2.5 -> "2500m"."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _threshold(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _target_ref(unit: ServingUnit) -> dict:
    if unit.multi_node:
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": unit.name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": unit.name}


def _behavior(unit: ServingUnit) -> dict:
    a = unit.plan.deployment.kubernetes.autoscaling
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Percent", "value": a.scale_up_percent, "periodSeconds": a.period_seconds},
                {"type": "Pods", "value": a.scale_up_pods, "periodSeconds": a.period_seconds},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": unit.decided.scale_down_window_seconds,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": a.period_seconds}],
        },
    }


def _autoscaler_annotations(unit: ServingUnit) -> dict[str, str]:
    s, a = unit.serving, unit.plan.deployment.kubernetes.autoscaling
    return {
        f"{ANNOTATION}queue-target": (
            f"{s.queue_target_per_replica:g} waiting requests per replica (from sizing: capacity "
            f"{s.requests_per_second_per_replica:g} req/s per replica within the latency SLO)"
        ),
        f"{ANNOTATION}scale-up": (
            f"no stabilisation, +{a.scale_up_percent} % or +{a.scale_up_pods} pods per "
            f"{a.period_seconds} s: a growing queue breaks TTFT within seconds"
        ),
        f"{ANNOTATION}scale-down": (
            f"{unit.decided.scale_down_window_seconds} s stabilisation: a replica given back costs "
            f"{s.startup_seconds:.0f} s of weight loading to get again"
        ),
    }


def queue_query(unit: ServingUnit) -> str:
    """PromQL: the unit's total waiting requests (the autoscaler divides by replicas)."""
    namespace = unit.plan.deployment.kubernetes.namespace
    return f'sum({unit.engine.queue_metric}{{namespace="{namespace}",service="{unit.name}"}})'


def autoscaler_document(unit: ServingUnit) -> dict:
    s = unit.serving
    if unit.plan.deployment.kubernetes.autoscaler == "keda":
        return {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": object_meta(unit, annotations=_autoscaler_annotations(unit)),
            "spec": {
                "scaleTargetRef": _target_ref(unit),
                "minReplicaCount": unit.decided.min_replicas,
                "maxReplicaCount": unit.decided.max_replicas,
                "pollingInterval": unit.plan.deployment.kubernetes.autoscaling.period_seconds,
                "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(unit)}},
                "triggers": [
                    {
                        "type": "prometheus",
                        "metricType": "AverageValue",
                        "metadata": {
                            "serverAddress": unit.plan.deployment.kubernetes.autoscaling.prometheus_url,
                            "query": queue_query(unit),
                            "threshold": _threshold(s.queue_target_per_replica),
                        },
                    }
                ],
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": object_meta(unit, annotations=_autoscaler_annotations(unit)),
        "spec": {
            "scaleTargetRef": _target_ref(unit),
            "minReplicas": unit.decided.min_replicas,
            "maxReplicas": unit.decided.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": unit.engine.adapter_metric},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": _decimal(s.queue_target_per_replica),
                        },
                    },
                }
            ],
            "behavior": _behavior(unit),
        },
    }


def disruption_budget(unit: ServingUnit) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(
            unit,
            annotations={
                f"{ANNOTATION}max-unavailable": "one pod at a time: a drain takes out one replica (one LWS group) at most"
            },
        ),
        "spec": {
            "maxUnavailable": unit.decided.disruption_max_unavailable,
            "selector": {"matchLabels": pod_selector(unit)},
        },
    }


def adapter_values(plan: ResolvedPlan) -> dict:
    """prometheus-adapter Helm values: each engine's queue gauge as a per-pod custom metric for the HPA."""
    rules = []
    by_engine = {unit.decided.engine: unit.decided for unit in serving_units(plan)}
    for engine in sorted(by_engine):
        e = by_engine[engine]
        rules.append(
            {
                "seriesQuery": f'{e.queue_metric}{{namespace!="",pod!=""}}',
                "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                "name": {"matches": f"^{e.queue_metric}$", "as": e.adapter_metric},
                "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
            }
        )
    return {"rules": {"default": False, "custom": rules}}
