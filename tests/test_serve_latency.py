"""Serving latency roofline and queueing, with hand-checked numbers on the H100 fixture
(3.35e12 B/s × 0.8 = 2.68e12 B/s achievable; bf16 989.4 TFLOP/s × 0.7 = 692.58 TFLOP/s achievable)."""

from __future__ import annotations

import math

import pytest

from benchmarks.decode_fixed_time import CROSS_CHECK, ROWS, derived_seconds, per_layer_seconds, roofline_seconds
from compiler.catalog.types import Architecture
from compiler.sizing.serve.decode import (
    DECODE_LAYER_FIXED_SECONDS,
    decode_fixed_seconds,
    decode_step,
    expert_flops_per_second,
    routed_active_params,
)
from compiler.sizing.serve.latency import erlang_c, evaluate_batch, mmc_wait_p99_seconds
from compiler.sizing.serve.memory import weights_bytes_per_gpu
from compiler.sizing.serve.prefill import prefill_flops
from compiler.sizing.serve.replica import (
    SERVING_DROPOUT_MASKS,
    ReplicaModel,
    allreduce_seconds,
    compute_dtype,
    elementwise_seconds,
    experts_touched_fraction,
    matmul_params,
    weight_read_bytes_per_gpu,
)
from compiler.sizing.train.activations import LayerShape, activation_bytes_per_layer
from tests.test_serve_memory import A100, DEEPSEEK_V3, H100, LLAMA_31_8B, LLAMA_31_8B_COUNTS, T4

BANDWIDTH = 3.35e12 * 0.8
ELEMENTWISE_BYTES_PER_TOKEN = 2 * 32 * 139_264  # Llama-3.1-8B at TP1 (test below)
MIXTRAL = Architecture(
    layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32000, experts=8, experts_per_token=2
)


def llama_8b_on_h100(tp: int = 1, pp: int = 1) -> ReplicaModel:
    return ReplicaModel(
        gpu=H100,
        arch=LLAMA_31_8B,
        params=LLAMA_31_8B_COUNTS,
        precision="bf16",
        dtype="bf16",
        tp=tp,
        pp=pp,
        weights_bytes_per_gpu=weights_bytes_per_gpu(LLAMA_31_8B_COUNTS, LLAMA_31_8B, "bf16", tp, pp),
        kv_bytes_per_token_per_gpu=131_072 // tp,
    )


def test_compute_dtype_follows_tensor_cores():
    assert compute_dtype("fp8", H100) == "fp8"
    assert compute_dtype("fp8", A100) is None  # Ampere has no fp8 tensor cores
    assert compute_dtype("bf16", T4) is None  # Turing has no bf16
    assert compute_dtype("int4", T4) == "fp16"  # AWQ/GPTQ are weight-only: 16-bit matmuls
    assert compute_dtype("fp16", H100) == "fp16"


def test_matmul_params_leave_out_the_input_embedding():
    assert matmul_params(LLAMA_31_8B_COUNTS, LLAMA_31_8B) == 8_030_261_248 - 128256 * 4096


def test_prefill_flops_linear_plus_causal_attention():
    # 2 × 7,504,924,672 × 1000 + 32 layers × 1000² × 32 heads × (128 + 128)
    assert prefill_flops(LLAMA_31_8B_COUNTS, LLAMA_31_8B, 1000) == 2 * 7_504_924_672 * 1000 + 32 * 10**6 * 8192


def test_allreduce_ring_time():
    # 10 µs + 1 MB / 450 GB/s × 2·3/4
    assert allreduce_seconds(1e6, 4, 450e9) == pytest.approx(10e-6 + 1e6 / 450e9 * 1.5)
    assert allreduce_seconds(1e6, 1, 450e9) == 0.0


def test_decode_step_batch_1_is_a_weight_read():
    step = decode_step(llama_8b_on_h100(), batch=1, context=1000)
    weights_read = 16_060_522_496 - 128256 * 4096 * 2  # input embedding rows are gathered, not streamed
    assert weight_read_bytes_per_gpu(llama_8b_on_h100(), 1) == weights_read
    assert step.gemm_bound == "memory"
    assert step.comm_seconds == 0.0
    elementwise = ELEMENTWISE_BYTES_PER_TOKEN / BANDWIDTH
    fixed = 32 * 58.6e-6  # 32 layers at the per-layer fixed time gpt-fast's batch-1 steps leave (1.875 ms)
    assert step.fixed_seconds == pytest.approx(fixed)
    assert step.seconds == pytest.approx(weights_read / BANDWIDTH + 131_072 * 1000 / BANDWIDTH + elementwise + fixed)
    assert step.seconds == pytest.approx(7.5281e-3, rel=1e-5)  # 7.5283 ms with training's dropout masks


@pytest.mark.parametrize("pp, runs", [(1, 32), (2, 32), (3, 33)])
def test_the_fixed_time_is_paid_per_layer_run(pp, runs):
    """Each GPU runs its stage's ceil(L/pp) layers once per micro-batch: pp × ceil(32/pp) layer runs a round."""
    assert decode_fixed_seconds(llama_8b_on_h100(pp=pp)) == pytest.approx(runs * DECODE_LAYER_FIXED_SECONDS)
    assert decode_fixed_seconds(llama_8b_on_h100(tp=4)) == pytest.approx(32 * DECODE_LAYER_FIXED_SECONDS)


def test_the_fixed_time_per_layer_is_the_median_of_gpt_fasts_batch_1_steps():
    """The constant is what benchmarks/decode_fixed_time.py derives from gpt-fast's README table, not a fit to a scored
    row; the rows it comes from span 44-82 µs and scale with layers (70B's 80 layers pay more than 7B's 32 at TP 8)."""
    derived = [per_layer_seconds(r) for r in ROWS]
    assert DECODE_LAYER_FIXED_SECONDS == pytest.approx(derived_seconds(), abs=0.05e-6)
    assert 40e-6 < min(derived) and max(derived) < 85e-6
    seven_b, seventy_b = (1 / r.tokens_per_second - roofline_seconds(r) for r in (ROWS[3], ROWS[6]))  # both at TP 8
    assert seventy_b / seven_b == pytest.approx(80 / 32, rel=0.35)
    assert 50e-6 < per_layer_seconds(CROSS_CHECK) < 60e-6  # vLLM's B200 intercept, an engine and GPU of its own


def test_memory_bound_kernels_move_korthikantis_activation_bytes_twice_without_dropout_masks():
    """Llama-3.1-8B, one token, TP1, served with dropout off (no masks): 7h attention (6 + 4·g, g = 1/4) + (2h + 6f)
    MLP + 4h norms = 13h + 6f = 139,264 B per layer (h 4096, f 14336), written and read (2 passes) on 32 layers:
    8.91 MB, 3.3 µs at 2.68 TB/s; linear in tokens and split by TP except the 8h that TP replicates. Training's
    Table 2 count with masks would be 15h + 6f = 147,456 B and 10h replicated (9.44 MB a token)."""
    m = llama_8b_on_h100()
    assert SERVING_DROPOUT_MASKS is False
    assert ELEMENTWISE_BYTES_PER_TOKEN == 2 * 32 * (13 * 4096 + 6 * 14336)
    assert elementwise_seconds(m, 1) == pytest.approx(ELEMENTWISE_BYTES_PER_TOKEN / BANDWIDTH)
    assert elementwise_seconds(m, 1) == pytest.approx(3.3257e-6, rel=1e-4)
    assert elementwise_seconds(m, 256) == pytest.approx(256 * elementwise_seconds(m, 1))
    tp2 = elementwise_seconds(llama_8b_on_h100(tp=2), 1) * BANDWIDTH
    assert tp2 == pytest.approx(2 * 32 * ((5 * 4096 + 6 * 14336) / 2 + 8 * 4096))
    with_masks = activation_bytes_per_layer(LayerShape(LLAMA_31_8B, 1, 1, 1, False), "none", True)
    assert 2 * 32 * with_masks == 2 * 32 * (15 * 4096 + 6 * 14336) > ELEMENTWISE_BYTES_PER_TOKEN


def test_decode_step_large_batch_is_compute_bound_in_the_gemms():
    step = decode_step(llama_8b_on_h100(), batch=1024, context=192)
    gemm_flops_seconds = 1024 * 2 * 7_504_924_672 / (989.4e12 * 0.7)
    assert step.gemm_bound == "compute"
    assert step.gemm_seconds == pytest.approx(gemm_flops_seconds)  # 22.2 ms


def test_tp_adds_two_allreduces_per_layer():
    step = decode_step(llama_8b_on_h100(tp=2), batch=64, context=1000)
    message = 64 * 4096 * 2
    link = 450e9 * 749 / 900  # the fixture's NVLink, at the share collectives reach (nccl#1264)
    assert step.comm_seconds == pytest.approx(2 * 32 * (10e-6 + message / link * 1.0))


def test_fp8_gemms_run_at_the_deepgemm_measured_shares():
    """fp8 weights stream at 2298.5 of 3350 GB/s and multiply at 1041.5 of 1979 TFLOP/s (DeepGEMM on H800);
    the KV cache is still read at the streaming share."""
    fp8 = ReplicaModel(
        gpu=H100,
        arch=LLAMA_31_8B,
        params=LLAMA_31_8B_COUNTS,
        precision="fp8",
        dtype="fp8",
        tp=1,
        pp=1,
        weights_bytes_per_gpu=weights_bytes_per_gpu(LLAMA_31_8B_COUNTS, LLAMA_31_8B, "fp8", 1, 1),
        kv_bytes_per_token_per_gpu=65_536,
    )
    assert fp8.weight_bytes_per_second == pytest.approx(3.35e12 * 2298.5 / 3350)
    assert fp8.bytes_per_second == pytest.approx(BANDWIDTH)
    assert fp8.flops_per_second == pytest.approx(H100.peak_flops_per_second("fp8") * 1041.5 / 1979)
    small = decode_step(fp8, batch=1, context=1000)
    assert small.gemm_seconds == pytest.approx(weight_read_bytes_per_gpu(fp8, 1) / (2298.5e9))
    large = decode_step(fp8, batch=1024, context=192)
    assert large.gemm_bound == "compute"
    assert large.gemm_seconds == pytest.approx(1024 * 2 * 7_504_924_672 / fp8.flops_per_second)


def test_moe_experts_touched_by_a_batch():
    assert experts_touched_fraction(MIXTRAL, 1) == pytest.approx(0.25)  # top-2 of 8
    assert experts_touched_fraction(MIXTRAL, 2) == pytest.approx(1 - 0.75**2)
    assert experts_touched_fraction(MIXTRAL, 512) == pytest.approx(1.0)
    assert experts_touched_fraction(DEEPSEEK_V3, 1) == pytest.approx(8 / 256)


def test_moe_expert_gemms_are_a_roofline_of_their_own_at_deepgemms_grouped_rate():
    """Mixtral-8x7B fp8 at batch 1024: 256 rows per expert → DeepGEMM's masked grouped GEMM, 873.5 of 1979
    TFLOP/s; the dense GEMMs keep the 1041.5 share; weights are all read (every expert touched)."""
    from compiler.catalog.params import count_params

    counts = count_params(MIXTRAL)
    m = ReplicaModel(
        gpu=H100,
        arch=MIXTRAL,
        params=counts,
        precision="fp8",
        dtype="fp8",
        tp=1,
        pp=1,
        weights_bytes_per_gpu=weights_bytes_per_gpu(counts, MIXTRAL, "fp8", 1, 1),
        kv_bytes_per_token_per_gpu=65_536,
    )
    routed = 2 * 3 * 4096 * 14336 * 32
    assert routed_active_params(MIXTRAL) == routed
    peak = H100.peak_flops_per_second("fp8")
    assert expert_flops_per_second(m, 1024) == pytest.approx(peak * 873.5 / 1979)
    assert expert_flops_per_second(m, 2048) == pytest.approx(peak * 978 / 1979)
    assert expert_flops_per_second(m, 100_000) == pytest.approx(m.flops_per_second)  # never above the dense rate
    step = decode_step(m, batch=1024, context=100)
    expert = 1024 * 2 * routed / (peak * 873.5 / 1979)
    dense = 1024 * 2 * (matmul_params(counts, MIXTRAL) - routed) / m.flops_per_second
    assert step.gemm_seconds == pytest.approx(expert + dense)
    bf16 = ReplicaModel(
        gpu=H100,
        arch=MIXTRAL,
        params=counts,
        precision="bf16",
        dtype="bf16",
        tp=1,
        pp=1,
        weights_bytes_per_gpu=1,
        kv_bytes_per_token_per_gpu=1,
    )
    assert expert_flops_per_second(bf16, 1024) == bf16.flops_per_second  # no grouped-GEMM measurement


def test_erlang_c_known_values():
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = ρ
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(100, 60.0) < 1e-3  # many slots at ρ = 0.6 rarely queue


def test_mm1_wait_p99():
    # P(W > t) = ρ e^{−(μ−λ)t}, μ = 1, λ = 0.5 → t99 = ln(0.5/0.01) / 0.5
    assert mmc_wait_p99_seconds(1, 0.5, 1.0) == pytest.approx(math.log(50) / 0.5)
    assert mmc_wait_p99_seconds(256, 0.6, 10.0) == 0.0


def test_batch_point_throughput_and_latency_consistency():
    m = llama_8b_on_h100()
    p = evaluate_batch(m, 64, prompt_tokens=512, output_tokens=256, chunk_tokens=8192, utilization=0.6)
    assert p.cycle_seconds == pytest.approx(64 * p.prefill_occupancy_seconds + 256 * p.step.seconds)
    assert p.tokens_per_second == pytest.approx(64 * 256 / p.cycle_seconds)
    assert p.ttft_p99_seconds >= p.prefill_latency_seconds + p.step.seconds
    assert p.tpot_p99_seconds > p.step.seconds  # other requests' prefills interleave with decode
    bigger = evaluate_batch(m, 256, prompt_tokens=512, output_tokens=256, chunk_tokens=8192, utilization=0.6)
    assert bigger.tokens_per_second > p.tokens_per_second and bigger.tpot_p99_seconds > p.tpot_p99_seconds


def test_long_prompt_prefill_is_compute_bound_and_chunked():
    m = llama_8b_on_h100()
    p = evaluate_batch(m, 8, prompt_tokens=20000, output_tokens=100, chunk_tokens=8192, utilization=0.6)
    flops = prefill_flops(LLAMA_31_8B_COUNTS, LLAMA_31_8B, 20000)
    # 4.05e14 FLOPs at 692.6 TFLOP/s: 0.585 s, far above 3 weight reads (3 chunks × 5.6 ms); + 66.5 ms of
    # memory-bound kernels over 20,000 tokens, no dropout masks among them (70.4 ms and 0.6552 s with training's)
    assert p.prefill_latency_seconds == pytest.approx(
        flops / (989.4e12 * 0.7) + 20000 * ELEMENTWISE_BYTES_PER_TOKEN / BANDWIDTH
    )
    assert p.prefill_latency_seconds == pytest.approx(0.6514, rel=1e-4)


@pytest.mark.parametrize("tp, batch, context", [(1, 1, 100), (2, 64, 1000), (1, 1024, 192)])
def test_decode_step_is_the_sum_of_its_reported_parts(tp, batch, context):
    step = decode_step(llama_8b_on_h100(tp=tp), batch=batch, context=context)
    parts = (
        step.gemm_seconds + step.attention_seconds + step.elementwise_seconds + step.comm_seconds + step.fixed_seconds
    )
    assert step.fixed_seconds == pytest.approx(32 * DECODE_LAYER_FIXED_SECONDS)
    assert step.seconds == pytest.approx(parts)
    assert step.elementwise_seconds > 0 and (step.comm_seconds > 0) == (tp > 1)
