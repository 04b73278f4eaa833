"""The optimizer recipe: each value the plan's own or its model family's published one (with the source named), steps
from the plan's run, refusals where a framework cannot run what the plan asks, and every framework file carrying it."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from compiler.deployment.recipe_flags import hf_scheduler, megatron_recipe_args, recipe_env
from compiler.diagnostics import FieldRefused
from compiler.plan.spec import PlanSpec
from compiler.plan.spec_train import TrainSpec
from compiler.recipe.families import GPT3, LLAMA3, peak_lr
from tests.fixtures.resolved_plans import deployed, training_plan

FIXTURE_TRAIN = {
    "tokens": "1T",
    "seq_len": 8192,
    "global_batch_tokens": "4M",
    "deadline": "30d",
    "checkpoint": {"keep": 3, "dir": "/lustre/ckpt"},
    "entrypoint": {"script": "train.py"},
}


def plan_for(model_id: str = "llama-3.1-8b", params: float = 8.03e9, framework: str = "megatron", **train):
    """The fixture plan (1T tokens, 512 × 8192-token batch: 238,419 steps, or `steps`) as `model_id` of `params`
    parameters under `framework`, with `train` merged into its train section; recipe and deployment decided again."""
    workload, steps = train.pop("workload", "train"), train.pop("steps", 238_419)
    if framework == "megatron":  # the fixture's NGC PyTorch image ships no Megatron-LM: name the release
        train.setdefault("megatron", {"core_version": "0.13", "path": "/opt/megatron-lm"})
    plan = training_plan(workload=workload, train={**FIXTURE_TRAIN, **train})
    return deployed(
        plan.model_copy(
            update={
                "model": plan.model.model_copy(update={"id": model_id, "params_total": int(params)}),
                "parallelism": plan.parallelism.model_copy(update={"framework": framework}),
                "training": plan.training.model_copy(update={"steps": steps}),
            }
        )
    )


def test_llama3_8b_takes_table_3_and_the_405b_schedule():
    recipe = plan_for().recipe
    assert (recipe.lr_peak, recipe.lr_min, recipe.schedule) == (3e-4, 3e-6, "cosine")
    assert (recipe.warmup_steps, recipe.decay_steps) == (8000, 238_419)
    assert recipe.betas == (0.9, 0.95) and recipe.weight_decay == 0.1 and recipe.grad_clip_norm == 1.0
    assert "Table 3" in recipe.reasons["lr_peak"] and "8B" in recipe.reasons["lr_peak"]
    assert "8,000 steps" in recipe.reasons["warmup_steps"] and "1%" in recipe.reasons["lr_min"]
    assert recipe.dropout == 0.0 and "attention_dropout 0.0" in recipe.reasons["dropout"]


@pytest.mark.parametrize("params, lr", [(8e9, 3e-4), (70.6e9, 1.5e-4), (406e9, 8e-5)])
def test_llama3_peak_lr_by_size(params, lr):
    assert peak_lr(LLAMA3, params, 512)[0] == lr


def test_llama3_405b_decays_to_a_hundredth():
    recipe = plan_for("llama-3.1-405b", 406e9).recipe
    assert (recipe.lr_peak, recipe.lr_min) == (8e-5, 8e-7)  # §3.4.1: 8 × 10⁻⁵ to 8 × 10⁻⁷, no binary noise


def test_deepseek_v3_is_warmup_stable_decay_under_megatron():
    recipe = plan_for("deepseek-v3", 671e9).recipe
    assert (recipe.lr_peak, recipe.lr_min, recipe.schedule) == (2.2e-4, 2.2e-5, "wsd")
    assert recipe.warmup_steps == 2000 and recipe.init_std == 0.006
    assert recipe.wsd_decay_steps == round(4.3 / 14.8 * 238_419)  # the report's 4.3T of 14.8T tokens
    assert "§4.2" in recipe.reasons["init_std"] and "§4.2" in recipe.reasons["schedule"]


def test_deepseek_v3_default_becomes_cosine_where_deepspeed_has_no_wsd():
    recipe = plan_for("deepseek-v3", 671e9, framework="deepspeed").recipe
    assert recipe.schedule == "cosine" and recipe.wsd_decay_steps == 0
    assert "DeepSpeed has no warmup-stable-decay" in recipe.reasons["schedule"]


def test_a_given_wsd_is_refused_under_deepspeed_and_runs_under_the_trainer():
    with pytest.raises(FieldRefused) as refused:
        plan_for(framework="deepspeed", recipe={"schedule": "wsd"})
    assert refused.value.loc == ("train", "recipe", "schedule")
    assert "WarmupCosineLR" in refused.value.message
    plan = plan_for(framework="deepspeed", recipe={"schedule": "wsd"}, entrypoint={"kind": "hf-trainer"})
    assert plan.recipe.schedule == "wsd"
    assert plan.deployment.frameworks.deepspeed_config.scheduler is None  # the Trainer's warmup_stable_decay runs


def test_gpt3_fallback_by_nearest_size_and_warmup_in_tokens():
    recipe = plan_for("custom", 20e9, framework="deepspeed").recipe
    assert recipe.lr_peak == 1e-4 and "13B" in recipe.reasons["lr_peak"]  # 20B: nearer 13B than 175B in log size
    assert recipe.warmup_steps == math.ceil(375e6 / (512 * 8192))  # 375M tokens of 4M-token steps = 90
    assert recipe.eps == 1e-8 and recipe.family == GPT3.name


def test_lora_finetune_takes_qlora():
    recipe = plan_for(workload="finetune", method="lora").recipe
    assert (recipe.lr_peak, recipe.schedule, recipe.lr_min, recipe.grad_clip_norm) == (2e-4, "constant", 2e-4, 0.3)
    assert recipe.warmup_steps == round(0.03 * 238_419) and "warmup_ratio 0.03" in recipe.reasons["warmup_steps"]


def test_the_plans_values_win_and_say_so():
    recipe = plan_for(
        recipe={"lr_peak": 1e-4, "lr_min": 2e-5, "warmup_steps": 500, "betas": [0.9, 0.98], "dropout": 0.1}
    ).recipe
    assert (recipe.lr_peak, recipe.lr_min, recipe.warmup_steps, recipe.betas, recipe.dropout) == (
        1e-4,
        2e-5,
        500,
        (0.9, 0.98),
        0.1,
    )
    assert recipe.reasons["lr_peak"] == "the plan's train.recipe.lr_peak"
    assert recipe.eps == 1e-5 and "Llama 2" in recipe.reasons["eps"]  # the rest stays the family's


def test_a_linear_default_minimum_becomes_zero_under_deepspeed_and_a_given_one_is_refused():
    recipe = plan_for(framework="deepspeed", recipe={"schedule": "linear"}).recipe
    assert recipe.lr_min == 0.0 and "WarmupDecayLR" in recipe.reasons["lr_min"]
    with pytest.raises(FieldRefused) as refused:
        plan_for(framework="deepspeed", recipe={"schedule": "linear", "lr_min": 1e-5})
    assert refused.value.loc == ("train", "recipe", "lr_min")


def test_a_warmup_as_long_as_the_run_is_refused():
    with pytest.raises(FieldRefused) as refused:
        plan_for(recipe={"warmup_steps": 238_419})
    assert refused.value.loc == ("train", "recipe", "warmup_steps")


def test_a_short_run_caps_the_default_warmup_at_a_tenth():
    plan = plan_for(steps=4768)  # 20B tokens: Llama 3's 8,000-step warmup does not fit
    assert plan.recipe.warmup_steps == 476 and "capped at a tenth" in plan.recipe.reasons["warmup_steps"]


def test_megatron_refuses_an_optimizer_it_does_not_have():
    with pytest.raises(FieldRefused) as refused:
        plan_for(optimizer="adafactor")
    assert refused.value.loc == ("train", "optimizer") and "adam" in refused.value.message


def test_the_string_optimizer_still_validates_and_conflicts_are_refused():
    spec = TrainSpec.model_validate({"tokens": "1B", "optimizer": "adamw"})
    assert spec.optimizer == "adamw" and spec.recipe.lr_peak is None
    for bad in ({"warmup_steps": 10, "warmup_fraction": 0.1}, {"lr_peak": 1e-4, "lr_min": 1e-3}, {"lr_peak": 0}):
        with pytest.raises(ValidationError):
            TrainSpec.model_validate({"tokens": "1B", "recipe": bad})
    with pytest.raises(ValidationError):
        PlanSpec.model_validate(
            {**training_plan().spec.model_dump(mode="json"), "train": {"tokens": "1B", "recipe": {"lr": 1}}}
        )


def test_lr_at_follows_each_schedule():
    base = plan_for().recipe
    assert base.lr_at(0) == 0.0 and base.lr_at(4000) == pytest.approx(1.5e-4) and base.lr_at(8000) == 3e-4
    assert base.lr_at(238_419) == pytest.approx(3e-6)
    wsd = plan_for("deepseek-v3", 671e9).recipe
    start = wsd.decay_steps - wsd.wsd_decay_steps
    assert wsd.lr_at(start) == 2.2e-4 and wsd.lr_at(wsd.decay_steps) == pytest.approx(2.2e-5)
    assert wsd.lr_at(start + wsd.wsd_decay_steps // 2) == pytest.approx((2.2e-4 + 2.2e-5) / 2, rel=1e-3)


def test_every_framework_file_carries_the_recipe():
    plan = plan_for(framework="deepspeed")
    ds = plan.deployment.frameworks.deepspeed_config.as_written()  # deepspeed/ds_config.json's mapping
    assert ds["optimizer"] == {
        "type": "AdamW",
        "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-5, "weight_decay": 0.1},
    }
    assert ds["scheduler"]["type"] == "WarmupCosineLR"
    assert ds["scheduler"]["params"] == {
        "total_num_steps": 238_419,
        "warmup_min_ratio": 0.0,
        "warmup_num_steps": 8000,
        "cos_min_ratio": 0.01,
        "warmup_type": "linear",
    }
    words = dict(megatron_recipe_args(plan.recipe))
    assert (words["--lr"], words["--min-lr"], words["--lr-warmup-iters"]) == ("0.0003", "3e-06", "8000")
    assert words["--lr-decay-style"] == "cosine" and words["--attention-dropout"] == "0.0"
    env = dict(recipe_env(plan.recipe))
    assert (env["MLINFRA_LR"], env["MLINFRA_LR_SCHEDULE"], env["MLINFRA_LR_WARMUP_STEPS"]) == (
        "0.0003",
        "cosine",
        "8000",
    )
    assert hf_scheduler(plan.recipe) == ("cosine_with_min_lr", {"min_lr": 3e-6})


def test_hf_trainer_flags_of_the_recipe():
    plan = plan_for(framework="ddp", recipe={"schedule": "wsd"}, entrypoint={"kind": "hf-trainer"})
    args = plan.deployment.launcher.framework_args
    flag = dict(zip(args, args[1:]))
    assert (flag["--learning_rate"], flag["--lr_scheduler_type"], flag["--warmup_steps"]) == (
        "0.0003",
        "warmup_stable_decay",
        "8000",
    )
    kwargs = json.loads(flag["--lr_scheduler_kwargs"])
    assert kwargs == {"decay_type": "cosine", "min_lr_ratio": 0.01, "num_decay_steps": plan.recipe.wsd_decay_steps}
    assert (flag["--adam_beta2"], flag["--adam_epsilon"], flag["--max_grad_norm"]) == ("0.95", "1e-05", "1.0")


def test_the_report_states_the_recipe_with_sources():
    from compiler.targets import report

    text = report.render(plan_for("deepseek-v3", 671e9))[0].text
    section = text[text.index("## Optimizer recipe") :]
    assert "| peak learning rate | 0.00022 | DeepSeek-V3 report (arXiv:2412.19437) §4.2" in section
    assert "| schedule | wsd |" in section and "| final decay steps |" in section
    assert "| init std | 0.006 |" in section
