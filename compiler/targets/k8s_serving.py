"""Target: k8s_serving — `k8s/serving.yaml`, the Kubernetes serving stack of a serve plan.

Per serving unit (the whole service, or each stage of a multi-stage service): the engine as a Deployment, or a
LeaderWorkerSet when one replica spans nodes; a Service; an autoscaler on the engine's queue metric (HPA through a
Prometheus adapter, or a KEDA ScaledObject); a PodDisruptionBudget; a model-cache volume; a ServiceMonitor. With
the HPA, `helm/prometheus-adapter-values.yaml` (Helm values, not a Kubernetes object: kept out of k8s/ so that
`kubectl apply -f k8s/` applies every file there) maps the queue metric into the custom metrics API.
Every number comes from `plan.serving` / `plan.hardware`; the few policies chosen here are named constants with a
reason, and the reasons also travel in `mlinfra.io/*` annotations so `kubectl describe` shows them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..deployment.serving.pods import MODEL_CACHE_HEADROOM_FRACTION, STARTUP_BUDGET_FACTOR
from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_yaml_documents
from .k8s_common import labels, pvc, quantity_bytes, service_account
from .k8s_serving_pods import pod_spec, repository_config_map
from .k8s_serving_scaling import adapter_values, autoscaler_document, disruption_budget
from .k8s_serving_unit import ANNOTATION, LWS_LEADER_INDEX_LABEL, ServingUnit, object_meta, pod_selector, serving_units

# Kubernetes documents in a fixed order: Helm's InstallOrder for built-in kinds, custom resources after.
KIND_ORDER = (
    "ServiceAccount",
    "PodDisruptionBudget",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Service",
    "Deployment",
    "HorizontalPodAutoscaler",
    "LeaderWorkerSet",
    "ScaledObject",
    "ServiceMonitor",
)


def applies(plan: ResolvedPlan) -> bool:
    d = plan.deployment
    return (
        plan.serving is not None
        and d is not None
        and d.scheduler in ("kubernetes", "both")
        and bool(d.kubernetes.serving)
    )


def _workload_annotations(unit: ServingUnit) -> dict[str, str]:
    d = unit.decided
    return {
        f"{ANNOTATION}startup-budget": (
            f"{d.startup_budget_seconds} s = {d.startup_failure_threshold} × {d.probe_period_seconds} s ≥ "
            f"{STARTUP_BUDGET_FACTOR:g} × ({d.load_seconds} s weight load + {d.warmup_seconds} s warm-up)"
            + (
                f"; the ~{d.download_seconds} s download runs before, in the fetch-weights init container"
                if d.fetch_weights
                else ""
            )
        ),
        f"{ANNOTATION}weights": f"{d.weights_source}: {d.weights_location}",
        f"{ANNOTATION}replicas": (
            f"left to the autoscaler ({d.min_replicas}..{d.max_replicas}); a fixed count here "
            f"would be reset by every apply"
        ),
    }


def _workload(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> dict:
    s = unit.serving
    template_labels = {**labels(unit.plan, unit.component), **unit.plan.deployment.kubernetes.identity_pod_labels}
    if not unit.multi_node:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": object_meta(
                unit,
                annotations={
                    **_workload_annotations(unit),
                    f"{ANNOTATION}rollout": "surge one replica, none unavailable: capacity never drops below the SLO-sized level",
                },
            ),
            "spec": {
                "selector": {"matchLabels": pod_selector(unit)},
                "progressDeadlineSeconds": unit.decided.progress_deadline_seconds,
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {
                        "maxSurge": unit.decided.rollout_max_surge,
                        "maxUnavailable": unit.decided.rollout_max_unavailable,
                    },
                },
                "template": {
                    "metadata": {"labels": template_labels},
                    "spec": pod_spec(unit, leader=True, rendered=rendered),
                },
            },
        }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": object_meta(
            unit,
            annotations={
                **_workload_annotations(unit),
                f"{ANNOTATION}group": f"{s.nodes_per_replica} pods per replica (PP={s.pp}), {unit.decided.gpus_per_pod} GPUs each (TP={s.tp})",
            },
        ),
        "spec": {
            "leaderWorkerTemplate": {
                "size": s.pp,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": template_labels},
                    "spec": pod_spec(unit, leader=True, rendered=rendered),
                },
                "workerTemplate": {"metadata": {"labels": template_labels}, "spec": pod_spec(unit, leader=False)},
            },
        },
    }


def _service(unit: ServingUnit) -> dict:
    selector = pod_selector(unit)
    if unit.multi_node:
        selector[LWS_LEADER_INDEX_LABEL] = "0"  # only the leader serves HTTP
    ports = [{"name": "http", "port": unit.decided.http_port, "targetPort": "http"}]
    if unit.engine.metrics_port != unit.decided.http_port:
        ports.append({"name": "metrics", "port": unit.engine.metrics_port, "targetPort": "metrics"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(unit),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


def _model_cache(unit: ServingUnit) -> dict:
    doc = pvc(f"{unit.name}-model-cache", unit.decided.model_cache_bytes, unit.plan, "ReadWriteMany")
    doc["metadata"]["labels"] = labels(unit.plan, unit.component)
    doc["metadata"]["annotations"] = {
        f"{ANNOTATION}size": (
            f"{quantity_bytes(unit.decided.model_cache_bytes)} = weights {unit.serving.weights_bytes} B + "
            f"{MODEL_CACHE_HEADROOM_FRACTION:.0%} (filesystem reserve, tokenizer, revision updates); ReadWriteMany: "
            f"every replica reads one copy from the shared filesystem"
        )
    }
    return doc


def _service_monitor(unit: ServingUnit) -> dict:
    port = "http" if unit.engine.metrics_port == unit.decided.http_port else "metrics"
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": object_meta(unit),
        "spec": {
            "selector": {"matchLabels": pod_selector(unit)},
            "endpoints": [
                {
                    "port": port,
                    "path": "/metrics",
                    "interval": f"{unit.plan.deployment.kubernetes.autoscaling.period_seconds}s",
                }
            ],
        },
    }


def unit_documents(unit: ServingUnit, rendered: Mapping[str, OutputFile] | None = None) -> list[dict]:
    """Every document of one serving unit (unsorted); a multi-stage service calls this once per stage. `rendered`:
    the triton target's files, carried in a ConfigMap for a Triton unit."""
    rendered = rendered or {}
    docs = [
        disruption_budget(unit),
        _service(unit),
        _workload(unit, rendered),
        autoscaler_document(unit),
        _service_monitor(unit),
    ]
    if unit.decided.repository_init_image:
        docs.append(repository_config_map(unit, rendered))
    if unit.decided.shared_cache:
        docs.append(_model_cache(unit))
    return docs


def serving_documents(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[dict]:
    docs = service_account(plan, "server") + [
        doc for unit in serving_units(plan) for doc in unit_documents(unit, rendered)
    ]
    return sorted(docs, key=lambda d: KIND_ORDER.index(d["kind"]))  # stable: units keep their order within a kind


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    files = plan.deployment.files
    out = [OutputFile(files.k8s_serving, dump_yaml_documents(serving_documents(plan, rendered)))]
    if plan.deployment.kubernetes.autoscaler == "hpa":
        usage = (
            f"# Helm values for prometheus-adapter (not a Kubernetes object): helm upgrade --install prometheus-adapter "
            f"prometheus-community/prometheus-adapter -n monitoring -f {files.adapter_values}\n"
        )
        out.append(OutputFile(files.adapter_values, usage + dump_yaml_documents([adapter_values(plan)])))
    return out


TARGET = Target("k8s_serving", applies, render, needs=("triton",))
