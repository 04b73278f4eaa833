"""Target: k8s/training.yaml — a JobSet (default) or a Kubeflow PyTorchJob that runs launch/torchrun.sh on every node.

Why JobSet by default: JobSet (jobset.x-k8s.io/v1alpha2) is the Kubernetes SIG Apps API for multi-node training
and the layer Kubeflow Trainer v2 builds on; it needs only the JobSet controller. PyTorchJob (kubeflow.org/v1,
`cluster.kubernetes.job_api: pytorchjob`) is for clusters that still run the v1 training operator; the v1 API was
removed on the operator's master branch (v1.9.0 is its last release).

Documents, in this order: ConfigMap (the launcher and its configs, byte-identical to the Slurm ones), PVC
(checkpoints), then the job. There is no Service document because both controllers make the headless Service the
rendezvous needs: JobSet from `network.enableDNSHostnames` (a Service named after `network.subdomain`, with
publishNotReadyAddresses, so pod `<jobset>-<replicatedJob>-<job>-<pod>.<subdomain>` resolves before it is ready),
and the training operator one headless Service per replica (`<job>-master-0` on the container port named
`pytorchjob-port`), whose name it also puts into MASTER_ADDR/MASTER_PORT.

One pod per node (the pod takes all `gpus_per_node` GPUs, and a required pod anti-affinity keeps two trainer pods
off one host), placed by the GPU product label and the plan's tolerations.
"""

from __future__ import annotations

from ..resolved import ResolvedPlan
from . import deepspeed, torchrun
from .base import OutputFile, dump_yaml_documents, with_header
from .k8s_common import GIB, gpu_node_selector, labels, pvc, secret_env, shm_volume, tolerations

OUTPUT_PATH = "k8s/training.yaml"
RDZV_PORT = torchrun.DEFAULT_RDZV_PORT
MOUNT = "/mlinfra"  # the ConfigMap's files: $MLINFRA_OUT_DIR of the launcher
REPLICATED_JOB = "trainer"
# Default image when the plan names none: NVIDIA's PyTorch container (torch, NCCL, DeepSpeed-ready CUDA toolkit).
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
# The training operator's names (kubeflow/training-operator v1.9.0, pkg/apis/kubeflow.org/v1/pytorch_types.go):
# it reads MASTER_PORT from this port of this container.
PYTORCHJOB_CONTAINER = "pytorch"
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
# The Job controller writes each pod's index into this annotation (kubernetes.io/docs/concepts/workloads/controllers/job,
# "Completion mode"); the downward API turns it into NODE_RANK.
COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

# /dev/shm rule: 1 GiB per GPU process. DataLoader workers hand every batch to their trainer process through shared
# memory, and NCCL's shared-memory transport uses it between the node's ranks; the container runtime's 64 MiB default
# breaks both (NVIDIA's PyTorch container notes: raise --shm-size or use --ipc=host for multi-process data loading).
SHM_BYTES_PER_GPU = GIB
# Checkpoint PVC = checkpoint_bytes × (kept + 1 being written: the oldest is deleted only after the new one lands)
# × 1.10 for filesystem metadata and partial shards of an interrupted write.
CHECKPOINTS_IN_FLIGHT = 1
CHECKPOINT_FS_HEADROOM = 1.10
# Whole-job restarts before the job is marked failed (policy). Spot: a reclaim that marks the pods DisruptionTarget
# restarts without spending one (see _jobset); 20 covers reclaims that surface as plain pod failures (a node gone
# before its pods were marked), each a restart from the last checkpoint. On-demand/reserved nodes fail rarely:
# Llama 3 (arXiv:2407.21783, §3.3.4) saw 419 unexpected interruptions in 54 days on 16,384 GPUs, one per ~2,100
# GPU-days (a 64-GPU job: one a month), so 3 retries cover a bad node and a repeated failure needs a human look.
MAX_RESTARTS = {"spot": 20, "on-demand": 3, "reserved": 3}


def applies(plan: ResolvedPlan) -> bool:
    return plan.training is not None and plan.spec.cluster.scheduler in ("kubernetes", "both")


def checkpoint_claim_bytes(plan: ResolvedPlan) -> int:
    copies = plan.training.checkpoint_keep + CHECKPOINTS_IN_FLIGHT
    return int(plan.training.checkpoint_bytes * copies * CHECKPOINT_FS_HEADROOM)


def shm_bytes(plan: ResolvedPlan) -> int:
    return SHM_BYTES_PER_GPU * plan.hardware.gpus_per_node


def max_restarts(plan: ResolvedPlan) -> int:
    return MAX_RESTARTS[plan.spec.cluster.pricing]


def _config_map(plan: ResolvedPlan) -> dict:
    files = torchrun.render(plan) + (deepspeed.render(plan) if deepspeed.applies(plan) else [])
    data = {f.path.replace("/", "__"): with_header(f, plan.plan_file, plan.name).text for f in files}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{plan.name}-launch", "namespace": plan.spec.cluster.kubernetes.namespace,
                         "labels": labels(plan, "launcher")},
            "data": dict(sorted(data.items()))}


def _env(plan: ResolvedPlan, job_api: str) -> list[dict]:
    """What launch/torchrun.sh reads. The plan's own env is exported by the launcher itself (shell-quoted), so
    it never passes through the kubelet's $(VAR) expansion. A PyTorchJob gets MASTER_ADDR/MASTER_PORT (and
    RANK = node rank) from the operator, which appends them: setting them here too would duplicate the names."""
    name = plan.name
    env = []
    if job_api == "jobset":
        env += [{"name": "MASTER_ADDR", "value": f"{name}-{REPLICATED_JOB}-0-0.{name}"},  # <jobset>-<rjob>-<job>-<pod>.<subdomain>
                {"name": "MASTER_PORT", "value": str(RDZV_PORT)},
                {"name": "NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}}]
    env += [
        {"name": "NNODES", "value": str(plan.hardware.nodes)},
        {"name": "NPROC_PER_NODE", "value": str(plan.hardware.gpus_per_node)},
        {"name": "MLINFRA_OUT_DIR", "value": MOUNT},
        {"name": "MLINFRA_RDZV_ID", "value": name},
        *secret_env(plan),
    ]
    return env


def _pod_spec(plan: ResolvedPlan, config_map: dict, job_api: str) -> dict:
    hw, k8s = plan.hardware, plan.spec.cluster.kubernetes
    pytorchjob = job_api == "pytorchjob"
    items = [{"key": key, "path": key.replace("__", "/"), "mode": 0o755 if key.endswith(".sh") else 0o644}
             for key in config_map["data"]]
    gpus = {"nvidia.com/gpu": hw.gpus_per_node}
    container = {
        "name": PYTORCHJOB_CONTAINER if pytorchjob else "trainer",
        "image": k8s.image or plan.spec.cluster.slurm.container_image or DEFAULT_IMAGE,
        "command": ["bash", f"{MOUNT}/{torchrun.LAUNCHER_PATH}"],
        "env": _env(plan, job_api),
        "ports": [{"name": PYTORCHJOB_PORT_NAME if pytorchjob else "rdzv", "containerPort": RDZV_PORT}],
        "resources": {"limits": dict(gpus), "requests": dict(gpus)},
        "volumeMounts": [
            {"name": "launch", "mountPath": MOUNT, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "checkpoints", "mountPath": plan.training.checkpoint_dir},
        ],
    }
    one_per_node = {"labelSelector": {"matchLabels": {"app.kubernetes.io/instance": plan.name,
                                                      "app.kubernetes.io/component": "trainer"}},
                    "topologyKey": "kubernetes.io/hostname"}
    return {
        # JobSet: a failed pod fails its Job (backoffLimit 0) and the JobSet restarts every pod together;
        # PyTorchJob: the operator's own restart policy (set on the replica spec).
        **({} if pytorchjob else {"restartPolicy": "Never"}),
        "nodeSelector": gpu_node_selector(plan),
        "tolerations": tolerations(plan),
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]}},
        "containers": [container],
        "volumes": [
            {"name": "launch", "configMap": {"name": config_map["metadata"]["name"], "items": items}},
            shm_volume(shm_bytes(plan)),
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": f"{plan.name}-checkpoints"}},
        ],
    }


def _jobset(plan: ResolvedPlan, config_map: dict) -> dict:
    name, nodes = plan.name, plan.hardware.nodes
    spot = plan.spec.cluster.pricing == "spot"
    job: dict = {"parallelism": nodes, "completions": nodes, "completionMode": "Indexed", "backoffLimit": 0}
    failure_policy: dict = {"maxRestarts": max_restarts(plan)}
    if spot:
        # A reclaimed node marks its pods DisruptionTarget (Kubernetes pod disruption conditions); the Job fails with
        # reason PodFailurePolicy and the JobSet restarts without spending a retry: preemption is the price of spot,
        # not a fault (the pattern of JobSet's failure-policy docs). Other failures still count against maxRestarts.
        job["podFailurePolicy"] = {"rules": [{"action": "FailJob",
                                              "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
        failure_policy["rules"] = [{"name": "restart-on-preemption", "action": "RestartJobSetAndIgnoreMaxRestarts",
                                    "onJobFailureReasons": ["PodFailurePolicy"]}]
    job["template"] = {"metadata": {"labels": labels(plan, "trainer")}, "spec": _pod_spec(plan, config_map, "jobset")}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": plan.spec.cluster.kubernetes.namespace, "labels": labels(plan, "trainer")},
        "spec": {
            "failurePolicy": failure_policy,
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def _pytorchjob(plan: ResolvedPlan, config_map: dict) -> dict:
    def replica(count: int) -> dict:
        # OnFailure: the kubelet restarts a crashed container in place and the operator recreates a lost pod;
        # runPolicy.backoffLimit bounds the retries.
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": labels(plan, "trainer")},
                             "spec": _pod_spec(plan, config_map, "pytorchjob")}}

    specs = {"Master": replica(1)}
    if plan.hardware.nodes > 1:
        specs["Worker"] = replica(plan.hardware.nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": plan.name, "namespace": plan.spec.cluster.kubernetes.namespace, "labels": labels(plan, "trainer")},
        "spec": {"runPolicy": {"backoffLimit": max_restarts(plan)}, "pytorchReplicaSpecs": specs},
    }


def render(plan: ResolvedPlan) -> list[OutputFile]:
    config_map = _config_map(plan)
    claim = pvc(f"{plan.name}-checkpoints", checkpoint_claim_bytes(plan), plan, "ReadWriteMany")  # every node writes shards
    claim["metadata"]["labels"] = labels(plan, "checkpoints")
    job_api = plan.spec.cluster.kubernetes.job_api
    job = _pytorchjob(plan, config_map) if job_api == "pytorchjob" else _jobset(plan, config_map)
    return [OutputFile(OUTPUT_PATH, dump_yaml_documents([config_map, claim, job]))]
