"""The batch limits each serving engine runs with unless the plan pins them (vLLM, TensorRT-LLM behind Triton, TGI)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .memory import GIB
from .types import ServeRequest

if TYPE_CHECKING:
    from ...catalog.types import GpuSpec

# vLLM's batch defaults (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER):
# GPUs with ≥ 70 GiB that are not A100: max_num_seqs 1024, max_num_batched_tokens 8192; others 256 / 2048.
VLLM_LARGE_GPU_BYTES = 70 * GIB
VLLM_MAX_NUM_SEQS = (1024, 256)
VLLM_MAX_NUM_BATCHED_TOKENS = (8192, 2048)
# TensorRT-LLM behind Triton: trtllm-bench caps max batch at 4096 (tensorrt_llm/bench/build/tuning.py
# finetune_setting: "min(kv_cache_max_requests, 4096)"); KVCacheManager's default max_num_tokens 8192.
TRTLLM_MAX_BATCH = 4096
TRTLLM_MAX_NUM_TOKENS = 8192
# TGI: text-generation-launcher `--max-batch-prefill-tokens` default 4096; `--max-batch-size` has no
# default (the token budget bounds it), so the search caps it with vLLM's figure.
TGI_MAX_BATCH_PREFILL_TOKENS = 4096


def engine_limits(req: ServeRequest, gpu: GpuSpec) -> tuple[int, int]:
    """(max concurrency, max tokens per step) the engine runs with unless the request pins them."""
    large = gpu.memory_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in gpu.id.lower()
    vllm_seqs, vllm_tokens = VLLM_MAX_NUM_SEQS[0 if large else 1], VLLM_MAX_NUM_BATCHED_TOKENS[0 if large else 1]
    batch, tokens = {
        "vllm": (vllm_seqs, vllm_tokens),
        "triton": (TRTLLM_MAX_BATCH, TRTLLM_MAX_NUM_TOKENS),
        "tgi": (vllm_seqs, TGI_MAX_BATCH_PREFILL_TOKENS),
    }[req.engine]
    return req.max_batch or batch, req.max_num_batched_tokens or tokens
