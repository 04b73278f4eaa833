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

from collections.abc import Mapping

from ..deployment.serving.engine_args import VLLM_VERSION
from ..plan.deployment_serving import Tensor, TritonModel
from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json
from .base import render as render_template
from .engine_common import EngineUnit, engine_units, unit_path, vllm_engine_config

VERSION = "1"  # the model version folder
# Fetching a model file from the plan's weights location, by URI scheme.
FETCH = {
    "s3://": ("aws", "s3", "cp"),
    "gs://": ("gcloud", "storage", "cp"),
    "http://": ("curl", "-fsSL", "-o"),
    "https://": ("curl", "-fsSL", "-o"),
}


def applies(plan: ResolvedPlan) -> bool:
    return bool(engine_units(plan, "triton"))


def model_name(plan: ResolvedPlan) -> str:
    """The model folder's name in a single-service plan (tests)."""
    return plan.deployment.engines[0].triton.name


# ----------------------------------------------------------------------------------------------- config.pbtxt
def _tensor_rows(tensors: list[Tensor]) -> list[dict]:
    return [
        {
            "name": t.name,
            "data_type": t.data_type,
            "dims": ", ".join(str(d) for d in t.dims),
            "format": t.format,
            "has_format": bool(t.format),
            "optional": t.optional,
        }
        for t in tensors
    ]


def onnx_config(plan: ResolvedPlan, instance_kind: str = "KIND_GPU", model: TritonModel | None = None) -> str:
    """config.pbtxt of an ONNX model (`model`: the unit's Triton decisions; default the single service's)."""
    s, m = plan.serving, model or plan.deployment.engines[0].triton
    return render_template(
        "triton/onnx_config.pbtxt.j2",
        plan_name=plan.name,
        name=m.name,
        backend=m.backend,
        model_file=m.model_file,
        precision=s.precision,
        max_batch_size=s.max_concurrency,
        inputs=_tensor_rows(m.inputs),
        outputs=_tensor_rows(m.outputs),
        preferred_batch_sizes=", ".join(str(b) for b in s.preferred_batch_sizes),
        has_preferred=bool(s.preferred_batch_sizes),
        max_queue_delay_microseconds=m.max_queue_delay_microseconds,
        instance_count=m.instance_count,
        instance_kind=instance_kind,
        latency_slo_ms=_ms(s.latency_slo_seconds),
        has_slo=s.latency_slo_seconds is not None,
    )


def vllm_config(plan: ResolvedPlan, model: TritonModel) -> str:
    s = plan.serving
    return render_template(
        "triton/vllm_config.pbtxt.j2",
        plan_name=plan.name,
        name=model.name,
        vllm_version=VLLM_VERSION,
        tp=s.tp,
        pp=s.pp,
        gpus=s.gpus_per_replica,
    )


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


def _onnx_model(plan: ResolvedPlan, m: TritonModel) -> dict:
    return {
        "name": m.name,
        "hf_id": plan.model.hf_id,
        "fetch_before": _fetch_command(plan)[0],
        "fetch_after": _fetch_command(plan)[1],
        "has_weights": bool(plan.model.weights_uri),
        "weights_uri": plan.model.weights_uri,
        "task": m.export_task,
        "dtype": m.export_dtype,
        "on_gpu": m.export_on_gpu,
        "onnx_path": f"{m.name}/model.onnx" if m.engine_build_flags else f"{m.name}/{VERSION}/model.onnx",
        "build": bool(m.engine_build_flags),
        "build_flags": m.engine_build_flags,
        "plan_path": f"{m.name}/{VERSION}/{m.model_file}",
    }


def serve_sh(unit: EngineUnit) -> str:
    plan, m = unit.plan, unit.engine.triton
    onnx = [] if m.backend == "vllm" else [_onnx_model(plan, m)]
    return render_template(
        "triton/serve.sh.j2",
        plan_name=plan.name,
        server_version=unit.engine.version,
        models=onnx,
        has_build=any(x["build"] for x in onnx),
        model=m.name,
        version=VERSION,
        http_port=unit.engine.http_port,
        grpc_port=unit.engine.grpc_port,
        metrics_port=unit.engine.metrics_port,
        exit_timeout_seconds=unit.engine.exit_timeout_seconds,
    )


# ----------------------------------------------------------------------------------------------- files
def repository(unit: EngineUnit, instance_kind: str = "KIND_GPU") -> list[OutputFile]:
    """The unit's model folder. `instance_kind="KIND_CPU"` is for loading it in a CPU-only tritonserver (tests)."""
    plan, m = unit.plan, unit.engine.triton
    name = m.name
    folder = unit_path("triton", unit, name)
    if m.backend == "vllm":
        if unit.serving.nodes_per_replica > 1:
            raise ValueError(
                f"Triton's vLLM backend runs one replica per node; plan needs {unit.serving.nodes_per_replica} nodes"
            )
        return [
            OutputFile(f"{folder}/config.pbtxt", vllm_config(plan, m)),
            OutputFile(f"{folder}/{VERSION}/model.json", model_json(unit)),
        ]
    readme = render_template(
        "triton/version_readme.md.j2",
        name=name,
        version=VERSION,
        model_file=m.model_file,
        build=bool(m.engine_build_flags),
    )
    return [
        OutputFile(f"{folder}/config.pbtxt", onnx_config(plan, instance_kind, m)),
        OutputFile(f"{folder}/{VERSION}/README.md", readme),
    ]


def render_units(plan: ResolvedPlan, instance_kind: str = "KIND_GPU") -> list[OutputFile]:
    files = []
    for unit in engine_units(plan, "triton"):
        files += repository(unit, instance_kind)
        files.append(OutputFile(unit_path("triton", unit, "serve.sh"), serve_sh(unit), 0o755))
    return files


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    return render_units(plan)


TARGET = Target("triton", applies, render)
