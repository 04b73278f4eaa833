"""Training-step communication: the data-parallel collectives' bandwidth and ring time, and the seconds the TP,
CP, EP, pipeline and DP traffic of a step take and leave exposed (time.py's docstring gives the model)."""

from __future__ import annotations

from ...catalog.types import GpuSpec
from .activations import (
    OP_SAC,
)
from .layout import Layout, Links, Workload
from .parallel import (
    cp_allgather_bytes_per_layer,
    cp_by_allgather,
    cp_ring_bytes_per_layer,
    ep_all_to_all_bytes_per_layer,
    interleaved_bubble_fraction,
    moe_layer_share,
)
from .step_rates import GRADIENT_BYTES, Rates, StepTraffic, layout_recompute, microbatch_tokens

# NVLink achieves ~83% of its specification (H100: 749 of 900 GB/s bidirectional p2p, NVIDIA/nccl#1264;
# formulas.md §8).
NVLINK_ACHIEVABLE_FRACTION = 749 / 900
# Inter-node collectives reach ~86% of the NICs' rate: nccl-tests all_reduce bus bandwidth between 8×A100 nodes
# with 4× HDR 200 Gb/s (100 GB/s per node): 84.8 (nccl-tests #119), 86 (NVIDIA/nccl#1048), 91 GB/s (nccl-tests #100);
# the middle one.
INTER_NODE_ACHIEVABLE_FRACTION = 0.86

ZERO3_GATHERS_PER_MICROBATCH = 2  # ZeRO paper §5.3 / FSDP: parameters gathered for the forward, again for the backward


def pipeline_gathers_per_step(microbatches: int, reshard_after_forward: bool = True) -> int:
    """All-gathers of one FSDP2 pipeline stage per step (torch 2.13 pipelining, train_memory.pipeline_without_sync):
    a backward leaves the stage gathered, so a forward that follows a backward gathers nothing (and reshards after
    it), a backward that follows a backward neither; under 1F1B the warm-up forwards and the first steady forward
    gather, and every steady backward: m + 1, against 2m with a gradient sync per micro-batch. Without
    reshard_after_forward nothing reshards before the step's reduce: one. Counted on gloo ranks (1F1B and interleaved)
    by tests/test_fsdp_pp_memory_real.py."""
    return microbatches + 1 if reshard_after_forward else 1


BACKWARD_SHARE_OF_COMPUTE = 2 / 3  # the backward is 4N of the 6N FLOPs per token
ZERO3_VOLUME_FACTOR = 1.5  # ZeRO paper §7.2.2: stage 3 moves 3Ψ against DP's 2Ψ


def dp_ranks_per_node(tp: int, dp: int, gpus_per_node: int) -> int:
    """A DP group's ranks on one node: TP innermost in the rank order, so every tp-th GPU of the node."""
    return max(1, min(dp, gpus_per_node // max(1, tp)))


def dp_collective_bandwidth(
    gpu: GpuSpec,
    tp: int,
    dp: int,
    gpus_per_node: int,
    nic_bytes_per_second: float,
    nvlink_fraction: float = NVLINK_ACHIEVABLE_FRACTION,
    nic_fraction: float = INTER_NODE_ACHIEVABLE_FRACTION,
) -> tuple[float, bool]:
    """(bandwidth B of t = S/B · 2(n−1)/n, whether the group spans nodes) for a data-parallel collective.

    Ranks are ordered TP innermost, then DP (Megatron's order; FSDP/DeepSpeed have no TP), so a DP group takes
    every tp-th GPU: within one node while tp·dp ≤ gpus per node, else gpus_per_node/tp of its ranks on each node.
    Across nodes NCCL runs a ring per NIC and each node's ranks share the inter-node hops, so a GPU's collective
    moves at its NIC rate times its node's ranks in the group (nccl-tests #100, #119 and NVIDIA/nccl#1048: 8×A100
    nodes with 4 HDR NICs reach 85-91 GB/s bus bandwidth of the node's 100 GB/s), at INTER_NODE_ACHIEVABLE_FRACTION
    and never above NVLink, which carries the intra-node hops. A site calibration file's measured shares replace
    the two fractions (site_calibration.py)."""
    nvlink = gpu.intra_node_bandwidth_bytes_per_second * nvlink_fraction
    ranks_per_node = dp_ranks_per_node(tp, dp, gpus_per_node)
    if dp <= ranks_per_node:
        return nvlink, False
    return min(nvlink, nic_bytes_per_second * ranks_per_node * nic_fraction), True


def ring_allreduce_seconds(size_bytes: float, ranks: int, bandwidth: float, latency: float = 0.0) -> float:
    """nccl-tests PERFORMANCE.md: t = S/B · 2(n−1)/n, plus 2(n−1) latency hops."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * size_bytes / bandwidth + 2 * (ranks - 1) * latency


def cp_exposed_seconds(
    work: Workload, layout: Layout, links: Links, rates: Rates, layers: int, attention: float
) -> float:
    """CP's K/V exchange: the ring hidden under the attention kernel where it can be; the all-gather (the FSDP2
    script) whole."""
    lay, recompute = layout, layout_recompute(layout)
    if lay.cp <= 1:
        return 0.0
    bandwidth = rates.nvlink if lay.tp * lay.cp <= links.gpus_per_node else min(rates.nvlink, rates.nic)
    shape = (work.arch, work.seq_len, lay.micro_batch, lay.tp, lay.cp, recompute)
    if cp_by_allgather(lay.framework):
        return layers * cp_allgather_bytes_per_layer(*shape) / bandwidth
    return max(0.0, layers * cp_ring_bytes_per_layer(*shape) / bandwidth - attention)


def ep_seconds(work: Workload, layout: Layout, links: Links, rates: Rates, layers: int, mtp: int = 0) -> float:
    """EP all-to-alls (dispatch and combine) of the MoE layers, and of `mtp` MTP modules' layers (each an MoE layer as
    the model's last); EP ranks sit every tp·cp ranks: inside a node while ep·tp·cp fits."""
    arch, lay = work.arch, layout
    if lay.ep <= 1 or not arch.is_moe:
        return 0.0
    bandwidth = rates.nvlink if lay.ep * lay.tp * lay.cp <= links.gpus_per_node else min(rates.nvlink, rates.nic)
    volume = ep_all_to_all_bytes_per_layer(
        arch, microbatch_tokens(work, lay) / lay.tp, lay.ep, layout_recompute(lay), lay.ep_dispatch
    )
    return (layers * moe_layer_share(arch) + mtp) * volume / bandwidth


def tp_comm_seconds(work: Workload, layout: Layout, links: Links, rates: Rates, layers: int) -> float:
    """4 all-reduces of the activations per layer (2 forward, 2 backward), 2 more with a recomputed forward."""
    lay = layout
    if lay.tp <= 1 or not work.arch.layers:
        return 0.0
    bandwidth = rates.nvlink if lay.tp <= links.gpus_per_node else links.inter_node_bytes_per_second
    collectives = 4 + (2 if layout_recompute(lay) in ("full", OP_SAC) else 0)
    size = microbatch_tokens(work, lay) * work.arch.hidden * 2
    return collectives * layers * ring_allreduce_seconds(size, lay.tp, bandwidth)


def zero3_gathers(work: Workload, layout: Layout, traffic: StepTraffic) -> float:
    """16-bit weight all-gathers per micro-batch at ZeRO-3 across DP: 2, or m + 1 a step under FSDP2 pipelining."""
    lay = layout
    if lay.zero < 3 or lay.dp <= 1:
        return 0
    microbatches = lay.microbatches(work)
    if traffic.reduce_once_per_step:
        return pipeline_gathers_per_step(microbatches, work.memory.reshard_after_forward) / microbatches
    return ZERO3_GATHERS_PER_MICROBATCH


def pipeline_seconds(work: Workload, layout: Layout, links: Links, stage_seconds: float) -> tuple[float, float]:
    """(bubble, point-to-point): the interleaved 1F1B bubble, and activations forward and gradients backward, v times
    per boundary."""
    lay = layout
    if lay.pp <= 1:
        return 0.0, 0.0
    microbatches = lay.microbatches(work)
    bubble = interleaved_bubble_fraction(lay.pp, lay.vp, microbatches) * microbatches * stage_seconds
    if not work.arch.layers:
        return bubble, 0.0
    p2p_bytes = microbatch_tokens(work, lay) * work.arch.hidden * 2 / (lay.tp if lay.sequence_parallel else 1)
    nic = links.inter_node_bytes_per_second * links.nic_fraction
    return bubble, microbatches * 2 * max(1, lay.vp) * p2p_bytes / nic


def dp_seconds(
    work: Workload, layout: Layout, gpu: GpuSpec, links: Links, traffic: StepTraffic, per_microbatch: float
) -> tuple[float, float]:
    """(DP collectives a step, what of them the backward does not hide): ZeRO-3's all-gathers and reduce-scatters
    per micro-batch (once a step under FSDP2 pipelining), else one all-reduce overlapped with the last backward; HSDP
    adds the replicas' all-reduce of the gradient shard."""
    lay, microbatches = layout, layout.microbatches(work)
    replica_bytes = traffic.gradient_bytes_per_replica if traffic.gradient_bytes_per_replica is not None else 0.0
    ranks = lay.data_ranks  # CP ranks reduce their gradients with DP (parallel.py docstring)
    shard = min(ranks, lay.shard_group or ranks)
    fractions = {"nvlink_fraction": links.nvlink_fraction, "nic_fraction": links.nic_fraction}
    group = shard if lay.zero >= 3 else ranks
    nic = links.inter_node_bytes_per_second
    bandwidth, spans_nodes = dp_collective_bandwidth(gpu, lay.tp, group, links.gpus_per_node, nic, **fractions)
    latency = links.inter_node_latency_seconds if spans_nodes else 0.0
    reduce_scale = traffic.reduce_bytes_per_gradient / GRADIENT_BYTES  # 2 when FSDP2 reduces in fp32 (docstring)
    if lay.zero >= 3 and traffic.reduce_once_per_step:  # m + 1 all-gathers, one reduce-scatter after the last backward
        step_gathers = pipeline_gathers_per_step(microbatches, work.memory.reshard_after_forward)
        gather = ring_allreduce_seconds(replica_bytes / 2, shard, bandwidth, latency)
        reduce = ring_allreduce_seconds(replica_bytes * reduce_scale / 2, shard, bandwidth, latency)
        dp_comm = step_gathers * gather + reduce
        exposed = step_gathers * max(0.0, gather - per_microbatch) + reduce  # nothing left to overlap the reduce
    elif lay.zero >= 3:  # two 16-bit all-gathers and a reduce-scatter in the reduce dtype, each half an all-reduce
        volume = ZERO3_VOLUME_FACTOR + (reduce_scale - 1) / 2
        per_mb = ring_allreduce_seconds(replica_bytes * volume, shard, bandwidth, latency)
        dp_comm = per_mb * microbatches
        exposed = microbatches * max(0.0, per_mb - per_microbatch)
    else:
        dp_comm = ring_allreduce_seconds(replica_bytes, ranks, bandwidth, latency)
        exposed = max(0.0, dp_comm - BACKWARD_SHARE_OF_COMPUTE * per_microbatch)
    if lay.zero >= 3 and shard < ranks:  # HSDP: the replicas all-reduce the gradient shard once per step
        replica_bandwidth, crosses = dp_collective_bandwidth(
            gpu, lay.tp * shard, ranks // shard, links.gpus_per_node, nic, **fractions
        )
        replicas = ring_allreduce_seconds(
            replica_bytes * reduce_scale / shard,
            ranks // shard,
            replica_bandwidth,
            links.inter_node_latency_seconds if crosses else 0.0,
        )
        dp_comm += replicas
        exposed += max(0.0, replicas - BACKWARD_SHARE_OF_COMPUTE * per_microbatch)
    return dp_comm, exposed
