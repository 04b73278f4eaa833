"""FSDP2 × TP end to end: a plan pinned to TP2 at ZeRO-3 on 4 GPUs compiles to fsdp/fsdp_tp.{json,py} (no Megatron
arguments, no Accelerate config), and launch/torchrun.sh runs one real optimizer step of a tiny Llama-shaped model
on 4 CPU gloo ranks with the decided 2-D mesh [dp_shard 2, tp 2] (tests/fsdp_tp_step.py), matching a
single-process fp32 reference."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from compiler.sizing.train.frameworks import framework_gap, fsdp_tp_runs, resolve_framework, sequence_parallel
from compiler.sizing.train.layout import Layout
from tests.fsdp_real import assert_consistency_refuses, cluster, compiled, llama8b_train, step_rows
from tests.test_target_torchrun import REPO, torch_env
from tests.tools import realtools

STEP = REPO / "tests" / "fsdp_tp_step.py"
# bf16 forward against the fp32 reference: about 0.01 measured on the tiny model, 0.044-0.050 on the hf one pipelined
# (test_fsdp_pp_real's 1F1B cases; 0.0500 where oneDNN runs its bf16 matmuls on AMX, 0.0486 on AVX-512); a lost
# micro-batch or a gradient not reduced over a mesh dimension is off by about one half
GRAD_TOLERANCE = 0.1
PLAN = (
    llama8b_train("fsdp-tp", framework="{framework}")
    + """\
  memory_quantile: none
  entrypoint: {{script: {script}}}
"""
    + cluster()
    + """\
parallelism: {{tp: 2, zero_stage: 3{extra}}}
"""
)


def compile_plan(tmp_path: Path, framework: str = "fsdp", extra: str = "", seq_len: int = 4096) -> Path:
    text = PLAN.format(framework=framework, script=json.dumps(str(STEP)), extra=extra)
    return compiled(tmp_path, text.replace("seq_len: 4096", f"seq_len: {seq_len}"), "fsdp-tp")


def test_fsdp_runs_tp_only_at_zero3_without_other_model_parallelism():
    assert fsdp_tp_runs("full", Layout(tp=2, zero=3))
    assert not fsdp_tp_runs("full", Layout(tp=2, zero=1))  # ZeRO-1 with TP is Megatron's distributed optimizer
    assert fsdp_tp_runs("full", Layout(tp=2, pp=2, zero=3))  # PP: fsdp_tp.pipeline (tests/test_fsdp_pp_real.py)
    assert fsdp_tp_runs("lora", Layout(tp=2, zero=3)) and not fsdp_tp_runs(
        "qlora", Layout(tp=2, zero=3)
    )  # fsdp/lora_tp.py
    assert not fsdp_tp_runs("full", Layout(tp=2, zero=3, offload=True))
    assert dict(framework_gap("fsdp", "full", Layout(tp=2, pp=2, zero=1)).facts)["layout"] == "fsdp-model-parallel"
    assert resolve_framework("auto", "full", Layout(tp=2, zero=3))[0] == "fsdp"
    assert resolve_framework("auto", "full", Layout(tp=2, zero=1))[0] == "megatron"


@pytest.mark.parametrize("framework", ["fsdp", "auto"])
def test_tp_at_zero3_compiles_to_the_fsdp_tp_files(tmp_path, framework):
    out = compile_plan(tmp_path, framework)
    plan = json.loads((out / "plan.json").read_text())
    par, frameworks = plan["parallelism"], plan["deployment"]["frameworks"]
    assert (par["framework"], par["tp"], par["dp"], par["zero_stage"]) == ("fsdp", 2, 2, 3)
    assert frameworks["fsdp_tp"]["mesh_shape"] == [2, 2] and frameworks["fsdp_tp"]["mesh_dim_names"] == [
        "dp_shard",
        "tp",
    ]
    assert frameworks["megatron_args"] is None and frameworks["accelerate_config"] is None
    assert json.loads((out / "fsdp" / "fsdp_tp.json").read_text()) == frameworks["fsdp_tp"]
    assert not (out / "megatron").exists() and not (out / "fsdp" / "accelerate_config.yaml").exists()
    launcher = (out / "launch" / "torchrun.sh").read_text()
    assert 'export MLINFRA_FSDP_TP_SCRIPT="$OUT_DIR/fsdp/fsdp_tp.py"' in launcher
    assert plan["deployment"]["launcher"]["kind"] == "torchrun"
    assert any(d["topic"] == "FSDP × TP mesh" for d in plan["deployment"]["decisions"])
    assert "FSDP × TP mesh" in (out / "REPORT.md").read_text()


def test_sequence_parallel_is_one_rule_for_the_sizing_and_the_files():
    tp2 = Layout(tp=2)
    assert sequence_parallel(tp2, "fsdp", 4096) and sequence_parallel(tp2, "megatron", 4096)
    assert not sequence_parallel(tp2, "fsdp", 4095)  # a pipeline stage could not rebuild the sequence from its shard
    assert not sequence_parallel(Layout(pp=2, stage_layers=(16, 16)), "fsdp", 4096)  # PP alone: no TP


@pytest.mark.parametrize("seq_len", [4096, 4095])
def test_the_sized_sequence_parallelism_reaches_the_files_and_the_report(tmp_path, seq_len):
    out = compile_plan(tmp_path, extra=", recompute: full, micro_batch: 8", seq_len=seq_len)
    plan = json.loads((out / "plan.json").read_text())
    sp, settings = seq_len % 2 == 0, plan["deployment"]["frameworks"]["fsdp_tp"]
    assert plan["parallelism"]["sequence_parallel"] == settings["sequence_parallel"] == sp and settings["loss_parallel"]
    assert settings["model_tp_plan"]["lm_head"] == (
        "colwise_sequence_to_vocab_shards" if sp else "colwise_to_vocab_shards"
    )
    assert ("embed_tokens" in settings["model_tp_plan"]) == sp and (
        "input_layernorm" in settings["block_tp_plan"]
    ) == sp
    assert settings["block_tp_plan"]["self_attn.o_proj"] == ("rowwise_to_sequence_shards" if sp else "rowwise")
    decision = next(d for d in plan["deployment"]["decisions"] if d["topic"] == "FSDP × TP sequence parallelism")
    assert decision["choice"].startswith("on" if sp else "off")
    assert "FSDP × TP sequence parallelism" in (out / "REPORT.md").read_text()
    # Korthikanti et al. 2022 (sizing/train/activations.py), llama-3.1-8b at mb8 on TP2, full recompute: each of 32
    # layers keeps its 2·s·b·h-byte input, the recomputed one holds attention (6+4g)sbh + MLP 2sbh + 6sbf + norms 4sbh
    # (Llama trains with dropout 0: no dropout masks), of which 8sbh are replicated over TP unless SP splits them; the
    # eager fp32 cross-entropy's three copies of the vocabulary-sharded logits, s·b·V/2 × 12 bytes
    s, b, h, f, vocab, tp = seq_len, 8, 4096, 14336, 128256, 2
    split = tp if sp else 1
    recomputed = (7 + 2 + 4 - 8) * s * b * h / tp + 6 * s * b * f / tp + 8 * s * b * h / split
    expected = 32 * 2 * s * b * h / split + recomputed + s * b * vocab / tp * 12
    assert plan["memory_per_gpu_bytes"]["activations"] == pytest.approx(expected, rel=1e-9)


def transformers_available() -> bool:
    python = realtools.tool_python("torch")
    return subprocess.run([str(python), "-c", "import transformers"], capture_output=True).returncode == 0


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize(
    "model, recompute, seq_len",
    [
        ("tiny", "none", 4096),
        ("hf", "none", 4096),
        ("hf-labels", "none", 4096),
        ("hf-labels", "none", 4095),
        ("tiny", "full", 4096),
        ("tiny", "selective", 4096),
        ("tiny", "none", 4095),
    ],
)
def test_one_step_on_four_gloo_ranks_matches_the_reference(tmp_path, model, recompute, seq_len):
    """`hf`: transformers' LlamaForCausalLM, the module the plan's checkpoint loads into (its attention takes
    hidden_states by keyword and sizes heads from its input). recompute full: the plan decides activation
    checkpointing, and fsdp_tp.py wraps every block; selective: torchtitan's op-level SAC over TP's DTensors. seq_len
    4096 splits over TP2: sequence parallelism (torchtitan's plan, logits sharded over the vocabulary); 4095 does not:
    transformers' plan, logits gathered. `hf-labels`: LlamaForCausalLM's own loss (`labels=`, transformers'
    ForCausalLMLoss) on the vocabulary-sharded logits, under fsdp_tp.loss_parallel, with and without SP."""
    env = torch_env()
    model, loss = model.split("-") if "-" in model else (model, "logits")
    if model == "hf":
        realtools.require_tool(
            "transformers",
            transformers_available(),
            "transformers not in the torch venv; run scripts/install-test-deps.sh",
        )
    out = compile_plan(tmp_path, extra=f", recompute: {recompute}", seq_len=seq_len)
    settings = json.loads((out / "fsdp" / "fsdp_tp.json").read_text())
    assert settings["activation_checkpoint"] == {"selective": "selective-op"}.get(recompute, recompute)
    sp = seq_len % 2 == 0
    assert settings["sequence_parallel"] == sp and settings["loss_parallel"]  # TP2: logits sharded over the vocabulary
    rows = step_rows(out, {**env, "MLINFRA_TEST_MODEL": model, "MLINFRA_TEST_LOSS": loss}, "FSDP_TP_STEP")
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    for r in rows:
        assert r["mesh"] == [2, 2] and r["mesh_dims"] == ["dp_shard", "tp"]
        assert r["checkpointed"] == (0 if recompute == "none" else 2)  # both blocks wrapped
        # TP innermost: ranks 0,1 are one TP group (dp_shard 0), ranks 2,3 the other
        assert (r["dp_rank"], r["tp_rank"]) == divmod(r["rank"], 2)
        # bf16 forward against the fp32 reference on the same sequences
        assert abs(r["loss"] - r["reference_loss"]) < 0.02, r
        # AdamW's first step moves each weight by about lr·sign(grad): the averaged sharded gradients point the same
        # way as the reference's full-batch gradient (a wrong shard or reduction gives about half)
        assert r["sign_agreement"] > 0.97, r
        assert r["max_abs_diff"] <= 2.5 * r["lr"], r
        placements = {
            name.removeprefix("model.").replace("._checkpoint_wrapped_module", ""): p
            for name, p in r["placements"].items()
        }
        assert placements["layers.0.self_attn.q_proj.weight"][1] == "S(0)"  # colwise over tp
        assert placements["layers.0.self_attn.o_proj.weight"][1] == "S(1)"  # rowwise over tp
        assert placements["lm_head.weight"][1] == "S(0)"  # colwise over the vocabulary
        # sequence parallelism: norms replicated over tp, embedding rowwise; without: FSDP over dp_shard only
        assert r["sequence_parallel"] == sp
        norm = ["S(0)", "R"] if sp else ["S(0)"]
        assert placements["layers.0.input_layernorm.weight"] == norm and placements["norm.weight"] == norm
        assert placements["embed_tokens.weight"] == (["_S(0, 2)", "S(0)"] if sp else ["S(0)"])  # vocabulary over tp
        # the reduced gradients themselves (a norm's not summed over the TP ranks' sequence shards is off by ~1/2)
        assert r["grad_rel_error"] < GRAD_TOLERANCE, r
    by_dp = {r["dp_rank"]: r["loss"] for r in rows}
    assert all(r["loss"] == by_dp[r["dp_rank"]] for r in rows)  # a TP group computes one loss
    assert by_dp[0] != by_dp[1]  # the DP shards saw different sequences


def test_the_consistency_check_catches_a_mesh_that_is_not_the_plans(tmp_path):
    text = PLAN.format(framework="fsdp", script="train.py", extra="")
    assert_consistency_refuses(tmp_path, text, {"mesh_shape": [1, 4]}, "mesh != plan")


def test_spot_fsdp_tp_restarts_at_full_size(tmp_path):
    """fsdp/fsdp_tp.py builds the decided mesh and stops at another world size, so a spot plan keeps its node count
    (torchrun still restarts it from the last checkpoint). Before: --nnodes=1:2, whose first restart on one node failed."""
    spot = PLAN.replace("  max_gpus: 4\n", "  max_gpus: 8\n  pricing: spot\n")
    out = compiled(tmp_path, spot.format(framework="fsdp", script=json.dumps(str(STEP)), extra=", dp: 4"), "fsdp-tp")
    launch = json.loads((out / "plan.json").read_text())["deployment"]["launcher"]
    assert (launch["nodes"], launch["nnodes"], launch["min_nodes"], launch["node_range"]) == (2, "2", 2, False)
    assert launch["elastic"] and launch["max_restarts"] == 10
    assert "fsdp/fsdp_tp.py builds the decided mesh" in launch["restart_reason"]
    assert "  --nnodes=2 \\\n" in (out / "launch" / "torchrun.sh").read_text()
    assert "fsdp/fsdp_tp.py builds the decided mesh" in (out / "REPORT.md").read_text()
