"""Kubernetes pieces shared by the training and serving targets: labels, GPU placement, secrets, volumes.
Not a target (not in the registry); values come from `plan.deployment.kubernetes`.

Every function returns plain dicts (dumped by `base.dump_yaml_documents`), so a value from the plan is
always a YAML scalar and never YAML syntax.
"""

from __future__ import annotations

import math

from ..plan.probe import Probe
from ..plan.resolved import ResolvedPlan

MANAGED_BY = "mlinfra-compile"
# The key the Secret named by `cluster.kubernetes.secret_name` holds the Hugging Face token under.
HF_TOKEN_KEY = "HF_TOKEN"
GIB = 2**30


def labels(plan: ResolvedPlan, component: str) -> dict[str, str]:
    """The recommended app.kubernetes.io labels (kubernetes.io/docs/concepts/overview/working-with-objects/common-labels)."""
    return {
        "app.kubernetes.io/name": plan.name,
        "app.kubernetes.io/instance": plan.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": plan.name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def gpu_node_selector(plan: ResolvedPlan) -> dict[str, str]:
    """The plan's extra node labels plus the GPU product label that NVIDIA GPU feature discovery sets."""
    return {
        **plan.deployment.kubernetes.node_selector,
        "nvidia.com/gpu.product": plan.hardware.gpu_spec.k8s_product_label,
    }


def tolerations(plan: ResolvedPlan) -> list[dict]:
    return [dict(t) for t in plan.deployment.kubernetes.tolerations]


def secret_env(plan: ResolvedPlan) -> list[dict]:
    """HF_TOKEN from the plan's Secret, by reference only (optional: public models need no token)."""
    ref = {"name": plan.deployment.kubernetes.secret_name, "key": HF_TOKEN_KEY, "optional": True}
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]


def pod_identity(plan: ResolvedPlan) -> dict:
    """serviceAccountName and imagePullSecrets of a pod spec, where the plan names them (by reference only)."""
    k8s = plan.deployment.kubernetes
    out: dict = {}
    if k8s.service_account:
        out["serviceAccountName"] = k8s.service_account
    if k8s.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": name} for name in k8s.image_pull_secrets]
    return out


def weights_env_from(plan: ResolvedPlan) -> list[dict]:
    """envFrom of a container that reads object-storage weights: the object-store Secret's keys, by reference."""
    secret = plan.deployment.kubernetes.object_store_secret
    return [{"secretRef": {"name": secret}}] if secret else []


def service_account(plan: ResolvedPlan, component: str) -> list[dict]:
    """The workload-identity ServiceAccount, when the plan binds one (else nothing: the namespace's default)."""
    k8s = plan.deployment.kubernetes
    if not k8s.service_account:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": k8s.service_account,
                "namespace": k8s.namespace,
                "labels": labels(plan, component),
                "annotations": dict(k8s.service_account_annotations),
            },
        }
    ]


def literal(text: str) -> str:
    """`text` for a container's env `value`, `command` or `args`, where the kubelet expands `$(VAR)` references
    to earlier variables and reads `$$` as `$` (kubernetes third_party/forked/golang/expansion): doubling every
    `$` makes the kubelet hand the process exactly `text`."""
    return text.replace("$", "$$")


def quantity_bytes(n: int) -> str:
    """A Kubernetes quantity in whole GiB, rounded up so a request is never smaller than `n` bytes."""
    return f"{max(1, math.ceil(n / GIB))}Gi"


def pvc(name: str, size_bytes: int, plan: ResolvedPlan, access_mode: str) -> dict:
    """A PersistentVolumeClaim in the plan's namespace: ReadWriteMany claims in the shared StorageClass, the others in
    the plan's StorageClass (the cluster default when unset)."""
    spec = {"accessModes": [access_mode], "resources": {"requests": {"storage": quantity_bytes(size_bytes)}}}
    k8s = plan.deployment.kubernetes
    storage_class = k8s.shared_storage_class if access_mode == "ReadWriteMany" else k8s.storage_class
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": plan.deployment.kubernetes.namespace},
        "spec": spec,
    }


def shm_volume(size_bytes: int) -> dict:
    """/dev/shm as a RAM-backed emptyDir (volume `dshm`); its pages count against the pod's memory."""
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity_bytes(size_bytes)}}


def config_key(path: str) -> str:
    """A ConfigMap key for a file path (keys are flat: [-._a-zA-Z0-9]+); the volume's items put it back at its path."""
    return path.replace("/", ".-.")


def probe_job(
    plan: ResolvedPlan, probe: Probe, command: str, carried: dict[str, str], env: list[dict] | None = None
) -> list[dict]:
    """A ConfigMap with the probe's files (`carried`, by path) and a one-pod Job that runs `command` in the probe's
    image on `probe.processes` GPUs of one node of the plan's type, the files mounted at /probe; the training and
    serving probes differ only in their command and environment."""
    meta = {"name": probe.name, "namespace": plan.deployment.kubernetes.namespace, "labels": labels(plan, "probe")}
    container = {
        "name": "probe",
        "image": probe.kubernetes.image,
        "command": ["bash", "-c", command],
        **({"env": env} if env else {}),
        "resources": {"limits": {"nvidia.com/gpu": probe.processes}},
        "volumeMounts": [
            {"name": "probe", "mountPath": "/probe", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    items = [{"key": config_key(path), "path": path} for path in sorted(carried)]
    pod = {
        "restartPolicy": "Never",
        "nodeSelector": gpu_node_selector(plan),
        "tolerations": tolerations(plan),
        "containers": [container],
        "volumes": [
            {"name": "probe", "configMap": {"name": probe.name, "items": items}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": probe.time_limit_seconds,
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
        },
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {config_key(path): text for path, text in sorted(carried.items())},
    }
    return [config, job]
