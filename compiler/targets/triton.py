"""Target: triton — a Triton Inference Server model repository under `triton/` and its launcher `triton/serve.sh`.

One model folder per served model, `triton/<model>/config.pbtxt` plus the version folder `1/`:
* LLMs run on Triton's vLLM backend (triton-inference-server/vllm_backend): `1/model.json` holds the vLLM engine
  arguments (the vllm target's, without the HTTP server's host/port), batching is left to vLLM (max_batch_size 0,
  decoupled responses) and the instance is KIND_MODEL, so vLLM places its TP × PP workers itself.
* Vision models (CNNs, ViTs) and encoders run on the onnxruntime backend with Triton's dynamic batcher: the batch
  (max_batch_size), the preferred batch sizes and the queue delay come from the serving search. The ONNX file is
  not generated: serve.sh fetches it from the plan's weights location, or exports it from the Hugging Face repo
  with optimum, whose export names the tensors `pixel_values` / `input_ids`... and `logits` / `last_hidden_state`.

A multi-stage service gets one repository per Triton stage, under `triton/<stage>/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..deployment.serving import VLLM_VERSION
from ..resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json, render as render_template
from .engine_common import EngineUnit, engine_units, unit_path, vllm_engine_config

VERSION = "1"  # the model version folder
MICROSECONDS_PER_SECOND = 1_000_000
# One execution instance per GPU: the serving search sized one batch running at a time per GPU (latency bound
# delay + 2 × batch time, compiler/sizing/vision.py); a second instance would overlap batches it did not budget.
INSTANCES_PER_GPU = 1

# Tensor element type of an ONNX export per plan precision. fp16 (and bf16, which ONNX Runtime's CUDA kernels
# mostly lack: the same 2 bytes per weight, so sizing holds) are exported in float16 and take/return float16.
# int8/fp8/int4 are QDQ-quantized models (onnxruntime.quantization): their inputs and outputs stay float32.
IO_TYPE = {"fp16": "TYPE_FP16", "bf16": "TYPE_FP16"}
DEFAULT_IO_TYPE = "TYPE_FP32"
EXPORT_DTYPE = {"TYPE_FP16": "fp16", "TYPE_FP32": "fp32"}  # optimum-cli export onnx --dtype
# optimum-cli export onnx --task per model kind, and the tensor names its ONNX configs give the inputs/outputs.
EXPORT_TASK = {"cnn": "image-classification", "vision-transformer": "image-classification", "encoder": "feature-extraction"}
IMAGE_CHANNELS = 3  # RGB, NCHW
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # BERT-style encoder export (int64 token ids)
# Fetching a model file from the plan's weights location, by URI scheme.
FETCH = {"s3://": ("aws", "s3", "cp"), "gs://": ("gcloud", "storage", "cp"), "http://": ("curl", "-fsSL", "-o"),
         "https://": ("curl", "-fsSL", "-o")}


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str
    dims: list[int]
    format: str = ""  # FORMAT_NCHW for images
    optional: bool = False


def applies(plan: ResolvedPlan) -> bool:
    return bool(engine_units(plan, "triton"))


def model_name(plan: ResolvedPlan) -> str:
    """The model's folder and API name: the catalog preset id (safe characters), else the plan name (a DNS label)."""
    return plan.model.id if plan.model.id != "custom" else plan.name


def is_llm(plan: ResolvedPlan) -> bool:
    return plan.model.architecture.kind == "decoder"


def io_type(plan: ResolvedPlan) -> str:
    return IO_TYPE.get(plan.serving.precision, DEFAULT_IO_TYPE)


def inputs_outputs(plan: ResolvedPlan) -> tuple[list[Tensor], list[Tensor]]:
    """Tensors of the ONNX export (batch dimension implicit: max_batch_size > 0)."""
    arch, dtype = plan.model.architecture, io_type(plan)
    if arch.kind in ("cnn", "vision-transformer"):
        image = Tensor("pixel_values", dtype, [IMAGE_CHANNELS, arch.image_size, arch.image_size], "FORMAT_NCHW")
        return [image], [Tensor("logits", dtype, [arch.vocab])]  # vocab = number of classes for classifiers
    if arch.kind == "encoder":
        tokens = [Tensor(name, "TYPE_INT64", [-1]) for name in TEXT_INPUTS]
        return tokens, [Tensor("last_hidden_state", dtype, [-1, arch.hidden])]
    raise ValueError(f"no ONNX model layout for a {arch.kind} model")


# ----------------------------------------------------------------------------------------------- config.pbtxt
def _tensor_rows(tensors: list[Tensor]) -> list[dict]:
    return [{"name": t.name, "data_type": t.data_type, "dims": ", ".join(str(d) for d in t.dims),
             "format": t.format, "has_format": bool(t.format), "optional": t.optional} for t in tensors]


def onnx_config(plan: ResolvedPlan, instance_kind: str = "KIND_GPU") -> str:
    s = plan.serving
    inputs, outputs = inputs_outputs(plan)
    return render_template(
        "triton/onnx_config.pbtxt.j2", plan_name=plan.name, name=model_name(plan),
        precision=s.precision, max_batch_size=s.max_concurrency, inputs=_tensor_rows(inputs),
        outputs=_tensor_rows(outputs), preferred_batch_sizes=", ".join(str(b) for b in s.preferred_batch_sizes),
        has_preferred=bool(s.preferred_batch_sizes),
        max_queue_delay_microseconds=round(s.max_queue_delay_seconds * MICROSECONDS_PER_SECOND),
        instance_count=INSTANCES_PER_GPU, instance_kind=instance_kind, latency_slo_ms=_ms(s.latency_slo_seconds),
        has_slo=s.latency_slo_seconds is not None,
    )


def vllm_config(plan: ResolvedPlan) -> str:
    s = plan.serving
    return render_template("triton/vllm_config.pbtxt.j2", plan_name=plan.name, name=model_name(plan),
                           vllm_version=VLLM_VERSION, tp=s.tp, pp=s.pp, gpus=s.gpus_per_replica)


def model_json(unit: EngineUnit) -> str:
    """The vLLM backend's engine arguments: `AsyncEngineArgs(**model.json)`, so engine fields only."""
    return dump_json(vllm_engine_config(unit.engine, frontend=False))


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:g}"


# ----------------------------------------------------------------------------------------------- serve.sh
def _fetch_command(plan: ResolvedPlan) -> tuple[list[str], list[str]]:
    """Words before and after the destination ("$dest" in the script) of the command that fetches the ONNX file."""
    uri = plan.model.weights_uri
    for scheme, words in FETCH.items():
        if uri.startswith(scheme):
            return ([*words], [uri]) if words[0] == "curl" else ([*words, uri], [])
    return (["cp", "--", uri], [])


def _onnx_model(plan: ResolvedPlan) -> dict:
    return {
        "name": model_name(plan), "hf_id": plan.model.hf_id, "fetch_before": _fetch_command(plan)[0], "fetch_after": _fetch_command(plan)[1],
        "has_weights": bool(plan.model.weights_uri), "weights_uri": plan.model.weights_uri,
        "task": EXPORT_TASK[plan.model.architecture.kind], "dtype": EXPORT_DTYPE[io_type(plan)],
        "on_gpu": io_type(plan) == "TYPE_FP16",  # optimum exports float16 on a CUDA device only
    }


def serve_sh(unit: EngineUnit) -> str:
    plan = unit.plan
    onnx = [] if is_llm(plan) else [_onnx_model(plan)]
    return render_template("triton/serve.sh.j2", plan_name=plan.name, server_version=unit.engine.version,
                           models=onnx, model=model_name(plan), version=VERSION, http_port=unit.engine.http_port,
                           grpc_port=unit.engine.grpc_port, metrics_port=unit.engine.metrics_port)


# ----------------------------------------------------------------------------------------------- files
def repository(unit: EngineUnit, instance_kind: str = "KIND_GPU") -> list[OutputFile]:
    """The unit's model folder. `instance_kind="KIND_CPU"` is for loading it in a CPU-only tritonserver (tests)."""
    plan, name = unit.plan, model_name(unit.plan)
    folder = unit_path("triton", unit, name)
    if is_llm(plan):
        if unit.serving.nodes_per_replica > 1:
            raise ValueError(f"Triton's vLLM backend runs one replica per node; plan needs {unit.serving.nodes_per_replica} nodes")
        return [OutputFile(f"{folder}/config.pbtxt", vllm_config(plan)),
                OutputFile(f"{folder}/{VERSION}/model.json", model_json(unit))]
    readme = render_template("triton/version_readme.md.j2", name=name, version=VERSION)
    return [OutputFile(f"{folder}/config.pbtxt", onnx_config(plan, instance_kind)),
            OutputFile(f"{folder}/{VERSION}/README.md", readme)]


def render_units(plan: ResolvedPlan, instance_kind: str = "KIND_GPU") -> list[OutputFile]:
    files = []
    for unit in engine_units(plan, "triton"):
        files += repository(unit, instance_kind)
        files.append(OutputFile(unit_path("triton", unit, "serve.sh"), serve_sh(unit), 0o755))
    return files


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    return render_units(plan)


TARGET = Target("triton", applies, render)
