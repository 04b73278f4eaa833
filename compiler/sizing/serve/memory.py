"""GPU memory of one serving replica: weights by precision, KV cache per token, vLLM's memory budget.

Pure functions. Bytes are per GPU unless the name says `_total`. `params` is a
`compiler.catalog.params.ParamCounts` (fields total, active, embedding, ...).

The budget follows vLLM's profiler (vllm-project/vllm PR #10511, `worker.py` "Memory profiling results"):

    kv_cache = total_memory × gpu_memory_utilization − weights − activation peak − non-torch memory

and the KV tokens that fit are kv_cache / (KV bytes per token on this GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture

GIB = 2**30

# Bytes per weight element by serving precision (the element widths of the formats).
WEIGHT_ELEMENT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int8": 1.0, "int4": 0.5}
# NVFP4 (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025; ModelOpt checkpoints):
# 4-bit E2M1 values with one FP8 E4M3 scale per block of 16 and one FP32 scale per tensor (negligible): 0.5 + 1/16 B.
NVFP4_BLOCK_SIZE = 16
NVFP4_SCALE_BYTES_PER_BLOCK = 1
# int4 group quantisation: AWQ (Lin et al. 2023, §5 "group size 128") and GPTQ (Frantar et al. 2022, §5,
# grouping 128) store one fp16 scale and one zero point per group of 128 input weights. We count the zero
# point as fp16 too (2 B), an upper bound: AutoAWQ packs zeros into 4 bits.
INT4_GROUP_SIZE = 128
INT4_SCALE_BYTES_PER_GROUP = 2
INT4_ZERO_BYTES_PER_GROUP = 2
# int8 W8A8 (SmoothQuant, Xiao et al. 2022; vLLM compressed-tensors): one fp16 scale per output channel,
# i.e. 2 B per row of each matrix = 2 / in_features bytes per weight. We take in_features ≈ hidden.
INT8_SCALE_BYTES_PER_CHANNEL = 2
# Block-scaled FP8 checkpoints (DeepSeek-V3/R1, deepseek-ai/DeepSeek-V3 README_WEIGHTS.md "FP8 Weight Documentation":
# "FP8 weight format with 128x128 block scaling", a float32 `weight_scale_inv` per block; vLLM allocates the same
# float32 [ceil(out/128), ceil(in/128)] tensor, vllm/model_executor/layers/quantization/fp8.py @0071b24): 4 B per
# block of block² weights. A per-tensor scale (vLLM's load-time fp8, ModelOpt FP8) is negligible and not counted.
FP8_BLOCK_SCALE_BYTES = 4
# Quantised checkpoints keep the embedding and LM head in 16 bits: AutoAWQ skips `lm_head`, NVIDIA
# ModelOpt's FP8 config excludes `*lm_head*`, vLLM never quantises `VocabParallelEmbedding`.
UNQUANTISED_EMBEDDING_BYTES = 2

# KV cache element bytes: 'auto' follows the activation dtype (bf16/fp16, also for int4/int8/fp8 weights,
# vLLM `--kv-cache-dtype auto` = model dtype); 'fp8' stores e4m3/e5m2 (1 B).
KV_ELEMENT_BYTES = {"auto": 2, "fp8": 1}
ACTIVATION_BYTES = 2  # bf16/fp16 activations
LOGITS_BYTES = 4  # vLLM's sampler works on fp32 logits

# vLLM's default share of GPU memory for the instance (vLLM EngineArgs `gpu_memory_utilization`, 0.9).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# Memory outside PyTorch's allocator (CUDA context, cuBLAS workspace, NCCL buffers). vLLM PR #10511
# profile of Llama-3-8B on H100: "non_torch_memory 1.79GiB" at TP1 and "3.58GiB" at TP2 — we take
# 1.79 GiB plus another 1.79 GiB once NCCL/custom all-reduce buffers exist (TP or PP > 1).
NON_TORCH_BYTES = 1.79 * GIB
NON_TORCH_COLLECTIVE_BYTES = 1.79 * GIB
# The same profile shows "PyTorch activation peak memory 1.26GiB" at TP1 and TP2 alike, so the
# activation workspace below is not divided by TP.


def weight_bytes_per_param(precision: str, in_features: int, weight_block: int = 0) -> float:
    """Stored bytes per quantisable weight, scales and zero points included.

    int4: 0.5 + (2 + 2)/128 = 0.53125 B; fp4 (NVFP4): 0.5 + 1/16 = 0.5625 B; int8: 1 + 2/in_features;
    fp8 with `weight_block` (a block-scaled checkpoint): 1 + 4/block² (128: 1.000244 B); fp8/bf16/fp16: element width.
    """
    element = WEIGHT_ELEMENT_BYTES[precision]
    if precision == "fp8" and weight_block:
        return element + FP8_BLOCK_SCALE_BYTES / weight_block**2
    if precision == "int4":
        return element + (INT4_SCALE_BYTES_PER_GROUP + INT4_ZERO_BYTES_PER_GROUP) / INT4_GROUP_SIZE
    if precision == "int8":
        return element + INT8_SCALE_BYTES_PER_CHANNEL / max(1, in_features)
    if precision == "fp4":
        return element + NVFP4_SCALE_BYTES_PER_BLOCK / NVFP4_BLOCK_SIZE
    return element


def embedding_weight_bytes(params: ParamCounts, precision: str) -> float:
    width = WEIGHT_ELEMENT_BYTES[precision] if precision in ("bf16", "fp16") else UNQUANTISED_EMBEDDING_BYTES
    return params.embedding * width


def weights_bytes_total(params: ParamCounts, arch: Architecture, precision: str, weight_block: int = 0) -> int:
    """All weights of the model: quantised body + 16-bit embedding / LM head.

    Llama-2-70B int4 (g128): body 68.45e9 × 0.53125 + embedding 0.524e9 × 2 ≈ 37.4e9 bytes.
    """
    body = params.total - params.embedding
    per_param = weight_bytes_per_param(precision, arch.hidden, weight_block)
    return int(body * per_param + embedding_weight_bytes(params, precision))


def layers_per_stage(arch: Architecture, pp: int) -> int:
    return math.ceil(arch.layers / pp)


def routed_expert_params_total(arch: Architecture) -> int:
    """All routed experts' matrices (gate, up and down when gated) over the MoE layers; 0 for dense models."""
    if not arch.is_moe:
        return 0
    return (
        arch.moe_layer_count
        * arch.experts
        * (3 if arch.gated_mlp else 2)
        * arch.hidden
        * (arch.moe_ffn_hidden or arch.ffn_hidden)
    )


def weights_bytes_per_gpu(
    params: ParamCounts, arch: Architecture, precision: str, tp: int, pp: int, dp: int = 1, weight_block: int = 0
) -> int:
    """Weights on the busiest GPU: ceil(L/pp) layers of the body, split by TP (Megatron/vLLM shard every
    matrix, vocab-parallel embedding included). With PP the input embedding sits on the first stage and the
    LM head on the last, so a stage holds half of an untied pair or all of a tied one. With attention data
    parallelism over `dp` ranks (vLLM --data-parallel-size with --enable-expert-parallel, docs "Data Parallel
    Deployment") each rank holds everything but the routed experts whole (split by its TP), and the routed
    experts are split over all dp × tp GPUs. `weight_block`: a block-scaled fp8 checkpoint's scale blocks."""
    per_param = weight_bytes_per_param(precision, arch.hidden, weight_block)
    routed = routed_expert_params_total(arch) * per_param
    body = (params.total - params.embedding) * per_param - routed + routed / dp
    stage_body = body * layers_per_stage(arch, pp) / arch.layers
    embedding = embedding_weight_bytes(params, precision)
    stage_embedding = embedding if pp == 1 or arch.tied_embeddings else embedding / 2
    return int((stage_body + stage_embedding) / tp)


def kv_element_bytes(kv_cache_dtype: str) -> int:
    return KV_ELEMENT_BYTES[kv_cache_dtype]


def kv_bytes_per_token(arch: Architecture, element_bytes: int) -> int:
    """KV cache bytes per token for the whole model.

    GQA/MHA (vLLM paper, Kwon et al. 2023 §3): 2 (K and V) × layers × kv_heads × head_dim × bytes;
    Llama-3.1-8B bf16: 2 × 32 × 8 × 128 × 2 = 131072 B.
    MLA (DeepSeek-V2 paper, Liu et al. 2024 §2.1.2): one compressed latent of kv_lora_rank plus the
    decoupled RoPE key of qk_rope_head_dim per layer; DeepSeek-V3: (512 + 64) × 61 × 2 = 70272 B.
    """
    if arch.uses_mla:
        return arch.layers * (arch.kv_lora_rank + arch.qk_rope_head_dim) * element_bytes
    return 2 * arch.layers * arch.kv_heads * arch.attention_head_dim * element_bytes


def kv_heads_per_gpu(arch: Architecture, tp: int) -> int:
    """KV heads split over TP; with fewer KV heads than ranks each rank keeps (a replica of) one head
    (vLLM `get_num_kv_heads`: max(1, kv_heads // tp))."""
    return max(1, math.ceil(arch.kv_heads / tp))


def kv_bytes_per_token_per_gpu(arch: Architecture, element_bytes: int, tp: int, pp: int) -> int:
    """KV bytes one GPU stores per token of context: its stage's layers and its share of the KV heads.
    The MLA latent is not split by heads, so every TP rank keeps all of it (replicated)."""
    layers = layers_per_stage(arch, pp)
    if arch.uses_mla:
        return layers * (arch.kv_lora_rank + arch.qk_rope_head_dim) * element_bytes
    return 2 * layers * kv_heads_per_gpu(arch, tp) * arch.attention_head_dim * element_bytes


def mlp_activation_width(arch: Architecture) -> int:
    """Widest MLP intermediate a token produces: dense ffn, or top-k routed + shared experts."""
    if arch.is_moe:
        expert = arch.moe_ffn_hidden or arch.ffn_hidden
        dense = arch.ffn_hidden if arch.moe_layer_count < arch.layers else 0  # leading or interleaved dense layers
        return max(dense, (arch.experts_per_token + arch.shared_experts) * expert)
    return arch.ffn_hidden


def activation_workspace_bytes(arch: Architecture, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Peak activation memory of vLLM's profiling forward pass (max_num_batched_tokens dummy tokens).

    Our model: within one layer the live tensors peak in the MLP — the residual and normed hidden states
    (2·h) plus the gate/up output and the activated product (3·ffn), all 16-bit — plus fp32 logits and one
    probability copy for the max_num_seqs sampled rows:
        T × (2h + 3·ffn) × 2 B + 2 × seqs × vocab × 4 B.
    Llama-3-8B, T = 8192, seqs = 256: 0.78 GiB + 0.24 GiB = 1.02 GiB against vLLM PR #10511's measured
    "PyTorch activation peak memory 1.26GiB".
    """
    per_token = (2 * arch.hidden + 3 * mlp_activation_width(arch)) * ACTIVATION_BYTES
    logits = 2 * max_num_seqs * arch.vocab * LOGITS_BYTES
    return int(max_num_batched_tokens * per_token + logits)


def non_torch_bytes(tp: int, pp: int) -> int:
    return int(NON_TORCH_BYTES + (NON_TORCH_COLLECTIVE_BYTES if tp * pp > 1 else 0))


@dataclass(frozen=True)
class ReplicaMemory:
    """Per-GPU memory of one replica (bytes) and the KV capacity it leaves."""

    weights: int
    kv_cache: int
    activations: int
    other: int
    total: int  # what vLLM allocates: weights + KV + activations + other
    usable: int  # total_memory × gpu_memory_utilization
    kv_bytes_per_token: int  # on this GPU
    kv_cache_tokens: int  # tokens of context the replica can hold
    max_seqs_at_context: int  # sequences at the plan's full context length
    max_seqs_at_request: int  # sequences at the average request length (prompt + output)

    @property
    def fits(self) -> bool:
        return self.kv_cache > 0


@dataclass(frozen=True)
class MemoryLayout:
    """How a replica's weights and KV cache are stored and split: their types and the TP × PP (× attention DP) split."""

    precision: str
    kv_cache_dtype: str
    tp: int
    pp: int
    dp: int = 1


@dataclass(frozen=True)
class MemoryBudget:
    """The GPU memory the engine may take, and the batch and sequence lengths it reserves memory for."""

    gpu_memory_bytes: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    max_num_seqs: int
    context_len: int
    request_tokens: int
    share_of_free_memory: bool = False


def replica_memory(
    params: ParamCounts,
    arch: Architecture,
    layout: MemoryLayout,
    budget: MemoryBudget,
    draft_weights: int = 0,
    draft_kv_bytes_per_token: int = 0,
    weight_block: int = 0,
) -> ReplicaMemory:
    """`budget.gpu_memory_utilization` is vLLM's share of all GPU memory; with `budget.share_of_free_memory` it is
    TensorRT-LLM's `kv_cache_free_gpu_mem_fraction`: the KV cache takes that share of what weights, activations and
    runtime leave free (TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction). With attention data parallelism
    (`layout.dp` > 1) the KV figures are one DP rank's: each rank keeps its own sequences' KV cache. A speculative
    draft (serve_speculative.py) adds its weights and its layers' KV per token (`draft_*`, per GPU)."""
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    weights = weights_bytes_per_gpu(params, arch, layout.precision, tp, pp, dp, weight_block) + draft_weights
    activations = activation_workspace_bytes(arch, budget.max_num_batched_tokens, budget.max_num_seqs)
    other = non_torch_bytes(tp * dp, pp)
    if budget.share_of_free_memory:
        free = max(0, budget.gpu_memory_bytes - weights - activations - other)
        kv_cache = int(free * budget.gpu_memory_utilization)
        usable = weights + activations + other + kv_cache
    else:
        usable = int(budget.gpu_memory_bytes * budget.gpu_memory_utilization)
        kv_cache = max(0, usable - weights - activations - other)
    per_token = (
        kv_bytes_per_token_per_gpu(arch, kv_element_bytes(layout.kv_cache_dtype), tp, pp) + draft_kv_bytes_per_token
    )
    tokens = kv_cache // per_token
    return ReplicaMemory(
        weights=weights,
        kv_cache=kv_cache,
        activations=activations,
        other=other,
        total=weights + kv_cache + activations + other,
        usable=usable,
        kv_bytes_per_token=per_token,
        kv_cache_tokens=tokens,
        max_seqs_at_context=tokens // max(1, budget.context_len),
        max_seqs_at_request=tokens // max(1, budget.request_tokens),
    )
