"""Serving memory: weights by precision, KV bytes per token (GQA, MLA), vLLM / TensorRT-LLM budgets.

Fixtures are hand-built (GpuSpec, Architecture, parameter counts) so the numbers below can be checked
by hand; other serving tests import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from compiler.catalog.types import Architecture, GpuSpec
from compiler.sizing.serve.memory import (
    MemoryBudget,
    MemoryLayout,
    activation_workspace_bytes,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    replica_memory,
    weight_bytes_per_param,
    weights_bytes_per_gpu,
    weights_bytes_total,
)

GIB = 2**30


@dataclass(frozen=True)
class Counts:
    """Stand-in for compiler.catalog.params.ParamCounts with hand-counted totals."""

    total: int
    active: int
    embedding: int
    per_layer_attention: int = 0
    per_layer_mlp_total: int = 0
    per_layer_mlp_active: int = 0
    per_layer_norm: int = 0
    largest_layer: int = 0


def gpu(
    ident: str,
    memory_gib: float,
    bandwidth: float,
    tflops: dict,
    *,
    link: float = 450e9,
    price: float = 4.0,
    per_node: int = 8,
    edge: bool = False,
    tdp: float = 700,
) -> GpuSpec:
    return GpuSpec(
        id=ident,
        name=ident.upper(),
        memory_bytes=int(memory_gib * GIB),
        memory_bandwidth_bytes_per_second=bandwidth,
        dense_tflops=tflops,
        intra_node_bandwidth_bytes_per_second=link,
        gpus_per_node=per_node,
        tdp_watts=tdp,
        price_usd_per_gpu_hour={"on-demand": price, "spot": price / 2, "reserved": price * 0.6},
        achievable_matmul_fraction=0.7,
        achievable_memory_bandwidth_fraction=0.8,
        k8s_product_label=ident.upper(),
        slurm_gres_type=ident.split("-")[0],
        edge=edge,
        source="test fixture",
        as_of="2025-01-01",
    )


H100 = gpu("h100-sxm-80gb", 80, 3.35e12, {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "int8": 1978.9})
A100 = gpu("a100-sxm-80gb", 80, 2.039e12, {"bf16": 312, "fp16": 312, "int8": 624}, link=300e9, price=2.0)
L40S = gpu("l40s-pcie-48gb", 48, 0.864e12, {"bf16": 362.05, "fp16": 362.05, "fp8": 733}, link=32e9, price=1.5)
T4 = gpu("t4-pcie-16gb", 16, 0.32e12, {"fp16": 65, "int8": 130}, link=16e9, price=0.5, tdp=70)
JETSON = gpu(
    "jetson-orin-64gb", 64, 0.2048e12, {"fp16": 85, "int8": 170}, link=0, price=0.1, per_node=1, edge=True, tdp=60
)
GPUS = {g.id: g for g in (H100, A100, L40S, T4, JETSON)}

# Llama-3.1-8B: per layer 4096·(4096·2 + 1024·2) attention + 3·4096·14336 MLP + 2·4096 norms = 218,112,000;
# ×32 + untied embedding/LM head 2·128256·4096 = 1,050,673,152 + final norm 4096 → 8,030,261,248.
LLAMA_31_8B = Architecture(
    layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, max_position=131072
)
LLAMA_31_8B_COUNTS = Counts(total=8_030_261_248, active=8_030_261_248, embedding=1_050_673_152)
# Llama-2-70B: per layer 150,994,944 + 704,643,072 + 16,384 = 855,654,400; ×80 + 2·32000·8192 + 8192.
LLAMA_2_70B = Architecture(
    layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, max_position=4096
)
LLAMA_2_70B_COUNTS = Counts(total=68_976_648_192, active=68_976_648_192, embedding=524_288_000)
# DeepSeek-V3 (config_671B.json): 61 layers, MLA kv_lora_rank 512, rope 64; 671B total, 37B active.
DEEPSEEK_V3 = Architecture(
    layers=61,
    hidden=7168,
    heads=128,
    kv_heads=128,
    ffn_hidden=18432,
    vocab=129280,
    experts=256,
    experts_per_token=8,
    shared_experts=1,
    moe_ffn_hidden=2048,
    dense_layers=3,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
)
DEEPSEEK_V3_COUNTS = Counts(total=671_000_000_000, active=37_000_000_000, embedding=2 * 129280 * 7168)


def test_kv_bytes_per_token_llama_31_8b_bf16_is_128_kib():
    # 2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 B (formulas.md §5)
    assert kv_bytes_per_token(LLAMA_31_8B, 2) == 131_072
    assert kv_bytes_per_token(LLAMA_31_8B, 1) == 65_536  # fp8 KV cache


def test_kv_bytes_per_token_llama_2_70b_gqa():
    assert kv_bytes_per_token(LLAMA_2_70B, 2) == 327_680  # 2·80·8·128·2


def test_deepseek_v3_mla_caches_latent_and_rope_key():
    # (512 + 64) × 61 × 2 B = 70,272 B ≈ the "70KB per token" DeepSeek reports
    assert kv_bytes_per_token(DEEPSEEK_V3, 2) == 70_272
    # the latent is not split by heads: every TP rank keeps all of it
    assert kv_bytes_per_token_per_gpu(DEEPSEEK_V3, 2, tp=8, pp=1) == 70_272
    # PP2: the busiest stage holds ceil(61/2) = 31 layers
    assert kv_bytes_per_token_per_gpu(DEEPSEEK_V3, 2, tp=8, pp=2) == 31 * 576 * 2


def test_kv_heads_split_by_tp_then_replicated():
    assert kv_bytes_per_token_per_gpu(LLAMA_31_8B, 2, tp=2, pp=1) == 65_536  # 4 heads per GPU
    assert kv_bytes_per_token_per_gpu(LLAMA_31_8B, 2, tp=8, pp=1) == 16_384  # 1 head per GPU
    assert kv_bytes_per_token_per_gpu(LLAMA_31_8B, 2, tp=16, pp=1) == 16_384  # 8 heads < 16 ranks: replicated


def test_weight_bytes_per_param_by_precision():
    assert weight_bytes_per_param("bf16", 4096) == 2.0
    assert weight_bytes_per_param("fp8", 4096) == 1.0
    assert weight_bytes_per_param("int4", 8192) == 0.53125  # 0.5 + (2 + 2) / 128
    assert weight_bytes_per_param("int8", 8192) == pytest.approx(1 + 2 / 8192)
    # a block-scaled FP8 checkpoint (DeepSeek-V3: one fp32 weight_scale_inv per 128×128 block)
    assert weight_bytes_per_param("fp8", 7168, weight_block=128) == 1 + 4 / 128**2
    assert weight_bytes_per_param("bf16", 7168, weight_block=128) == 2.0  # the blocks are an fp8 checkpoint's


def test_deepseek_v3_fp8_block_scaled_weights_on_8_gpus():
    """671B FP8 weights over TP8 with their scales (body × 4/128² ≈ 164 MB in all) and the BF16 embedding and head."""
    body = DEEPSEEK_V3_COUNTS.total - DEEPSEEK_V3_COUNTS.embedding
    expected = int((body * (1 + 4 / 128**2) + DEEPSEEK_V3_COUNTS.embedding * 2) / 8)
    assert weights_bytes_per_gpu(DEEPSEEK_V3_COUNTS, DEEPSEEK_V3, "fp8", 8, 1, weight_block=128) == expected
    unscaled = weights_bytes_per_gpu(DEEPSEEK_V3_COUNTS, DEEPSEEK_V3, "fp8", 8, 1)
    assert expected - unscaled == pytest.approx(body * 4 / 128**2 / 8, abs=1)
    assert 84.0e9 < expected < 84.3e9


def test_llama_2_70b_int4_group_128_weights():
    # body (68,976,648,192 − 524,288,000) × 0.53125 = 36,365,316,352; 16-bit embedding/LM head 1,048,576,000
    assert weights_bytes_total(LLAMA_2_70B_COUNTS, LLAMA_2_70B, "int4") == 37_413_892_352
    # split over TP4
    assert weights_bytes_per_gpu(LLAMA_2_70B_COUNTS, LLAMA_2_70B, "int4", tp=4, pp=1) == 37_413_892_352 // 4


def test_llama_31_8b_bf16_weights_and_tp_split():
    assert weights_bytes_total(LLAMA_31_8B_COUNTS, LLAMA_31_8B, "bf16") == 16_060_522_496  # "14.96GiB" in vLLM's log
    assert weights_bytes_per_gpu(LLAMA_31_8B_COUNTS, LLAMA_31_8B, "bf16", tp=2, pp=1) == 8_030_261_248


def test_pp_stage_holds_its_layers_and_half_the_untied_embedding():
    body = (8_030_261_248 - 1_050_673_152) * 2
    expected = int((body * 16 / 32 + 1_050_673_152 * 2 / 2) / 1)
    assert weights_bytes_per_gpu(LLAMA_31_8B_COUNTS, LLAMA_31_8B, "bf16", tp=1, pp=2) == expected


def test_activation_workspace_matches_stated_model():
    # 8192 × (2·4096 + 3·14336) × 2 B + 2 × 256 × 128256 × 4 B
    assert activation_workspace_bytes(LLAMA_31_8B, 8192, 256) == 838_860_800 + 262_668_288


def test_vllm_budget_llama_31_8b_bf16_on_80_gib():
    m = replica_memory(
        LLAMA_31_8B_COUNTS,
        LLAMA_31_8B,
        MemoryLayout("bf16", "auto", tp=1, pp=1),
        MemoryBudget(
            gpu_memory_bytes=80 * GIB,
            gpu_memory_utilization=0.9,
            max_num_batched_tokens=8192,
            max_num_seqs=256,
            context_len=8192,
            request_tokens=768,
        ),
    )
    assert m.usable == 77_309_411_328  # 0.9 × 80 GiB
    assert m.weights == 16_060_522_496
    assert m.activations == 1_101_529_088
    assert m.other == 1_921_997_864  # 1.79 GiB non-torch memory (vLLM PR #10511)
    assert m.kv_cache == 77_309_411_328 - 16_060_522_496 - 1_101_529_088 - 1_921_997_864
    assert m.kv_cache_tokens == 444_224  # 58,225,361,880 // 131,072
    assert m.max_seqs_at_context == 54  # 444,224 // 8192
    assert m.max_seqs_at_request == 578  # 444,224 // 768


def test_tensorrt_llm_budget_is_a_share_of_free_memory():
    m = replica_memory(
        LLAMA_31_8B_COUNTS,
        LLAMA_31_8B,
        MemoryLayout("bf16", "auto", tp=1, pp=1),
        MemoryBudget(
            gpu_memory_bytes=80 * GIB,
            gpu_memory_utilization=0.9,
            max_num_batched_tokens=8192,
            max_num_seqs=256,
            context_len=8192,
            request_tokens=768,
            share_of_free_memory=True,
        ),
    )
    free = 80 * GIB - 16_060_522_496 - 1_101_529_088 - 1_921_997_864
    assert m.kv_cache == int(free * 0.9)


def test_model_that_does_not_fit_leaves_no_kv():
    m = replica_memory(
        LLAMA_2_70B_COUNTS,
        LLAMA_2_70B,
        MemoryLayout("bf16", "auto", tp=1, pp=1),
        MemoryBudget(
            gpu_memory_bytes=80 * GIB,
            gpu_memory_utilization=0.9,
            max_num_batched_tokens=2048,
            max_num_seqs=256,
            context_len=4096,
            request_tokens=1024,
        ),
    )
    assert m.weights > m.usable and m.kv_cache == 0 and m.kv_cache_tokens == 0 and not m.fits
