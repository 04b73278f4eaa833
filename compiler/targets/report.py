"""Target: REPORT.md — the decision and its reasons — with SVG charts beside it."""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from ..units import format_bytes, format_count, format_seconds, format_usd
from . import charts
from .base import OutputFile, Target
from .base import render as render_template
from .report_charts import capacity_label, pareto_charts, quantile_note
from .report_facts import VISION_KINDS, headline_facts, median_note

MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "other")


def applies(plan: ResolvedPlan) -> bool:
    return True


def _memory_rows(plan: ResolvedPlan) -> list[dict]:
    mem = plan.memory_per_gpu_bytes
    terms_total = sum(getattr(mem, term) for term in MEMORY_TERMS)
    rows = []
    for term in MEMORY_TERMS:
        value = getattr(mem, term)
        if value:
            share = f"{100 * value / terms_total:.1f}%" if terms_total else ""
            rows.append({"term": term, "size": format_bytes(value), "share": share})
    return rows


def _stages(plan: ResolvedPlan) -> list[dict]:
    return [
        {
            "name": st.name,
            "model": st.model.name,
            "gpus": f"{st.hardware.gpus} × {st.hardware.gpu}",
            "replicas": f"{st.serving.replicas} ({st.serving.min_replicas}–{st.serving.max_replicas})",
            "ratio": f"{st.gpus_per_last_stage_gpu:.2f}",
            "usd": format_usd(st.usd_per_month),
            "queue": st.queue or "—",
        }
        for st in plan.stages
    ]


def _alternatives(plan: ResolvedPlan) -> list[dict]:
    unit = format_seconds
    return [
        {
            "description": a.description,
            "usd": format_usd(a.usd),
            "seconds": unit(a.seconds),
            "chosen": "✔" if a.chosen else "",
        }
        for a in plan.alternatives
    ]


def _latency_name(plan: ResolvedPlan) -> str:
    """The time axis of the alternatives: what their Pareto front is computed on."""
    vision = plan.model is not None and plan.model.architecture.kind in VISION_KINDS
    return "wall time" if plan.workload != "serve" else "p99 latency" if vision else "request latency p99"


RANGE_LABELS = {  # quantity -> (label, formatter)
    "training.step_seconds": ("step time", format_seconds),
    "training.wall_seconds": ("wall time", format_seconds),
    "training.gpu_hours": ("GPU-hours", format_count),
    "training.tokens_per_second": ("tokens/s", format_count),
    "cost.usd_total": ("cost", format_usd),
    "cost.usd_per_month": ("cost per month", format_usd),
    "memory_per_gpu_bytes.total": ("memory per GPU", format_bytes),
    "serving.tokens_per_second_per_replica": ("tokens/s per replica", format_count),
    "serving.ttft_seconds": ("TTFT p99 at peak", format_seconds),
    "serving.tpot_seconds": ("TPOT p99 at peak", format_seconds),
}
VISION_RANGE_LABELS = {
    "serving.tokens_per_second_per_replica": ("images/s per replica", format_count),
    "serving.ttft_seconds": ("request latency p99 at peak", format_seconds),
}


def _ranges(plan: ResolvedPlan) -> list[dict]:
    """The plan's ranges, then those of each stage before the last (the last stage's are the plan's)."""
    staged = [(f"{st.name}: ", st.model, st.ranges) for st in plan.stages[:-1]]
    rows = []
    for prefix, model, ranges in [("", plan.model, plan.ranges), *staged]:
        vision = model is not None and model.architecture.kind in VISION_KINDS
        rows += _range_rows(ranges, prefix, vision and plan.workload == "serve")
    return rows


def _range_rows(ranges, prefix: str, vision: bool) -> list[dict]:
    rows = []
    for r in ranges:
        label, fmt = (vision and VISION_RANGE_LABELS.get(r.quantity)) or RANGE_LABELS[r.quantity]
        rows.append(
            {
                "what": prefix + label,
                "median": fmt(r.p50),
                "spread": f"{fmt(r.p10)} – {fmt(r.p90)}",
                "roofline": fmt(r.roofline),
                "source": f"{r.family}: actual ÷ predicted over {r.rows} published rows"
                + (f"; outside them: {r.outside}" if r.outside else ""),
            }
        )
    return rows


RECIPE_ROWS = (
    ("optimizer", "optimizer"),
    ("lr_peak", "peak learning rate"),
    ("lr_min", "minimum learning rate"),
    ("schedule", "schedule"),
    ("warmup_steps", "warmup steps (linear from 0)"),
    ("decay_steps", "decay ends at step"),
    ("wsd_decay_steps", "final decay steps"),
    ("weight_decay", "weight decay"),
    ("betas", "Adam β1, β2"),
    ("eps", "Adam ε"),
    ("grad_clip_norm", "gradient clip (global norm)"),
    ("init_std", "init std"),
    ("dropout", "dropout (attention, hidden)"),
)


def _recipe_rows(plan: ResolvedPlan) -> list[dict]:
    """The decided recipe, one row per value with its source (compiler/recipe/)."""
    recipe = plan.recipe
    if recipe is None:
        return []
    rows = []
    for name, label in RECIPE_ROWS:
        value = getattr(recipe, name)
        if name == "wsd_decay_steps" and recipe.schedule != "wsd":
            continue
        if name == "betas":
            text = ", ".join(f"{v:g}" for v in value)
        else:
            text = value if isinstance(value, str | int) else f"{value:g}"
        rows.append({"label": label, "value": text, "source": recipe.reasons.get(name, "train.optimizer")})
    return rows


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    mem = plan.memory_per_gpu_bytes
    spread = next((r for r in plan.ranges if r.quantity == "memory_per_gpu_bytes.total"), None)
    files = [
        OutputFile(
            "charts/memory.svg",
            charts.memory_bar(
                [(t, float(getattr(mem, t))) for t in MEMORY_TERMS if getattr(mem, t)],
                float(mem.usable or mem.total),
                f"Memory per GPU: {plan.name}",
                (spread.p10, spread.p50, spread.p90) if spread else None,
                capacity_label(plan),
            ),
        ),
    ]
    pareto = pareto_charts(plan)
    files += [
        OutputFile(path, charts.pareto(points, x, y, f"{title}: {plan.name}")) for path, title, points, x, y in pareto
    ]
    text = render_template(
        "report/REPORT.md.j2",
        name=plan.name,
        workload=plan.workload,
        plan_file=plan.plan_file,
        facts=headline_facts(plan),
        memory_rows=_memory_rows(plan),
        memory_total=format_bytes(mem.total) + median_note(plan, "memory_per_gpu_bytes.total", format_bytes),
        memory_usable=format_bytes(mem.usable),
        decisions=[d.model_dump() for d in plan.decisions],
        recipe_rows=_recipe_rows(plan),
        recipe_family=plan.recipe.family if plan.recipe else "",
        deployment=[d.model_dump() for d in plan.deployment.decisions] if plan.deployment else [],
        alternatives=_alternatives(plan),
        stages=_stages(plan),
        rejected=[r.model_dump() for r in plan.rejected],
        warnings=plan.warnings,
        evaluated=plan.search_evaluated,
        ranges=_ranges(plan),
        front_axis=_latency_name(plan),
        pareto_charts=[path for path, *_ in pareto],
        quantile_note=quantile_note(plan),
    )
    return [
        OutputFile(plan.deployment.files.report if plan.deployment else "REPORT.md", text.rstrip("\n") + "\n"),
        *files,
    ]


TARGET = Target("report", applies, render)
