"""Pass: cost the plan on the node its pods land on, where a pod outgrows the node the GPU's price is from.

A GPU's price per GPU-hour is its first catalog node's (the priced node, compiler/catalog/gpus.yaml). A pod whose host
memory floor that node's GPU share cannot hold lands on a larger node of the same GPU (compiler/deployment/nodes.py
`choose`): the plan then pays that node's price, so its cost is re-priced at that node's list price / its GPUs, and
the budget is checked again with the new cost. A node without a sourced price keeps the priced node's rate and the
plan says the cost is understated, and by which node.

Runs after attach_ranges (the headlines and their ranges scale by the same factor: cost is linear in the price) and
before resolve_deployment (its alert timings read the final cost). It picks the node with the deployment pass's own
functions (pods.pod_node, kubernetes.trainer_node), so both see the same node.
"""

from __future__ import annotations

from ..deployment import nodes
from ..deployment.serving.pods import pod_node
from ..deployment.training.kubernetes import trainer_node
from ..deployment.units import unit_views
from ..diagnostics import InfeasiblePlan
from ..plan.deployment_fields import NodeShare
from ..plan.resolved import Decision, Hardware, ResolvedPlan
from ..sizing.serve.types import HOURS_PER_MONTH
from ..units import format_usd
from .context import PassContext
from .training_families import gate_factor


def _repriced(hardware: Hardware, node: NodeShare | None, prefix: str) -> tuple[float, list[Decision], list[str]]:
    """(factor on the cost, decisions, warnings) of one unit whose pod lands on `node`: 1.0 unless it outgrew the
    priced node."""
    if node is None or not node.outgrown_priced_node:
        return 1.0, [], []
    spec = hardware.gpu_spec
    priced, chosen = spec.node_types[0], nodes.node_type(spec, node.node_type)
    needs = f"the pod needs {node.floor_bytes / 2**30:.1f} GiB of host memory, more than its GPU share of {priced.id}"
    price = nodes.price_per_gpu(spec, chosen, hardware.pricing)
    if price is None:
        return (
            1.0,
            [],
            [
                f"{prefix}{needs}, and lands on {chosen.id}, which has no sourced price: the cost uses {priced.id}'s "
                f"{format_usd(hardware.usd_per_gpu_hour)}/GPU-hour and is understated by {chosen.id}'s premium "
                "(cluster.catalog can give the node a price_usd_per_hour)"
            ],
        )
    usd, how = price
    decision = Decision(
        topic=f"{prefix}price per GPU-hour",
        choice=f"{format_usd(usd)}/GPU-hour {hardware.pricing} on {chosen.id} (not {format_usd(hardware.usd_per_gpu_hour)} on {priced.id})",
        reason=f"{needs} ({priced.id}: ${priced.price_usd_per_hour or 0:g}/h for {priced.gpus} GPU), so it lands on "
        f"{chosen.id} and the plan pays that node: {how}",
    )
    return usd / hardware.usd_per_gpu_hour, [decision], []


def _scaled(plan: ResolvedPlan, factor: float, hardware: Hardware | None, stages: list | None) -> ResolvedPlan:
    """The cost, its ranges and the chosen alternative × factor; the headline hardware (and stages) as re-priced."""
    cost = plan.cost.model_copy(
        update={
            k: getattr(plan.cost, k) * factor
            for k in ("usd_per_hour", "usd_total", "usd_per_month", "usd_per_million_tokens")
        }
    )
    ranges = [
        r.model_copy(update={k: getattr(r, k) * factor for k in ("roofline", "p10", "p50", "p90")})
        if r.quantity.startswith("cost.")
        else r
        for r in plan.ranges
    ]
    alternatives = [
        a.model_copy(
            update={
                "usd": a.usd * factor,
                "spread": {
                    k: (lo * factor, hi * factor) if k == "usd" else (lo, hi) for k, (lo, hi) in a.spread.items()
                },
            }
        )
        if a.chosen
        else a
        for a in plan.alternatives
    ]
    update = {"cost": cost, "ranges": ranges, "alternatives": alternatives, "hardware": hardware or plan.hardware}
    if stages is not None:
        update["stages"] = stages
    return plan.model_copy(update=update)


def _serving(plan: ResolvedPlan, ctx: PassContext, on_kubernetes: bool) -> ResolvedPlan:
    fabric = ctx.catalog.interconnects[plan.hardware.interconnect].family
    views = unit_views(plan)
    decisions, warnings, stages, old, new = [], [], [], 0.0, 0.0
    for view in views:
        prefix = f"{view.stage}: " if view.stage else ""
        factor, decided, warned = _repriced(view.plan.hardware, pod_node(view.plan, on_kubernetes, fabric), prefix)
        decisions, warnings = decisions + decided, warnings + warned
        hardware = view.plan.hardware.model_copy(
            update={"usd_per_gpu_hour": view.plan.hardware.usd_per_gpu_hour * factor}
        )
        if view.stage:
            stage = next(s for s in plan.stages if s.name == view.stage)
            stages.append(
                stage.model_copy(update={"hardware": hardware, "usd_per_month": stage.usd_per_month * factor})
            )
            old, new = old + stage.usd_per_month, new + stage.usd_per_month * factor
        else:
            old, new = 1.0, factor
    if not decisions:
        return plan.model_copy(update={"warnings": plan.warnings + warnings})
    factor = new / old if old else 1.0
    last = stages[-1].hardware if stages else hardware
    plan = _scaled(plan, factor, last, stages or None)
    if stages:
        plan = plan.model_copy(
            update={"cost": plan.cost.model_copy(update={"usd_per_hour": plan.cost.usd_per_month / HOURS_PER_MONTH})}
        )
    budget = plan.cost.budget_usd_per_month
    if budget is not None and plan.cost.usd_per_month > budget:
        raise InfeasiblePlan(
            f"on the node its pods land on the service costs {format_usd(plan.cost.usd_per_month)}/month, over the "
            f"budget of {format_usd(budget)}/month ({'; '.join(d.choice for d in decisions)})"
        )
    return plan.model_copy(update={"decisions": plan.decisions + decisions, "warnings": plan.warnings + warnings})


def _training(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    factor, decisions, warnings = _repriced(plan.hardware, trainer_node(plan), "")
    if not decisions:
        return plan.model_copy(update={"warnings": plan.warnings + warnings})
    roofline = next((r.roofline for r in plan.ranges if r.quantity == "cost.usd_total"), plan.cost.usd_total)
    hardware = plan.hardware.model_copy(update={"usd_per_gpu_hour": plan.hardware.usd_per_gpu_hour * factor})
    plan = _scaled(plan, factor, hardware, None)
    budget = plan.cost.budget_usd
    if budget:
        spec = plan.spec
        gated = (
            roofline
            * factor
            * gate_factor(ctx.catalog, spec.workload, spec.train.gate_quantile, plan.model.architecture)
        )
        if gated > budget:
            raise InfeasiblePlan(
                f"on the node its pods land on the run costs {format_usd(gated)} at {spec.train.gate_quantile}, over "
                f"the budget of {format_usd(budget)} ({decisions[0].choice})"
            )
    return plan.model_copy(update={"decisions": plan.decisions + decisions})


def price_on_node(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    if plan.hardware is None or plan.hardware.gpu_spec.edge:
        return plan
    on_kubernetes = plan.spec.cluster.scheduler in ("kubernetes", "both")
    if plan.workload == "serve":
        return _serving(plan, ctx, on_kubernetes) if plan.serving is not None else plan
    if plan.training is not None and on_kubernetes:
        return _training(plan, ctx)
    return plan
