"""Node shapes: the catalog server a pod or a Slurm job lands on, and the share of its CPUs and memory it may request.

A pod that takes g of a node's G GPUs requests g/G of the node's allocatable CPU and memory, so G/g such pods fit one
node and the price per GPU-hour (the node's list price / G) pays for exactly what the pod asks for.

Allocatable = capacity - system reserve - eviction threshold - daemonset allowance (kubernetes.io "Reserve Compute
Resources for System Daemons"):
- CPU reserve, every provider: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of every core above
  four (GKE "Plan node sizes", Memory and CPU reservations; amazon-eks-ami nodeadm getCPUMillicoresToReserve uses the
  same ranges, 600/100/50/25 per 10,000).
- Memory reserve on AWS: 11 MiB x maxPods + 255 MiB (amazon-eks-ami nodeadm getMemoryMebibytesToReserve; maxPods from
  its eni-max-pods.txt, in the catalog's node entry). Elsewhere GKE's table: 25% of the first 4 GiB, 20% of the next 4,
  10% of the next 8, 6% of the next 112, 2% above 128 GiB (GKE "Plan node sizes"); AKS and on-premises kubelets are
  held to the same table (an assumption: their defaults reserve less or nothing).
- Eviction: the kubelet's default hard threshold memory.available<100Mi.
- Huge pages: an AWS node with EFA pre-allocates 5,128 2-MiB huge pages (AWS EKS user guide "Run machine learning
  training on Amazon EKS with Elastic Fabric Adapter"), and the kubelet removes every huge page pool from allocatable
  memory (kubernetes pkg/kubelet/nodestatus/setters.go MachineInfo: "for every huge page reservation, we need to
  remove it from allocatable memory"). A pod that uses EFA requests hugepages-2Mi: 5120Mi beside its EFA devices (the
  same page's pod example; libfabric's EFA provider takes its buffers from that pool), its GPU share of it on a part
  of the node.
- Daemonsets on a GPU node (device plugin, DCGM exporter, CNI, kube-proxy, CSI node driver, node exporter): a policy of
  DAEMONSET_CPU_MILLICORES and DAEMONSET_MEMORY_BYTES (kube-proxy asks 100m, kube-prometheus-stack's node exporter
  102m / 180Mi, the AWS VPC CNI 25m; the NVIDIA device plugin and DCGM exporter ask nothing by default).
"""

from __future__ import annotations

import math

from ..catalog.types import GpuSpec, NodeType
from ..plan.deployment_fields import NodeShare

MIB = 2**20
GIB = 2**30
# (millicores in the range, reserved per 10,000), the last range open-ended.
CPU_RESERVE_RANGES = ((1000, 600), (1000, 100), (2000, 50), (None, 25))
# (bytes in the range, reserved fraction), the last range open-ended.
GKE_MEMORY_RANGES = ((4 * GIB, 0.25), (4 * GIB, 0.20), (8 * GIB, 0.10), (112 * GIB, 0.06), (None, 0.02))
EKS_MEMORY_PER_POD_BYTES = 11 * MIB
EKS_MEMORY_BASE_BYTES = 255 * MIB
EVICTION_HARD_BYTES = 100 * MIB
EFA_HUGEPAGES_POOL_BYTES = 5128 * 2 * MIB  # pre-allocated on an EFA node (module docstring)
EFA_HUGEPAGES_REQUEST_BYTES = 5120 * MIB  # hugepages-2Mi of a whole-node pod using EFA
HUGEPAGE_BYTES = 2 * MIB
DAEMONSET_CPU_MILLICORES = 500
DAEMONSET_MEMORY_BYTES = 1 * GIB
# Fabrics whose NICs the pod must be given as a device, and the providers whose nodes carry them: EFA only on AWS;
# InfiniBand/RoCE through the RDMA shared device plugin on Azure ND and on-premises clusters.
FABRIC_PROVIDERS = {"efa": ("aws",), "ib": ("azure", "on-prem"), "roce": ("azure", "on-prem")}


# The device a pod must request to reach the fabric's NICs: InfiniBand and RoCE through Mellanox/NVIDIA's
# k8s-rdma-shared-dev-plugin (deployed by the NVIDIA Network Operator; resourcePrefix "rdma", resourceName
# "rdma_shared_device_a" in its README's default config; one shared device gives the pod every HCA); AWS EFA through the
# aws-efa-k8s-device-plugin's vpc.amazonaws.com/efa, one per EFA interface of the node (AWS "EFA on EKS" docs).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
RDMA_RESOURCES = {
    "ib": ("rdma/rdma_shared_device_a", 1),
    "roce": ("rdma/rdma_shared_device_a", 1),
    "efa": (EFA_RESOURCE, 32),  # p5.48xlarge's count; the node's own where the catalog gives it (fabric_device)
}

FABRIC_DEVICE_SOURCE = {
    "ib": "k8s-rdma-shared-dev-plugin (NVIDIA Network Operator) default resource",
    "roce": "k8s-rdma-shared-dev-plugin (NVIDIA Network Operator) default resource",
    "efa": "aws-efa-k8s-device-plugin: every EFA interface of the node (32 on p5.48xlarge, 4 on p4d.24xlarge)",
    "eth": "none: TCP sockets",
}


def fabric_family(interconnect: str) -> str:
    """The fabric family of a catalog interconnect id: ib, roce, efa, or eth (TCP)."""
    return interconnect.split("-", 1)[0].lower()


def fabric_device(fabric: str, node: NodeShare | None) -> tuple[str, int]:
    """(extended resource, count per pod) of the fabric's NICs; ("", 0) for plain Ethernet (TCP sockets)."""
    resource, count = RDMA_RESOURCES.get(fabric, ("", 0))
    if resource == EFA_RESOURCE and node is not None and node.efa_interfaces:
        count = node.efa_interfaces
    return resource, count


def fabric_hugepages_bytes(fabric: str, node: NodeShare | None) -> int:
    """hugepages-2Mi a pod on the fabric requests: EFA's 5120Mi for a whole node, its GPU share on a part of one
    (whole 2-MiB pages); 0 on other fabrics."""
    if fabric != "efa" or node is None or not node.efa_interfaces:
        return 0
    share = EFA_HUGEPAGES_REQUEST_BYTES * node.gpus // node.node_gpus
    return share // HUGEPAGE_BYTES * HUGEPAGE_BYTES


def hugepages_pool_bytes(node: NodeType) -> int:
    """The huge pages a node pre-allocates (removed from its allocatable memory): EFA nodes' pool, else none."""
    return EFA_HUGEPAGES_POOL_BYTES if node.provider == "aws" and node.efa_interfaces else 0


def _tiered(total: float, ranges: tuple) -> float:
    reserved, start = 0.0, 0.0
    for size, rate in ranges:
        end = total if size is None else min(total, start + size)
        if end > start:
            reserved += (end - start) * rate
        start += size or 0
    return reserved


def cpu_reserve_millicores(node: NodeType) -> int:
    return math.ceil(_tiered(node.vcpus * 1000, tuple((s, r / 10_000) for s, r in CPU_RESERVE_RANGES)))


def memory_reserve(node: NodeType) -> tuple[int, str]:
    """(bytes, formula) of the kubelet's memory reserve on this node."""
    if node.provider == "aws":
        reserved = EKS_MEMORY_PER_POD_BYTES * node.max_pods + EKS_MEMORY_BASE_BYTES
        return reserved, f"EKS 11 MiB x {node.max_pods} pods + 255 MiB"
    return math.ceil(_tiered(node.memory_bytes, GKE_MEMORY_RANGES)), "GKE table"


def allocatable(node: NodeType) -> tuple[int, int]:
    """(CPU millicores, memory bytes) a node offers pods."""
    cpu = node.vcpus * 1000 - cpu_reserve_millicores(node) - DAEMONSET_CPU_MILLICORES
    memory = node.memory_bytes - memory_reserve(node)[0] - EVICTION_HARD_BYTES - DAEMONSET_MEMORY_BYTES
    return cpu, memory - hugepages_pool_bytes(node)


def share(node: NodeType, gpus: int) -> tuple[int, int]:
    """(CPU millicores, memory bytes rounded down to MiB) of `gpus` of the node's GPUs."""
    cpu, memory = allocatable(node)
    return cpu * gpus // node.gpus, memory * gpus // node.gpus // MIB * MIB


def _candidates(spec: GpuSpec, gpus: int, fabric: str) -> tuple[list[NodeType], str]:
    holding = [n for n in spec.node_types if n.gpus >= gpus]
    providers = FABRIC_PROVIDERS.get(fabric)
    if providers:
        on_fabric = [n for n in holding if n.provider in providers and (fabric != "efa" or n.efa_interfaces)]
        if on_fabric:
            return on_fabric, f"; a {fabric} fabric: {'/'.join(providers)} nodes"
    return holding, ""


def choose(spec: GpuSpec, gpus: int, floor_bytes: int = 0, fabric: str = "") -> NodeShare | None:
    """The first catalog node (the priced one first) that holds `gpus` GPUs and whose share of them holds `floor_bytes`
    of host memory; None when the catalog lists no node that holds them."""
    nodes, why = _candidates(spec, gpus, fabric)
    if not nodes:
        return None
    fitting = [n for n in nodes if share(n, gpus)[1] >= floor_bytes]
    node = (fitting or [max(nodes, key=lambda n: share(n, gpus)[1])])[0]
    return node_share(spec, node, gpus, floor_bytes, why)


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _outgrown_words(first: NodeType, gpus: int, floor_bytes: int) -> str:
    """Why the priced node cannot hold the pod."""
    if first.gpus < gpus:
        return f": it has {first.gpus} GPU, fewer than the pod's {gpus}"
    return f": its share is below the pod's {_gib(floor_bytes)} of host memory"


def node_share(spec: GpuSpec, node: NodeType, gpus: int, floor_bytes: int, why: str = "") -> NodeShare:
    cpu, memory = share(node, gpus)
    cpu_reserve, (mem_reserve, formula) = cpu_reserve_millicores(node), memory_reserve(node)
    alloc_cpu, alloc_memory = allocatable(node)
    first = spec.node_types[0]
    priced = first.id == node.id
    outgrown = not priced and (first.gpus < gpus or share(first, gpus)[1] < floor_bytes)
    reason = (
        f"{node.id} ({node.vcpus} vCPU, {_gib(node.memory_bytes)}, {node.gpus} GPU): allocatable "
        f"{node.vcpus} - {cpu_reserve / 1000:g} reserved - {DAEMONSET_CPU_MILLICORES / 1000:g} daemonsets = "
        f"{alloc_cpu / 1000:g} CPU and {_gib(node.memory_bytes)} - {_gib(mem_reserve)} ({formula}) - 100 MiB eviction "
        f"- {_gib(DAEMONSET_MEMORY_BYTES)} daemonsets"
        + (f" - {_gib(hugepages_pool_bytes(node))} EFA huge pages" if hugepages_pool_bytes(node) else "")
        + f" = {_gib(alloc_memory)}; x {gpus}/{node.gpus} GPU = "
        f"{cpu / 1000:g} CPU, {_gib(memory)}"
        + ("" if priced else f"; not {first.id}, the node the price is from")
        + (_outgrown_words(first, gpus, floor_bytes) if outgrown else why)
    )
    return NodeShare(
        node_type=node.id,
        provider=node.provider,
        node_vcpus=node.vcpus,
        node_memory_bytes=node.memory_bytes,
        node_gpus=node.gpus,
        node_local_nvme_bytes=node.local_nvme_bytes,
        efa_interfaces=node.efa_interfaces,
        gpus=gpus,
        cpu_millicores=cpu,
        memory_bytes=memory,
        floor_bytes=floor_bytes,
        fits=memory >= floor_bytes,
        priced=priced,
        outgrown_priced_node=outgrown,
        reason=reason,
    )


def cpu_quantity(millicores: int) -> str:
    """A Kubernetes CPU quantity: whole cores where exact, else millicores."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(n: int) -> str:
    """A Kubernetes memory quantity in MiB (shares are whole MiB)."""
    return f"{n // MIB}Mi"


def node_type(spec: GpuSpec, node_id: str) -> NodeType:
    return next(n for n in spec.node_types if n.id == node_id)


def price_per_gpu(spec: GpuSpec, node: NodeType, pricing: str) -> tuple[float, str] | None:
    """(USD per GPU-hour, how) of the node at the plan's pricing: its on-demand list price / its GPUs, scaled for spot
    or reserved by the GPU's own ratio to on-demand (only on-demand node prices are sourced); None without a price."""
    if node.price_usd_per_hour is None:
        return None
    per_gpu = node.price_usd_per_hour / node.gpus
    how = f"{node.id} ${node.price_usd_per_hour:g}/h on-demand / {node.gpus} GPU"
    if pricing == "on-demand":
        return per_gpu, how
    base, own = spec.price_usd_per_gpu_hour.get("on-demand"), spec.price_usd_per_gpu_hour.get(pricing)
    if not base or own is None:
        return None
    return per_gpu * own / base, (
        f"{how} x {own:g}/{base:g} (the GPU's {pricing} / on-demand price: only the node's on-demand price is sourced)"
    )
