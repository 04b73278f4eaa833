"""Target: k8s_serving — `k8s/serving.yaml`, the Kubernetes serving stack of a serve plan.

Per serving unit (the whole service, or each stage of a multi-stage service): the engine as a Deployment, or a
LeaderWorkerSet when one replica spans nodes; a Service; an autoscaler on the engine's queue metric (HPA through a
Prometheus adapter, or a KEDA ScaledObject); a PodDisruptionBudget; a model-cache volume; a ServiceMonitor. With
the HPA, `k8s/prometheus-adapter-values.yaml` maps the queue metric into the custom metrics API.
Every number comes from `plan.serving` / `plan.hardware`; the few policies chosen here are named constants with a
reason, and the reasons also travel in `mlinfra.io/*` annotations so `kubectl describe` shows them.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from ..resolved import ResolvedPlan, Serving
from .base import OutputFile, dump_yaml_documents, shell_words

from .k8s_common import gpu_node_selector, labels, literal, pvc, quantity_bytes, secret_env, shm_volume, tolerations
from . import tgi, vllm
from .vllm import VLLM_VERSION

# Kubernetes documents in a fixed order: Helm's InstallOrder for built-in kinds, custom resources after.
KIND_ORDER = (
    "PodDisruptionBudget", "PersistentVolumeClaim", "Service", "Deployment", "HorizontalPodAutoscaler",
    "LeaderWorkerSet", "ScaledObject", "ServiceMonitor",
)

HTTP_PORT = 8000  # the engines' default API port (vLLM and Triton HTTP; TGI is told --port)
CACHE_MOUNT = "/models"  # HF_HOME and Triton's model repository live on the model-cache volume
ANNOTATION = "mlinfra.io/"  # prefix of the annotations that carry the reasons for chosen numbers

# Kubernetes probe defaults (periodSeconds 10, failureThreshold 3; kubernetes.io "Configure Liveness, Readiness
# and Startup Probes"), written out so a reviewer sees them.
PROBE_PERIOD_SECONDS = 10
PROBE_FAILURE_THRESHOLD = 3
# serving.startup_seconds is a bandwidth roofline (weights ÷ storage read bandwidth): a lower bound that leaves out
# process start, CUDA graph capture and KV-cache profiling. Our policy, not a measurement: budget twice the bound.
STARTUP_BUDGET_FACTOR = 2.0

# Model cache = weights + headroom: ext4 reserves 5 % of blocks for root (mke2fs -m default), and another 5 % holds
# tokenizer/config files and the changed files of a new revision while it downloads.
MODEL_CACHE_HEADROOM_FRACTION = 0.10
# Storage kinds that are shared filesystems: one ReadWriteMany cache for all replicas. Anything else (object
# storage, local NVMe) gets a per-pod ephemeral volume that each pod fills from the weights source.
SHARED_FILESYSTEMS = frozenset({"lustre", "nfs", "gpfs", "weka", "vast", "cephfs", "filestore", "efs", "azurefile"})

# HPA behaviour. Scale-up: the Kubernetes defaults (no stabilisation; +100 % or +4 pods per 15 s, the larger;
# kubernetes.io "Horizontal Pod Autoscaling", default behavior) — a queue that grows breaks TTFT within seconds.
SCALE_UP_PERCENT = 100
SCALE_UP_PODS = 4
SCALE_PERIOD_SECONDS = 15  # also the HPA sync period (kube-controller-manager --horizontal-pod-autoscaler-sync-period)
# Scale-down: a replica given back costs serving.startup_seconds to get again, so keep it until the load has been low
# at least that long (the break-even rule of ski rental, Karlin et al. 1988), never less than the Kubernetes default.
DEFAULT_SCALE_DOWN_WINDOW_SECONDS = 300
METRICS_SCRAPE_INTERVAL = f"{SCALE_PERIOD_SECONDS}s"  # fresh queue samples at every HPA sync

# Prometheus that KEDA queries: the Service prometheus-operator creates for every Prometheus ("prometheus-operated")
# in the namespace kube-prometheus-stack is usually installed in. An assumption: edit it for another install.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"

# Pinned engine images (release tags of the upstream images); spec.cluster.kubernetes.image overrides.
ENGINE_IMAGES = {
    "vllm": f"vllm/vllm-openai:v{VLLM_VERSION}",  # the release whose flags the vLLM target emits
    "tgi": "ghcr.io/huggingface/text-generation-inference:3.3.6",
    "triton": "nvcr.io/nvidia/tritonserver:25.10-vllm-python-py3",
}
# /dev/shm for NCCL and vLLM's shared-memory broadcast queue: the size LWS's vLLM GPU example gives
# (kubernetes-sigs/lws docs/examples/vllm/GPU/lws.yaml, sizeLimit 15Gi); Docker's 64 MiB default is too small.
SHM_BYTES = 15 * 2**30
RAY_PORT = 6379  # Ray head's default GCS port (ray start --head)
LWS_LEADER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on the leader pod (LWS API)


@dataclass(frozen=True)
class Engine:
    """What differs between engines: health path, queue metric (Prometheus name and custom-metrics API name)."""

    health_path: str
    queue_metric: str
    adapter_metric: str
    metrics_port: int = HTTP_PORT


ENGINES = {
    # vLLM: GET /health; vllm:num_requests_waiting gauge (vllm/v1/metrics/loggers.py).
    "vllm": Engine("/health", "vllm:num_requests_waiting", "vllm_num_requests_waiting"),
    # TGI: GET /health; tgi_queue_size gauge (router/src/server.rs).
    "tgi": Engine("/health", "tgi_queue_size", "tgi_queue_size"),
    # Triton: /v2/health/ready (KServe v2 protocol); pending-request gauge on the metrics port 8002.
    "triton": Engine("/v2/health/ready", "nv_inference_pending_request_count", "nv_inference_pending_request_count", 8002),
}


@dataclass(frozen=True)
class ServingUnit:
    """One independently scaled deployment: the whole service, or one stage of a multi-stage service.

    `plan` is a view of the ResolvedPlan whose model/hardware/serving sections are this unit's, so the shared
    helpers (node selector, labels...) that read a plan see the unit's own GPU.
    """

    name: str
    component: str
    plan: ResolvedPlan
    input_queue: str = ""  # multi-stage: the queue this stage reads from (named in plan.json's stages)
    output_queue: str = ""  # and the one the next stage reads from

    @property
    def serving(self) -> Serving:
        return self.plan.serving

    @property
    def engine(self) -> Engine:
        return ENGINES[self.serving.engine]

    @property
    def multi_node(self) -> bool:
        return self.serving.nodes_per_replica > 1


def applies(plan: ResolvedPlan) -> bool:
    return plan.workload == "serve" and plan.serving is not None and plan.spec.cluster.scheduler in ("kubernetes", "both")


def object_name(*parts: str) -> str:
    """A DNS-1035 label (Service names): ≤ 63 characters, starting with a letter; shortened with a stable hash."""
    name = "-".join(parts)
    if not name[0].isalpha():
        name = f"m-{name}"
    if len(name) > 63:
        name = f"{name[:54].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


def serving_units(plan: ResolvedPlan) -> list[ServingUnit]:
    """The units to deploy: one per stage of a multi-stage service, else the service itself."""
    if not plan.stages:
        return [ServingUnit(object_name(plan.name), "server", plan)]
    outputs = [stage.queue for stage in plan.stages[1:]] + [""]
    return [
        ServingUnit(object_name(plan.name, stage.name), stage.name,
                    plan.model_copy(update={"model": stage.model, "hardware": stage.hardware, "serving": stage.serving,
                                            "memory_per_gpu_bytes": stage.memory_per_gpu_bytes}),
                    input_queue=stage.queue, output_queue=output)
        for stage, output in zip(plan.stages, outputs)
    ]


def gpus_per_pod(serving: Serving) -> int:
    """GPUs of one pod: the whole replica on one node; with a LeaderWorkerSet, TP per pod and one pod per PP stage."""
    if serving.nodes_per_replica == 1:
        return serving.gpus_per_replica
    if serving.pp != serving.nodes_per_replica or serving.tp * serving.pp != serving.gpus_per_replica:
        raise ValueError(
            f"a multi-node replica must be one pipeline stage per node with TP GPUs each: got TP={serving.tp}, "
            f"PP={serving.pp}, {serving.nodes_per_replica} nodes, {serving.gpus_per_replica} GPUs per replica")
    return serving.tp


def startup_failure_threshold(serving: Serving) -> int:
    """Startup probe failures allowed, so that failureThreshold × periodSeconds ≥ budget ≥ startup_seconds."""
    return max(1, math.ceil(STARTUP_BUDGET_FACTOR * serving.startup_seconds / PROBE_PERIOD_SECONDS))


def model_cache_bytes(serving: Serving) -> int:
    return math.ceil(serving.weights_bytes * (1 + MODEL_CACHE_HEADROOM_FRACTION))


def scale_down_window_seconds(serving: Serving) -> int:
    return max(DEFAULT_SCALE_DOWN_WINDOW_SECONDS, math.ceil(serving.startup_seconds))


def _shared_cache(unit: ServingUnit) -> bool:
    return unit.plan.hardware.storage in SHARED_FILESYSTEMS


def _decimal(value: float) -> str:
    """A Kubernetes quantity / KEDA threshold for a plain number: 4 -> "4", 2.5 -> "2500m"."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _threshold(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# ----------------------------------------------------------------------------------------------- engine commands
def model_word(model_id: str) -> str:
    """The model as a positional argument that argparse cannot take for a flag. Hub ids never start with "-"; a local
    path that does is the same path with "./" before it."""
    return f"./{model_id}" if model_id.startswith("-") else model_id


def vllm_args(unit: ServingUnit) -> list[str]:
    """`vllm serve` arguments: exactly those of the vLLM target (vllm/serve.sh), so no two files disagree."""
    return vllm.serve_args(unit.plan)


def tgi_args(unit: ServingUnit) -> list[str]:
    """text-generation-launcher arguments: exactly those of the TGI target (tgi/launcher.sh)."""
    return tgi.launcher_words(unit.plan)


def triton_args(unit: ServingUnit) -> list[str]:
    """tritonserver over the model repository the triton target emits, copied onto the model-cache volume."""
    return [f"--model-repository={CACHE_MOUNT}/model_repository", f"--http-port={HTTP_PORT}",
            f"--metrics-port={ENGINES['triton'].metrics_port}"]


def _command(unit: ServingUnit) -> tuple[list[str], list[str]]:
    """(command, args) of the engine container of a single-pod replica or of an LWS leader."""
    engine = unit.serving.engine
    if engine == "vllm":
        if not unit.multi_node:
            return ["vllm", "serve"], vllm_args(unit)
        # The leader starts the Ray head, waits until every worker's GPUs joined the cluster, then serves.
        ready = (f'import ray, sys; ray.init(address="auto", logging_level="ERROR"); '
                 f'sys.exit(ray.cluster_resources().get("GPU", 0) < {unit.serving.gpus_per_replica})')
        script = (f"ray start --head --port={RAY_PORT} && until python3 -c {shell_words([ready])}; "
                  f"do sleep {PROBE_PERIOD_SECONDS}; done && exec vllm serve {shell_words(vllm_args(unit))}")
        return ["bash", "-c"], [script]
    if unit.multi_node:
        raise ValueError(f"engine {engine} cannot span nodes: a replica needs {unit.serving.nodes_per_replica} nodes")
    if engine == "tgi":
        return ["text-generation-launcher"], tgi_args(unit)
    return ["tritonserver"], triton_args(unit)


# ----------------------------------------------------------------------------------------------- documents
def _meta(unit: ServingUnit, name: str | None = None, annotations: dict[str, str] | None = None) -> dict:
    meta = {"name": name or unit.name, "namespace": unit.plan.spec.cluster.kubernetes.namespace,
            "labels": labels(unit.plan, unit.component)}
    if annotations:
        meta["annotations"] = annotations
    return meta


def _selector(unit: ServingUnit) -> dict[str, str]:
    return {k: v for k, v in labels(unit.plan, unit.component).items()
            if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")}


def _cache_volume(unit: ServingUnit) -> dict:
    if _shared_cache(unit):
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": f"{unit.name}-model-cache"}}
    claim = pvc(f"{unit.name}-model-cache", model_cache_bytes(unit.serving), unit.plan, "ReadWriteOnce")
    return {"name": "model-cache", "ephemeral": {"volumeClaimTemplate": {"spec": claim["spec"]}}}


def _probe(unit: ServingUnit, failure_threshold: int) -> dict:
    return {"httpGet": {"path": unit.engine.health_path, "port": "http"},
            "periodSeconds": PROBE_PERIOD_SECONDS, "failureThreshold": failure_threshold}


def _pod_spec(unit: ServingUnit, leader: bool) -> dict:
    """Pod of a single-node replica (leader=True) or of an LWS leader/worker."""
    s = unit.serving
    shm = shm_volume(SHM_BYTES)
    if leader:
        command, args = _command(unit)
    else:
        command, args = ["bash", "-c"], [f"exec ray start --block --address=\"$LWS_LEADER_ADDRESS:{RAY_PORT}\""]
    container = {
        "name": "engine" if leader else "worker",
        "image": unit.plan.spec.cluster.kubernetes.image or ENGINE_IMAGES[s.engine],
        # literal(): the kubelet would expand a `$(VAR)` in a model id or queue name before the engine sees it
        "command": [literal(word) for word in command],
        "args": [literal(word) for word in args],
        "env": [*secret_env(unit.plan), {"name": "HF_HOME", "value": f"{CACHE_MOUNT}/hf"},
                *([{"name": "MLINFRA_INPUT_QUEUE", "value": literal(unit.input_queue)}] if unit.input_queue else []),
                *([{"name": "MLINFRA_OUTPUT_QUEUE", "value": literal(unit.output_queue)}] if unit.output_queue else [])],
        "resources": {"limits": {"nvidia.com/gpu": gpus_per_pod(s)}},
        "volumeMounts": [{"name": "model-cache", "mountPath": CACHE_MOUNT},
                         {"name": shm["name"], "mountPath": "/dev/shm"}],
    }
    if leader:
        ports = [{"name": "http", "containerPort": HTTP_PORT}]
        if unit.engine.metrics_port != HTTP_PORT:
            ports.append({"name": "metrics", "containerPort": unit.engine.metrics_port})
        container["ports"] = ports
        container["startupProbe"] = _probe(unit, startup_failure_threshold(s))
        container["readinessProbe"] = _probe(unit, PROBE_FAILURE_THRESHOLD)
        container["livenessProbe"] = _probe(unit, PROBE_FAILURE_THRESHOLD)
    spec = {"containers": [container], "volumes": [_cache_volume(unit), shm],
            "nodeSelector": gpu_node_selector(unit.plan), "tolerations": tolerations(unit.plan)}
    return spec


def _workload_annotations(unit: ServingUnit) -> dict[str, str]:
    s = unit.serving
    budget = startup_failure_threshold(s) * PROBE_PERIOD_SECONDS
    return {
        f"{ANNOTATION}startup-budget": (f"{budget} s = {startup_failure_threshold(s)} × {PROBE_PERIOD_SECONDS} s ≥ "
                                        f"{STARTUP_BUDGET_FACTOR:g} × {s.startup_seconds:.0f} s weight load (weights ÷ storage bandwidth)"),
        f"{ANNOTATION}replicas": (f"left to the autoscaler ({s.min_replicas}..{s.max_replicas}); a fixed count here "
                                  f"would be reset by every apply"),
    }


def _workload(unit: ServingUnit) -> dict:
    s = unit.serving
    template_labels = labels(unit.plan, unit.component)
    if not unit.multi_node:
        return {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(unit, annotations={
                **_workload_annotations(unit),
                f"{ANNOTATION}rollout": "surge one replica, none unavailable: capacity never drops below the SLO-sized level",
            }),
            "spec": {
                "selector": {"matchLabels": _selector(unit)},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": template_labels}, "spec": _pod_spec(unit, leader=True)},
            },
        }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": _meta(unit, annotations={
            **_workload_annotations(unit),
            f"{ANNOTATION}group": f"{s.nodes_per_replica} pods per replica (PP={s.pp}), {gpus_per_pod(s)} GPUs each (TP={s.tp})",
        }),
        "spec": {
            "leaderWorkerTemplate": {
                "size": s.pp,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": template_labels}, "spec": _pod_spec(unit, leader=True)},
                "workerTemplate": {"metadata": {"labels": template_labels}, "spec": _pod_spec(unit, leader=False)},
            },
        },
    }


def _service(unit: ServingUnit) -> dict:
    selector = _selector(unit)
    if unit.multi_node:
        selector[LWS_LEADER_INDEX_LABEL] = "0"  # only the leader serves HTTP
    ports = [{"name": "http", "port": HTTP_PORT, "targetPort": "http"}]
    if unit.engine.metrics_port != HTTP_PORT:
        ports.append({"name": "metrics", "port": unit.engine.metrics_port, "targetPort": "metrics"})
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(unit),
            "spec": {"type": "ClusterIP", "selector": selector, "ports": ports}}


def _target_ref(unit: ServingUnit) -> dict:
    if unit.multi_node:
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": unit.name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": unit.name}


def _behavior(unit: ServingUnit) -> dict:
    return {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": SCALE_UP_PERCENT, "periodSeconds": SCALE_PERIOD_SECONDS},
            {"type": "Pods", "value": SCALE_UP_PODS, "periodSeconds": SCALE_PERIOD_SECONDS}]},
        "scaleDown": {"stabilizationWindowSeconds": scale_down_window_seconds(unit.serving), "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": SCALE_PERIOD_SECONDS}]},
    }


def _autoscaler_annotations(unit: ServingUnit) -> dict[str, str]:
    s = unit.serving
    return {
        f"{ANNOTATION}queue-target": (f"{s.queue_target_per_replica:g} waiting requests per replica (from sizing: capacity "
                                      f"{s.requests_per_second_per_replica:g} req/s per replica within the latency SLO)"),
        f"{ANNOTATION}scale-up": (f"no stabilisation, +{SCALE_UP_PERCENT} % or +{SCALE_UP_PODS} pods per "
                                  f"{SCALE_PERIOD_SECONDS} s: a growing queue breaks TTFT within seconds"),
        f"{ANNOTATION}scale-down": (f"{scale_down_window_seconds(s)} s stabilisation: a replica given back costs "
                                    f"{s.startup_seconds:.0f} s of weight loading to get again"),
    }


def queue_query(unit: ServingUnit) -> str:
    """PromQL: the unit's total waiting requests (the autoscaler divides by replicas)."""
    namespace = unit.plan.spec.cluster.kubernetes.namespace
    return f'sum({unit.engine.queue_metric}{{namespace="{namespace}",service="{unit.name}"}})'


def _autoscaler(unit: ServingUnit) -> dict:
    s = unit.serving
    if unit.plan.spec.cluster.kubernetes.autoscaler == "keda":
        return {
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": _meta(unit, annotations=_autoscaler_annotations(unit)),
            "spec": {
                "scaleTargetRef": _target_ref(unit),
                "minReplicaCount": s.min_replicas, "maxReplicaCount": s.max_replicas,
                "pollingInterval": SCALE_PERIOD_SECONDS,
                "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(unit)}},
                "triggers": [{"type": "prometheus", "metricType": "AverageValue", "metadata": {
                    "serverAddress": PROMETHEUS_URL, "query": queue_query(unit),
                    "threshold": _threshold(s.queue_target_per_replica)}}],
            },
        }
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(unit, annotations=_autoscaler_annotations(unit)),
        "spec": {
            "scaleTargetRef": _target_ref(unit),
            "minReplicas": s.min_replicas, "maxReplicas": s.max_replicas,
            "metrics": [{"type": "Pods", "pods": {
                "metric": {"name": unit.engine.adapter_metric},
                "target": {"type": "AverageValue", "averageValue": _decimal(s.queue_target_per_replica)}}}],
            "behavior": _behavior(unit),
        },
    }


def _pdb(unit: ServingUnit) -> dict:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": _meta(unit, annotations={
            f"{ANNOTATION}max-unavailable": "one pod at a time: a drain takes out one replica (one LWS group) at most"}),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _selector(unit)}},
    }


def _model_cache(unit: ServingUnit) -> dict:
    doc = pvc(f"{unit.name}-model-cache", model_cache_bytes(unit.serving), unit.plan, "ReadWriteMany")
    doc["metadata"]["labels"] = labels(unit.plan, unit.component)
    doc["metadata"]["annotations"] = {f"{ANNOTATION}size": (
        f"{quantity_bytes(model_cache_bytes(unit.serving))} = weights {unit.serving.weights_bytes} B + "
        f"{MODEL_CACHE_HEADROOM_FRACTION:.0%} (filesystem reserve, tokenizer, revision updates); ReadWriteMany: "
        f"every replica reads one copy from the shared filesystem")}
    return doc


def _service_monitor(unit: ServingUnit) -> dict:
    port = "http" if unit.engine.metrics_port == HTTP_PORT else "metrics"
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": _meta(unit),
        "spec": {"selector": {"matchLabels": _selector(unit)},
                 "endpoints": [{"port": port, "path": "/metrics", "interval": METRICS_SCRAPE_INTERVAL}]},
    }


def unit_documents(unit: ServingUnit) -> list[dict]:
    """Every document of one serving unit (unsorted); a multi-stage service calls this once per stage."""
    gpus_per_pod(unit.serving)  # refuses an inconsistent multi-node shape before anything is built
    docs = [_pdb(unit), _service(unit), _workload(unit), _autoscaler(unit), _service_monitor(unit)]
    if _shared_cache(unit):
        docs.append(_model_cache(unit))
    return docs


def serving_documents(plan: ResolvedPlan) -> list[dict]:
    docs = [doc for unit in serving_units(plan) for doc in unit_documents(unit)]
    return sorted(docs, key=lambda d: KIND_ORDER.index(d["kind"]))  # stable: units keep their order within a kind


def adapter_values(plan: ResolvedPlan) -> dict:
    """prometheus-adapter Helm values: each engine's queue gauge as a per-pod custom metric for the HPA."""
    rules = []
    for engine in sorted({unit.serving.engine for unit in serving_units(plan)}):
        e = ENGINES[engine]
        rules.append({
            "seriesQuery": f'{e.queue_metric}{{namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{e.queue_metric}$", "as": e.adapter_metric},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        })
    return {"rules": {"default": False, "custom": rules}}


def render(plan: ResolvedPlan) -> list[OutputFile]:
    files = [OutputFile("k8s/serving.yaml", dump_yaml_documents(serving_documents(plan)))]
    if plan.spec.cluster.kubernetes.autoscaler == "hpa":
        files.append(OutputFile("k8s/prometheus-adapter-values.yaml", dump_yaml_documents([adapter_values(plan)])))
    return files
