"""LoRA × TP × PP end to end: a LoRA plan pinned to TP2 (and PP2 × TP2) at ZeRO-3 on framework fsdp compiles to
fsdp/fsdp_tp.json with a "lora" section and fsdp/lora_tp.py, and launch/torchrun.sh runs one real step of a tiny
Llama-shaped model on 4 CPU gloo ranks (tests/lora_tp_step.py) whose loss and adapter gradients equal PEFT's LoRA on
the unsharded model in one process, with no gradient on any frozen base parameter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.deployment.lora_tp import lora_settings
from compiler.plan.spec_train import LoraSpec
from compiler.sizing.train.frameworks import framework_gap, resolve_framework
from compiler.sizing.train.layout import Layout
from compiler.sizing.train.model_states import lora_trainable_params
from tests.fsdp_real import cluster, compiled, step_rows
from tests.test_fsdp_tp_real import transformers_available
from tests.test_target_torchrun import REPO, torch_env
from tests.tools import realtools

STEP = REPO / "tests" / "lora_tp_step.py"
PLAN = (
    """\
name: lora-tp
workload: finetune
model: {model}
precision: fp32
train:
  tokens: 100M
  seq_len: 4096
  global_batch: {batch}
  framework: fsdp
  method: lora
  lora: {{rank: 4, alpha: 8, targets: [q, k, v, o, gate, up, down]}}
  entrypoint: {{script: {script}}}
"""
    + cluster()
    + """\
parallelism: {{zero_stage: 3, micro_batch: 1, {extra}}}
"""
)
TP = "tp: 2, pp: 1, dp: 2"
PP = "tp: 2, pp: 2, vp: 1, dp: 1"
# with PP the step's tiny model has the plan's layer count: Llama-3.1-8B's shape cut to 4 layers keeps 2 CPU cores
# under the time limit (4 micro-batches through 2 stages of 2 layers)
SHORT_LLAMA = (
    "{architecture: {layers: 4, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256, "
    "max_position: 8192}}"
)


def compile_plan(tmp_path: Path, extra: str, seq_len: int = 4096) -> Path:
    model, batch = (SHORT_LLAMA, 4) if "pp: 2" in extra else ("{preset: llama-3.1-8b}", 8)
    text = PLAN.format(script=json.dumps(str(STEP)), extra=extra, model=model, batch=batch)
    return compiled(tmp_path, text.replace("seq_len: 4096", f"seq_len: {seq_len}"), "lora-tp")


def test_lora_runs_on_fsdp_tp_and_qlora_does_not():
    assert resolve_framework("auto", "lora", Layout(tp=2, pp=4, zero=3))[0] == "fsdp"
    assert resolve_framework("auto", "lora", Layout(tp=2, pp=4)) is None  # Megatron-LM's arguments: full weights only
    assert dict(framework_gap("auto", "qlora", Layout(tp=2, zero=3)).facts)["layout"] == "adapters-model-parallel"


def test_lora_under_pp_without_tp_is_refused_by_name_not_a_crash(tmp_path):
    """fsdp/lora_tp.py shards each adapter as the TP plan shards its base layer: PP without TP has no TP plan, so the
    FSDP2 path cannot take LoRA there (it was a KeyError, exit 3); 1-D FSDP keeps LoRA."""
    assert framework_gap("fsdp", "lora", Layout(pp=2, zero=3)) is not None
    assert resolve_framework("fsdp", "lora", Layout(tp=2, pp=2, zero=3))[0] == "fsdp"
    assert resolve_framework("fsdp", "lora", Layout(dp=4, zero=3))[0] == "fsdp"
    text = PLAN.format(script='"train.py"', extra="tp: 1, pp: 2, vp: 1, dp: 2", model=SHORT_LLAMA, batch=8)
    plan = tmp_path / "lora-pp.yaml"
    plan.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "compiler", str(plan), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 4, done.stderr
    assert "trains LoRA under model parallelism only with TP" in done.stderr


def test_adapters_per_tp_rank_follow_their_base_layers_split():
    import csv

    from benchmarks.accuracy import LAYOUTS, layout_row

    row = next(r for r in csv.DictReader(LAYOUTS.open()) if "LoRA" in r["model"])
    arch = layout_row(row)["arch"]  # Llama-2-70B: hidden 8192, 64 heads, 8 KV heads of 128
    # q: 16·(8192 + 8192/2), k and v: 16·(8192 + 1024/2), o (row-parallel): 16·(8192/2 + 8192); 80 layers
    per_layer = 16 * (8192 + 4096) + 2 * 16 * (8192 + 512) + 16 * (4096 + 8192)
    assert lora_trainable_params(arch, 16, ("q", "k", "v", "o"), 2) == per_layer * 80 == 53_739_520
    assert lora_trainable_params(arch, 16, ("q", "k", "v", "o")) == 16 * (2 * 16384 + 2 * 9216) * 80


def test_the_lora_section_moves_the_tp_plan_keys_to_the_base_layers():
    class Train:
        lora = LoraSpec(rank=8, alpha=16, targets=["q", "down"])

    class Spec:
        train = Train()

    plan = {"self_attn.q_proj": "colwise", "self_attn.o_proj": "rowwise", "mlp.down_proj": "rowwise"}
    section, moved = lora_settings(Spec(), plan)
    assert moved == {
        "self_attn.q_proj.base_layer": "colwise",
        "self_attn.o_proj": "rowwise",
        "mlp.down_proj.base_layer": "rowwise",
    }
    assert section.modules == {"self_attn.q_proj": "colwise", "mlp.down_proj": "rowwise"}
    assert section.placements == {
        "self_attn.q_proj": ("Replicate", "Shard(0)"),
        "mlp.down_proj": ("Shard(1)", "Replicate"),
    }
    assert (section.scaling, section.dropout) == (2.0, 0.0)


@pytest.mark.parametrize(
    "extra, mesh, seq_len",
    [(TP, [2, 2], 4096), (TP, [2, 2], 4095), (PP, [2, 1, 2], 4096)],
    ids=["tp2-sp", "tp2", "pp2-tp2-sp"],
)
def test_lora_plan_compiles_to_the_adapter_settings(tmp_path, extra, mesh, seq_len):
    """Sequence parallelism where the sequence splits over TP, adapters or not: the row-parallel bases and their
    adapters' outputs sharded over the sequence. Before: off under LoRA (the adapters took the whole sequence)."""
    out = compile_plan(tmp_path, extra, seq_len)
    sp = seq_len % 2 == 0
    plan = json.loads((out / "plan.json").read_text())
    settings = plan["deployment"]["frameworks"]["fsdp_tp"]
    assert settings["mesh_shape"] == mesh and plan["parallelism"]["zero_stage"] == 3
    assert (
        settings["lora"]["rank"] == 4 and settings["lora"]["scaling"] == 2.0 and len(settings["lora"]["modules"]) == 7
    )
    assert plan["parallelism"]["sequence_parallel"] is settings["sequence_parallel"] is sp
    rowwise = "rowwise_to_sequence_shards" if sp else "rowwise"
    assert (
        settings["block_tp_plan"]["mlp.down_proj.base_layer"] == settings["lora"]["modules"]["mlp.down_proj"] == rowwise
    )
    assert settings["lora"]["placements"]["mlp.down_proj"] == ["Shard(1)", "Replicate"]
    assert ("input_layernorm" in settings["block_tp_plan"]) is sp
    assert (out / "fsdp" / "lora_tp.py").exists()
    assert "fsdp/lora_tp.py" in plan["deployment"]["launcher"]["reads"]
    assert any(d["topic"] == "LoRA × TP adapters" for d in plan["deployment"]["decisions"])


def peft_available() -> bool:
    python = realtools.tool_python("torch")
    return subprocess.run([str(python), "-c", "import peft"], capture_output=True).returncode == 0


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, model, seq_len",
    [(TP, "tiny", 4096), (TP, "hf", 4096), (PP, "tiny", 4096), (TP, "tiny", 4095)],
    ids=["tp2-sp-tiny", "tp2-sp-hf", "pp2-tp2-sp-tiny", "tp2-tiny"],
)
def test_one_lora_step_matches_peft_on_the_unsharded_model(tmp_path, extra, model, seq_len):
    """seq_len 4096 splits over TP2: sequence parallelism, the row-parallel adapters' outputs reduce-scattered over the
    sequence as their bases'; 4095: without it."""
    env = torch_env()
    realtools.require_tool("peft", peft_available(), "peft not in the torch venv; run scripts/install-test-deps.sh")
    if model == "hf":
        realtools.require_tool(
            "transformers",
            transformers_available(),
            "transformers not in the torch venv; run scripts/install-test-deps.sh",
        )
    out = compile_plan(tmp_path, extra, seq_len)
    settings = json.loads((out / "fsdp" / "fsdp_tp.json").read_text())
    assert settings["sequence_parallel"] is (seq_len % 2 == 0)
    rows = step_rows(out, {**env, "MLINFRA_TEST_MODEL": model}, "LORA_TP_STEP", timeout=400)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    pp = settings.get("pp", 1)
    layers = sum(settings["pp_stage_layers"]) if pp > 1 else 2
    for r in rows:
        assert r["tp_rank"] == r["rank"] % 2  # TP innermost
        assert r["sequence_parallel"] is settings["sequence_parallel"]
        assert r["frozen_with_grad"] == [] and r["base_changed"] == []
        assert r["trained"] == 2 * 7 * layers // pp  # A and B of 7 projections in this rank's layers
        assert r["reference_trained"] == 2 * 7 * layers
        assert r["grad_rel_error"] < 1e-4, r  # fp32: the sharded adapters' gradients are PEFT's
        if r["loss"] is not None:
            assert abs(r["loss"] - r["reference_loss"]) < 1e-4, r
        place, shapes = r["placements"], r["local_shapes"]
        assert place["self_attn.q_proj.lora_A.weight"][-1] == "R"  # column-parallel base: A whole over TP
        assert place["self_attn.q_proj.lora_B.weight"][-1] == "S(0)"  # B split on its output
        assert place["mlp.down_proj.lora_A.weight"][-1] == "S(1)"  # row-parallel base: A split on its input
        assert place["mlp.down_proj.lora_B.weight"][-1] == "R"
        assert place["mlp.down_proj.lora_B.weight"][0] == "S(0)"  # and fully_shard over dp_shard
        if pp == 1:  # dp_shard 2 × tp 2 of hidden 64, FFN 128, rank 4: fully_shard splits dim 0 again over DP
            assert shapes["self_attn.q_proj.lora_A.weight"] == [2, 64]  # 4 × 64 whole over TP, rows halved over DP
            assert shapes["self_attn.q_proj.lora_B.weight"] == [16, 4]  # 64 rows / TP 2 / DP 2
            assert shapes["mlp.down_proj.lora_A.weight"] == [2, 64]  # 4 × (128 / TP 2), rows halved over DP
    losses = [r["loss"] for r in rows if r["loss"] is not None]
    assert losses and (pp > 1 or len({(r["dp_rank"], r["loss"]) for r in rows}) == 2)
