"""FSDP2 × TP × PP end to end: a plan pinned to PP at ZeRO-3 compiles to fsdp/fsdp_tp.json with the 3-D mesh
[pp, dp_shard, tp], the decided stage split and the pipeline schedule, and launch/torchrun.sh runs one real optimizer
step on CPU gloo ranks through fsdp_tp.pipeline (tests/fsdp_tp_step.py), matching a single-process fp32 reference:
8 ranks (pp 2 × dp_shard 2 × tp 2, interleaved 1F1B) and 4 ranks (pp 2 × dp_shard 2, uneven 15/17 stages, 1F1B,
full recompute; the tiny model and transformers' LlamaForCausalLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.deployment.fsdp_tp import stage_modules, virtual_stage_layers
from compiler.sizing.train.frameworks import (
    framework_gap,
    fsdp_pipeline_microbatches_ok,
    fsdp_tp_runs,
    resolve_framework,
)
from compiler.sizing.train.layout import Layout
from tests.fsdp_real import assert_consistency_refuses, cluster, compiled, llama8b_train, run_compile, step_rows
from tests.test_fsdp_tp_real import GRAD_TOLERANCE, transformers_available
from tests.test_target_torchrun import REPO, torch_env
from tests.tools import realtools

STEP = REPO / "tests" / "fsdp_tp_step.py"
PLAN = (
    llama8b_train("fsdp-pp", global_batch=8)
    + """\
  entrypoint: {{script: {script}}}
"""
    + cluster("{gpus}")
    + """\
parallelism: {{pp: 2, zero_stage: 3, micro_batch: 1, {extra}}}
"""
)
INTERLEAVED = dict(gpus=8, extra="tp: 2, vp: 2")
UNEVEN = dict(gpus=4, extra="tp: 1, vp: 1, pp_first_stage_layers: 15, recompute: full")


def compile_plan(tmp_path: Path, gpus: int, extra: str) -> Path:
    return compiled(tmp_path, PLAN.format(gpus=gpus, extra=extra, script=json.dumps(str(STEP))), "fsdp-pp")


def test_stages_of_each_rank_cut_into_chunks():
    # the Llama 3 split of 30 layers over 4 ranks, 2 chunks each: the first rank's first chunk and the last rank's
    # last chunk are the light ones (they also embed and run the head); stage s is chunk s // 4 of rank s % 4
    assert virtual_stage_layers([7, 8, 8, 7], 2) == [3, 4, 4, 4, 4, 4, 4, 3]
    assert virtual_stage_layers([15, 17], 1) == [15, 17]
    assert virtual_stage_layers([16, 16], 2) == [8, 8, 8, 8]
    assert stage_modules([1, 2, 1]) == [
        ["embed_tokens", "layers.0"],
        ["layers.1", "layers.2"],
        ["layers.3", "norm", "lm_head"],
    ]


def test_fsdp_runs_pp_at_zero3_and_refuses_cp_and_ep():
    assert fsdp_tp_runs("full", Layout(pp=2, zero=3))
    assert fsdp_tp_runs("full", Layout(tp=2, pp=4, vp=2, stage_layers=(7, 8, 8, 7), zero=3))
    assert not fsdp_tp_runs("full", Layout(pp=2, zero=1))  # PP at ZeRO-1 is Megatron's
    assert not fsdp_tp_runs("full", Layout(pp=2, vp=4, stage_layers=(3, 4), zero=3))  # a 3-layer stage in 4 chunks
    assert resolve_framework("auto", "full", Layout(pp=2, zero=3))[0] == "fsdp"
    assert resolve_framework("auto", "full", Layout(pp=2, zero=1))[0] == "megatron"
    gap = framework_gap("fsdp", "full", Layout(tp=2, cp=2, pp=2, stage_layers=(16, 16), zero=3))
    assert dict(gap.facts)["layout"] == "fsdp-model-parallel"  # CP
    assert not fsdp_pipeline_microbatches_ok(4, 3) and fsdp_pipeline_microbatches_ok(4, 4)


def test_the_search_refuses_fewer_microbatches_than_stages_under_fsdp(tmp_path):
    text = PLAN.format(gpus=8, extra="tp: 2, dp: 2, vp: 1, offload: false", script="train.py")
    done = run_compile(tmp_path, text.replace("global_batch: 8", "global_batch: 2"))
    assert done.returncode == 4, done.stderr
    assert "1 micro-batch(es) per step under PP2" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "case, mesh, stages, schedule",
    [
        (INTERLEAVED, [2, 2, 2], [8, 8, 8, 8], "Interleaved1F1B"),
        (UNEVEN, [2, 2, 1], [15, 17], "1F1B"),
    ],
)
def test_pp_at_zero3_compiles_to_the_pipeline_settings(tmp_path, case, mesh, stages, schedule):
    out = compile_plan(tmp_path, **case)
    plan = json.loads((out / "plan.json").read_text())
    par, settings = plan["parallelism"], plan["deployment"]["frameworks"]["fsdp_tp"]
    assert (par["framework"], par["pp"], par["zero_stage"]) == ("fsdp", 2, 3)
    assert settings["mesh_dim_names"] == ["pp", "dp_shard", "tp"] and settings["mesh_shape"] == mesh
    assert settings["stage_layers"] == stages and settings["pipeline_schedule"] == schedule
    assert settings["pipeline_microbatches"] == par["grad_accum"] == 4
    assert settings["stage_modules"][0][:2] == ["embed_tokens", "layers.0"]
    assert settings["stage_modules"][-1][-2:] == ["norm", "lm_head"]
    assert json.loads((out / "fsdp" / "fsdp_tp.json").read_text()) == settings
    assert plan["deployment"]["frameworks"]["megatron_args"] is None
    decision = next(d for d in plan["deployment"]["decisions"] if d["topic"] == "FSDP × TP mesh")
    assert f"Schedule{schedule}" in decision["choice"] and "(p−1)/(v·m)" in decision["reason"]


def test_the_consistency_check_catches_a_stage_split_that_is_not_the_plans(tmp_path):
    text = PLAN.format(script="train.py", **INTERLEAVED)
    assert_consistency_refuses(tmp_path, text, {"stage_layers": [16, 16]}, "pipeline stages != plan")


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize(
    "case, model",
    [(INTERLEAVED, "tiny"), (UNEVEN, "tiny"), (UNEVEN, "hf"), (INTERLEAVED, "hf")],
    ids=["pp2-dp2-tp2-interleaved", "pp2-dp2-uneven-1f1b", "pp2-dp2-uneven-1f1b-hf", "pp2-dp2-tp2-interleaved-hf"],
)
def test_one_pipelined_step_on_gloo_ranks_matches_the_reference(tmp_path, case, model):
    """`hf`: transformers' LlamaForCausalLM cut into stages (fsdp_tp.Stage hands its decoder layers the rotary
    position embeddings they take by keyword). TP2: with sequence parallelism, the stages exchange their TP rank's
    sequence shard and the last one its vocabulary shard of the logits (loss_parallel)."""
    env = torch_env()
    if model == "hf":
        realtools.require_tool(
            "transformers",
            transformers_available(),
            "transformers not in the torch venv; run scripts/install-test-deps.sh",
        )
    out = compile_plan(tmp_path, **case)
    settings = json.loads((out / "fsdp" / "fsdp_tp.json").read_text())
    rows = step_rows(out, {**env, "MLINFRA_TEST_MODEL": model}, "FSDP_TP_STEP")
    pp, dp, tp = settings["mesh_shape"]
    assert sorted(r["rank"] for r in rows) == list(range(pp * dp * tp))
    names = settings["stage_modules"]
    for r in rows:
        assert r["mesh"] == [pp, dp, tp] and r["mesh_dims"] == ["pp", "dp_shard", "tp"]
        # PP outermost, TP innermost (torchtitan's order)
        assert (r["pp_rank"], r["dp_rank"], r["tp_rank"]) == (
            r["rank"] // (dp * tp),
            r["rank"] // tp % dp,
            r["rank"] % tp,
        )
        # the rank holds the layers of stages pp_rank, pp_rank + pp, ... as decided
        mine = [
            int(m.split(".")[1])
            for s in range(r["pp_rank"], len(names), pp)
            for m in names[s]
            if m.startswith("layers.")
        ]
        assert r["layers"] == sorted(mine)
        assert r["checkpointed"] == (len(mine) if settings["activation_checkpoint"] == "full" else 0)
        last = r["pp_rank"] == (len(names) - 1) % pp
        assert (r["loss"] is not None) == last
        if last:  # the mean of the micro-batches' losses, bf16 against the fp32 reference on the same sequences
            assert abs(r["loss"] - r["reference_loss"]) < 0.02, r
            assert "lm_head.weight" in r["placements"]
        # AdamW's first step moves each weight by about lr·sign(grad): a micro-batch lost, a stage's gradient not
        # reduced over dp_shard or a wrong stage boundary gives about half
        assert r["sign_agreement"] > 0.97, r
        assert r["max_abs_diff"] <= 2.5 * r["lr"], r
        assert r["grad_rel_error"] < GRAD_TOLERANCE, r  # the reduced gradients themselves
        assert r["sequence_parallel"] == settings["sequence_parallel"] == (tp > 1)
        if tp > 1:
            first = f"layers.{r['layers'][0]}"
            # FSDP shards dim 0 over dp_shard (strided where TP already split dim 0), then colwise / rowwise over tp
            assert r["placements"][f"{first}.self_attn.q_proj.weight"] == [f"_S(0, {tp})", "S(0)"]
            assert r["placements"][f"{first}.self_attn.o_proj.weight"] == ["S(0)", "S(1)"]
            assert r["placements"][f"{first}.input_layernorm.weight"] == ["S(0)", "R"]  # SP: replicated over tp
