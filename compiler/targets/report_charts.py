"""The REPORT target's charts: which Pareto charts are worth drawing (cost against wall time, TTFT, TPOT or latency)
with their budget, deadline and SLO lines, the memory chart's limit and the note on the quantiles shown. Not a
target itself."""

from __future__ import annotations

from ..plan.resolved import ResolvedPlan
from . import chart_axes, charts


def _checked_at(plan: ResolvedPlan) -> str:
    """The quantile deadline and budget (train) or SLOs and budget (serve) are checked at, in words."""
    if plan.workload != "serve":
        return f"checked at {plan.training.gate_quantile.upper()}"
    return "checked on the roofline"


def capacity_label(plan: ResolvedPlan) -> str:
    """The memory chart's limit line: what the roofline must fit, and the quantile behind it."""
    quantile = plan.training.memory_quantile if plan.training else "none"
    return "usable" if quantile == "none" else f"usable, the roofline's limit at {quantile.upper()}:"


def quantile_note(plan: ResolvedPlan) -> str:
    """What the charts and the table show, and the quantile the limits are checked at."""
    if not plan.ranges:
        return "Each option at its roofline prediction (no published family covers this model)."
    if plan.workload != "serve":
        return (
            f"Each option at P50, with P10–P90 in the charts; deadline and budget are {_checked_at(plan)} "
            "(the far end of each whisker)."
        )
    return (
        f"Each option at P50, with P10–P90 in the charts; SLOs and budget are {_checked_at(plan)} prediction "
        "(a warning says where the P50 misses an SLO)."
    )


def _chart_points(plan: ResolvedPlan, field: str) -> list[charts.Point]:
    """The alternatives at P50 on cost and `field` (seconds, ttft_seconds, tpot_seconds) with their P10-P90."""
    return [
        charts.Point(a.description, a.usd, getattr(a, field), a.chosen, a.spread.get("usd"), a.spread.get(field))
        for a in plan.alternatives
    ]


def pareto_charts(plan: ResolvedPlan) -> list[tuple[str, str, list[charts.Point], chart_axes.Axis, chart_axes.Axis]]:
    """(file, title, points, cost axis, time axis) per chart worth drawing: training on wall time against the
    deadline; an LLM service on the SLO's own quantities, TTFT and TPOT; a vision service on its p99 latency."""
    cost, checked = plan.cost, _checked_at(plan)
    if plan.workload != "serve":
        deadline = plan.training.deadline_seconds if plan.training else None
        charts_ = [
            (
                "charts/pareto.svg",
                "Cost vs wall time",
                _chart_points(plan, "seconds"),
                chart_axes.Axis("total cost", chart_axes.usd_unit, cost.budget_usd, "budget", checked),
                chart_axes.Axis("wall time", chart_axes.seconds_unit, deadline, "deadline", checked),
            )
        ]
    else:
        s = plan.serving
        budget = chart_axes.Axis("cost per month", chart_axes.usd_unit, cost.budget_usd_per_month, "budget", checked)
        if s.tpot_seconds:
            charts_ = [
                (
                    "charts/pareto.svg",
                    "Cost vs TTFT",
                    _chart_points(plan, "ttft_seconds"),
                    budget,
                    chart_axes.Axis(
                        "TTFT p99 at peak", chart_axes.seconds_unit, s.ttft_slo_seconds, "TTFT SLO", checked
                    ),
                ),
                (
                    "charts/pareto-tpot.svg",
                    "Cost vs TPOT",
                    _chart_points(plan, "tpot_seconds"),
                    budget,
                    chart_axes.Axis(
                        "TPOT p99 at peak", chart_axes.seconds_unit, s.tpot_slo_seconds, "TPOT SLO", checked
                    ),
                ),
            ]
        else:
            slo = s.latency_slo_seconds
            latency = chart_axes.Axis("p99 latency", chart_axes.seconds_unit, slo, "latency SLO", checked)
            charts_ = [("charts/pareto.svg", "Cost vs latency", _chart_points(plan, "seconds"), budget, latency)]
    return [c for c in charts_ if charts.worth_drawing(c[2])]
