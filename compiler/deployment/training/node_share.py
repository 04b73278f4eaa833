"""A job below a node (a 1-GPU fine-tune on an 8-GPU server): its CPUs and host memory per GPU, from the plan's
Slurm node figures or the catalog node's share; the defaults when neither says."""

from __future__ import annotations

from ...plan.resolved import ResolvedPlan
from ...plan.spec import PlanSpec
from .. import nodes

# CPU cores per GPU when the plan gives no cpus_per_node: the smallest of the common 8-GPU servers,
# AWS p4d.24xlarge (96 vCPUs / 8 A100, aws.amazon.com/ec2/instance-types/p4), so the request fits
# DGX A100 (128 cores), DGX H100 (112 cores) and p5.48xlarge (192 vCPUs) as well.
DEFAULT_CPUS_PER_GPU = 12

# Host memory per GPU of a job that shares its node (--mem when the plan gives no memory_per_node): the smallest of
# the common 8-GPU servers, AWS p4d.24xlarge, 1,152 GiB / 8 GPUs (aws.amazon.com/ec2/instance-types/p4), as for CPUs.
HOST_MEMORY_PER_GPU_BYTES = 144 * 2**30

GIB = 2**30


def partial_node(plan: ResolvedPlan) -> bool:
    """The job uses fewer GPUs than its node has (a 1-GPU fine-tune on an 8-GPU server): share the node."""
    return plan.hardware.nodes == 1 and plan.hardware.gpus_per_node < plan.hardware.gpu_spec.gpus_per_node


def slurm_share(plan: ResolvedPlan, spec: PlanSpec) -> tuple[int, int, str]:
    """(CPUs, memory bytes, reason) per GPU of a job below a node: the node's own figures divided by its GPUs, from
    cluster.slurm.cpus_per_node / memory_per_node where given, else one GPU's share of the first catalog node that has
    the catalog's GPUs per node (the priced one where it does; its system reserve stands for slurmd and the OS, which
    sites keep out of a node's CPUs / RealMemory)."""
    given, gpu = spec.cluster.slurm, plan.hardware.gpu_spec
    node_gpus = gpu.gpus_per_node
    node_type = next((n for n in gpu.node_types if n.gpus >= node_gpus), None)
    one = nodes.node_share(gpu, node_type, 1, 0) if node_type else None
    cpus = (
        given.cpus_per_node // node_gpus
        if given.cpus_per_node is not None
        else (one.cpu_millicores // 1000 if one else DEFAULT_CPUS_PER_GPU)
    )
    if given.memory_per_node is not None:
        memory = given.memory_per_node // node_gpus
    else:
        memory = one.memory_bytes if one else HOST_MEMORY_PER_GPU_BYTES
    sources = [
        f"CPUs: cluster.slurm.cpus_per_node / {node_gpus} GPUs" if given.cpus_per_node is not None else "",
        f"memory: cluster.slurm.memory_per_node / {node_gpus} GPUs" if given.memory_per_node is not None else "",
    ]
    if given.cpus_per_node is None or given.memory_per_node is None:
        sources.append(
            f"one GPU's share of {one.reason} (whole CPUs)"
            if one
            else f"no catalog node has {node_gpus} GPUs: {DEFAULT_CPUS_PER_GPU} CPU, "
            f"{HOST_MEMORY_PER_GPU_BYTES // GIB} GiB per GPU (AWS p4d.24xlarge's share)"
        )
        sources.append("cluster.slurm.cpus_per_node / memory_per_node give the site's node instead")
    return max(1, cpus), memory, "; ".join(x for x in sources if x)
