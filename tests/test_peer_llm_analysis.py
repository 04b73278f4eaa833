"""The naive peer is llm-analysis 0.2.2 itself, fed our catalog: its numbers on real rows, checked by hand against its
documented formulas (llm_analysis/analysis.py), so a wrong GPU peak, dtype, bandwidth or layout mapping fails."""

from __future__ import annotations

import pytest

from benchmarks import peer_llm_analysis as peer
from tests.tools.realtools import INSTALL_HINT, require_tool

A100_BF16_PEAK = 312e12  # gpus.yaml a100-sxm-80gb dense bf16
H100_FP8_PEAK = 1978.9e12  # gpus.yaml h100-sxm-80gb dense fp8
H100_BYTES_PER_SECOND = 3.35e12  # gpus.yaml h100-sxm-80gb HBM3


@pytest.fixture(autouse=True)
def _installed():
    require_tool("llm-analysis", peer.available(), f"llm-analysis 0.2.2 not installed: {INSTALL_HINT}")


def _row(family: str, name: str):
    from benchmarks.peer_rows import peer_rows

    return next(r for r in peer_rows() if r.family == family and r.name == name)


def test_a_megatron_2021_step_is_its_flops_with_full_recompute_at_half_the_a100_peak():
    """GPT 1.7B (24 layers, d 2304, vocab 51200, s 2048) on 32 A100s, published 137 TFLOP/s/GPU in Megatron's eq. (3)
    per token. llm-analysis: fwd per token l·(24h² + 4sh) + 2hV (MHA), ×4 with full recompute (fwd, 2 × fwd backward,
    fwd again), at 0.5 × 312 TFLOP/s; tokens/s per GPU does not depend on TP/PP/DP (no communication, no bubble)."""
    layers, h, s, vocab = 24, 2304, 2048, 51200
    eq3 = 96 * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
    published = 137e12 / eq3
    peer_flops = 4 * (layers * (24 * h * h + 4 * s * h) + 2 * h * vocab)
    predicted = 0.5 * A100_BF16_PEAK / peer_flops
    row = _row("train-step-time", "GPT (1.7B) Megatron-LM 2021 s2048 on 32 × a100-sxm-80gb")
    assert row.ratio == pytest.approx(predicted / published, rel=1e-6)  # ratio: actual ÷ predicted step time
    assert 1 / row.ratio - 1 == pytest.approx(-0.108, abs=0.002)


def test_a_training_step_multiplies_the_micro_batch_by_accumulation_over_the_model_parallel_gpus():
    """latency_per_iter = FLOPs per micro-batch × accumulation ÷ (TP·PP × peak × 0.5): DP adds GPUs, not time."""
    from compiler.catalog.loader import load_gpus
    from compiler.catalog.types import Architecture

    arch = Architecture(
        layers=8, hidden=4096, heads=32, kv_heads=32, ffn_hidden=16384, vocab=32000, max_position=4096, gated_mlp=False
    )
    layout = peer.PeerLayout(tp=2, pp=2, dp=4, micro_batch=2, accumulation=8, recompute="full")
    summary = peer.training(arch, load_gpus()["a100-sxm-80gb"], layout, 2048)
    b, s, h, layers, vocab = 2, 2048, 4096, 8, 32000
    forward = layers * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * vocab
    assert summary["latency_per_iter"] == pytest.approx(4 * forward * 8 / (2 * 2 * A100_BF16_PEAK * 0.5), rel=1e-9)
    assert (summary["global_batch_size"], summary["total_num_gpus"]) == (64, 16)


def _llama_8b_weight_bytes_bf16() -> float:
    """Llama-3.1-8B's weights as llm-analysis counts them: q, o and GQA k, v; a SwiGLU MLP of three 4096 × 14336
    matrices (its two-matrix MLP at 3/2 the width); one 128256 × 4096 embedding read (it ties the head)."""
    layers, h, heads, kv, ffn, vocab = 32, 4096, 32, 8, 14336, 128256
    per_layer = 2 * h * h + 2 * h * h * kv / heads + 3 * h * ffn
    return 2 * (layers * per_layer + vocab * h)


def test_a_single_stream_decode_step_reads_the_weights_and_the_kv_cache_at_the_full_hbm_rate():
    """serve_points_2.csv's Llama-3.1-8B bf16 ITL fit at 256 prompt tokens (6.44 + 4.37e-5 × 256 ms), one stream on an
    H100: llm-analysis's decode step at batch 1 is memory-bound, weights + twice the KV cache of 256 + 128 tokens at
    3.35 TB/s (hbm_memory_efficiency 1.0, its default)."""
    kv_cache = 2 * 32 * (256 + 128) * 128 * 8 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    decode_seconds = (_llama_8b_weight_bytes_bf16() + 2 * kv_cache) / H100_BYTES_PER_SECOND
    published = (6.44 + 4.37e-5 * 256) / 1e3
    row = _row("serve-tpot", "Llama-3.1-8B bf16 1×h100-sxm-80gb 256/128 1 clients tpot")
    assert row.ratio == pytest.approx(published / decode_seconds, rel=0.005)


def test_an_fp8_prefill_runs_at_half_the_fp8_peak():
    """A compute-bound prefill (batch 8 × 2048 tokens, FP8 on an H100) takes its forward FLOPs at 0.5 × the FP8 dense
    peak (its w8a8 dtype reads peak_i8_TFLOPS, which the catalog's fp8 figure fills), plus a little memory-bound time
    (layer norms, the embedding read)."""
    from compiler.catalog.loader import load_gpus, load_models

    arch = load_models()["llama-3.1-8b"].architecture
    summary = peer.inference(arch, load_gpus()["h100-sxm-80gb"], peer.ServePoint("fp8", 1.0, 1, 8, 2048, 128))
    b, s, h, layers, groups, vocab = 8, 2048, 4096, 32, 4, 128256
    forward = layers * (4 * b * s * h * h * (1 + 1 / groups) + 4 * b * s * s * h + 16 * b * s * h * h)
    forward += 2 * b * s * h * vocab
    assert summary["prefill_latency"] == pytest.approx(forward / (H100_FP8_PEAK * 0.5), rel=0.03)
    assert summary["prefill_latency"] > forward / (H100_FP8_PEAK * 0.5)


def test_every_transformer_row_of_the_residuals_has_the_peers_verdict():
    """The peer answers on the same rows: every residual row but the CNNs' gets a ratio or a reason it is left out."""
    from benchmarks.coverage import with_peers
    from benchmarks.residuals import labelled_rows

    rows = labelled_rows()
    missing = [r.name for r, p in zip(rows, with_peers(rows)) if p is None and r.family not in CNN_FAMILIES]
    assert missing == []


CNN_FAMILIES = {"train-cnn", "serve-vision", "serve-vision-batch1"}
