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
from dataclasses import dataclass

from ..deployment.nodes import cpu_quantity, memory_quantity
from ..deployment.serving.pods import MODEL_CACHE_HEADROOM_FRACTION, STARTUP_BUDGET_FACTOR
from ..deployment.units import unit_views
from ..plan import deployment as decided_types
from ..plan.resolved import ResolvedPlan, Serving
from .base import OutputFile, Target, dump_yaml_documents, shell_words
from .engine_common import EngineUnit, tgi_launcher_words, unit_path, vllm_serve_args
from .k8s_common import (
    gpu_node_selector,
    labels,
    literal,
    pod_identity,
    pvc,
    quantity_bytes,
    secret_env,
    service_account,
    shm_volume,
    tolerations,
    weights_env_from,
)

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

ANNOTATION = "mlinfra.io/"  # prefix of the annotations that carry the reasons for chosen numbers

LWS_LEADER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on the leader pod (LWS API)


@dataclass(frozen=True)
class ServingUnit:
    """One independently scaled deployment: the whole service, or one stage of a multi-stage service.

    `plan` is a view of the ResolvedPlan whose model/hardware/serving sections are this unit's, so the shared
    helpers (node selector, labels...) that read a plan see the unit's own GPU; `decided` holds the unit's
    deployment decisions (plan.deployment.kubernetes.serving) and `engine_decision` its engine arguments.
    """

    plan: ResolvedPlan
    decided: decided_types.ServingUnit
    engine_decision: decided_types.Engine

    @property
    def name(self) -> str:
        return self.decided.name

    @property
    def component(self) -> str:
        return self.decided.component

    @property
    def input_queue(self) -> str:
        return self.decided.input_queue

    @property
    def output_queue(self) -> str:
        return self.decided.output_queue

    @property
    def serving(self) -> Serving:
        return self.plan.serving

    @property
    def engine(self) -> decided_types.ServingUnit:
        """Health path, queue metric and ports of the unit's engine."""
        return self.decided

    @property
    def multi_node(self) -> bool:
        return self.decided.pods_per_replica > 1


def applies(plan: ResolvedPlan) -> bool:
    d = plan.deployment
    return (
        plan.serving is not None
        and d is not None
        and d.scheduler in ("kubernetes", "both")
        and bool(d.kubernetes.serving)
    )


def serving_units(plan: ResolvedPlan) -> list[ServingUnit]:
    """The units to deploy: one per stage of a multi-stage service, else the service itself."""
    units = {u.stage: u for u in plan.deployment.kubernetes.serving}
    engines = {e.stage: e for e in plan.deployment.engines}
    return [ServingUnit(v.plan, units[v.stage], engines[v.stage]) for v in unit_views(plan)]


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
    return vllm_serve_args(unit.engine_decision)


def tgi_args(unit: ServingUnit) -> list[str]:
    """text-generation-launcher arguments: exactly those of the TGI target (tgi/launcher.sh)."""
    return tgi_launcher_words(unit.engine_decision)


def triton_args(unit: ServingUnit) -> list[str]:
    """tritonserver over the model repository the triton target emits, copied onto the model-cache volume."""
    return [
        f"--model-repository={unit.plan.deployment.kubernetes.model_cache_mount}/model_repository",
        f"--http-port={unit.decided.http_port}",
        f"--metrics-port={unit.decided.metrics_port}",
        f"--exit-timeout-secs={unit.engine_decision.exit_timeout_seconds}",
    ]


def _command(unit: ServingUnit) -> tuple[list[str], list[str]]:
    """(command, args) of the engine container of a single-pod replica or of an LWS leader."""
    engine = unit.serving.engine
    if engine == "vllm":
        if not unit.multi_node:
            return ["vllm", "serve"], vllm_args(unit)
        # The leader starts the Ray head, waits until every worker's GPUs joined the cluster, then serves.
        ready = (
            f'import ray, sys; ray.init(address="auto", logging_level="ERROR"); '
            f'sys.exit(ray.cluster_resources().get("GPU", 0) < {unit.serving.gpus_per_replica})'
        )
        script = (
            f"ray start --head --port={unit.engine_decision.ray_port} && until python3 -c {shell_words([ready])}; "
            f"do sleep {unit.decided.probe_period_seconds}; done && exec vllm serve {shell_words(vllm_args(unit))}"
        )
        return ["bash", "-c"], [script]
    if unit.multi_node:
        raise ValueError(f"engine {engine} cannot span nodes: a replica needs {unit.serving.nodes_per_replica} nodes")
    if engine == "tgi":
        return ["text-generation-launcher"], tgi_args(unit)
    return ["tritonserver"], triton_args(unit)


# ----------------------------------------------------------------------------------------------- documents
def _meta(unit: ServingUnit, name: str | None = None, annotations: dict[str, str] | None = None) -> dict:
    meta = {
        "name": name or unit.name,
        "namespace": unit.plan.deployment.kubernetes.namespace,
        "labels": labels(unit.plan, unit.component),
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


def _selector(unit: ServingUnit) -> dict[str, str]:
    return {
        k: v
        for k, v in labels(unit.plan, unit.component).items()
        if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
    }


def _cache_volume(unit: ServingUnit) -> dict:
    if unit.decided.shared_cache:
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": f"{unit.name}-model-cache"}}
    claim = pvc(f"{unit.name}-model-cache", unit.decided.model_cache_bytes, unit.plan, "ReadWriteOnce")
    return {"name": "model-cache", "ephemeral": {"volumeClaimTemplate": {"spec": claim["spec"]}}}


def _probe(unit: ServingUnit, failure_threshold: int) -> dict:
    return {
        "httpGet": {"path": unit.engine.health_path, "port": "http"},
        "periodSeconds": unit.decided.probe_period_seconds,
        "failureThreshold": failure_threshold,
    }


# The init container's program: download the checkpoint files into the Hugging Face cache (HF_HOME on the model-cache
# volume), where the engine then finds them; the repo id and the patterns arrive as argv, never inside the code.
FETCH_SCRIPT = (
    "import sys; from huggingface_hub import snapshot_download; "
    "snapshot_download(repo_id=sys.argv[1], allow_patterns=sys.argv[2:])"
)


def _cache_env(unit: ServingUnit) -> list[dict]:
    return [
        *secret_env(unit.plan),
        {"name": "HF_HOME", "value": f"{unit.plan.deployment.kubernetes.model_cache_mount}/hf"},
    ]


def _init_containers(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> list[dict]:
    init = [_fetch_container(unit)] if unit.decided.fetch_weights else []
    if unit.decided.repository_init_image:
        init.append(_fill_container(unit, rendered))
    if unit.decided.engine_build_image:
        init.append(_build_container(unit))
    return init


def _build_container(unit: ServingUnit) -> dict:
    """Builds the TensorRT plan from the exported ONNX file on the device (TensorRT of the server's release)."""
    root = _repository_root(unit)
    return {
        "name": "build-engine",
        "image": unit.decided.engine_build_image,
        "command": ["bash", f"{root}/serve.sh", "--build-only"],
        "volumeMounts": [{"name": "model-cache", "mountPath": unit.plan.deployment.kubernetes.model_cache_mount}],
        "resources": {"limits": {"nvidia.com/gpu": unit.decided.engine_build_gpus}},
    }


def _fetch_container(unit: ServingUnit) -> dict:
    """Downloads the Hub checkpoint before the engine starts: no probe races the download."""
    return {
        "name": "fetch-weights",
        "image": unit.decided.image,
        "command": ["python3", "-c", FETCH_SCRIPT],
        "args": [literal(unit.decided.weights_location), *unit.decided.fetch_patterns],
        "env": _cache_env(unit),
        "volumeMounts": [{"name": "model-cache", "mountPath": unit.plan.deployment.kubernetes.model_cache_mount}],
    }


def _resources(unit: ServingUnit) -> dict:
    """CPU request without a limit, host memory request = limit, the GPUs, and the RDMA devices of multi-node pods."""
    d = unit.decided
    extra = {d.rdma_resource: d.rdma_count} if d.rdma_resource else {}
    memory = (
        memory_quantity(d.memory_bytes) if d.node is not None and not d.node_arch else quantity_bytes(d.memory_bytes)
    )
    return {
        "requests": {"cpu": cpu_quantity(d.cpu_millicores), "memory": memory},
        "limits": {"memory": memory, "nvidia.com/gpu": d.gpus_per_pod, **extra},
    }


# ----------------------------------------------------------------------------------------------- Triton repository
REPOSITORY_SOURCE = "/repository-source"  # where the ConfigMap with the generated repository is mounted


def _repository_root(unit: ServingUnit) -> str:
    return f"{unit.plan.deployment.kubernetes.model_cache_mount}/model_repository"


def repository_files(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> list[tuple[str, OutputFile]]:
    """(path inside the repository, file) of every file the triton target rendered for this unit."""
    prefix = unit_path("triton", EngineUnit(unit.plan, unit.engine_decision), "") + "/"
    return [(path[len(prefix) :], f) for path, f in sorted(rendered.items()) if path.startswith(prefix)]


def _config_map_key(path: str) -> str:
    return path.replace("/", "__")


def _repository_config_map(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(unit, f"{unit.name}-model-repository"),
        "data": {_config_map_key(path): f.text for path, f in repository_files(unit, rendered)},
    }


def _repository_volume(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> dict:
    items = [
        {"key": _config_map_key(path), "path": path, **({"mode": 0o755} if f.mode & 0o111 else {})}
        for path, f in repository_files(unit, rendered)
    ]
    return {"name": "repository-source", "configMap": {"name": f"{unit.name}-model-repository", "items": items}}


def _fill_container(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> dict:
    """Copies the generated repository into the model cache, then fetches or exports the model file (serve.sh)."""
    d, root = unit.decided, _repository_root(unit)
    steps = [
        f"install -D -m {'0755' if f.mode & 0o111 else '0644'} {shell_words([f'{REPOSITORY_SOURCE}/{path}', f'{root}/{path}'])}"
        for path, f in repository_files(unit, rendered)
    ]
    if d.repository_init_packages:
        steps.append(f"python3 -m pip install --no-cache-dir {shell_words(d.repository_init_packages)}")
    steps.append(f"bash {shell_words([f'{root}/serve.sh'])} --fetch-only")
    container = {
        "name": "fill-repository",
        "image": d.repository_init_image,
        "command": ["bash", "-c"],
        "args": [literal("set -euo pipefail; " + "; ".join(steps))],
        "env": _cache_env(unit),
        "volumeMounts": [
            {"name": "model-cache", "mountPath": unit.plan.deployment.kubernetes.model_cache_mount},
            {"name": "repository-source", "mountPath": REPOSITORY_SOURCE, "readOnly": True},
        ],
    }
    if d.repository_init_gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": d.repository_init_gpus}}
    if d.weights_source == "object-store" and (env_from := weights_env_from(unit.plan)):
        container["envFrom"] = env_from  # serve.sh --fetch-only copies the model file from object storage
    return container


def _pod_spec(unit: ServingUnit, leader: bool, rendered: Mapping[str, OutputFile] | None = None) -> dict:
    """Pod of a single-node replica (leader=True) or of an LWS leader/worker."""
    shm = shm_volume(unit.decided.shm_bytes)
    if leader:
        command, args = _command(unit)
    else:
        command, args = (
            ["bash", "-c"],
            [f'exec ray start --block --address="$LWS_LEADER_ADDRESS:{unit.engine_decision.ray_port}"'],
        )
    container = {
        "name": "engine" if leader else "worker",
        "image": unit.decided.image,
        # literal(): the kubelet would expand a `$(VAR)` in a model id or queue name before the engine sees it
        "command": [literal(word) for word in command],
        "args": [literal(word) for word in args],
        "env": [
            *_cache_env(unit),
            *([{"name": "MLINFRA_INPUT_QUEUE", "value": literal(unit.input_queue)}] if unit.input_queue else []),
            *([{"name": "MLINFRA_OUTPUT_QUEUE", "value": literal(unit.output_queue)}] if unit.output_queue else []),
        ],
        "resources": _resources(unit),
        "volumeMounts": [
            {"name": "model-cache", "mountPath": unit.plan.deployment.kubernetes.model_cache_mount},
            {"name": shm["name"], "mountPath": "/dev/shm"},
        ],
    }
    if unit.decided.weights_source == "object-store" and (env_from := weights_env_from(unit.plan)):
        container["envFrom"] = env_from  # the engine streams the weights from object storage
    if unit.decided.nccl_env:
        container["env"] += [{"name": e.name, "value": literal(e.value)} for e in unit.decided.nccl_env]
    if unit.decided.rdma_resource:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}  # RDMA memory registration
    if leader:
        container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(unit.decided.pre_stop_seconds)]}}}
        ports = [{"name": "http", "containerPort": unit.decided.http_port}]
        if unit.engine.metrics_port != unit.decided.http_port:
            ports.append({"name": "metrics", "containerPort": unit.engine.metrics_port})
        container["ports"] = ports
        container["startupProbe"] = _probe(unit, unit.decided.startup_failure_threshold)
        container["readinessProbe"] = _probe(unit, unit.decided.probe_failure_threshold)
        container["livenessProbe"] = _probe(unit, unit.decided.probe_failure_threshold)
    spec = {
        "containers": [container],
        "volumes": [_cache_volume(unit), shm],
        "terminationGracePeriodSeconds": unit.decided.termination_grace_seconds,
        **({"initContainers": init} if (init := _init_containers(unit, rendered or {})) else {}),
        "nodeSelector": {
            **gpu_node_selector(unit.plan),
            **({"kubernetes.io/arch": unit.decided.node_arch} if unit.decided.node_arch else {}),
        },
        "tolerations": tolerations(unit.plan),
        **pod_identity(unit.plan),
    }
    if unit.decided.repository_init_image:
        spec["volumes"].append(_repository_volume(unit, rendered or {}))
    return spec


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
            "metadata": _meta(
                unit,
                annotations={
                    **_workload_annotations(unit),
                    f"{ANNOTATION}rollout": "surge one replica, none unavailable: capacity never drops below the SLO-sized level",
                },
            ),
            "spec": {
                "selector": {"matchLabels": _selector(unit)},
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
                    "spec": _pod_spec(unit, leader=True, rendered=rendered),
                },
            },
        }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(
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
                    "spec": _pod_spec(unit, leader=True, rendered=rendered),
                },
                "workerTemplate": {"metadata": {"labels": template_labels}, "spec": _pod_spec(unit, leader=False)},
            },
        },
    }


def _service(unit: ServingUnit) -> dict:
    selector = _selector(unit)
    if unit.multi_node:
        selector[LWS_LEADER_INDEX_LABEL] = "0"  # only the leader serves HTTP
    ports = [{"name": "http", "port": unit.decided.http_port, "targetPort": "http"}]
    if unit.engine.metrics_port != unit.decided.http_port:
        ports.append({"name": "metrics", "port": unit.engine.metrics_port, "targetPort": "metrics"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(unit),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


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


def _autoscaler(unit: ServingUnit) -> dict:
    s = unit.serving
    if unit.plan.deployment.kubernetes.autoscaler == "keda":
        return {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": _meta(unit, annotations=_autoscaler_annotations(unit)),
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
        "metadata": _meta(unit, annotations=_autoscaler_annotations(unit)),
        "spec": {
            "scaleTargetRef": _target_ref(unit),
            "minReplicas": unit.decided.min_replicas,
            "maxReplicas": unit.decided.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": unit.engine.adapter_metric},
                        "target": {"type": "AverageValue", "averageValue": _decimal(s.queue_target_per_replica)},
                    },
                }
            ],
            "behavior": _behavior(unit),
        },
    }


def _pdb(unit: ServingUnit) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(
            unit,
            annotations={
                f"{ANNOTATION}max-unavailable": "one pod at a time: a drain takes out one replica (one LWS group) at most"
            },
        ),
        "spec": {
            "maxUnavailable": unit.decided.disruption_max_unavailable,
            "selector": {"matchLabels": _selector(unit)},
        },
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
        "metadata": _meta(unit),
        "spec": {
            "selector": {"matchLabels": _selector(unit)},
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
    docs = [_pdb(unit), _service(unit), _workload(unit, rendered), _autoscaler(unit), _service_monitor(unit)]
    if unit.decided.repository_init_image:
        docs.append(_repository_config_map(unit, rendered))
    if unit.decided.shared_cache:
        docs.append(_model_cache(unit))
    return docs


def serving_documents(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[dict]:
    docs = service_account(plan, "server") + [
        doc for unit in serving_units(plan) for doc in unit_documents(unit, rendered)
    ]
    return sorted(docs, key=lambda d: KIND_ORDER.index(d["kind"]))  # stable: units keep their order within a kind


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
