"""megatron/args.sh: Megatron-LM flags for the parallel layout and model shape (values from the fixture),
bash syntax, shellcheck, and that sourcing it yields exactly the intended words."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import training_consistency
from compiler.targets import megatron
from compiler.targets.base import with_header
from tests.fixtures.resolved_plans import deployed, training_plan
from tests.test_target_torchrun import realtools, render_training, small_training_plan


def sourced_words(tmp_path, plan) -> list[str]:
    path = tmp_path / "args.sh"
    path.write_text(with_header(megatron.render(plan)[0], plan.plan_file, plan.name).text)
    result = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "_", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split("\0")[:-1]


def test_applies():
    assert megatron.applies(training_plan())  # TP 2
    assert not megatron.applies(small_training_plan())  # TP = PP = 1, ddp
    assert megatron.applies(small_training_plan(framework="megatron"))


def test_fixture_arguments(tmp_path):
    words = sourced_words(tmp_path, training_plan())
    pairs = dict(zip(words, words[1:]))
    assert pairs["--tensor-model-parallel-size"] == "2"
    assert pairs["--pipeline-model-parallel-size"] == "1"
    assert pairs["--micro-batch-size"] == "2"
    assert pairs["--global-batch-size"] == "512"
    assert pairs["--seq-length"] == "8192"
    assert (pairs["--num-layers"], pairs["--hidden-size"], pairs["--num-attention-heads"]) == ("32", "4096", "32")
    assert (pairs["--num-query-groups"], pairs["--ffn-hidden-size"]) == ("8", "14336")  # GQA: 8 KV heads
    assert pairs["--recompute-granularity"] == "selective"
    assert pairs["--save-interval"] == "379"  # 3600 s checkpoint interval / 9.5 s per step = 378.9
    assert {
        "--sequence-parallel",
        "--group-query-attention",
        "--use-distributed-optimizer",
        "--bf16",
        "--swiglu",
    } <= set(words)
    assert "--fp16" not in words


def test_full_recompute_and_fp16(tmp_path):
    plan = training_plan(precision="fp16")
    plan = deployed(
        plan.model_copy(
            update={
                "parallelism": plan.parallelism.model_copy(update={"recompute": "full", "sequence_parallel": False})
            }
        )
    )
    words = sourced_words(tmp_path, plan)
    pairs = dict(zip(words, words[1:]))
    assert (pairs["--recompute-granularity"], pairs["--recompute-method"], pairs["--recompute-num-layers"]) == (
        "full",
        "uniform",
        "1",
    )
    assert "--fp16" in words and "--bf16" not in words and "--sequence-parallel" not in words


def test_hostile_checkpoint_dir_is_one_word(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"/ck pt/$(touch {marker})`touch {marker}`'\""
    plan = training_plan()
    plan = deployed(plan.model_copy(update={"training": plan.training.model_copy(update={"checkpoint_dir": hostile})}))
    words = sourced_words(tmp_path, plan)
    assert dict(zip(words, words[1:]))["--save"] == hostile
    assert not marker.exists()


def test_consistency_check_catches_a_wrong_tp():
    plan = training_plan()
    files = {p: f.text for p, f in render_training(plan).items()}
    files["megatron/args.sh"] = files["megatron/args.sh"].replace(
        "--tensor-model-parallel-size 2", "--tensor-model-parallel-size 4"
    )
    with pytest.raises(AssertionError, match="TP"):
        training_consistency.check(files, plan)


def test_bash_syntax_and_shellcheck(tmp_path):
    plan = training_plan()
    path = tmp_path / "args.sh"
    path.write_text(with_header(megatron.render(plan)[0], plan.plan_file, plan.name).text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run([str(realtools().shellcheck_bin()), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("model_id, params", [("llama-3.1-405b", 406e9), ("deepseek-v3", 671e9)])
def test_megatron_scheduler_from_the_emitted_args_follows_the_recipe(tmp_path, model_id, params):
    """megatron-core's OptimizerParamScheduler, built from megatron/args.sh as Megatron-LM's training loop builds it
    (samples = iterations × --global-batch-size), gives the decided learning rate at the start (0), half-way through
    the warmup, at its end (the peak), in the decay (Llama 3: cosine; DeepSeek-V3: constant until the final 29%, then
    a cosine) and at the end (lr_min), with the decided weight decay. Before, args.sh had no --lr: the scheduler failed
    on float(None), and schedule, warmup, minimum and decay were Megatron's defaults."""
    from tests.test_recipe import plan_for

    plan = plan_for(model_id, params)
    recipe = plan.recipe
    path = tmp_path / "args.sh"
    path.write_text(with_header(megatron.render(plan)[0], plan.plan_file, plan.name).text)
    stable_end = recipe.decay_steps - recipe.wsd_decay_steps if recipe.wsd_decay_steps else recipe.decay_steps // 2
    iterations = [0, recipe.warmup_steps // 2, recipe.warmup_steps, stable_end, recipe.decay_steps - 1000]
    iterations.append(recipe.decay_steps)
    row = realtools().megatron_lr_schedule(path, iterations)
    lr = {int(k): v for k, v in row["lr"].items()}
    assert lr == pytest.approx({i: recipe.lr_at(i) for i in iterations}, rel=1e-9, abs=1e-15)
    assert (lr[0], lr[recipe.warmup_steps], lr[recipe.decay_steps]) == (0.0, recipe.lr_peak, recipe.lr_min)
    assert row["wd"] == recipe.weight_decay
    assert row["args"]["--lr-decay-style"] == ("WSD" if model_id == "deepseek-v3" else "cosine")


# ----------------------------------------------------------------------------------------------- the model it builds
REPO_ROOT = Path(__file__).resolve().parents[1]
MEGATRON_PLANS = REPO_ROOT / "tests" / "data" / "megatron"


def megatron_examples() -> list[Path]:
    """The examples whose compiled files include megatron/args.sh."""
    from compiler.pipeline import resolve

    found = []
    for path in sorted((REPO_ROOT / "examples").glob("*.yaml")):
        plan = resolve(path)
        frameworks = plan.deployment.frameworks if plan.deployment else None
        if frameworks is not None and frameworks.megatron_args is not None:
            found.append(path)
    return found


MODEL_PLANS = megatron_examples() + [
    MEGATRON_PLANS / f"{name}.yaml" for name in ("deepseek-v3", "mixtral-8x7b", "bloom-learned")
]


@pytest.mark.realtool
@pytest.mark.parametrize("plan_path", MODEL_PLANS, ids=lambda p: p.stem)
def test_megatron_builds_the_sized_model(tmp_path, plan_path):
    """megatron-core builds the GPT model from the emitted args.sh through Megatron-LM's own parser, config and
    gpt_builder (meta device, whole model on one rank): its parameters equal plan.json's within 1% — the sized count
    plus the MTP module the launch trains beside it, which plan.json states apart."""
    done = subprocess.run(
        [sys.executable, "-m", "compiler", str(plan_path), "-o", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = next(p for p in tmp_path.iterdir() if (p / "megatron" / "args.sh").exists())
    target = json.loads((out / "plan.json").read_text())["deployment"]["frameworks"]["megatron"]
    model = realtools().megatron_model(out / "megatron" / "args.sh")
    assert model["params"] == pytest.approx(target["launched_params"], rel=0.01)
    assert model["mtp_params"] == pytest.approx(target["mtp_params"], rel=0.01)
    assert model["params"] - model["mtp_params"] == pytest.approx(target["sized_params"], rel=0.01)
    if plan_path.stem == "deepseek-v3":  # the architecture, not only its size
        assert (model["config"], model["num_moe_experts"], model["moe_ffn_hidden_size"]) == (
            "MLATransformerConfig",
            256,
            2048,
        )
        assert model["moe_layer_freq"] == 58 and model["mtp_num_layers"] == 1  # 3 dense layers of 61
        assert (model["moe_router_score_function"], model["moe_router_enable_expert_bias"]) == ("sigmoid", True)
    if plan_path.stem == "bloom-learned":
        assert (model["position_embedding_type"], model["normalization"]) == ("learned_absolute", "LayerNorm")
        assert model["add_bias_linear"] and not model["gated_linear_unit"]
        assert not model["untie_embeddings_and_output_weights"]
