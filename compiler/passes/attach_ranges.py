"""attach_ranges: every headline is the median of its calibrated distribution, with P10 and P90 beside it.

A family's residuals (compiler/catalog/residuals.yaml, written by benchmarks/residuals.py) are the ratio
actual ÷ predicted at P10, P50 and P90 over its rows. The sizing passes predict a roofline; this pass keeps that number
as the range's `roofline` and writes roofline × P50 into the headline's own field (÷ for a rate, whose P10 comes from
the P90 ratio), so every headline a reader, a chart or a generated file takes is the median, inside its own range.
Step time and throughput take the steady-step family; a pre-training plan's wall time, GPU-hours and cost the
published whole pre-training runs (failures, restarts, stragglers and all that a step leaves out); a fine-tune's,
which no published whole run resembles, the steady-step family; a CNN sized layer by layer all of them the published
CNN training rows (train-cnn). TTFT and TPOT take the published latencies at stated load points (serve-ttft,
serve-tpot). A mixture-of-experts model serves in a regime of its own (every published MoE row lands optimistic,
benchmarks/residuals.py): its throughput and TPOT take the MoE rows (serve-moe-throughput, serve-moe-tpot); no
MoE TTFT is published, so its TTFT takes serve-ttft. A CNN with a layer table takes the serve-vision family
(images/s), or serve-vision-batch1 when it serves batch 1; other vision models (ViT, CNNs without a table) have no
rows: no range, and their headline stays the roofline. Nor has a serving replica's memory: no published row states
it, and the engines fill their KV cache up to the configured share. A service's cost per month is the price of the
replicas it deploys (the autoscaler's maximum): a decision, not a prediction, so it takes no range; throughput below
the roofline shows as a higher utilisation and latency at that cost.

A plan outside a family's rows says so (Range.outside, a warning) and still takes its range, borrowed: where every row
names its GPU and none ran on the plan's, and where every row names its model's active parameters (count_params) and
the plan's model lies strictly outside their span (residuals.yaml `active_params`: fewest, most; no tolerance).

Gates keep their stated quantile of the same families (train.gate_quantile, train.memory_quantile); a serving SLO is
checked on the roofline, and a warning says when the median misses it.

A site calibration (cluster.calibration) that fitted the shares to measured steps already corrects what the
published median corrects: there the families are re-centred on the fit (training_families.time_residual; serving
families on 1 where the site measured that kind of serving, LLM steps or vision batches, on the plan's or the stage's
GPU), so a calibrated headline is the site's own measurement, and the published rows give only the spread.
"""

from __future__ import annotations

from ..catalog.catalog import Catalog
from ..catalog.residuals import Residual
from ..catalog.types import Architecture
from ..plan.resolved import Alternative, Decision, Range, ResolvedPlan, Stage
from ..units import format_count, format_seconds
from .context import PassContext
from .training_families import (
    CNN_TRAIN_FAMILY,
    MEMORY_FAMILY,
    STEP_FAMILY,
    WHOLE_RUN_FAMILY,
    step_family,
    time_family,
    time_residual,
)

THROUGHPUT = "serve-throughput"
TTFT = "serve-ttft"
TPOT = "serve-tpot"
MOE_THROUGHPUT = "serve-moe-throughput"
MOE_TPOT = "serve-moe-tpot"
VISION = "serve-vision"
VISION_BATCH1 = "serve-vision-batch1"  # batch-1 rows: launch and framework overhead the roofline leaves out
# fields that move with a headline by the same factor: the same quantity at other loads, or a rate derived from it
FOLLOWERS = {
    "cost.usd_total": ("cost.usd_per_million_tokens",),
    "serving.ttft_seconds": (
        "serving.ttft_p50_seconds",
        "serving.ttft_batch1_seconds",
        "serving.ttft_at_capacity_seconds",
    ),
    "serving.tpot_seconds": (
        "serving.tpot_p50_seconds",
        "serving.tpot_batch1_seconds",
        "serving.tpot_at_capacity_seconds",
        "serving.itl_p50_seconds",
    ),
}


SERVING_FAMILIES = (THROUGHPUT, TTFT, TPOT, MOE_THROUGHPUT, MOE_TPOT)
VISION_FAMILIES = (VISION, VISION_BATCH1)
TRAINING_TIME_FAMILIES = (STEP_FAMILY, WHOLE_RUN_FAMILY, CNN_TRAIN_FAMILY)


def _site_fitted_gpus(catalog: Catalog, family: str) -> tuple[str, ...]:
    """The GPUs a site calibration fitted to measurements of this serving family's kind (LLM steps, vision batches)."""
    if family in SERVING_FAMILIES:
        return catalog.site_fitted_serving
    return catalog.site_fitted_vision if family in VISION_FAMILIES else ()


def _residual(ctx: PassContext, family: str, arch: Architecture | None, gpu: str = "") -> Residual:
    """The family's published actual ÷ predicted, or where a site calibration fitted the steps (cluster.calibration)
    re-centred on that fit: training time as training_families.time_residual, serving on 1 where the site measured
    that kind of serving on the plan's (or the stage's) GPU (the fitted shares already give the measured steps; the
    published rows keep only the spread around their median). A GPU the site did not measure keeps the published
    median."""
    catalog = ctx.catalog
    if family in TRAINING_TIME_FAMILIES:
        return time_residual(catalog, family, arch, gpu)
    published = catalog.residuals[family]
    if gpu in _site_fitted_gpus(catalog, family):
        middle = published.p50
        return published.model_copy(update={"p10": published.p10 / middle, "p50": 1.0, "p90": published.p90 / middle})
    return published


def _off_gpu(r: Residual, gpu: str) -> bool:
    """Every row names its GPU and none ran on this one."""
    return bool(gpu and r.gpus and gpu not in r.gpus)


def _off_size(r: Residual, active_params: int) -> bool:
    """Every row names its model's active parameters and this model's lie strictly outside their span."""
    return bool(active_params and r.active_params) and not r.active_params[0] <= active_params <= r.active_params[-1]


# what a family's rows did with their models, by the family's first word: the verb of the size reason
ROW_VERBS = {"train": "trained", "serve": "served", "memory": "measured"}


def _outside(family: str, r: Residual, gpu: str, active_params: int) -> str:
    """Why the plan lies outside the family's rows (a GPU none ran on, a model size beyond their span), or ""."""
    reasons = []
    if _off_gpu(r, gpu):
        reasons.append(f"ran on {gpu} (its rows: {', '.join(r.gpus)})")
    if _off_size(r, active_params):
        fewest, most = (format_count(n) for n in r.active_params)
        span = fewest if fewest == most else f"{fewest}–{most}"
        verb = ROW_VERBS[family.split("-")[0]]
        reasons.append(f"{verb} a model of {format_count(active_params)} active parameters (its rows: {span})")
    return f"no published {family} row " + ", nor ".join(reasons) if reasons else ""


def _range(
    ctx: PassContext, quantity: str, roofline: float, family: str, plan: ResolvedPlan, rate: bool = False
) -> Range:
    arch = plan.model.architecture
    r = _residual(ctx, family, arch, plan.hardware.gpu)
    if rate:
        low, mid, high = roofline / r.p90, roofline / r.p50, roofline / r.p10
    else:
        low, mid, high = roofline * r.p10, roofline * r.p50, roofline * r.p90
    outside = _outside(family, r, plan.hardware.gpu, plan.model.params_active)
    return Range(
        quantity=quantity, roofline=roofline, p10=low, p50=mid, p90=high, family=family, rows=r.rows, outside=outside
    )


def _training(plan: ResolvedPlan, ctx: PassContext) -> list[Range]:
    t, method = plan.training, plan.spec.train.method
    arch = plan.model.architecture
    run, step = time_family(plan.workload, arch), step_family(arch)
    ranges = [
        _range(ctx, "training.step_seconds", t.step_seconds, step, plan),
        _range(ctx, "training.wall_seconds", t.wall_seconds, run, plan),
        _range(ctx, "training.gpu_hours", t.gpu_hours, run, plan),
        _range(ctx, "training.tokens_per_second", t.tokens_per_second, step, plan, rate=True),
        _range(ctx, "cost.usd_total", plan.cost.usd_total, run, plan),
    ]
    if plan.memory_per_gpu_bytes.total:
        total = plan.memory_per_gpu_bytes.total
        ranges.append(_range(ctx, "memory_per_gpu_bytes.total", total, MEMORY_FAMILY[method], plan))
    return ranges


def _vision_family(plan: ResolvedPlan) -> str | None:
    """CNNs sized layer by layer have published rows; ViTs and encoders not yet."""
    if not (plan.model.architecture.kind == "cnn" and plan.model.architecture.layer_table):
        return None
    return VISION_BATCH1 if plan.serving.max_concurrency == 1 else VISION


def _serving(plan: ResolvedPlan, ctx: PassContext) -> list[Range]:
    s = plan.serving
    if not s.tpot_seconds:
        family = _vision_family(plan)
        if family is None:
            return []
        ranges = [
            _range(ctx, "serving.tokens_per_second_per_replica", s.tokens_per_second_per_replica, family, plan),
            _range(ctx, "serving.ttft_seconds", s.ttft_seconds, family, plan, rate=True),
        ]
        return ranges
    throughput, tpot = _llm_families(plan)
    # a replica's throughput; the replicas, so the monthly cost, scale inversely with it
    return [
        _range(ctx, "serving.tokens_per_second_per_replica", s.tokens_per_second_per_replica, throughput, plan),
        _range(ctx, "serving.ttft_seconds", s.ttft_seconds, TTFT, plan),
        _range(ctx, "serving.tpot_seconds", s.tpot_seconds, tpot, plan),
    ]


def _llm_families(plan: ResolvedPlan) -> tuple[str, str]:
    return (MOE_THROUGHPUT, MOE_TPOT) if plan.model.architecture.is_moe else (THROUGHPUT, TPOT)


def _set(plan: ResolvedPlan, dotted: str, value: float) -> ResolvedPlan:
    section_name, field = dotted.split(".")
    section = getattr(plan, section_name)
    if isinstance(getattr(section, field), int):
        value = round(value)
    return plan.model_copy(update={section_name: section.model_copy(update={field: value})})


def _headlines_at_median(plan: ResolvedPlan, ranges: list[Range]) -> ResolvedPlan:
    for r in ranges:
        plan = _set(plan, r.quantity, r.p50)
        factor = r.p50 / r.roofline if r.roofline else 1.0
        for follower in FOLLOWERS.get(r.quantity, ()):
            section, field = follower.split(".")
            plan = _set(plan, follower, getattr(getattr(plan, section), field) * factor)
    return plan


def _spread(
    ctx: PassContext, roofline: float, family: str, plan: ResolvedPlan, rate: bool = False
) -> tuple[float, tuple[float, float]]:
    r = _range(ctx, "", roofline, family, plan, rate)
    return r.p50, (r.p10, r.p90)


def _alternative(a: Alternative, plan: ResolvedPlan, ctx: PassContext) -> Alternative:
    """An alternative's cost and time at P50 of the same families as the headline, with P10-P90."""
    if plan.training is not None:
        run = time_family(plan.workload, plan.model.architecture)
        usd, usd_spread = _spread(ctx, a.usd, run, plan)
        seconds, seconds_spread = _spread(ctx, a.seconds, run, plan)
        return a.model_copy(
            update={"usd": usd, "seconds": seconds, "spread": {"usd": usd_spread, "seconds": seconds_spread}}
        )
    if not a.tpot_seconds:
        family = _vision_family(plan)
        if family is None:
            return a
        seconds, seconds_spread = _spread(ctx, a.seconds, family, plan, rate=True)
        return a.model_copy(update={"seconds": seconds, "spread": {"seconds": seconds_spread}})
    _, tpot_family = _llm_families(plan)
    ttft, ttft_spread = _spread(ctx, a.ttft_seconds, TTFT, plan)
    tpot, tpot_spread = _spread(ctx, a.tpot_seconds, tpot_family, plan)
    # request latency = TTFT + output tokens × TPOT: each part at the same quantile of its own family
    decode_steps = (a.seconds - a.ttft_seconds) / a.tpot_seconds
    latency = ttft + decode_steps * tpot
    latency_spread = (ttft_spread[0] + decode_steps * tpot_spread[0], ttft_spread[1] + decode_steps * tpot_spread[1])
    spread = {"seconds": latency_spread, "ttft_seconds": ttft_spread, "tpot_seconds": tpot_spread}
    return a.model_copy(update={"seconds": latency, "ttft_seconds": ttft, "tpot_seconds": tpot, "spread": spread})


def _slo_warnings(plan: ResolvedPlan) -> list[str]:
    """The search meets a serving SLO with the roofline; say where the median misses it."""
    s = plan.serving
    if s is None:
        return []
    found = []
    for name, value, slo in (
        ("TTFT", s.ttft_seconds, s.ttft_slo_seconds),
        ("TPOT", s.tpot_seconds, s.tpot_slo_seconds),
    ):
        if slo and value > slo:
            found.append(
                f"{name} p99 at peak is {format_seconds(value)} at P50 of the published ÷ predicted ratios, above "
                f"the {format_seconds(slo)} SLO the roofline prediction meets: budget for more replicas or a "
                "lower load point"
            )
    return found


# what an outside range is borrowed from, by (off the rows' GPUs, off their model sizes)
BORROWED = {
    (True, False): "the range is borrowed from other GPUs, not measured on this one",
    (False, True): "the range is borrowed from models of other sizes, not measured at this one",
    (True, True): "the range is borrowed from other GPUs and models of other sizes, not measured on this plan",
}


def _outside_warnings(plan: ResolvedPlan, ranges: list[Range], ctx: PassContext) -> list[str]:
    """One warning per family the plan lies outside of: its range is borrowed, not measured."""
    said: dict[str, str] = {}
    for r in ranges:
        if r.outside and r.outside not in said:
            residual = ctx.catalog.residuals[r.family]
            off = (_off_gpu(residual, plan.hardware.gpu), _off_size(residual, plan.model.params_active))
            said[r.outside] = BORROWED[off]
    return [f"{reason}: {borrowed}" for reason, borrowed in said.items()]


def _calibration(plan: ResolvedPlan, ranges: list[Range], catalog: Catalog) -> Decision:
    """Which median each headline took, and the quantile each gate used."""
    factors: dict[str, list[str]] = {}
    for r in ranges:
        factor = r.p50 / r.roofline if r.roofline else 1.0
        factors.setdefault(f"× {factor:.2f} ({r.family}, {r.rows} published rows)", []).append(r.quantity)
    medians = "; ".join(f"{', '.join(q)} {f}" for f, q in factors.items())
    if plan.training is not None:
        train = plan.spec.train
        gates = (
            f"deadline and budget checked at {train.gate_quantile.upper()} (train.gate_quantile), memory fit at "
            f"{train.memory_quantile.upper()} (train.memory_quantile)"
        )
    else:
        gates = "the latency SLOs checked on the roofline prediction (a warning says where the P50 misses one)"
    fitted = _site_fitted(plan, ranges, catalog)
    return Decision(
        topic="calibration",
        choice="headlines at P50 of published actual ÷ predicted"
        + (", re-centred on the site calibration's fit (cluster.calibration)" if fitted else ""),
        reason=f"{medians}; {gates}"
        + (
            "; the site's measured steps fitted the shares, so the published rows keep only their spread around "
            "their median (a whole run keeps what it adds beyond a steady step)"
            if fitted
            else ""
        ),
    )


def _site_fitted(plan: ResolvedPlan, ranges: list[Range], catalog: Catalog) -> bool:
    """Whether the site's fit re-centred these ranges (_residual): training steps on the plan's GPU, or the serving
    kind a range's family is of (LLM steps, vision batches) measured there."""
    if plan.training is not None:
        return plan.hardware.gpu in catalog.site_fitted_training
    return any(plan.hardware.gpu in _site_fitted_gpus(catalog, r.family) for r in ranges)


def _stages_at_median(plan: ResolvedPlan, ctx: PassContext) -> list[Stage]:
    """Each stage of a staged service with its headlines at P50 of the families a single-stage plan of its model and
    GPU takes (the top-level sections describe the last stage: its ranges are the plan's)."""
    staged = []
    for stage in plan.stages:
        view = plan.model_copy(update={"serving": stage.serving, "model": stage.model, "hardware": stage.hardware})
        ranges = _serving(view, ctx)
        serving = _headlines_at_median(view, ranges).serving
        staged.append(stage.model_copy(update={"serving": serving, "ranges": ranges}))
    return staged


def attach_ranges(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    if plan.training is not None:
        ranges = _training(plan, ctx)
    elif plan.serving is not None:
        ranges = _serving(plan, ctx)
    else:
        return plan
    alternatives = [_alternative(a, plan, ctx) for a in plan.alternatives] if ranges else plan.alternatives
    calibrated = _headlines_at_median(plan, ranges)
    return calibrated.model_copy(
        update={
            "stages": _stages_at_median(plan, ctx),
            "ranges": ranges,
            "alternatives": alternatives,
            "decisions": calibrated.decisions + ([_calibration(plan, ranges, ctx.catalog)] if ranges else []),
            "warnings": calibrated.warnings + _slo_warnings(calibrated) + _outside_warnings(plan, ranges, ctx),
        }
    )
