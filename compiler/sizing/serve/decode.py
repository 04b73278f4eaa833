"""LLM serving: one decode step of a replica (TPOT), a roofline model.

* Decode step (TPOT): reads the weights once (per PP micro-batch) plus the KV of every running sequence
  (formulas.md §6), a roofline per kernel class run one after the other:
  t = max(W / BW_w, F_gemm / R) + max(KV / BW, F_attn / R16) + A / BW + 2 all-reduces per layer
  (NVIDIA/nccl-tests PERFORMANCE.md: t = lat + S/B · 2(n−1)/n) + PP sends (t = lat + S/B over the plan's
  `cluster.interconnect` when a replica spans nodes, the NVLink otherwise), A the activation bytes the memory-bound
  kernels between the GEMMs write and read (as the training model counts them); fp8 GEMMs stream their
  weights (BW_w) and multiply (R) at the shares DeepGEMM measured (train_time.FP8_GEMM_*); an MoE's routed
  experts are a GEMM term of their own, max(W_e / BW_w, F_e / R_e), R_e DeepGEMM's grouped-GEMM rate at the
  step's rows per expert. Plus a fixed time per layer that no roofline term holds (DECODE_LAYER_FIXED_SECONDS:
  kernel boundaries inside the CUDA graph, sampling and what CPU work the engine does not overlap), measured from
  published batch-1 decode steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .attention_dp import expert_exchange_seconds
from .memory import ACTIVATION_BYTES, layers_per_stage
from .replica import (
    COLLECTIVE_LATENCY_SECONDS,
    ReplicaModel,
    allreduce_seconds,
    attention_flops_per_second,
    attention_width,
    elementwise_seconds,
    expert_params,
    experts_touched_fraction,
    matmul_params,
    routed_expert_bytes_per_gpu,
    weight_read_bytes_per_gpu,
)
from .speculative import tokens_per_round

if TYPE_CHECKING:
    from ...catalog.types import Architecture

# A decode step's fixed time per layer run, beyond every roofline term: at batch 1 a step is ~10 short kernels per layer
# (norm, QKV, rotary, KV write, attention, O, norm, gate-up, SiLU·mul, down), each paying its launch inside the CUDA
# graph and its ramp to full bandwidth, plus the step's sampling and any CPU work not overlapped. No source gives these
# per kernel; published batch-1 steps give their sum. gpt-fast's README (pytorch-labs/gpt-fast @0f925b5, "Benchmarks":
# batch 1, 5-token prompt, torch.compile mode="reduce-overhead" = one CUDA graph per step, sampling included; A100-80GB
# at 330 W) lists bf16 tokens/s of Llama-2-7B at TP 1/2/4/8 and Llama-2-70B at TP 2/4/8: each step less this model's
# decode_step, over the layers, is 64, 48, 44, 46, 82, 66, 59 µs (benchmarks/decode_fixed_time.py); the median, 58.6 µs,
# is taken. It scales with layers, not bytes: the 70B's 80 layers pay 2.5× the 7B's 32 at TP 8. Cross-checks outside the
# scored rows: vLLM v0.19.1's single-stream fit on B200 (FlashInfer, intercept 3.93 ms, vllm-project.github.io
# _posts/2026-04-22-fp8-kvcache.md) leaves 55 µs per layer. vLLM's own CPU scheduling (62% of a v0.5.3 step, vLLM
# v0.6.0 blog "Performance Diagnosis") is not added on top: since v0.14 async scheduling overlaps it with the GPU step
# (vLLM v0.14.0 release notes, #27614), so it shows only inside these published steps. What the median leaves out (the
# rows span 44-82 µs) is in the serve-tpot range, from the scored rows.
DECODE_LAYER_FIXED_SECONDS = 58.6e-6

# fp8 grouped GEMMs for MoE decode (DeepGEMM's "masked layout", deepseek-ai/DeepGEMM README.md @7a70b43, H800
# SXM5, 1979 dense fp8 TFLOP/s): with few tokens per expert they reach less of the peak than one large GEMM.
# Median of the two rows per M per group (N×K = 4096×7168 and 7168×2048): 256 → 873.5, 512 → 978,
# 1024 → 1079 TFLOP/s. Keyed by the smallest M per group each applies from; below 256, the 256 rows.
FP8_GROUPED_GEMM_MATMUL_FRACTIONS = ((256, 873.5e12 / 1979e12), (512, 978e12 / 1979e12), (1024, 1079e12 / 1979e12))


def routed_active_params(arch: Architecture) -> float:
    """Routed-expert parameters one token multiplies: k experts in every MoE layer (0 for dense models)."""
    if not arch.is_moe:
        return 0.0
    return arch.experts_per_token * expert_params(arch) * arch.moe_layer_count


def expert_flops_per_second(m: ReplicaModel, tokens: float) -> float:
    """Rate of the routed experts' grouped GEMMs when a step of `tokens` tokens gives each expert
    tokens·k/E rows: DeepGEMM's measured share for fp8 (FP8_GROUPED_GEMM_MATMUL_FRACTIONS, never above the
    dense fp8 rate); no measurement for other dtypes, so the dense GEMM rate."""
    if m.dtype != "fp8":
        return m.flops_per_second
    rows = tokens * m.arch.experts_per_token / m.arch.experts
    fraction = next(
        (f for least, f in reversed(FP8_GROUPED_GEMM_MATMUL_FRACTIONS) if rows >= least),
        FP8_GROUPED_GEMM_MATMUL_FRACTIONS[0][1],
    )
    return min(m.flops_per_second, m.gpu.peak_flops_per_second("fp8") * fraction)


@dataclass(frozen=True)
class StepTime:
    seconds: float
    gemm_seconds: float  # max(weight bytes / bandwidth, matmul FLOPs / rate)
    attention_seconds: float  # max(KV bytes / bandwidth, attention FLOPs / 16-bit rate)
    comm_seconds: float
    gemm_bound: str  # 'memory' | 'compute'
    elementwise_seconds: float = 0.0  # norms, activations, rotary, residual adds: activation bytes / bandwidth
    fixed_seconds: float = 0.0  # layers run × DECODE_LAYER_FIXED_SECONDS

    @property
    def bound(self) -> str:
        return self.gemm_bound


def decode_step(m: ReplicaModel, batch: int, context: float) -> StepTime:
    """One decode round: every one of `batch` sequences gains one token at `context` cached tokens.

    Roofline per kernel class, the classes run one after the other: the GEMMs stream the weights,
    the attention kernels stream the KV cache, so t = max(W/BW, F_gemm/R) + max(KV/BW, F_attn/R16);
    an MoE's routed experts are a class of their own (grouped GEMMs, at expert_flops_per_second).
    With PP the batch runs as pp micro-batches; each stage reads its weights once per micro-batch, so
    a round streams pp × (stage weights) + the batch's KV on each GPU. TP: 2 all-reduces per layer of
    (batch/pp)·h·2 bytes over the GPU's intra-node link; PP: one activation send per micro-batch, over the
    plan's fabric when the stages sit on different nodes (`ReplicaModel.pp_link`). Each GPU runs its stage's
    layers once per micro-batch, each at DECODE_LAYER_FIXED_SECONDS.
    With speculative decoding the step returned is the time per output token (speculative_step).
    """
    if m.speculation is not None:
        return speculative_step(m, batch, context)
    replica_tokens = batch / m.pp  # routed to the experts of every DP rank at once
    if m.dp > 1:  # each DP rank runs its share of the sequences, the busiest at least one (serve_attention_dp.py)
        batch = max(1, math.ceil(batch / m.dp - 1e-9))
    micro = batch / m.pp
    ranks = m.tp * m.pp
    expert_bytes = routed_expert_bytes_per_gpu(m) * experts_touched_fraction(m.arch, replica_tokens)
    expert_weight_s = m.pp * expert_bytes / m.weight_bytes_per_second
    routed = routed_active_params(m.arch)
    expert_flops_s = batch * 2 * routed / ranks / expert_flops_per_second(m, replica_tokens)
    weight_s = m.pp * weight_read_bytes_per_gpu(m, micro) / m.weight_bytes_per_second - expert_weight_s
    gemm_flops_s = batch * 2 * (matmul_params(m.params, m.arch) - routed) / ranks / m.flops_per_second
    kv_s = batch * context * m.kv_bytes_per_token_per_gpu / m.bytes_per_second
    attn_flops = batch * 2 * m.arch.layers * context * attention_width(m.arch) / ranks
    attn_flops_s = attn_flops / attention_flops_per_second(m)
    message = micro * m.arch.hidden * ACTIVATION_BYTES
    comm = 2 * m.arch.layers * allreduce_seconds(message, m.tp, m.link_bytes_per_second)
    if m.pp > 1:
        comm += m.pp * m.pp_link.seconds(message)
    comm += m.pp * expert_exchange_seconds(
        m.arch, m.dp, micro, layers_per_stage(m.arch, m.pp), m.link_bytes_per_second, COLLECTIVE_LATENCY_SECONDS
    )
    gemm = max(weight_s, gemm_flops_s) + max(expert_weight_s, expert_flops_s)
    attention = max(kv_s, attn_flops_s)
    elementwise = elementwise_seconds(m, batch)
    fixed = decode_fixed_seconds(m)
    memory_bound = weight_s + expert_weight_s >= gemm_flops_s + expert_flops_s
    return StepTime(
        gemm + attention + comm + elementwise + fixed,
        gemm,
        attention,
        comm,
        "memory" if memory_bound else "compute",
        elementwise,
        fixed,
    )


def decode_fixed_seconds(m: ReplicaModel) -> float:
    """The fixed time of the layers one GPU runs in a decode round: its stage's layers once per micro-batch."""
    return m.pp * layers_per_stage(m.arch, m.pp) * DECODE_LAYER_FIXED_SECONDS


def speculative_step(m: ReplicaModel, batch: int, context: float) -> StepTime:
    """(verify + k · draft) / E per output token (serve_speculative.py): the verify pass runs B·(k + 1) tokens with the
    attention of B sequences, the draft is the MTP module's own decode step at B."""
    s = m.speculation
    plain = replace(m, speculation=None)
    verify = decode_step(plain, batch * (s.draft_tokens + 1), context)
    one_pass = decode_step(plain, batch, context)
    draft_model = replace(
        plain,
        arch=s.draft_arch,
        params=s.draft_params,
        weights_bytes_per_gpu=s.draft_weights_bytes_per_gpu,
        kv_bytes_per_token_per_gpu=s.draft_kv_bytes_per_token_per_gpu,
    )
    draft = decode_step(draft_model, batch, context)
    per_token = 1 / tokens_per_round(s.acceptance_rate, s.draft_tokens)
    attention = one_pass.attention_seconds + s.draft_tokens * draft.attention_seconds
    gemm = verify.gemm_seconds + s.draft_tokens * draft.gemm_seconds
    comm = verify.comm_seconds + s.draft_tokens * draft.comm_seconds
    elementwise = verify.elementwise_seconds + s.draft_tokens * draft.elementwise_seconds
    fixed = verify.fixed_seconds + s.draft_tokens * draft.fixed_seconds  # each layer run: the verify's and the drafts'
    total = gemm + attention + comm + elementwise + fixed  # as decode_step sums its kernel classes
    return StepTime(
        total * per_token,
        gemm * per_token,
        attention * per_token,
        comm * per_token,
        verify.gemm_bound,
        elementwise * per_token,
        fixed * per_token,
    )
