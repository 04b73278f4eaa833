"""Target: launch/torchrun.sh, the per-node launcher that Slurm (srun) and Kubernetes (JobSet/PyTorchJob) both run.

One torchrun agent per node; c10d rendezvous at $MASTER_ADDR:$MASTER_PORT (or the first argument HOST:PORT),
so the same file works under srun, a PyTorchJob (which sets MASTER_ADDR/MASTER_PORT) and a JobSet.
"""

from __future__ import annotations

import math

from ..resolved import ResolvedPlan
from .base import OutputFile, render as render_template

LAUNCHER_PATH = "launch/torchrun.sh"
DS_CONFIG_PATH = "deepspeed/ds_config.json"
ACCELERATE_CONFIG_PATH = "fsdp/accelerate_config.yaml"

# torchrun's default rendezvous port (torch.distributed.run: --master-port default 29500).
DEFAULT_RDZV_PORT = 29500

# CPU cores per GPU when the plan gives no cpus_per_node: the smallest of the common 8-GPU servers,
# AWS p4d.24xlarge (96 vCPUs / 8 A100, aws.amazon.com/ec2/instance-types/p4), so the request fits
# DGX A100 (128 cores), DGX H100 (112 cores) and p5.48xlarge (192 vCPUs) as well.
DEFAULT_CPUS_PER_GPU = 12

# Spot pricing makes the job elastic: torchrun keeps running while at least this share of the
# planned nodes is alive (a policy choice: below half the throughput the deadline is lost anyway).
SPOT_MIN_NODE_FRACTION = 0.5
# Restarts torchrun may do per job on spot capacity (each reloads the last checkpoint); on
# on-demand/reserved capacity a failure ends the job and Slurm/Kubernetes requeue it instead.
SPOT_MAX_RESTARTS = 10

# Environment for the collective library, by fabric family (NCCL env docs:
# docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). Every value is only a default:
# the launcher keeps a value already set in the environment, because device names are site-specific.
_IB_ENV = [
    ("NCCL_IB_DISABLE", "0", "use the InfiniBand verbs transport"),
    ("NCCL_IB_HCA", "mlx5", "all ports of every HCA whose name starts with mlx5 (prefix match)"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "bootstrap over any interface but loopback and docker bridges"),
]
_ROCE_ENV = [
    ("NCCL_IB_DISABLE", "0", "RoCE runs on the IB verbs transport"),
    ("NCCL_IB_HCA", "mlx5", "all ports of every HCA whose name starts with mlx5 (prefix match)"),
    ("NCCL_IB_GID_INDEX", "3", "GID index of RoCE v2 on Mellanox/NVIDIA NICs with the default GID table"),
    ("NCCL_IB_TC", "106", "traffic class of the lossless (PFC/ECN) queue in NVIDIA's RoCE guides"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "bootstrap over any interface but loopback and docker bridges"),
]
_EFA_ENV = [
    ("FI_PROVIDER", "efa", "libfabric provider used by the aws-ofi-nccl plugin"),
    ("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA on p4d/p5 (AWS EFA docs)"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "bootstrap over any interface but loopback and docker bridges"),
]
_SOCKET_ENV = [
    ("NCCL_IB_DISABLE", "1", "no RDMA fabric: TCP sockets"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "any interface but loopback and docker bridges"),
]
_FABRIC_ENV = {"ib": _IB_ENV, "roce": _ROCE_ENV, "efa": _EFA_ENV}


def applies(plan: ResolvedPlan) -> bool:
    return plan.workload in ("train", "finetune") and plan.hardware is not None and plan.training is not None


def world_size(plan: ResolvedPlan) -> int:
    return plan.hardware.nodes * plan.hardware.gpus_per_node


def cpus_per_node(plan: ResolvedPlan) -> int:
    """From the plan's cluster.slurm.cpus_per_node, else DEFAULT_CPUS_PER_GPU per GPU."""
    given = plan.spec.cluster.slurm.cpus_per_node
    return given if given is not None else DEFAULT_CPUS_PER_GPU * plan.hardware.gpus_per_node


def omp_threads(plan: ResolvedPlan) -> int:
    """OMP_NUM_THREADS: the node's cores shared evenly by its GPU processes."""
    return max(1, cpus_per_node(plan) // plan.hardware.gpus_per_node)


def is_elastic(plan: ResolvedPlan) -> bool:
    return plan.spec.cluster.pricing == "spot"


def nnodes_argument(plan: ResolvedPlan) -> str:
    """--nnodes: N, or MIN:MAX on spot capacity (MIN keeps whole model replicas: TP×PP GPUs each)."""
    nodes = plan.hardware.nodes
    if not is_elastic(plan):
        return str(nodes)
    replica_gpus = plan.parallelism.tp * plan.parallelism.pp
    replica_nodes = max(1, math.ceil(replica_gpus / plan.hardware.gpus_per_node))
    minimum = max(replica_nodes, math.ceil(nodes * SPOT_MIN_NODE_FRACTION))
    minimum = min(nodes, math.ceil(minimum / replica_nodes) * replica_nodes)
    return f"{minimum}:{nodes}"


def fabric_env(interconnect: str) -> list[dict[str, str]]:
    family = interconnect.split("-", 1)[0].lower()
    return [{"name": n, "value": v, "comment": c} for n, v, c in _FABRIC_ENV.get(family, _SOCKET_ENV)]


def _context(plan: ResolvedPlan) -> dict:
    entry = plan.spec.train.entrypoint
    framework = plan.parallelism.framework
    return {
        "name": plan.name,
        "interconnect": plan.hardware.interconnect,
        "nodes": plan.hardware.nodes,
        "nnodes": nnodes_argument(plan),
        "nproc_per_node": plan.hardware.gpus_per_node,
        "world_size": world_size(plan),
        "elastic": is_elastic(plan),
        "max_restarts": SPOT_MAX_RESTARTS if is_elastic(plan) else 0,
        "rdzv_port": DEFAULT_RDZV_PORT,
        "omp_threads": omp_threads(plan),
        "fabric_env": fabric_env(plan.hardware.interconnect),
        "user_env": sorted(entry.env.items()),
        "has_user_env": bool(entry.env),
        "script": entry.script,
        "python_script": entry.script.endswith(".py"),
        "args": list(entry.args),
        "deepspeed": framework == "deepspeed",
        "ds_config_path": DS_CONFIG_PATH,
        "fsdp": framework == "fsdp",
        "accelerate_config_path": ACCELERATE_CONFIG_PATH,
        "global_batch": plan.parallelism.global_batch,
        "micro_batch": plan.parallelism.micro_batch,
        "grad_accum": plan.parallelism.grad_accum,
        "precision": plan.spec.precision,
        "checkpoint_dir": plan.training.checkpoint_dir,
    }


def render(plan: ResolvedPlan) -> list[OutputFile]:
    return [OutputFile(LAUNCHER_PATH, render_template("torchrun/torchrun.sh.j2", **_context(plan)), 0o755)]
