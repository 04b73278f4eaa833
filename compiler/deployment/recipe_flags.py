"""The decided optimizer recipe (`plan.recipe`) in each framework's words: Megatron-LM arguments, DeepSpeed's optimizer
and scheduler blocks, the Hugging Face Trainer's flags and the MLINFRA_* environment of a plain script.

Names are the frameworks' own: Megatron-LM megatron/training/arguments.py (SchedulerConfig and TransformerConfig fields
as flags; --optimizer adam is AdamW there: OptimizerConfig.decoupled_weight_decay defaults to True), DeepSpeed 0.19.8
deepspeed/runtime/lr_schedules.py and engine.py (optimizer "AdamW"; WarmupLR, WarmupDecayLR, WarmupCosineLR),
transformers TrainingArguments and SchedulerType (cosine_with_min_lr, polynomial, constant_with_warmup,
warmup_stable_decay). Floats are written with repr: the shortest text that reads back as the same number.
"""

from __future__ import annotations

import json

from ..diagnostics import FieldRefused
from ..plan.framework_configs import (
    AdamWParams,
    DeepSpeedOptimizer,
    WarmupCosineLR,
    WarmupCosineLRParams,
    WarmupDecayLR,
    WarmupDecayLRParams,
    WarmupLR,
    WarmupLRParams,
)
from ..plan.recipe import Recipe, significant

MEGATRON_OPTIMIZER = {"adamw": "adam", "sgd": "sgd"}
MEGATRON_DECAY_STYLE = {"cosine": "cosine", "linear": "linear", "constant": "constant", "wsd": "WSD"}
WSD_DECAY_STYLE = "cosine"  # the decay of DeepSeek-V3's schedule (report §4.2)


def number(value: float) -> str:
    return repr(float(value))


def megatron_recipe_args(recipe: Recipe) -> list[tuple[str, str | None]]:
    """Optimizer, learning-rate schedule, regularisation, initialisation and dropout flags of megatron/args.sh."""
    optimizer = MEGATRON_OPTIMIZER.get(recipe.optimizer)
    if optimizer is None:
        raise FieldRefused(
            ("train", "optimizer"),
            f"Megatron-LM has no {recipe.optimizer} optimizer (its --optimizer: adam, which is AdamW, or sgd); use "
            "adamw or sgd, or a framework that runs it (train.framework deepspeed, fsdp or ddp)",
            "unsupported-optimizer",
        )
    args: list[tuple[str, str | None]] = [
        ("--optimizer", optimizer),
        ("--lr", number(recipe.lr_peak)),
        ("--min-lr", number(recipe.lr_min)),
        ("--lr-decay-style", MEGATRON_DECAY_STYLE[recipe.schedule]),
        ("--lr-warmup-iters", str(recipe.warmup_steps)),
        ("--lr-decay-iters", str(recipe.decay_steps)),
    ]
    if recipe.schedule == "wsd":
        args += [("--lr-wsd-decay-style", WSD_DECAY_STYLE), ("--lr-wsd-decay-iters", str(recipe.wsd_decay_steps))]
    args.append(("--weight-decay", number(recipe.weight_decay)))
    if optimizer == "adam":
        args += [
            ("--adam-beta1", number(recipe.betas[0])),
            ("--adam-beta2", number(recipe.betas[1])),
            ("--adam-eps", number(recipe.eps)),
        ]
    return args + [
        ("--clip-grad", number(recipe.grad_clip_norm)),
        ("--init-method-std", number(recipe.init_std)),
        ("--attention-dropout", number(recipe.dropout)),
        ("--hidden-dropout", number(recipe.dropout)),
    ]


def deepspeed_optimizer(recipe: Recipe) -> DeepSpeedOptimizer | None:
    """ds_config's optimizer block; None where DeepSpeed has no such optimizer (the script builds it, from MLINFRA_*)."""
    if recipe.optimizer != "adamw":
        return None
    params = AdamWParams(lr=recipe.lr_peak, betas=recipe.betas, eps=recipe.eps, weight_decay=recipe.weight_decay)
    return DeepSpeedOptimizer(type="AdamW", params=params)


def deepspeed_scheduler(recipe: Recipe) -> WarmupLR | WarmupDecayLR | WarmupCosineLR | None:
    """ds_config's scheduler block, warmup linear from 0 as decided (DeepSpeed's default warmup_type is log; its
    schedulers need warmup_num_steps ≥ 1). linear: WarmupDecayLR uses warmup_min_lr as the floor of both the warmup
    and the decay, so it is written only with lr_min 0 (cosine's WarmupCosineLR has separate ratios). WSD has no
    DeepSpeed scheduler: the recipe pass refuses or replaces it before this point; under the hf-trainer kind the
    Trainer schedules instead (no block)."""
    warmup = {"warmup_num_steps": max(1, recipe.warmup_steps), "warmup_type": "linear"}
    if recipe.schedule == "cosine":
        ratio = significant(recipe.lr_min / recipe.lr_peak)
        cosine = WarmupCosineLRParams(
            total_num_steps=recipe.decay_steps, warmup_min_ratio=0.0, cos_min_ratio=ratio, **warmup
        )
        return WarmupCosineLR(type="WarmupCosineLR", params=cosine)
    lrs = {"warmup_min_lr": 0.0, "warmup_max_lr": recipe.lr_peak, **warmup}
    if recipe.schedule == "linear" and recipe.lr_min == 0:
        linear = WarmupDecayLRParams(total_num_steps=recipe.decay_steps, **lrs)
        return WarmupDecayLR(type="WarmupDecayLR", params=linear)
    if recipe.schedule == "constant":
        return WarmupLR(type="WarmupLR", params=WarmupLRParams(**lrs))
    return None


def hf_scheduler(recipe: Recipe) -> tuple[str, dict]:
    """transformers' lr_scheduler_type and lr_scheduler_kwargs for the decided schedule (HF's cosine and linear end
    at 0: a minimum above 0 takes cosine_with_min_lr, or polynomial of power 1 to lr_end)."""
    if recipe.schedule == "constant":
        return "constant_with_warmup", {}
    if recipe.schedule == "wsd":
        ratio = significant(recipe.lr_min / recipe.lr_peak)
        kwargs = {"num_decay_steps": recipe.wsd_decay_steps, "min_lr_ratio": ratio, "decay_type": WSD_DECAY_STYLE}
        return "warmup_stable_decay", kwargs
    if recipe.lr_min == 0:
        return recipe.schedule, {}
    if recipe.schedule == "cosine":
        return "cosine_with_min_lr", {"min_lr": recipe.lr_min}
    return "polynomial", {"lr_end": recipe.lr_min, "power": 1.0}


def hf_trainer_args(recipe: Recipe) -> list[str]:
    """TrainingArguments flags of the recipe (optimizer AdamW: the Trainer's default adamw_torch)."""
    schedule, kwargs = hf_scheduler(recipe)
    args = [
        "--learning_rate",
        number(recipe.lr_peak),
        "--lr_scheduler_type",
        schedule,
        "--warmup_steps",
        str(recipe.warmup_steps),
        "--weight_decay",
        number(recipe.weight_decay),
        "--adam_beta1",
        number(recipe.betas[0]),
        "--adam_beta2",
        number(recipe.betas[1]),
        "--adam_epsilon",
        number(recipe.eps),
        "--max_grad_norm",
        number(recipe.grad_clip_norm),
    ]
    if kwargs:
        args += ["--lr_scheduler_kwargs", json.dumps(kwargs, sort_keys=True)]
    return args


def recipe_env(recipe: Recipe) -> list[tuple[str, str]]:
    """The plain-script contract: what a torchrun, DeepSpeed or Accelerate script reads to build its optimizer and
    schedule (the schedule's shape is in MLINFRA_LR_SCHEDULE; Recipe.lr_at in compiler/plan/recipe.py is the formula)."""
    return [
        ("MLINFRA_OPTIMIZER", recipe.optimizer),
        ("MLINFRA_LR", number(recipe.lr_peak)),
        ("MLINFRA_LR_MIN", number(recipe.lr_min)),
        ("MLINFRA_LR_SCHEDULE", recipe.schedule),
        ("MLINFRA_LR_WARMUP_STEPS", str(recipe.warmup_steps)),
        ("MLINFRA_LR_DECAY_STEPS", str(recipe.decay_steps)),
        ("MLINFRA_LR_WSD_DECAY_STEPS", str(recipe.wsd_decay_steps)),
        ("MLINFRA_WEIGHT_DECAY", number(recipe.weight_decay)),
        ("MLINFRA_ADAM_BETA1", number(recipe.betas[0])),
        ("MLINFRA_ADAM_BETA2", number(recipe.betas[1])),
        ("MLINFRA_ADAM_EPS", number(recipe.eps)),
        ("MLINFRA_GRAD_CLIP_NORM", number(recipe.grad_clip_norm)),
        ("MLINFRA_INIT_STD", number(recipe.init_std)),
        ("MLINFRA_DROPOUT", number(recipe.dropout)),
    ]
