"""deepspeed/ds_config.json: batch identity, ZeRO and precision sections, bucket sizes from the hidden size
(hand-checked), and acceptance by DeepSpeed's own config classes (validate_ds_config)."""

from __future__ import annotations

import json

import pytest

from compiler import training_consistency
from compiler.deployment.frameworks import bucket_sizes
from compiler.targets import deepspeed
from tests.fixtures.resolved_plans import deployed, training_plan, with_framework_config
from tests.test_target_torchrun import free_port, realtools, render_training, small_training_plan


def config_of(plan) -> dict:
    return json.loads(deepspeed.render(plan)[0].text)


def with_parallelism(plan, **update):
    return deployed(plan.model_copy(update={"parallelism": plan.parallelism.model_copy(update=update)}))


def test_batch_identity_and_sizes():
    ds = config_of(training_plan())  # micro 2 × grad-accum 8 × DP 32
    assert ds["train_batch_size"] == 512
    assert ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["gradient_accumulation_steps"] == 8
    assert ds["gradient_clipping"] == 1.0
    assert ds["wall_clock_breakdown"] is False


def test_bucket_sizes_from_hidden_size():
    # Llama-3.1-8B hidden 4096: h² = 16,777,216; 0.9·h² = 15,099,494.4 → 15,099,494; 10·h = 40,960
    z3 = config_of(with_parallelism(training_plan(), zero_stage=3))["zero_optimization"]
    assert z3["reduce_bucket_size"] == 16_777_216
    assert z3["stage3_prefetch_bucket_size"] == 15_099_494
    assert z3["stage3_param_persistence_threshold"] == 40_960
    assert "allgather_bucket_size" not in z3
    z1 = config_of(training_plan())["zero_optimization"]
    assert z1 == {
        "stage": 1,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": 16_777_216,
        "allgather_bucket_size": 16_777_216,
    }


def test_bucket_default_without_hidden_size():
    assert bucket_sizes(0)["reduce"] == 500_000_000  # DeepSpeed's own 5e8 default


def test_offload_sections():
    z3 = config_of(with_parallelism(training_plan(), zero_stage=3, offload_optimizer=True, offload_params=True))[
        "zero_optimization"
    ]
    assert z3["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert z3["offload_param"] == {"device": "cpu", "pin_memory": True}
    z2 = config_of(with_parallelism(training_plan(), zero_stage=2, offload_optimizer=True, offload_params=True))[
        "zero_optimization"
    ]
    assert "offload_param" not in z2  # parameter offload exists only at ZeRO-3


@pytest.mark.parametrize(
    ("precision", "bf16", "fp16"),
    [("bf16", True, None), ("fp8", True, None), ("fp16", None, True), ("fp32", None, None)],
)
def test_precision_sections(precision, bf16, fp16):
    ds = config_of(training_plan(precision=precision))
    assert ds.get("bf16", {}).get("enabled") == bf16
    assert ds.get("fp16", {}).get("enabled") == fp16
    if fp16:
        assert ds["fp16"]["loss_scale"] == 0  # 0 = dynamic loss scaling


def test_activation_checkpointing_follows_recompute():
    assert config_of(training_plan())["activation_checkpointing"]["partition_activations"] is True  # TP 2
    assert "activation_checkpointing" not in config_of(with_parallelism(training_plan(), recompute="none"))


def test_sorted_keys():
    text = deepspeed.render(training_plan())[0].text
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_consistency_check_catches_a_wrong_batch():
    plan = training_plan()
    files = {p: f.text for p, f in render_training(plan).items()}
    training_consistency.check(files, plan)
    with pytest.raises(AssertionError, match="train_batch_size"):
        training_consistency.check(files, with_framework_config(plan, "deepspeed_config", train_batch_size=510))


def test_consistency_check_catches_a_wrong_zero_stage_and_precision():
    plan = training_plan()  # ZeRO-1, bf16
    ds = plan.deployment.frameworks.deepspeed_config
    zero3 = ds.zero_optimization.model_copy(update={"stage": 3})
    with pytest.raises(AssertionError, match="ZeRO stage"):
        training_consistency.check({}, with_framework_config(plan, "deepspeed_config", zero_optimization=zero3))
    with pytest.raises(AssertionError, match="precision"):
        training_consistency.check({}, with_framework_config(plan, "deepspeed_config", bf16=None))


# --- DeepSpeed's own parser ---------------------------------------------------------------------------

VARIANTS = {
    "fixture zero1 bf16 tp2": training_plan(),
    "zero2 fp16": with_parallelism(training_plan(precision="fp16"), zero_stage=2),
    "zero3 offload all": with_parallelism(training_plan(), zero_stage=3, offload_optimizer=True, offload_params=True),
    "zero0 fp32": with_parallelism(training_plan(precision="fp32"), zero_stage=0, recompute="full"),
    "small 2x2 zero3": small_training_plan(nodes=2, gpus_per_node=2, framework="deepspeed", zero_stage=3),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_deepspeed_accepts(tmp_path, name):
    plan = VARIANTS[name]
    path = tmp_path / "ds_config.json"
    path.write_text(deepspeed.render(plan)[0].text)
    # DeepSpeed's batch "world" is the data-parallel size (with TP/PP, the mpu's DP group)
    ok, message = realtools().validate_ds_config(path, plan.parallelism.dp)
    assert ok, message


def test_deepspeed_rejects_a_wrong_batch_product(tmp_path):
    plan = VARIANTS["small 2x2 zero3"]
    ds = config_of(plan)
    ds["train_batch_size"] += 1
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ds))
    ok, message = realtools().validate_ds_config(path, plan.parallelism.dp)
    assert not ok
    assert "train_batch_size" in message


def test_deepspeed_rejects_the_wrong_world_size(tmp_path):
    plan = VARIANTS["small 2x2 zero3"]
    path = tmp_path / "ds_config.json"
    path.write_text(deepspeed.render(plan)[0].text)
    ok, _ = realtools().validate_ds_config(path, plan.parallelism.dp * 2)
    assert not ok


def test_a_real_engine_from_the_emitted_config_follows_the_recipe(tmp_path):
    """deepspeed.initialize with no client optimizer or scheduler builds both from ds_config.json's blocks (FusedAdam,
    WarmupCosineLR), and its learning rate follows the decided recipe: DeepSpeed's scheduler starts at iteration −1 and
    steps after each update, so after k updates it stands at iteration i = k − 1; in the warmup it gives the recipe's
    rate at i (linear from 0), in the cosine the rate at i + 1 (WarmupCosineLR counts the first decay step at the
    warmup's last), ending at lr_min. Before, the config had no optimizer or scheduler block."""
    plan = small_training_plan(nodes=1, gpus_per_node=1, framework="deepspeed", zero_stage=1, steps=200)
    recipe = plan.recipe
    assert (recipe.schedule, recipe.warmup_steps, recipe.decay_steps) == ("cosine", 20, 200)  # a tenth of 200 steps
    path = tmp_path / "ds_config.json"
    path.write_text(deepspeed.render(plan)[0].text)
    steps = [2, 11, recipe.warmup_steps + 1, 111, recipe.decay_steps + 1]
    row = realtools().deepspeed_lr_schedule(path, steps, free_port())
    assert (row["optimizer"], row["scheduler"]) == ("FusedAdam", "WarmupCosineLR")
    assert row["lr"]["0"] == 0.0 and row["scheduler_iteration"] == recipe.decay_steps

    def deepspeed_rate(iteration: int) -> float:
        return recipe.lr_at(iteration if iteration < recipe.warmup_steps else iteration + 1)

    for step in steps:
        assert row["lr"][str(step)] == pytest.approx(deepspeed_rate(step - 1), rel=1e-9), step
        assert row["applied_lr"][str(step)] == pytest.approx(deepspeed_rate(step - 2), rel=1e-9), step  # set before
    assert row["lr"][str(recipe.warmup_steps + 1)] == pytest.approx(recipe.lr_peak, rel=1e-3)
    assert row["lr"][str(recipe.decay_steps + 1)] == pytest.approx(recipe.lr_min, rel=1e-9)
    assert (row["betas"], row["eps"], row["weight_decay"]) == ([0.9, 0.95], recipe.eps, recipe.weight_decay)
    assert row["gradient_clipping"] == recipe.grad_clip_norm and row["skipped_steps"][str(steps[-1])] == 0
