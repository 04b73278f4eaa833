"""What a preset's own repository ships (catalog `checkpoint`; compiler/checkpoint.py): DeepSeek-V3 and R1 ship FP8
weights with one fp32 scale per 128×128 block (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md), so a serve plan that names
the preset without model.quantization is decided, sized and launched as FP8, and a plan asking bf16 of that
checkpoint is refused where it says so (vLLM keeps FP8 weights whatever --dtype says)."""

from __future__ import annotations

import json

import pytest
import yaml

from compiler.catalog.loader import load_models
from compiler.catalog.params import count_params
from compiler.diagnostics import PlanInputError
from compiler.sizing.serve.memory import weights_bytes_per_gpu
from tests.fixtures.compiled import compiled_files

V3 = load_models()["deepseek-v3"].architecture
PLAN = {
    "name": "ds-v3",
    "workload": "serve",
    "model": {"preset": "deepseek-v3"},
    "serve": {
        "engine": "vllm",
        "context_len": 3072,
        "traffic": {"concurrency": 1, "prompt_tokens": 1024, "output_tokens": 2048},
    },
    "cluster": {"gpu": "h200-sxm-141gb", "count": 8},
    "parallelism": {"tp": 8},
}


def _resolved(tmp_path, plan: dict) -> tuple[dict, dict[str, str]]:
    files = compiled_files(tmp_path, plan)
    return json.loads(files["plan.json"]), files


def test_only_the_deepseek_presets_ship_a_quantized_checkpoint():
    """Llama-4-Maverick's and Qwen3-235B's FP8 checkpoints are separate repositories (…-FP8): their presets' repos
    are BF16."""
    shipped = {m.id: m.checkpoint for m in load_models().values() if m.checkpoint is not None}
    assert sorted(shipped) == ["deepseek-r1", "deepseek-v3"]
    assert {(c.quantization, c.weight_block) for c in shipped.values()} == {("fp8", 128)}
    assert all("weight_block_size" in c.source for c in shipped.values())


def test_deepseek_v3_on_8_h200_is_decided_fp8_and_sized_at_a_byte_per_weight_plus_its_scales(tmp_path):
    resolved, _ = _resolved(tmp_path, PLAN)
    assert (resolved["model"]["quantization"], resolved["model"]["weight_block"]) == ("fp8", 128)
    assert resolved["serving"]["precision"] == "fp8"
    counts = count_params(V3)
    body = counts.total - counts.embedding
    # 8 GPUs, TP8: the FP8 body with its block scales + the BF16 embedding and LM head, over 8
    expected = int((body * (1 + 4 / 128**2) + counts.embedding * 2) / 8)
    assert resolved["memory_per_gpu_bytes"]["weights"] == expected
    assert weights_bytes_per_gpu(counts, V3, "fp8", 8, 1, weight_block=128) == expected
    assert 84.0e9 < expected < 84.3e9  # ≈ 671e9 / 8 + 0.02e9 of scales + 0.46e9 of 16-bit embedding share
    assert body * 4 / 128**2 == pytest.approx(163.4e6, rel=0.01)  # all the scales: 163 MB over the whole model
    assert resolved["serving"]["weights_bytes"] == pytest.approx(673.0e9, rel=1e-3)  # was 1342e9 at bf16


def test_the_decision_and_its_reason_are_in_plan_json_and_report(tmp_path):
    resolved, files = _resolved(tmp_path, PLAN)
    decided = {d["topic"]: d for d in resolved["decisions"]}
    checkpoint = decided["checkpoint"]
    assert checkpoint["choice"] == "fp8 weights, one fp32 scale per 128×128 block"
    assert "deepseek-ai/DeepSeek-V3" in checkpoint["reason"] and "README_WEIGHTS.md" in checkpoint["reason"]
    assert "model.quantization not given" in checkpoint["reason"]
    assert decided["precision"]["choice"] == "fp8"
    assert "**checkpoint**: fp8 weights" in files["REPORT.md"]


def test_vllm_gets_no_quantization_flag_for_the_fp8_checkpoint(tmp_path):
    """vLLM reads quant_method fp8 from the repo's config.json; --quantization fp8 would claim a 16-bit checkpoint
    quantized at load time."""
    _, files = _resolved(tmp_path, {**PLAN, "precision": "fp8"})
    config = yaml.safe_load(files["vllm/config.yaml"])
    assert "quantization" not in config
    assert config["dtype"] == "bfloat16"  # the activations; the weights stay FP8


def test_left_free_the_fp8_checkpoint_needs_8_h200_not_16(tmp_path):
    plan = {**PLAN, "cluster": {"gpu": "h200-sxm-141gb"}}
    del plan["parallelism"]
    resolved, _ = _resolved(tmp_path, plan)
    assert (resolved["hardware"]["gpus"], resolved["serving"]["tp"], resolved["serving"]["pp"]) == (8, 8, 1)


def test_precision_bf16_of_the_fp8_checkpoint_is_refused_at_precision(tmp_path):
    with pytest.raises(PlanInputError) as raised:
        compiled_files(tmp_path, {**PLAN, "precision": "bf16"})
    (diag,) = raised.value.diagnostics
    assert (diag.code, diag.path) == ("checkpoint-mismatch", "precision") and diag.line > 1
    assert "deepseek-ai/DeepSeek-V3 (preset deepseek-v3) ships FP8 weights" in diag.message
    assert "whatever --dtype says" in diag.message


@pytest.mark.parametrize(
    "model",
    [
        {"preset": "deepseek-v3", "hf_id": "someone/DeepSeek-V3-bf16"},
        {"preset": "deepseek-v3", "quantization": "none"},
    ],
    ids=["another-repository", "stated-16-bit"],
)
def test_a_plan_that_names_another_checkpoint_keeps_its_own(tmp_path, model):
    plan = {**PLAN, "model": model, "cluster": {"gpu": "h200-sxm-141gb"}}
    del plan["parallelism"]
    resolved, _ = _resolved(tmp_path, plan)
    assert (resolved["model"]["quantization"], resolved["model"]["weight_block"]) == ("none", 0)
    assert resolved["serving"]["precision"] == "bf16"
    assert "checkpoint" not in {d["topic"] for d in resolved["decisions"]}
    assert resolved["hardware"]["gpus"] == 16  # 1.34 TB of 16-bit weights: two nodes


def test_a_stated_quantization_decides_a_precision_left_out(tmp_path):
    """model.quantization fp8 stated for the preset's own repo: its block scales counted, precision fp8 decided (it
    was refused as the default bf16 before); no checkpoint decision, the plan stated it."""
    resolved, _ = _resolved(tmp_path, {**PLAN, "model": {"preset": "deepseek-v3", "quantization": "fp8"}})
    assert (resolved["model"]["quantization"], resolved["model"]["weight_block"]) == ("fp8", 128)
    topics = {d["topic"]: d["choice"] for d in resolved["decisions"]}
    assert topics["precision"] == "fp8" and "checkpoint" not in topics
