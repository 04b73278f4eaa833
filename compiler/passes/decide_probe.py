"""Pass: when `mlinfra-compile probe` asks for it (PassContext.probe), decide the probe (deployment/probe.py). A staged
service has none of its own: each stage is probed as a plan of its own (deployment/probe_stages.py)."""

from __future__ import annotations

from ..deployment.probe import decide_probe as decide
from ..plan.resolved import ResolvedPlan
from .context import PassContext


def decide_probe(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    if not ctx.probe or plan.stages:
        return plan
    probe = decide(plan, ctx.catalog, ctx.resolve_text, ctx.probe_gpus, ctx.probe_neighbours)
    return plan.model_copy(update={"probe": probe})
