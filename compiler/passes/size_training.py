"""Pass: size a train/finetune plan — the search over GPU type, count and parallelism (compiler/sizing/training.py)."""

from __future__ import annotations

from dataclasses import replace

from ..catalog.catalog import Catalog
from ..diagnostics import InfeasiblePlan
from ..plan.resolved import Cost, Decision, Rejection, ResolvedPlan
from ..recipe.decide import decide_dropout
from ..sizing.train.search import TrainRequest, search_training
from ..units import format_seconds
from .context import PassContext
from .price_on_node import price_notes
from .training_families import gate_factor, memory_factor, memory_source, time_family
from .training_request import DEFAULT_GLOBAL_BATCH_TOKENS, refuse_adapters_without_layers, refuse_uneven_cp, request_for
from .training_sections import alternatives_of, hardware_of, memory_section, parallelism_of, training_section
from .wording import rejection_rows, words
from .wording_training import Margins, training_decisions


def size_training(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    catalog = ctx.catalog
    if plan.workload == "serve":
        return plan
    refuse_adapters_without_layers(plan)
    refuse_uneven_cp(plan)
    arch = plan.model.architecture
    request = request_for(plan, catalog)
    result = search_training(request, catalog.gpus, ctx.searches)
    if result.chosen is None:
        raise InfeasiblePlan(words(result.infeasible_reason) if result.infeasible_reason else "no configuration fits")
    c, spec = result.chosen, plan.spec
    gpu = catalog.gpus[c.gpu_id]
    hardware = hardware_of(c, spec, gpu)
    parallelism = parallelism_of(c.layout, c.grad_accum)
    memory = memory_section(c)
    training = training_section(c, spec)
    cost = Cost(
        usd_per_hour=c.gpus * hardware.usd_per_gpu_hour,
        usd_total=c.cost_usd,
        usd_per_million_tokens=c.cost_usd / spec.train.total_tokens * 1e6,
        budget_usd=spec.budget.usd,
        alert_at=spec.budget.alert_at,
    )
    alternatives = alternatives_of(c, result.pareto)
    node_decisions, node_warnings = price_notes(c.node_price)
    decisions = training_decisions(
        spec,
        c,
        result.evaluated,
        hardware,
        parallelism,
        spec.train.global_batch_tokens or DEFAULT_GLOBAL_BATCH_TOKENS,
        Margins(
            gate=(
                gate_factor(ctx.catalog, spec.workload, spec.train.gate_quantile, arch, c.gpu_id),
                ctx.catalog.residuals[time_family(spec.workload, arch)].rows,
                time_family(spec.workload, arch),
            ),
            memory=(
                memory_factor(ctx.catalog, spec.train.method, spec.train.memory_quantile),
                memory_source(ctx.catalog, spec.train.method, spec.train.memory_quantile),
            ),
            dropout=decide_dropout(plan),
        ),
    )
    return plan.model_copy(
        update={
            "hardware": hardware,
            "parallelism": parallelism,
            "memory_per_gpu_bytes": memory,
            "training": training,
            "cost": cost,
            "alternatives": alternatives,
            "rejected": [Rejection(description=d, reason=r) for d, r in rejection_rows(result.rejected)],
            "decisions": plan.decisions + decisions + node_decisions + links_decision(request, c, catalog, ctx),
            "warnings": plan.warnings + [words(w) for w in result.warnings] + node_warnings,
            "search_evaluated": result.evaluated,
        }
    )


# the step's communication terms, as the report names them
COMM_TERMS = (
    ("dp_comm", "DP all-reduce"),
    ("dp_comm_exposed", "its exposed part"),
    ("tp_comm", "TP all-reduces"),
    ("cp_comm", "CP K/V exchange"),
    ("ep_comm", "EP all-to-alls"),
    ("pp_p2p", "PP sends"),
)


def links_decision(request: TrainRequest, chosen, catalog: Catalog, ctx: PassContext) -> list[Decision]:
    """With a site's measured link shares: the chosen layout's communication terms as the published shares predict
    them (the same search without the site's shares) and as the site's do."""
    if request.site_intra_node is None and request.inter_node_fraction is None:
        return []
    before = search_training(
        replace(request, site_intra_node=None, inter_node_fraction=None), catalog.gpus, ctx.searches
    ).chosen
    if before is None:
        return []
    old, new = before.step, chosen.step
    terms = [
        f"{name} {_seconds(getattr(old, key))} → {_seconds(getattr(new, key))}"
        for key, name in COMM_TERMS
        if getattr(old, key) or getattr(new, key)
    ]
    layout = (
        ""
        if before.description == chosen.description
        else f"; the published shares chose {before.description}, the site's {chosen.description}"
    )
    return [
        Decision(
            topic="site interconnect shares in this plan",
            choice=f"step {_seconds(old.total)} → {_seconds(new.total)}",
            reason="communication predicted with the published link shares → with the site's measured ones "
            "(cluster.calibration): " + (", ".join(terms) or "no collective in this layout") + layout,
        )
    ]


def _seconds(value: float) -> str:
    """format_seconds, below a millisecond in µs to 3 digits (a small plan's collectives)."""
    return format_seconds(value) if value >= 1e-3 or value == 0 else f"{value * 1e6:.3g} µs"
