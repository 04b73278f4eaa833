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
off one host), placed by the GPU product label and the plan's tolerations. It requests its GPU share of the catalog
node's allocatable CPU and memory (plan.deployment.kubernetes.training.node) and, on a multi-node InfiniBand, RoCE or
EFA fabric, the fabric's device resource with IPC_LOCK; launch/torchrun.sh sets the fabric's NCCL environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..deployment.nodes import cpu_quantity, memory_quantity
from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_yaml_documents
from .k8s_common import (
    gpu_node_selector,
    labels,
    pod_identity,
    pvc,
    secret_env,
    service_account,
    shm_volume,
    tolerations,
    weights_env_from,
)

# The training operator's names (kubeflow/training-operator v1.9.0, pkg/apis/kubeflow.org/v1/pytorch_types.go):
# it reads MASTER_PORT from this port of this container.
PYTORCHJOB_CONTAINER = "pytorch"
PYTORCHJOB_PORT_NAME = "pytorchjob-port"
# The Job controller writes each pod's index into this annotation (kubernetes.io/docs/concepts/workloads/controllers/job,
# "Completion mode"); the downward API turns it into NODE_RANK.
COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def applies(plan: ResolvedPlan) -> bool:
    return (
        plan.deployment is not None
        and plan.deployment.kubernetes is not None
        and plan.deployment.kubernetes.training is not None
    )


def carried_files(plan: ResolvedPlan) -> list[str]:
    """Files the ConfigMap carries, byte-identical to the Slurm ones: the launcher and every file the job reads."""
    return [plan.deployment.files.launcher, *plan.deployment.launcher.reads]


def _config_map(plan: ResolvedPlan, rendered: Mapping[str, OutputFile]) -> dict:
    data = {path.replace("/", "__"): rendered[path].text for path in carried_files(plan)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{plan.name}-launch",
            "namespace": plan.deployment.kubernetes.namespace,
            "labels": labels(plan, "launcher"),
        },
        "data": dict(sorted(data.items())),
    }


def _env(plan: ResolvedPlan, job_api: str) -> list[dict]:
    """What launch/torchrun.sh reads. The plan's own env is exported by the launcher itself (shell-quoted), so
    it never passes through the kubelet's $(VAR) expansion. A PyTorchJob gets MASTER_ADDR/MASTER_PORT (and
    RANK = node rank) from the operator, which appends them: setting them here too would duplicate the names."""
    name, job = plan.name, plan.deployment.kubernetes.training
    env = []
    if job_api == "jobset":
        env += [
            {
                "name": "MASTER_ADDR",
                "value": f"{name}-{job.replicated_job}-0-0.{name}",
            },  # <jobset>-<rjob>-<job>-<pod>.<subdomain>
            {"name": "MASTER_PORT", "value": str(job.rdzv_port)},
            {"name": "NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}},
        ]
    env += [
        {"name": "NNODES", "value": str(plan.hardware.nodes)},
        {"name": "NPROC_PER_NODE", "value": str(plan.hardware.gpus_per_node)},
        {"name": "MLINFRA_OUT_DIR", "value": job.launch_mount},
        {"name": "MLINFRA_RDZV_ID", "value": name},
        *secret_env(plan),
    ]
    return env


def _pod_labels(plan: ResolvedPlan) -> dict[str, str]:
    """The trainer pods' labels, with the workload-identity webhook's label where the plan binds one (Azure)."""
    return {**labels(plan, "trainer"), **plan.deployment.kubernetes.identity_pod_labels}


def _pod_spec(plan: ResolvedPlan, config_map: dict, job_api: str) -> dict:
    hw, job = plan.hardware, plan.deployment.kubernetes.training
    pytorchjob = job_api == "pytorchjob"
    items = [
        {"key": key, "path": key.replace("__", "/"), "mode": 0o755 if key.endswith(".sh") else 0o644}
        for key in config_map["data"]
    ]
    gpus = {"nvidia.com/gpu": hw.gpus_per_node}
    if job.fabric_resource:  # the fabric's NICs (multi-node): RDMA shared device or EFA interfaces
        gpus[job.fabric_resource] = job.fabric_count
    if job.hugepages_bytes:  # EFA's buffers; a huge page request equals its limit
        gpus["hugepages-2Mi"] = memory_quantity(job.hugepages_bytes)
    memory = memory_quantity(job.memory_bytes)
    container = {
        "name": PYTORCHJOB_CONTAINER if pytorchjob else "trainer",
        "image": job.image,
        "command": ["bash", f"{job.launch_mount}/{plan.deployment.files.launcher}"],
        "env": _env(plan, job_api),
        "ports": [{"name": PYTORCHJOB_PORT_NAME if pytorchjob else "rdzv", "containerPort": job.rdzv_port}],
        "resources": {
            "limits": {"memory": memory, **gpus},
            "requests": {"cpu": cpu_quantity(job.cpu_millicores), "memory": memory, **gpus},
        },
        "volumeMounts": [
            {"name": "launch", "mountPath": job.launch_mount, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "checkpoints", "mountPath": plan.deployment.launcher.checkpoint.dir},
        ],
    }
    if job.fabric_resource:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}  # RDMA memory registration
    if env_from := weights_env_from(plan):  # set only for object-storage weights (unused.py refuses it otherwise)
        container["envFrom"] = env_from  # the job reads MLINFRA_WEIGHTS from object storage
    volumes = [
        {"name": "launch", "configMap": {"name": config_map["metadata"]["name"], "items": items}},
        shm_volume(job.shm_bytes),
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": f"{plan.name}-checkpoints"}},
    ]
    if job.data_mount:  # train.data: a path on the nodes' shared filesystem, read-only at the same path
        container["volumeMounts"].append({"name": "data", "mountPath": job.data_mount, "readOnly": True})
        volumes.append({"name": "data", "hostPath": {"path": job.data_mount, "type": "Directory"}})
    one_per_node = {
        "labelSelector": {
            "matchLabels": {"app.kubernetes.io/instance": plan.name, "app.kubernetes.io/component": "trainer"}
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    return {
        # JobSet: a failed pod fails its Job (backoffLimit 0) and the JobSet restarts every pod together;
        # PyTorchJob: the operator's own restart policy (set on the replica spec).
        **({} if pytorchjob else {"restartPolicy": "Never"}),
        "nodeSelector": gpu_node_selector(plan),
        "tolerations": tolerations(plan),
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]}},
        "containers": [container],
        "volumes": volumes,
        **pod_identity(plan),
    }


def _jobset(plan: ResolvedPlan, config_map: dict) -> dict:
    name, nodes = plan.name, plan.hardware.nodes
    job_decision = plan.deployment.kubernetes.training
    spot = plan.deployment.launcher.elastic  # spot capacity
    job: dict = {"parallelism": nodes, "completions": nodes, "completionMode": "Indexed", "backoffLimit": 0}
    failure_policy: dict = {"maxRestarts": job_decision.max_restarts}
    if spot:
        # A reclaimed node marks its pods DisruptionTarget (Kubernetes pod disruption conditions); the Job fails with
        # reason PodFailurePolicy and the JobSet restarts without spending a retry: preemption is the price of spot,
        # not a fault (the pattern of JobSet's failure-policy docs). Other failures still count against maxRestarts.
        job["podFailurePolicy"] = {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        }
        failure_policy["rules"] = [
            {
                "name": "restart-on-preemption",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ]
    job["template"] = {"metadata": {"labels": _pod_labels(plan)}, "spec": _pod_spec(plan, config_map, "jobset")}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": plan.deployment.kubernetes.namespace,
            "labels": labels(plan, "trainer"),
        },
        "spec": {
            "failurePolicy": failure_policy,
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": [{"name": job_decision.replicated_job, "replicas": 1, "template": {"spec": job}}],
        },
    }


def _pytorchjob(plan: ResolvedPlan, config_map: dict) -> dict:
    def replica(count: int) -> dict:
        # OnFailure: the kubelet restarts a crashed container in place and the operator recreates a lost pod;
        # runPolicy.backoffLimit bounds the retries.
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"metadata": {"labels": _pod_labels(plan)}, "spec": _pod_spec(plan, config_map, "pytorchjob")},
        }

    specs = {"Master": replica(1)}
    if plan.hardware.nodes > 1:
        specs["Worker"] = replica(plan.hardware.nodes - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": plan.name,
            "namespace": plan.deployment.kubernetes.namespace,
            "labels": labels(plan, "trainer"),
        },
        "spec": {
            "runPolicy": {"backoffLimit": plan.deployment.kubernetes.training.max_restarts},
            "pytorchReplicaSpecs": specs,
        },
    }


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile]) -> list[OutputFile]:
    decided = plan.deployment.kubernetes.training
    config_map = _config_map(plan, rendered)
    # every node writes shards: ReadWriteMany for a multi-node job, one pod's volume otherwise
    access = "ReadWriteMany" if plan.hardware.nodes > 1 else "ReadWriteOnce"
    claim = pvc(f"{plan.name}-checkpoints", decided.checkpoint_claim_bytes, plan, access)
    claim["metadata"]["labels"] = labels(plan, "checkpoints")
    job = _pytorchjob(plan, config_map) if decided.job_api == "pytorchjob" else _jobset(plan, config_map)
    docs = [*service_account(plan, "trainer"), config_map, claim, job]  # the ServiceAccount before the pods that use it
    return [OutputFile(plan.deployment.files.k8s_training, dump_yaml_documents(docs))]


TARGET = Target("k8s_training", applies, render, needs=("torchrun", "deepspeed", "fsdp", "megatron"))
