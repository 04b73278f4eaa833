"""The pod of a serving unit for the k8s_serving target: the engine container and its probes, resources and
mounts, the init containers that fetch the weights, fill the Triton repository and build a TensorRT plan, and the
model-cache volume. Not a target itself."""

from __future__ import annotations

from collections.abc import Mapping

from ..deployment.nodes import cpu_quantity, memory_quantity
from .base import OutputFile, shell_words
from .engine_common import EngineUnit, unit_path
from .k8s_common import (
    gpu_node_selector,
    literal,
    pod_identity,
    pvc,
    quantity_bytes,
    secret_env,
    shm_volume,
    tolerations,
    weights_env_from,
)
from .k8s_serving_unit import ServingUnit, engine_command, object_meta


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
    if d.hugepages_bytes:  # EFA's buffers; the request defaults to this limit
        extra["hugepages-2Mi"] = memory_quantity(d.hugepages_bytes)
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


def repository_config_map(unit: ServingUnit, rendered: Mapping[str, OutputFile]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(unit, f"{unit.name}-model-repository"),
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


def pod_spec(unit: ServingUnit, leader: bool, rendered: Mapping[str, OutputFile] | None = None) -> dict:
    """Pod of a single-node replica (leader=True) or of an LWS leader/worker."""
    shm = shm_volume(unit.decided.shm_bytes)
    if leader:
        command, args = engine_command(unit)
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
