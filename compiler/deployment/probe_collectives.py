"""The probe's collectives: the all-reduce and all-gather sizes it measures on the node's GPUs and between two nodes."""

from __future__ import annotations

from ..plan.deployment_fields import DeploymentDecision
from ..plan.resolved import ResolvedPlan
from ..units import format_bytes
from .training.launcher import DEFAULT_RDZV_PORT

# The collectives' message sizes, a factor 16 apart as nccl-tests sweeps them (-b 1M -e 256M -f 16): the small one
# shows the latency, the largest the plateau rate the shares are fitted to (nccl-tests doc/PERFORMANCE.md: "on large
# sizes ... it makes more sense to look at the bandwidth"; bus bandwidth plateaus above ~100 MB on NVLink).
COLLECTIVE_BYTES = (1 << 20, 16 << 20, 256 << 20)


def collectives(plan: ResolvedPlan, processes: int) -> tuple[list[int], int, list[DeploymentDecision]]:
    """The all-reduce and all-gather sizes, and whether the probe takes a second node to measure the fabric."""
    hw = plan.hardware
    nodes = 2 if hw.nodes > 1 else 1
    sizes = list(COLLECTIVE_BYTES) if processes * nodes > 1 else []
    sweep = ", ".join(format_bytes(b) for b in COLLECTIVE_BYTES)
    return (
        sizes,
        nodes,
        [
            DeploymentDecision(
                topic="probe collectives",
                choice=f"all-reduce and all-gather at {sweep}" if sizes else "none",
                reason=(
                    "bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md: all-reduce algbw × 2(n−1)/n, "
                    "all-gather algbw × (n−1)/n), the median of 5 after a warm-up; the largest size's all-reduce "
                    "gives the site's interconnect shares (calibrate), the smaller ones show the latency; NCCL on "
                    "GPUs, gloo on CPU (sizes ÷ 64)"
                )
                if sizes
                else "one process on one node: no collective to measure",
            ),
            DeploymentDecision(
                topic="probe nodes",
                choice=f"{nodes}",
                reason=(
                    f"the plan spans {hw.nodes} nodes over {hw.interconnect}: the layouts run on the first node, "
                    f"then the collectives again across both nodes ({2 * processes} ranks) to measure the fabric "
                    f"the gradients cross; c10d rendezvous on the first node at port {DEFAULT_RDZV_PORT} "
                    f"(torchrun's default; $MASTER_PORT overrides it); probe.sbatch only: a Kubernetes probe "
                    f"Job stays one pod on one node"
                )
                if nodes == 2
                else f"the plan fits one node ({hw.gpus} GPU(s)): no inter-node traffic to measure",
            ),
        ],
    )
