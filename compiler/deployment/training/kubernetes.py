"""The Kubernetes training job: image, pods on a catalog node with the fabric's device, /dev/shm, checkpoint claim
and restarts."""

from __future__ import annotations

from ...plan.deployment_fields import NodeShare
from ...plan.deployment_training import KubernetesTraining, Launcher
from ...plan.resolved import ResolvedPlan
from ...plan.spec import PlanSpec
from .. import megatron_version, nodes
from ..images import training_image
from ..pod_price import SHM_BYTES_PER_GPU, landing_node, training_pod
from .launcher import DEFAULT_RDZV_PORT, fabric_family
from .node_share import DEFAULT_CPUS_PER_GPU, HOST_MEMORY_PER_GPU_BYTES

LAUNCH_MOUNT = "/mlinfra"  # the ConfigMap's files: $MLINFRA_OUT_DIR of the launcher
REPLICATED_JOB = "trainer"
# Checkpoint PVC = checkpoint_bytes × (kept + 1 being written: the oldest is deleted only after the new one lands)
# × 1.10 for filesystem metadata and partial shards of an interrupted write.
CHECKPOINTS_IN_FLIGHT = 1
CHECKPOINT_FS_HEADROOM = 1.10
# Whole-job restarts before the job is marked failed (policy). Spot: a reclaim that marks the pods DisruptionTarget
# restarts without spending one (see k8s_training._jobset); 20 covers reclaims that surface as plain pod failures (a
# node gone before its pods were marked), each a restart from the last checkpoint. On-demand/reserved nodes fail
# rarely: Llama 3 (arXiv:2407.21783, §3.3.4) saw 419 unexpected interruptions in 54 days on 16,384 GPUs, one per
# ~2,100 GPU-days (a 64-GPU job: one a month), so 3 retries cover a bad node and a repeated failure needs a human look.
MAX_RESTARTS = {"spot": 20, "on-demand": 3, "reserved": 3}


def trainer_node(plan: ResolvedPlan) -> NodeShare | None:
    """The catalog node a trainer pod lands on: the training search priced its pod of this shape (pod_price.py)."""
    hw = plan.hardware
    return landing_node(hw.gpu_spec, training_pod(hw.gpus_per_node, hw.nodes, hw.interconnect))


def kubernetes_training(plan: ResolvedPlan, spec: PlanSpec, launch: Launcher) -> KubernetesTraining:
    k8s = spec.cluster.kubernetes
    t = plan.training
    if k8s.job_api == "pytorchjob":
        pods = f"{plan.name}-(master|worker)-[0-9]+"
    else:
        pods = f"{plan.name}-{REPLICATED_JOB}-[0-9]+-[0-9]+-.+"
    image, image_reason = training_image(plan, spec)
    if launch.kind == "megatron" and not (k8s.image or spec.cluster.slurm.container_image):
        release = megatron_version.release(spec)
        image = megatron_version.image_for(release)
        image_reason = (
            f"the NeMo image that ships Megatron-LM at megatron-core {release.core_version} (megatron_images.yaml)"
        )
    hw, shm = plan.hardware, SHM_BYTES_PER_GPU * plan.hardware.gpus_per_node
    fabric = fabric_family(hw.interconnect) if hw.nodes > 1 else ""
    node = trainer_node(plan)
    resource, count = nodes.fabric_device(fabric, node)
    return KubernetesTraining(
        job_api=k8s.job_api,
        image=image,
        image_reason=image_reason,
        node=node,
        cpu_millicores=node.cpu_millicores if node else DEFAULT_CPUS_PER_GPU * hw.gpus_per_node * 1000,
        memory_bytes=node.memory_bytes if node else shm + HOST_MEMORY_PER_GPU_BYTES * hw.gpus_per_node,
        fabric=fabric,
        fabric_resource=resource,
        fabric_count=count,
        hugepages_bytes=nodes.fabric_hugepages_bytes(fabric, node),
        replicated_job=REPLICATED_JOB,
        launch_mount=LAUNCH_MOUNT,
        max_restarts=MAX_RESTARTS[spec.cluster.pricing],
        shm_bytes=shm,
        checkpoint_claim_bytes=int(
            t.checkpoint_bytes * (t.checkpoint_keep + CHECKPOINTS_IN_FLIGHT) * CHECKPOINT_FS_HEADROOM
        ),
        rdzv_port=DEFAULT_RDZV_PORT,
        trainer_pod_regex=pods,
        data_mount=launch.data_mount,
    )
