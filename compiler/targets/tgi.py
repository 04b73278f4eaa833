"""Target: tgi — `tgi/launcher.sh`, Hugging Face Text Generation Inference's `text-generation-launcher` with the
serving search's numbers. A multi-stage service gets one launcher per TGI stage under `tgi/<stage>/`.

TGI shards one replica over the GPUs of one node (`--num-shard` = TP); it has no pipeline parallelism and cannot
span nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..resolved import ResolvedPlan
from . import vllm
from .base import OutputFile, render as render_template

# The TGI release whose launcher arguments the output uses: 3.3.6 (the image k8s_serving pins). Argument names and
# values from TGI's launcher reference, docs/source/reference/launcher.md (huggingface/text-generation-inference
# @ 032fc4c4cf25), kept in tests/data/tgi/launcher_args.json for the tests.
TGI_VERSION = "3.3.6"
HTTP_PORT = 8000  # the port k8s_serving exposes for every engine (TGI's own default is 3000)
HOSTNAME = "0.0.0.0"  # the launcher's default, written out

# `--dtype` (launcher: float16 | bfloat16; "cannot be used with --quantize").
DTYPE = {"fp16": "float16", "bf16": "bfloat16"}
# `--quantize` per quantized precision (launcher reference, QUANTIZE):
#   fp8  -> fp8: FP8 (e4m3) weights, H100 and later;
#   int8 -> eetq: 8-bit, "doesn't require specific model";
#   int4 -> bitsandbytes-nf4: 4-bit, "can be applied on any model" (awq/gptq/marlin need pre-quantized repos).
QUANTIZE = {"fp8": "fp8", "int8": "eetq", "int4": "bitsandbytes-nf4"}
# `--kv-cache-dtype`: fp8 means e4m3 (vLLM's "fp8" is e4m3 too); unset = the model's dtype.
KV_CACHE_DTYPE = {"fp8": "fp8_e4m3fn"}
# TGI's default prefill budget is max_input_tokens + 50 "to give a bit of room" for block alignment (launcher
# reference, MAX_BATCH_PREFILL_TOKENS); never give it less than that.
PREFILL_ALIGNMENT_TOKENS = 50
# Requests the router admits beyond the running batch before it answers 429: twice the queue the autoscaler targets
# per replica, so the queue gauge (tgi_queue_size) can pass its target and trigger a scale-up before clients are
# refused. A policy, not a measurement.
QUEUE_ADMISSION_FACTOR = 2


@dataclass(frozen=True)
class LauncherArg:
    flag: str
    value: object  # None for a flag without a value
    reason: str


def applies(plan: ResolvedPlan) -> bool:
    return bool(vllm.engine_units(plan, "tgi"))


def max_input_tokens(plan: ResolvedPlan) -> int:
    """The longest prompt: the context minus one generated token (TGI's own default, max_total_tokens - 1)."""
    return plan.serving.context_len - 1


def max_batch_prefill_tokens(plan: ResolvedPlan) -> int:
    """Prefill tokens per batch: the sized chunk, at least the longest prompt + the alignment room (TGI rejects less)."""
    return max(plan.serving.max_num_batched_tokens, max_input_tokens(plan) + PREFILL_ALIGNMENT_TOKENS)


def max_concurrent_requests(plan: ResolvedPlan) -> int:
    s = plan.serving
    return s.max_concurrency + QUEUE_ADMISSION_FACTOR * math.ceil(s.queue_target_per_replica)


def launcher_args(plan: ResolvedPlan) -> list[LauncherArg]:
    vllm.require_llm(plan)
    s = plan.serving
    if s.nodes_per_replica > 1 or s.pp > 1:
        raise ValueError(f"TGI shards a replica over one node's GPUs only; the plan needs TP={s.tp} x PP={s.pp} "
                         f"on {s.nodes_per_replica} nodes (use engine vllm)")
    if s.precision not in DTYPE and s.precision not in QUANTIZE:
        raise ValueError(f"TGI serves float16, bfloat16 or quantized weights, not {s.precision}")
    args = [
        LauncherArg("--model-id", vllm.model_source(plan), "weights: the plan's weights location, else the Hub repo"),
        LauncherArg("--hostname", HOSTNAME, "listen on every interface"),
        LauncherArg("--port", HTTP_PORT, "API port"),
        LauncherArg("--num-shard", s.tp, "TP from the serving search: one shard per GPU"),
        LauncherArg("--max-total-tokens", s.context_len, "serve.context_len: prompt + output tokens per request"),
        LauncherArg("--max-input-tokens", max_input_tokens(plan), "longest prompt: context - 1"),
        LauncherArg("--max-batch-prefill-tokens", max_batch_prefill_tokens(plan), "prefill budget per batch"),
        LauncherArg("--max-concurrent-requests", max_concurrent_requests(plan),
                    f"batch {s.max_concurrency} + {QUEUE_ADMISSION_FACTOR} x queue target {s.queue_target_per_replica:g}"),
    ]
    if s.precision in QUANTIZE:
        args.append(LauncherArg("--quantize", QUANTIZE[s.precision], f"precision {s.precision}"))
    else:
        args.append(LauncherArg("--dtype", DTYPE[s.precision], f"precision {s.precision}"))
    if s.kv_cache_dtype in KV_CACHE_DTYPE:
        args.append(LauncherArg("--kv-cache-dtype", KV_CACHE_DTYPE[s.kv_cache_dtype], "serve.kv_cache_dtype"))
    return args


def launcher_words(plan: ResolvedPlan) -> list[str]:
    return [f"{a.flag}={a.value}" for a in launcher_args(plan)]


def _launcher_sh(unit: vllm.EngineUnit) -> str:
    plan = unit.plan
    return render_template(
        "tgi/launcher.sh.j2", tgi_version=TGI_VERSION, name=plan.name, gpus=unit.serving.tp,
        prefix_caching="1" if plan.spec.serve.prefix_caching else "0", words=launcher_words(plan),
    )


def render(plan: ResolvedPlan) -> list[OutputFile]:
    return [OutputFile(vllm.unit_path("tgi", unit, "launcher.sh"), _launcher_sh(unit), 0o755)
            for unit in vllm.engine_units(plan, "tgi")]
