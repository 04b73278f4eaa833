"""Kubernetes pieces shared by the training and serving targets: labels, GPU placement, secrets, volumes."""

from __future__ import annotations

import math

from ..resolved import ResolvedPlan

def labels(plan: ResolvedPlan, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": plan.name, "app.kubernetes.io/instance": plan.name,
            "app.kubernetes.io/component": component, "app.kubernetes.io/part-of": plan.name,
            "app.kubernetes.io/managed-by": "mlinfra-compile"}


def gpu_node_selector(plan: ResolvedPlan) -> dict[str, str]:
    return {**plan.spec.cluster.kubernetes.node_selector, "nvidia.com/gpu.product": plan.hardware.gpu_spec.k8s_product_label}


def tolerations(plan: ResolvedPlan) -> list[dict]:
    return [dict(t) for t in plan.spec.cluster.kubernetes.tolerations]


def secret_env(plan: ResolvedPlan) -> list[dict]:
    ref = {"name": plan.spec.cluster.kubernetes.secret_name, "key": "HF_TOKEN", "optional": True}
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]


def quantity_bytes(n: int) -> str:
    return f"{math.ceil(n / 2**30)}Gi"


def pvc(name: str, size_bytes: int, plan: ResolvedPlan, access_mode: str) -> dict:
    spec = {"accessModes": [access_mode], "resources": {"requests": {"storage": quantity_bytes(size_bytes)}}}
    if plan.spec.cluster.kubernetes.storage_class:
        spec["storageClassName"] = plan.spec.cluster.kubernetes.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": plan.spec.cluster.kubernetes.namespace}, "spec": spec}


def shm_volume(size_bytes: int) -> dict:
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity_bytes(size_bytes)}}
