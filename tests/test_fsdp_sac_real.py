"""torchtitan's op-level selective AC on the FSDP2 script: a 1-D FSDP plan pinned to `recompute: selective`
compiles to fsdp/fsdp_tp.{json,py} (the mesh [dp_shard 4, tp 1], no TP plan, the policy's save list) launched by
torchrun instead of Accelerate, whose FSDP1 plugin only checkpoints whole blocks; and one real step on 4 CPU gloo ranks
(tests/fsdp_sac_step.py) gives the loss and gradients of the step without checkpointing, while its backward re-runs
3 of a block's 7 matrices (k, o, up: torchtitan saves every other mm output), against 6 under full recompute."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fsdp_real import assert_consistency_refuses, cluster, llama8b_train, step_rows
from tests.fsdp_real import run_compile as compile_text
from tests.test_fsdp_tp_real import transformers_available
from tests.test_target_torchrun import REPO, torch_env
from tests.tools import realtools

STEP = REPO / "tests" / "fsdp_sac_step.py"
PLAN = (
    llama8b_train("fsdp-sac")
    + """\
  entrypoint: {{script: {script}{kind}}}
"""
    + cluster()
    + """\
parallelism: {{tp: 1, zero_stage: 3, recompute: selective{extra}}}
"""
)


def run_compile(tmp_path: Path, kind: str = "", extra: str = "") -> subprocess.CompletedProcess:
    return compile_text(
        tmp_path, PLAN.format(script=json.dumps(str(STEP)), kind=f", kind: {kind}" if kind else "", extra=extra)
    )


def test_selective_on_1d_fsdp_compiles_to_the_fsdp2_script_with_the_op_policy(tmp_path):
    done = run_compile(tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out" / "fsdp-sac"
    plan = json.loads((out / "plan.json").read_text())
    settings = plan["deployment"]["frameworks"]["fsdp_tp"]
    assert plan["parallelism"]["recompute"] == "selective" and plan["parallelism"]["tp"] == 1
    assert settings["activation_checkpoint"] == "selective-op"
    assert settings["activation_checkpoint_mm_recompute_every"] == 2
    assert "aten.mm.default" in settings["activation_checkpoint_save_ops"]
    assert "aten._scaled_dot_product_flash_attention.default" in settings["activation_checkpoint_save_ops"]
    assert settings["mesh_shape"] == [4, 1] and settings["block_tp_plan"] == settings["model_tp_plan"] == {}
    assert plan["deployment"]["launcher"]["kind"] == "torchrun"
    assert not (out / "fsdp" / "accelerate_config.yaml").exists()
    assert json.loads((out / "fsdp" / "fsdp_tp.json").read_text()) == settings


def test_accelerate_cannot_launch_op_sac(tmp_path):
    done = run_compile(tmp_path, kind="accelerate")
    assert done.returncode == 2 and "launch-kind-mismatch" in done.stderr


def test_selective_where_the_fsdp2_script_cannot_run_is_refused_with_why(tmp_path):
    done = run_compile(tmp_path, extra=", offload: true")
    assert done.returncode == 4, done.stderr
    assert "op-level SAC" in done.stderr and "FSDP2 script" in done.stderr


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny", "hf"])
def test_op_sac_step_equals_the_step_without_checkpointing(tmp_path, model):
    env = torch_env()
    if model == "hf":
        realtools.require_tool(
            "transformers",
            transformers_available(),
            "transformers not in the torch venv; run scripts/install-test-deps.sh",
        )
    done = run_compile(tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out" / "fsdp-sac"
    rows = step_rows(out, {**env, "MLINFRA_TEST_MODEL": model}, "FSDP_SAC_STEP")
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    for r in rows:
        sac, none, full = r["selective-op"], r["none"], r["full"]
        assert r["mesh"] == [4, 1] and r["grads"] > 0
        assert sac["wrapped"] == full["wrapped"] == r["layers"] and none["wrapped"] == 0
        # the same loss and gradients as the step that keeps every activation
        assert sac["loss_equal"] and sac["grad_max_abs_diff"] == 0.0, sac
        assert full["loss_equal"] and full["grad_max_abs_diff"] == 0.0, full
        # the recompute re-runs k, o and up of each block (3 mm: torchtitan saved q, v, gate, down), what the sizing
        # times (train_memory.op_sac_recomputed_params_per_layer); full recompute re-runs 6 of 7: non-reentrant
        # checkpointing stops once the last tensor the backward needs is rebuilt, and down's output is not one
        assert sac["backward_mm"] - none["backward_mm"] == 3 * r["layers"], r
        assert full["backward_mm"] - none["backward_mm"] == 6 * r["layers"], r


def test_the_consistency_check_catches_full_checkpointing_for_a_selective_plan(tmp_path):
    text = PLAN.format(script="train.py", kind="", extra="")
    assert_consistency_refuses(
        tmp_path, text, {"activation_checkpoint": "full"}, "activation checkpointing != plan recompute"
    )
