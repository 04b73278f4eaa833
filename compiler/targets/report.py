"""Target: REPORT.md — the decision and its reasons — with SVG charts beside it."""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from ..units import format_bytes, format_count, format_seconds, format_usd
from . import charts
from .base import OutputFile, Target
from .base import render as render_template

VISION_KINDS = ("cnn", "vision-transformer")
MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "other")
NEED_OPEN = "peak traffic ÷ per-replica capacity at the target utilisation"
NEED_CLOSED = "clients at peak ÷ max concurrency, so each client holds a slot"


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


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


def _median_note(plan: ResolvedPlan, quantity: str, fmt) -> str:
    """How a headline was made the median: ' at P50 (roofline X)', or nothing where no family covers it."""
    found = next((r for r in plan.ranges if r.quantity == quantity), None)
    return f" at P50 (roofline {fmt(found.roofline)})" if found else ""


def _facts(plan: ResolvedPlan) -> list[dict]:
    """The headline numbers, each with the formula or catalog entry behind it."""
    facts = []
    hw, par, cost = plan.hardware, plan.parallelism, plan.cost
    if plan.model:
        facts.append(
            {
                "what": "model",
                "value": f"{plan.model.name}, {format_count(plan.model.params_total)} params ({format_count(plan.model.params_active)} active)",
                "source": "parameter count from the architecture (catalog/params.py)",
            }
        )
    if hw:
        layout = (
            f"{_counted(plan.serving.replicas, 'replica')} × {_counted(plan.serving.gpus_per_replica, 'GPU')}"
            if plan.serving
            else f"{_counted(hw.nodes, 'node')} × {hw.gpus_per_node}"
        )
        facts.append(
            {
                "what": "hardware",
                "value": f"{hw.gpus} × {hw.gpu} ({layout})",
                "source": f"catalog: {hw.gpu_spec.source} (as of {hw.gpu_spec.as_of})",
            }
        )
        facts.append(
            {
                "what": "price",
                "value": f"{format_usd(hw.usd_per_gpu_hour)}/GPU-hour {hw.pricing}",
                "source": "catalog price list",
            }
        )
    if plan.serving:  # a replica's shape; replicas, batch and engine have their own rows
        facts.append(
            {
                "what": "parallelism",
                "value": f"TP={par.tp} PP={par.pp} per replica, engine {par.framework}",
                "source": "search over memory fit and the SLO",
            }
        )
    else:
        layout = "".join(f" {k}={v}" for k, v in (("CP", par.cp), ("EP", par.ep), ("VP", par.vp)) if v > 1)
        layout += " (EP all-to-alls overlapped)" if par.ep_overlap else ""
        if len(set(par.pp_stage_layers)) > 1:
            layout += " layers/stage=" + "/".join(map(str, par.pp_stage_layers))
        layout += f" shard-group={par.shard_group_gpus}" if par.shard_group_gpus else ""
        facts.append(
            {
                "what": "parallelism",
                "value": f"TP={par.tp} PP={par.pp} DP={par.dp}{layout} ZeRO={par.zero_stage} micro-batch={par.micro_batch} grad-accum={par.grad_accum} recompute={par.recompute} framework={par.framework}",
                "source": "search over memory fit and step time",
            }
        )
    if plan.training:
        t = plan.training
        facts += [
            {
                "what": "step time",
                "value": f"{format_seconds(t.step_seconds)}{_median_note(plan, 'training.step_seconds', format_seconds)}; roofline = compute {format_seconds(t.step_compute_seconds)} + TP comm {format_seconds(t.step_tp_comm_seconds)}"
                + "".join(
                    f" + {name} {format_seconds(v)}"
                    for name, v in (
                        ("CP K/V exchange", t.step_cp_comm_seconds),
                        ("EP all-to-all", t.step_ep_comm_seconds),
                        ("PP p2p", t.step_pp_p2p_seconds),
                    )
                    if v
                )
                + f" + PP bubble {format_seconds(t.step_pp_bubble_seconds)} + exposed DP comm {format_seconds(t.step_dp_comm_seconds)}",
                "source": "roofline at the catalog's achievable matmul share; ring all-reduce 2(n−1)/n; bubble (p−1)/(m+p−1), (p−1)/(v·m) of the ideal step interleaved (sizing/train_layout.py)",
            },
            {
                "what": "compute",
                "value": f"{format_seconds(t.step_compute_seconds)} = GEMMs {format_seconds(t.step_matmul_seconds)} + attention {format_seconds(t.step_attention_seconds)} + memory-bound kernels {format_seconds(t.step_memory_bound_seconds)} + weight and gradient traffic {format_seconds(t.step_weight_traffic_seconds)} + optimizer {format_seconds(t.step_optimizer_seconds)}",
                "source": "GEMM FLOPs at the achievable matmul share; flash-attention kernel at its measured share of peak (Dao 2023, Shah et al. 2024); activations, weights and optimizer states through HBM at its achievable share (train_time.py)",
            },
            {
                "what": "MFU",
                "value": f"{100 * t.mfu:.1f}% (HFU {100 * t.hfu:.1f}%) at the roofline step",
                "source": "PaLM appendix B: (6N + 12·L·H·Q·T) × tokens/s ÷ peak; a frozen base (LoRA, QLoRA) counts 4N, plus 6 per adapter parameter (Hu et al. 2021 §4.2)",
            },
            {
                "what": "throughput",
                "value": f"{format_count(t.tokens_per_second)} tokens/s{_median_note(plan, 'training.tokens_per_second', format_count)}, {t.steps} steps",
                "source": "global batch ÷ step time",
            },
            {
                "what": "wall time",
                "value": f"{format_seconds(t.wall_seconds)}{_median_note(plan, 'training.wall_seconds', format_seconds)}, {format_count(t.gpu_hours)} GPU-hours{_median_note(plan, 'training.gpu_hours', format_count)}; goodput {100 * t.goodput:.1f}%",
                "source": "roofline: steady steps ÷ goodput; goodput = 1 / (1 + the whole-run terms below); P50: × the median actual ÷ predicted (Ranges)",
            },
            {
                "what": "whole-run terms",
                "value": f"per 100 s of steps: failures and restarts {100 * t.whole_run_failures_share:.1f} s, checkpoint writes {100 * t.whole_run_checkpoints_share:.1f} s, stragglers {100 * t.whole_run_stragglers_share:.1f} s, evaluation {100 * t.whole_run_evaluation_share:.1f} s",
                "source": "failures at the per-GPU MTBF and a 10-minute restart (Llama 3 paper §3.3.4), Young–Daly checkpoint interval; the slowest of the job's GPUs at the GPU-to-GPU spread of Sinha et al. 2022 (SC22); Megatron-LM's default evaluation (100 forward iterations every 1000 steps)",
            },
            {
                "what": "checkpoint",
                "value": f"{format_bytes(t.checkpoint_bytes)} every {format_seconds(t.checkpoint_interval_seconds)}, write {format_seconds(t.checkpoint_write_seconds)}, keep {t.checkpoint_keep}",
                "source": "weights + fp32 master + optimizer states; Young–Daly √(2·δ·M)",
            },
            {
                "what": "cost",
                "value": f"{format_usd(cost.usd_total)} total{_median_note(plan, 'cost.usd_total', format_usd)}, {format_usd(cost.usd_per_million_tokens)} per 1M tokens",
                "source": "GPU-hours × catalog price",
            },
        ]
        if cost.budget_usd:
            facts.append(
                {
                    "what": "budget",
                    "value": f"{format_usd(cost.budget_usd)}: headroom {format_usd(cost.budget_usd - cost.usd_total)}, alert at {100 * cost.alert_at:.0f}%",
                    "source": "plan budget",
                }
            )
    if plan.serving and plan.model and plan.model.architecture.kind in VISION_KINDS:
        s = plan.serving
        facts += [
            {
                "what": "latency",
                "value": f"p99 {format_seconds(s.ttft_seconds)} (SLO {format_seconds(s.latency_slo_seconds) if s.latency_slo_seconds else 'none'}), batch {s.max_concurrency}, queue delay ≤ {format_seconds(s.max_queue_delay_seconds)}",
                "source": "batch time from the roofline (Why: hardware); dynamic-batching window from the SLO",
            },
            {
                "what": "replicas",
                "value": f"{s.replicas} (autoscale {s.min_replicas}–{s.max_replicas}) × {s.gpus_per_replica} GPU, {format_count(s.tokens_per_second_per_replica)} images/s each",
                "source": f"deployed at peak = max({s.replicas_needed} needed: peak traffic ÷ per-replica capacity at the target utilisation, availability floor {s.replica_floor}); {_load_point(s)}",
            },
            {
                "what": "cost",
                "value": f"{format_usd(cost.usd_per_month)}/month{_median_note(plan, 'cost.usd_per_month', format_usd)}",
                "source": "GPU-hours × catalog price, 730 h/month",
            },
        ]
    elif plan.serving:
        s = plan.serving
        facts += [
            {
                "what": "latency at peak traffic",
                "value": f"TTFT p50/p99 {format_seconds(s.ttft_p50_seconds)}/{format_seconds(s.ttft_seconds)} (SLO {format_seconds(s.ttft_slo_seconds) if s.ttft_slo_seconds else 'none'}), TPOT p50/p99 {format_seconds(s.tpot_p50_seconds)}/{format_seconds(s.tpot_seconds)} (SLO {format_seconds(s.tpot_slo_seconds) if s.tpot_slo_seconds else 'none'}); utilisation {s.utilization_at_peak:.2f}, {s.in_flight_at_peak:.1f} sequences in flight and {s.requests_per_second_at_peak:.3g} req/s per replica{f' from {s.concurrency} closed-loop clients' if s.concurrency else ''}; inter-token latency p50 {format_seconds(s.itl_p50_seconds)}",
                "source": "roofline: prefill FLOPs at achievable matmul rate; decode bytes at achievable HBM bandwidth (fp8 GEMMs at the DeepGEMM-measured shares); decode batch = sequences in flight (Little's law); open loop: M/M/c slot wait; closed loop: rate = clients ÷ (TTFT + output × TPOT)",
            },
            {
                "what": "latency, other loads",
                "value": f"one request alone: TTFT {format_seconds(s.ttft_batch1_seconds)}, TPOT {format_seconds(s.tpot_batch1_seconds)}; at max concurrency {s.max_concurrency} and the autoscaler's target utilisation: TTFT {format_seconds(s.ttft_at_capacity_seconds)}, TPOT {format_seconds(s.tpot_at_capacity_seconds)}",
                "source": "the same model at λ → 0 and at the capacity limit",
            },
            {
                "what": "concurrency",
                "value": f"{s.max_concurrency} sequences, KV cache {format_count(s.kv_cache_tokens)} tokens at {s.kv_bytes_per_token} B/token",
                "source": "MLA: (kv_lora_rank + qk_rope_head_dim) × layers × bytes, the compressed latent"
                if plan.model and plan.model.architecture.uses_mla
                else "2 × layers × kv_heads × head_dim × bytes (GQA-aware)",
            },
            {
                "what": "replicas",
                "value": f"{s.replicas} (autoscale {s.min_replicas}–{s.max_replicas}) × {s.gpus_per_replica} GPU, {format_count(s.tokens_per_second_per_replica)} tokens/s each",
                "source": f"deployed at peak = max({s.replicas_needed} needed: {NEED_CLOSED if s.concurrency else NEED_OPEN}, availability floor {s.replica_floor}); {_load_point(s)}",
            },
            {
                "what": "cost",
                "value": f"{format_usd(cost.usd_per_month)}/month{_median_note(plan, 'cost.usd_per_month', format_usd)}, {format_usd(cost.usd_per_million_tokens)} per 1M output tokens",
                "source": "GPU-hours × catalog price, 730 h/month",
            },
        ]
        if cost.budget_usd_per_month:
            facts.append(
                {
                    "what": "budget",
                    "value": f"{format_usd(cost.budget_usd_per_month)}/month: headroom {format_usd(cost.budget_usd_per_month - cost.usd_per_month)}",
                    "source": "plan budget",
                }
            )
    return facts


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


def _checked_at(plan: ResolvedPlan) -> str:
    """The quantile deadline and budget (train) or SLOs and budget (serve) are checked at, in words."""
    if plan.workload != "serve":
        return f"checked at {plan.training.gate_quantile.upper()}"
    return "checked on the roofline"


def _load_point(s) -> str:
    """The target utilisation replicas are sized for, and whether the plan pinned it."""
    if s.load_point_pinned:
        return f"target utilisation {s.target_utilization:g} (serve.target_utilization)"
    return f"target utilisation {s.target_utilization:g} (default: Vertex AI's autoscaling target; serve.target_utilization pins another)"


def _capacity_label(plan: ResolvedPlan) -> str:
    """The memory chart's limit line: what the roofline must fit, and the quantile behind it."""
    quantile = plan.training.memory_quantile if plan.training else "none"
    return "usable" if quantile == "none" else f"usable, the roofline's limit at {quantile.upper()}:"


def _quantile_note(plan: ResolvedPlan) -> str:
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


def _pareto_charts(plan: ResolvedPlan) -> list[tuple[str, str, list[charts.Point], charts.Axis, charts.Axis]]:
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
                charts.Axis("total cost", charts.usd_unit, cost.budget_usd, "budget", checked),
                charts.Axis("wall time", charts.seconds_unit, deadline, "deadline", checked),
            )
        ]
    else:
        s = plan.serving
        budget = charts.Axis("cost per month", charts.usd_unit, cost.budget_usd_per_month, "budget", checked)
        if s.tpot_seconds:
            charts_ = [
                (
                    "charts/pareto.svg",
                    "Cost vs TTFT",
                    _chart_points(plan, "ttft_seconds"),
                    budget,
                    charts.Axis("TTFT p99 at peak", charts.seconds_unit, s.ttft_slo_seconds, "TTFT SLO", checked),
                ),
                (
                    "charts/pareto-tpot.svg",
                    "Cost vs TPOT",
                    _chart_points(plan, "tpot_seconds"),
                    budget,
                    charts.Axis("TPOT p99 at peak", charts.seconds_unit, s.tpot_slo_seconds, "TPOT SLO", checked),
                ),
            ]
        else:
            slo = s.latency_slo_seconds
            latency = charts.Axis("p99 latency", charts.seconds_unit, slo, "latency SLO", checked)
            charts_ = [("charts/pareto.svg", "Cost vs latency", _chart_points(plan, "seconds"), budget, latency)]
    return [c for c in charts_ if charts.worth_drawing(c[2])]


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
    rows, vision = [], _latency_name(plan) == "p99 latency"
    for r in plan.ranges:
        label, fmt = (vision and VISION_RANGE_LABELS.get(r.quantity)) or RANGE_LABELS[r.quantity]
        rows.append(
            {
                "what": label,
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
                _capacity_label(plan),
            ),
        ),
    ]
    pareto = _pareto_charts(plan)
    files += [
        OutputFile(path, charts.pareto(points, x, y, f"{title}: {plan.name}")) for path, title, points, x, y in pareto
    ]
    text = render_template(
        "report/REPORT.md.j2",
        name=plan.name,
        workload=plan.workload,
        plan_file=plan.plan_file,
        facts=_facts(plan),
        memory_rows=_memory_rows(plan),
        memory_total=format_bytes(mem.total) + _median_note(plan, "memory_per_gpu_bytes.total", format_bytes),
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
        quantile_note=_quantile_note(plan),
    )
    return [
        OutputFile(plan.deployment.files.report if plan.deployment else "REPORT.md", text.rstrip("\n") + "\n"),
        *files,
    ]


TARGET = Target("report", applies, render)
