"""Decide the optimizer recipe: each value the plan's own (train.recipe), else its family's published one; warmup and
decay in steps of this plan's run (training.steps of global_batch × seq_len tokens)."""

from __future__ import annotations

import math

from ..diagnostics import FieldRefused
from ..plan.recipe import Recipe, significant
from ..plan.resolved import ResolvedPlan
from ..units import format_count
from .families import Family, Published, family_for, peak_lr

# A default warmup takes at most this share of the run, so the schedule proper keeps ≥ 90% of the steps (Megatron-LM
# also requires warmup < decay steps). Policy; the published warmups sit below it on their own runs (Llama 3 405B:
# 8,000 of 1.2M steps).
MAX_DEFAULT_WARMUP_FRACTION = 0.1
# DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py): WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
# LRRangeTest; no warmup-stable-decay.
DEEPSPEED_SCHEDULERS = "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest"
PLAN = "the plan's train.recipe.{}"


def _loc(name: str) -> tuple:
    return ("train", "recipe", name)


def _wsd_without_framework(plan: ResolvedPlan) -> str:
    """Why this plan's framework cannot run a WSD schedule ('' when it can): DeepSpeed's schedulers have none; under
    the hf-trainer kind the Trainer's own warmup_stable_decay runs instead of ds_config's."""
    spec = plan.spec.train
    if plan.parallelism.framework == "deepspeed" and spec.entrypoint.kind != "hf-trainer":
        return f"DeepSpeed has no warmup-stable-decay scheduler (its schedulers: {DEEPSPEED_SCHEDULERS})"
    return ""


def _schedule(plan: ResolvedPlan, family: Family) -> tuple[str, str]:
    given = plan.spec.train.recipe.schedule
    lacking = _wsd_without_framework(plan)
    if given is not None:
        if given == "wsd" and lacking:
            raise FieldRefused(
                _loc("schedule"),
                f"{lacking}; use cosine, or the hf-trainer launch kind (the Trainer's warmup_stable_decay)",
                "unsupported-schedule",
            )
        return given, PLAN.format("schedule")
    if family.schedule.value == "wsd" and lacking:
        return "cosine", f"{family.schedule.source}; cosine to the same minimum instead: {lacking}"
    return str(family.schedule.value), family.schedule.source


def _warmup(plan: ResolvedPlan, family: Family, steps: int) -> tuple[int, str]:
    recipe = plan.spec.train.recipe
    if recipe.warmup_steps is not None:
        if steps > 0 and recipe.warmup_steps >= steps:
            raise FieldRefused(
                _loc("warmup_steps"),
                f"warmup of {recipe.warmup_steps} steps is not shorter than the run's {steps} steps",
                "invalid-recipe",
            )
        return recipe.warmup_steps, PLAN.format("warmup_steps")
    if recipe.warmup_fraction is not None:  # shorter than the run, as Megatron-LM requires
        warmup = min(round(recipe.warmup_fraction * steps), max(0, steps - 1))
        return warmup, f"train.recipe.warmup_fraction {recipe.warmup_fraction:g} × {steps} steps"
    kind, amount = family.warmup.value
    tokens_per_step = plan.parallelism.global_batch * plan.training.seq_len
    if kind == "steps":
        wanted, how = int(amount), family.warmup.source
    elif kind == "tokens":
        wanted = math.ceil(amount / tokens_per_step)
        how = f"{family.warmup.source} = {wanted} steps of {tokens_per_step:,} tokens"
    else:
        wanted = round(amount * steps)
        how = f"{family.warmup.source} = {amount:.3g} × {steps} steps"
    cap = int(MAX_DEFAULT_WARMUP_FRACTION * steps)
    if wanted > cap:
        return cap, f"{how}; capped at a tenth of this run's {steps} steps"
    return wanted, how


def _lr(plan: ResolvedPlan, family: Family, schedule: str) -> tuple[float, str, float, str]:
    recipe, params = plan.spec.train.recipe, plan.model.params_total
    if recipe.lr_peak is not None:
        peak, peak_reason = recipe.lr_peak, PLAN.format("lr_peak")
    else:
        peak, peak_reason = peak_lr(family, params, plan.parallelism.global_batch)
    if schedule == "constant":
        if recipe.lr_min is not None and recipe.lr_min != peak:
            raise FieldRefused(
                _loc("lr_min"), "the constant schedule stays at lr_peak: lr_min does not apply", "invalid-recipe"
            )
        return peak, peak_reason, peak, "the constant schedule stays at lr_peak"
    if recipe.lr_min is not None:
        if recipe.lr_min > peak:
            raise FieldRefused(
                _loc("lr_min"), f"lr_min {recipe.lr_min:g} is above the peak learning rate {peak:g}", "invalid-recipe"
            )
        return peak, peak_reason, recipe.lr_min, PLAN.format("lr_min")
    ratio: Published = family.lr_min_ratio
    if ratio.value >= 1:  # the family's own schedule is constant; the plan chose a decay: to 0
        return peak, peak_reason, 0.0, f"{ratio.source}; the plan's {schedule} schedule decays to 0"
    return peak, peak_reason, significant(peak * ratio.value), f"{ratio.value:g} × lr_peak: {ratio.source}"


def _linear_floor(plan: ResolvedPlan, schedule: str, low: float, reason: str) -> tuple[float, str]:
    """DeepSpeed's WarmupDecayLR decays linearly to its warmup_min_lr, where the warmup also starts: a linear decay to
    a minimum above 0 after a warmup from 0 is not expressible there. A given minimum is refused, a default one is 0."""
    if schedule != "linear" or low == 0 or not _wsd_without_framework(plan):
        return low, reason
    lacking = "DeepSpeed's WarmupDecayLR starts its warmup at the minimum it decays to"
    if plan.spec.train.recipe.lr_min is not None:
        raise FieldRefused(
            _loc("lr_min"),
            f"{lacking}: use lr_min 0, the cosine schedule, or the hf-trainer launch kind",
            "invalid-recipe",
        )
    return 0.0, f"{reason}; 0 instead: {lacking}"


def _wsd_decay_steps(plan: ResolvedPlan, family: Family, steps: int, warmup: int) -> tuple[int, str]:
    given = plan.spec.train.recipe.decay_fraction
    fraction, source = (
        (given, PLAN.format("decay_fraction"))
        if given is not None
        else (
            family.decay_fraction.value,
            family.decay_fraction.source,
        )
    )
    decay = min(max(1, round(fraction * steps)), max(1, steps - warmup))
    return decay, f"{source}: {fraction:.3g} × {steps} steps = {decay}"


def _take(plan: ResolvedPlan, family: Family, name: str) -> tuple[object, str]:
    given = getattr(plan.spec.train.recipe, name)
    if given is not None:
        return given, PLAN.format(name)
    published: Published = getattr(family, name)
    return published.value, published.source


def _family(plan: ResolvedPlan) -> Family:
    return family_for(plan.model.id, plan.model.architecture.kind, plan.workload, plan.spec.train.method)


def decide_dropout(plan: ResolvedPlan) -> tuple[float, str]:
    """(dropout, its source): the plan's train.recipe.dropout, else its family's published value. The training sizing
    reads it before this pass runs (the recipe needs the sized steps and batch; the activations need the dropout
    masks, compiler/sizing/train/activations.py), so both take it from here."""
    return _take(plan, _family(plan), "dropout")


def decide_recipe(plan: ResolvedPlan) -> Recipe:
    spec, steps = plan.spec.train, plan.training.steps
    family = _family(plan)
    schedule, schedule_reason = _schedule(plan, family)
    warmup, warmup_reason = _warmup(plan, family, steps)
    peak, peak_reason, low, low_reason = _lr(plan, family, schedule)
    low, low_reason = _linear_floor(plan, schedule, low, low_reason)
    reasons = {"lr_peak": peak_reason, "lr_min": low_reason, "schedule": schedule_reason, "warmup_steps": warmup_reason}
    reasons["decay_steps"] = f"the run's {steps} steps ({format_count(plan.training.tokens)} tokens ÷ the global batch)"
    wsd = 0
    if schedule == "wsd":
        wsd, reasons["wsd_decay_steps"] = _wsd_decay_steps(plan, family, steps, warmup)
    values = {}
    for name in ("weight_decay", "betas", "eps", "grad_clip_norm", "init_std"):
        values[name], reasons[name] = _take(plan, family, name)
    values["dropout"], reasons["dropout"] = decide_dropout(plan)
    return Recipe(
        optimizer=spec.optimizer,
        family=family.name,
        lr_peak=peak,
        lr_min=low,
        schedule=schedule,
        warmup_steps=warmup,
        decay_steps=steps,
        wsd_decay_steps=wsd,
        **values,
        reasons=reasons,
    )
