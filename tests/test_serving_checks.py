"""Serve plans an engine would refuse to start are refused at compile time, located (compiler/serve_checks.py);
the checkpoint's own quantization (model.quantization) decides the engine's quantization flags."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compiler.diagnostics import PlanInputError
from compiler.pipeline import resolve
from compiler.targets import vllm


def _resolve(tmp_path: Path, text: str):
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(text))
    return resolve(path)


def _serve_plan(model: str, precision: str = "bf16", engine: str = "vllm", context_len: int = 8192) -> str:
    return (
        f"name: x\nworkload: serve\nmodel: {model}\nprecision: {precision}\n"
        f"serve:\n  engine: {engine}\n  context_len: {context_len}\n  traffic: {{requests_per_second: 2}}\n"
        "cluster: {gpus: [h100-sxm-80gb]}\n"
    )


def _refused(tmp_path: Path, text: str):
    with pytest.raises(PlanInputError) as exc:
        _resolve(tmp_path, text)
    return exc.value.diagnostics


def test_context_longer_than_the_model_is_refused_at_the_field(tmp_path):
    (diag,) = _refused(tmp_path, _serve_plan("{preset: mistral-7b}", context_len=131072))
    assert (diag.code, diag.path, diag.line) == ("context-too-long", "serve.context_len", 7)
    assert "32768" in diag.message and "131072" in diag.message


def test_context_up_to_the_model_maximum_compiles(tmp_path):
    plan = _resolve(tmp_path, _serve_plan("{preset: mistral-7b}", context_len=32768))
    assert vllm.engine_config(plan)["max_model_len"] == 32768


def test_int4_on_a_16_bit_repository_is_refused_for_vllm(tmp_path):
    (diag,) = _refused(tmp_path, _serve_plan("{preset: llama-3.1-8b}", precision="int4"))
    assert (diag.code, diag.path, diag.line) == ("checkpoint-mismatch", "precision", 4)
    assert "pre-quantized checkpoint" in diag.message and "meta-llama/Llama-3.1-8B" in diag.message


def test_int4_on_an_awq_checkpoint_compiles_and_names_no_method(tmp_path):
    plan = _resolve(
        tmp_path,
        _serve_plan(
            "{preset: llama-3.1-8b, hf_id: hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4, quantization: awq}",
            precision="int4",
        ),
    )
    assert "quantization" not in vllm.engine_config(plan)
    assert any("awq-quantized checkpoint" in d.choice for d in plan.deployment.decisions)


def test_precision_the_checkpoint_was_not_quantized_to_is_refused(tmp_path):
    (diag,) = _refused(tmp_path, _serve_plan("{preset: llama-3.1-8b, quantization: awq}", precision="fp8"))
    assert diag.code == "checkpoint-mismatch" and "awq" in diag.message


def test_fp8_from_a_16_bit_checkpoint_quantizes_at_load_time(tmp_path):
    plan = _resolve(tmp_path, _serve_plan("{preset: llama-3.1-8b}", precision="fp8"))
    assert vllm.engine_config(plan)["quantization"] == "fp8"


def test_fp8_checkpoint_gets_no_quantization_flag(tmp_path):
    plan = _resolve(
        tmp_path,
        _serve_plan(
            "{preset: llama-3.1-8b, hf_id: neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8, quantization: fp8}",
            precision="fp8",
        ),
    )
    config = vllm.engine_config(plan)
    assert "quantization" not in config and config["model"] == "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"
    assert "--quantization" not in " ".join(vllm.serve_args(plan))


def test_tgi_quantizes_a_16_bit_checkpoint_and_reads_a_quantized_one(tmp_path):
    plan = _resolve(tmp_path, _serve_plan("{preset: llama-3.1-8b}", precision="int4", engine="tgi"))
    assert {a.key: a.value for a in plan.deployment.engines[0].args}["--quantize"] == "bitsandbytes-nf4"
    plan = _resolve(tmp_path, _serve_plan("{preset: llama-3.1-8b, quantization: gptq}", precision="int4", engine="tgi"))
    keys = {a.key for a in plan.deployment.engines[0].args}
    assert "--quantize" not in keys and "--dtype" not in keys


def test_checkpoint_quantization_on_a_training_plan_is_refused(tmp_path):
    text = "name: x\nworkload: train\nmodel: {preset: llama-3.1-8b, quantization: awq}\ntrain: {tokens: 10B}\ncluster: {gpus: [h100-sxm-80gb]}\n"
    (diag,) = _refused(tmp_path, text)
    assert (diag.code, diag.path) == ("unused-field", "model.quantization")


def test_min_replicas_without_kubernetes_is_refused(tmp_path):
    text = (
        "name: x\nworkload: serve\nmodel: {preset: llama-3.1-8b}\n"
        "serve: {traffic: {requests_per_second: 1}, min_replicas: 2}\ncluster: {scheduler: slurm}\n"
    )
    (diag,) = _refused(tmp_path, text)
    assert (diag.code, diag.path) == ("unused-field", "serve.min_replicas")


def test_a_detector_is_refused_at_its_preset_not_served_as_a_classifier(tmp_path):
    """YOLO11's ONNX file has images → output0, not optimum's pixel_values → logits the repository describes."""
    (diag,) = _refused(tmp_path, _serve_plan("{preset: yolo11n}", precision="fp16", engine="triton"))
    assert (diag.code, diag.path, diag.line) == ("no-detector-deployment", "model.preset", 3)


def test_a_classifier_cnn_still_compiles(tmp_path):
    plan = _resolve(tmp_path, _serve_plan("{preset: resnet-50}", precision="fp16", engine="triton"))
    assert plan.serving.max_concurrency >= 1 and not plan.model.architecture.is_ultralytics_detector
