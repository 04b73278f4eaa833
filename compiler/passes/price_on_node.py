"""The price per GPU-hour of the node a plan's pods land on: the decision the sizing passes record, and the check that
the deployment placed the pods where the sizing priced them.

The searches price every candidate on the node its pod lands on (compiler/deployment/pod_price.py), so the cost, its
ranges, the budget and the alternatives are all at that price before anything reads them. `price_notes` words the
chosen candidate's node price for plan.json: a decision where the pod outgrew the priced node and pays a larger
node's price, a warning where that node has no sourced price. `check_price_on_node` runs after resolve_deployment: it
places the chosen plan's pods with the deployment's own functions (pods.pod_node, kubernetes.trainer_node) and
refuses, as a bug, a plan whose price per GPU-hour is not that node's.
"""

from __future__ import annotations

import math

from ..deployment.pod_price import NodePrice, price_on
from ..deployment.serving.pods import pod_node
from ..deployment.training.kubernetes import trainer_node
from ..deployment.units import unit_views
from ..plan.resolved import Decision, Hardware, ResolvedPlan
from .context import PassContext


class NodePriceMismatch(AssertionError):
    """The sizing priced a pod on one node and the deployment placed it on another: a bug (exit 3)."""


def price_notes(price: NodePrice, prefix: str = "") -> tuple[list[Decision], list[str]]:
    """(decisions, warnings) of the chosen candidate's node price: none where it pays the GPU's catalog price."""
    decisions = (
        [Decision(topic=f"{prefix}price per GPU-hour", choice=price.choice, reason=price.reason)]
        if price.choice
        else []
    )
    return decisions, [prefix + price.warning] if price.warning else []


def _expect_price(hardware: Hardware, price: NodePrice, where: str) -> None:
    if not math.isclose(price.usd_per_gpu_hour, hardware.usd_per_gpu_hour, rel_tol=1e-9):
        node = price.node.node_type if price.node else "no catalog node"
        raise NodePriceMismatch(
            f"{where}priced at ${hardware.usd_per_gpu_hour:g}/GPU-hour, but its pods land on {node} at "
            f"${price.usd_per_gpu_hour:g}/GPU-hour"
        )


def check_price_on_node(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    """The plan unchanged, once every unit's price is that of the node the deployment places its pods on."""
    if plan.hardware is None or plan.hardware.gpu_spec.edge:
        return plan
    on_kubernetes = plan.spec.cluster.scheduler in ("kubernetes", "both")
    if plan.workload == "serve" and plan.serving is not None:
        fabric = ctx.catalog.interconnects[plan.hardware.interconnect].family
        for view in unit_views(plan):
            hw, where = view.plan.hardware, f"{view.stage}: " if view.stage else ""
            _expect_price(hw, price_on(hw.gpu_spec, pod_node(view.plan, on_kubernetes, fabric), hw.pricing), where)
    elif plan.training is not None and on_kubernetes:
        hw = plan.hardware
        _expect_price(hw, price_on(hw.gpu_spec, trainer_node(plan), hw.pricing), "")
    return plan
