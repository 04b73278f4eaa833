"""The node a pod lands on and the price per GPU-hour it pays there, decided while sizing.

A GPU's catalog price per GPU-hour is its first catalog node's list price / its GPUs (the priced node,
compiler/catalog/gpus.yaml). A pod the priced node cannot hold, because it needs more GPUs than the node has or more
host memory than the node's share of them, lands on a larger node of the same GPU (nodes.choose) and pays that node's
list price / its GPUs. The sizing searches price every candidate here (training: sizing/train/candidate.py; serving:
sizing/serve/llm_config.py and vision.py), so the alternatives they compare are compared at the price of the node
each would land on; the deployment pass places the chosen plan's pods with the same shapes (serving/pods.py pod_node,
training/kubernetes.py trainer_node), and passes/price_on_node.py (check_price_on_node) checks that both agree.

A pod whose priced node holds it pays the GPU's catalog price even where the plan's fabric sends it to another node
(an InfiniBand cluster's Azure or on-premises nodes): the price is then the GPU's, not a node's. A node without a
sourced price (GCP, Azure, on-premises, AWS p5e.48xlarge) keeps the GPU's catalog price, and the plan says the cost
leaves out that node's premium.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog.types import GpuSpec
from ..plan.deployment_fields import NodeShare
from ..units import format_usd
from . import nodes

GIB = 2**30
# Training pods. /dev/shm rule: 1 GiB per GPU process. DataLoader workers hand every batch to their trainer process
# through shared memory, and NCCL's shared-memory transport uses it between the node's ranks; the container runtime's
# 64 MiB default breaks both (NVIDIA's PyTorch container notes: raise --shm-size or use --ipc=host for multi-process
# data loading).
SHM_BYTES_PER_GPU = GIB
# Serving pods. /dev/shm for NCCL and vLLM's shared-memory broadcast queue: the size LWS's vLLM GPU example gives
# (kubernetes-sigs/lws docs/examples/vllm/GPU/lws.yaml, sizeLimit 15Gi); Docker's 64 MiB default is too small.
SHM_BYTES = 15 * GIB
# Host memory beside the weights a serving pod reads through (serving/pods.py, "Pod resources"): Python, CUDA context
# and NCCL host buffers, tokenizer, API server; a policy.
HOST_MEMORY_OVERHEAD_BYTES = 16 * GIB
# /dev/shm of a 1-GPU pod: no NCCL peers and no tensor-parallel workers for vLLM's shared-memory broadcast queue, so
# the training rule of 1 GiB per GPU process (DataLoader-style IPC, Triton's Python backend regions) rather than 15 GiB.
SINGLE_GPU_SHM_BYTES = 1 * GIB
# Edge devices (Jetson: 8-64 GB shared by CPU and GPU): a small request that fits the device.
EDGE_HOST_MEMORY_OVERHEAD_BYTES = 1 * GIB
EDGE_SHM_BYTES = 1 * GIB


@dataclass(frozen=True)
class PodShape:
    """What a pod asks of a node: its GPUs, the host memory it needs at least, and the fabric family of a job that
    spans nodes ("" otherwise: any node of the GPU will do)."""

    gpus: int
    floor_bytes: int
    fabric: str = ""


@dataclass(frozen=True)
class NodePrice:
    """The price per GPU-hour a pod pays and the node it lands on. `choice` and `reason` are set where the pod pays
    another node's price than the GPU's catalog one; `warning` where its node has no sourced price."""

    usd_per_gpu_hour: float
    node: NodeShare | None
    choice: str = ""
    reason: str = ""
    warning: str = ""


def training_pod(gpus_per_node: int, nodes_count: int, interconnect: str) -> PodShape:
    """A trainer pod: one per node, the node's GPUs, their /dev/shm; the fabric (of the catalog interconnect id)
    matters once the job spans nodes."""
    fabric = nodes.fabric_family(interconnect) if nodes_count > 1 else ""
    return PodShape(gpus_per_node, SHM_BYTES_PER_GPU * gpus_per_node, fabric)


def serving_shm_bytes(pod_gpus: int, edge: bool) -> int:
    return EDGE_SHM_BYTES if edge else (SHM_BYTES if pod_gpus > 1 else SINGLE_GPU_SHM_BYTES)


def serving_pod(
    gpus_per_replica: int, tp: int, nodes_per_replica: int, weights_bytes: int, edge: bool, fabric: str = ""
) -> PodShape:
    """A serving pod: the whole replica on one node, else one pipeline stage of TP GPUs per node; its floor is its
    share of the weights (read through host memory) + its /dev/shm + the overhead. The fabric family matters for a
    replica that spans nodes."""
    pod_gpus = tp if nodes_per_replica > 1 else gpus_per_replica
    overhead = EDGE_HOST_MEMORY_OVERHEAD_BYTES if edge else HOST_MEMORY_OVERHEAD_BYTES
    weights = math.ceil(weights_bytes / nodes_per_replica)
    floor = weights + serving_shm_bytes(pod_gpus, edge) + overhead
    return PodShape(pod_gpus, floor, fabric if nodes_per_replica > 1 else "")


def landing_node(spec: GpuSpec, pod: PodShape) -> NodeShare | None:
    return nodes.choose(spec, pod.gpus, pod.floor_bytes, pod.fabric)


def node_price(spec: GpuSpec, pod: PodShape, pricing: str) -> NodePrice:
    """The price per GPU-hour of a pod of `pod`'s shape: the GPU's catalog price, unless the pod outgrows the priced
    node (nodes.node_share outgrown_priced_node), when it is the landing node's (nodes.price_per_gpu)."""
    return price_on(spec, None if spec.edge else landing_node(spec, pod), pricing)


def price_on(spec: GpuSpec, node: NodeShare | None, pricing: str) -> NodePrice:
    """The price per GPU-hour of a pod that landed on `node` (node_price)."""
    usd = spec.price_usd_per_gpu_hour.get(pricing, math.inf)
    if node is None or not node.outgrown_priced_node:
        return NodePrice(usd, node)
    priced, chosen = spec.node_types[0], nodes.node_type(spec, node.node_type)
    needs = (
        f"the pod needs {node.gpus} GPUs, more than {priced.id}'s {priced.gpus}"
        if node.gpus > priced.gpus
        else f"the pod needs {node.floor_bytes / GIB:.1f} GiB of host memory, more than its GPU share of {priced.id}"
    )
    price = nodes.price_per_gpu(spec, chosen, pricing)
    if price is None:
        warning = (
            f"{needs}, and lands on {chosen.id}, which has no sourced price: the cost uses {spec.id}'s catalog "
            f"{format_usd(usd)}/GPU-hour and leaves out {chosen.id}'s premium (cluster.catalog can give the node a "
            "price_usd_per_hour)"
        )
        return NodePrice(usd, node, warning=warning)
    landed, how = price
    listed = f"${priced.price_usd_per_hour:g}/h" if priced.price_usd_per_hour is not None else "no sourced price"
    return NodePrice(
        landed,
        node,
        choice=f"{format_usd(landed)}/GPU-hour {pricing} on {chosen.id} (not {format_usd(usd)} on {priced.id})",
        reason=f"{needs} ({priced.id}: {listed} for {priced.gpus} GPU), so it lands on {chosen.id} and the "
        f"plan pays that node: {how}",
    )
