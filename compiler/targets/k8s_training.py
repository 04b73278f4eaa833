"""Target: k8s/training.yaml — a JobSet (default) or a Kubeflow PyTorchJob running launch/torchrun.sh.

JobSet (jobset.x-k8s.io/v1alpha2) is the default: it is the Kubernetes SIG Apps API for multi-node
training that Kubeflow Trainer v2 builds on, it needs only the JobSet controller, and it gives every pod a
stable DNS name through its headless service (`network.enableDNSHostnames`). PyTorchJob (kubeflow.org/v1,
`cluster.kubernetes.job_api: pytorchjob`) is for clusters that run the v1 training operator; v1 was
removed on the operator's master branch.

One pod per node with all its GPUs; the pod runs the same launcher as Slurm (mounted from a ConfigMap
generated here), so both schedulers run byte-identical scripts.
"""

from __future__ import annotations

from ..resolved import ResolvedPlan
from . import deepspeed, torchrun
from .base import OutputFile, dump_yaml_documents, with_header
from .k8s_common import gpu_node_selector, labels, pvc, secret_env, shm_volume, tolerations

RDZV_PORT = 29500
MOUNT = "/mlinfra"
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
# /dev/shm: PyTorch DataLoader workers pass batches through shared memory and NCCL uses it for
# intra-node buffers; Docker's 64 MiB default breaks both. 1 GiB per GPU (NVIDIA's PyTorch container
# docs recommend --shm-size=1g or more per process).
SHM_BYTES_PER_GPU = 2**30
# Checkpoint PVC: retained checkpoints plus one being written (the oldest is deleted after the new one
# lands), +10% for filesystem overhead.
CHECKPOINT_HEADROOM = 1.10
# Restarts tolerated before the job fails: spot nodes are reclaimed routinely, so the job restarts from
# its checkpoint; on-demand nodes fail rarely (Llama 3: ~1 interruption per 50k GPU-hours).
MAX_RESTARTS = {"spot": 20, "on-demand": 3, "reserved": 3}


def applies(plan: ResolvedPlan) -> bool:
    return plan.training is not None and plan.spec.cluster.scheduler in ("kubernetes", "both")


def _config_map(plan: ResolvedPlan, name: str, namespace: str) -> dict:
    files = torchrun.render(plan) + (deepspeed.render(plan) if deepspeed.applies(plan) else [])
    data = {f.path.replace("/", "__"): with_header(f, plan.plan_file, plan.name).text for f in files}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-launch", "namespace": namespace, "labels": labels(plan, "launcher")},
            "data": dict(sorted(data.items()))}


def _pod_spec(plan: ResolvedPlan, name: str, master_addr: str, config_map: dict) -> dict:
    hw, train = plan.hardware, plan.training
    k8s = plan.spec.cluster.kubernetes
    items = [{"key": key, "path": key.replace("__", "/"), "mode": 0o755 if key.endswith(".sh") else 0o644}
             for key in config_map["data"]]
    env = [
        {"name": "MASTER_ADDR", "value": master_addr},
        {"name": "MASTER_PORT", "value": str(RDZV_PORT)},
        {"name": "MLINFRA_OUT_DIR", "value": MOUNT},
        {"name": "MLINFRA_RDZV_ID", "value": name},
        *[{"name": k, "value": v} for k, v in sorted(plan.spec.train.entrypoint.env.items())],
        *secret_env(plan),
    ]
    container = {
        "name": "trainer",
        "image": k8s.image or plan.spec.cluster.slurm.container_image or DEFAULT_IMAGE,
        "command": ["bash", f"{MOUNT}/launch/torchrun.sh"],
        "env": env,
        "ports": [{"name": "rdzv", "containerPort": RDZV_PORT}],
        "resources": {"limits": {"nvidia.com/gpu": hw.gpus_per_node}, "requests": {"nvidia.com/gpu": hw.gpus_per_node}},
        "volumeMounts": [
            {"name": "launch", "mountPath": MOUNT},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "checkpoints", "mountPath": train.checkpoint_dir},
        ],
    }
    return {
        "restartPolicy": "Never",
        "nodeSelector": gpu_node_selector(plan),
        "tolerations": tolerations(plan),
        "containers": [container],
        "volumes": [
            {"name": "launch", "configMap": {"name": config_map["metadata"]["name"], "items": items}},
            shm_volume(SHM_BYTES_PER_GPU * hw.gpus_per_node),
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": f"{name}-checkpoints"}},
        ],
    }


def _jobset(plan: ResolvedPlan, name: str, namespace: str, config_map: dict) -> dict:
    master = f"{name}-trainer-0-0.{name}"  # <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>
    nodes = plan.hardware.nodes
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(plan, "trainer")},
        "spec": {
            "failurePolicy": {"maxRestarts": MAX_RESTARTS[plan.spec.cluster.pricing]},
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": [{
                "name": "trainer", "replicas": 1,
                "template": {"spec": {
                    "parallelism": nodes, "completions": nodes, "completionMode": "Indexed", "backoffLimit": 0,
                    "template": {"metadata": {"labels": labels(plan, "trainer")},
                                 "spec": _pod_spec(plan, name, master, config_map)},
                }},
            }],
        },
    }


def _pytorchjob(plan: ResolvedPlan, name: str, namespace: str, config_map: dict) -> dict:
    master = f"{name}-master-0"
    nodes = plan.hardware.nodes

    def replica(count: int) -> dict:
        pod = _pod_spec(plan, name, master, config_map)
        pod["containers"][0]["name"] = "pytorch"  # the operator looks for a container named pytorch
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": labels(plan, "trainer")}, "spec": pod}}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(plan, "trainer")},
        "spec": {"runPolicy": {"backoffLimit": MAX_RESTARTS[plan.spec.cluster.pricing]}, "pytorchReplicaSpecs": specs},
    }


def render(plan: ResolvedPlan) -> list[OutputFile]:
    name, namespace = plan.name, plan.spec.cluster.kubernetes.namespace
    config_map = _config_map(plan, name, namespace)
    keep = plan.training.checkpoint_keep + 1
    claim = pvc(f"{name}-checkpoints", int(plan.training.checkpoint_bytes * keep * CHECKPOINT_HEADROOM), plan, "ReadWriteMany")
    claim["metadata"]["labels"] = labels(plan, "checkpoints")
    job = (_pytorchjob if plan.spec.cluster.kubernetes.job_api == "pytorchjob" else _jobset)(plan, name, namespace, config_map)
    return [OutputFile("k8s/training.yaml", dump_yaml_documents([config_map, claim, job]))]
