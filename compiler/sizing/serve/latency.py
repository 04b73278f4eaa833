"""LLM serving latency and throughput of one replica — a roofline model, stated as such.

Pure functions; seconds, bytes, FLOPs. Every time is a floor that real kernels approach, at the
catalog's achievable fractions of peak (`GpuSpec.achievable_matmul_fraction`,
`achievable_memory_bandwidth_fraction`).

* Prefill (TTFT floor): 2·N·P matmul FLOPs + causal attention L·P²·H·(d_qk + d_v), at the achievable
  dense rate of the compute dtype, split over TP; never faster than one read of the weights.
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
* Capacity at concurrency B (engine full, continuous batching): a "cycle" in which B requests are
  prefilled and decoded takes B · prefill + O · step(B). Prefill and decode are added, not overlapped:
  prefill is compute-bound and decode memory-bound, and one engine step does one kind of work at a time
  at this level of detail — a conservative bound.
* Queueing: each of the B slots is a server holding a request for one cycle; arrivals are Poisson, so
  the slot wait is M/M/c (Erlang C) with c = B at utilisation ρ; its p99 is exact for M/M/c:
  P(W > t) = C(c, a)·e^(−c(1−ρ)t/S)  ⇒  W99 = S·ln(C/0.01) / (c(1−ρ)).
  TTFT p99 = W99 + one decode step (admission waits for the running step) + prefill latency.
  TPOT p99 = step(B) + (prefills of requests arriving during this one's decode)/O, the count taken as
  Poisson at its mean + z99·√mean (normal approximation, z99 = 2.326).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from ..train.activations import activation_bytes_per_layer
from ..train.communication import INTER_NODE_ACHIEVABLE_FRACTION, NVLINK_ACHIEVABLE_FRACTION
from ..train.flops import FP8_GEMM_BANDWIDTH_FRACTION, matmul_flops_per_second
from ..train.time import FORWARD_PASSES
from .attention_dp import expert_exchange_seconds
from .memory import ACTIVATION_BYTES, WEIGHT_ELEMENT_BYTES, layers_per_stage, weight_bytes_per_param
from .speculative import tokens_per_round

if TYPE_CHECKING:
    from ...catalog.fabrics import Interconnect
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture, GpuSpec
    from .speculative import Speculation

# Small-message all-reduce latency: NVIDIA/nccl issue #583, nccl-tests all_reduce_perf on 2× A100 SXM4,
# 32 B: 10.1 µs; NVIDIA/nccl-tests issue #123 (DGX-A100, Ring LL, 2 GPUs): 10 µs. Used for every
# collective and point-to-point message.
COLLECTIVE_LATENCY_SECONDS = 10e-6
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
# Standard normal 99th percentile (p99 of a Poisson count by the normal approximation).
P99_Z = 2.326
P99_TAIL = 0.01

# Compute dtype each serving precision runs its matmuls in, best first. fp8: Hopper/Ada tensor cores
# (W8A8). int8: W8A8 int8 tensor cores (SmoothQuant). int4: AWQ/GPTQ are weight-only (W4A16) — weights
# are dequantised and the GEMM runs in 16 bits (AWQ paper §4.2 kernels).
COMPUTE_DTYPES = {
    "bf16": ("bf16",),
    "fp16": ("fp16", "bf16"),
    "fp8": ("fp8",),
    "fp4": ("fp4",),  # NVFP4 W4A4: Blackwell's FP4 tensor cores (catalog fp4 peak), weights and activations in FP4
    "int8": ("int8",),
    "int4": ("fp16", "bf16"),
}


def compute_dtype(precision: str, gpu: GpuSpec) -> str | None:
    """The dtype whose dense peak applies, or None when the GPU has no such tensor cores."""
    return next((d for d in COMPUTE_DTYPES[precision] if d in gpu.dense_tflops), None)


def memory_bytes_per_second(gpu: GpuSpec) -> float:
    return gpu.memory_bandwidth_bytes_per_second * gpu.achievable_memory_bandwidth_fraction


def matmul_params(params: ParamCounts, arch: Architecture) -> float:
    """Parameters that take part in a matmul per token: active ones, less the input embedding lookup
    (an untied input table is gathered, not multiplied; Kaplan et al. 2020 leave embeddings out of C)."""
    return params.active - (0 if arch.tied_embeddings else arch.vocab * arch.hidden)


def attention_width(arch: Architecture) -> int:
    """H·(d_qk + d_v): query heads × (score width + value width); MLA uses nope+rope and v_head_dim."""
    if arch.uses_mla:
        return arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim)
    return arch.heads * 2 * arch.attention_head_dim


def prefill_attention_flops(arch: Architecture, tokens: int) -> float:
    """Causal attention of a P-token prompt: L·P²·H·(d_qk + d_v) — half of the unmasked 2·2·L·P²·H·d of
    llm-foundry's `attn_flops_per_seq`, as FlashAttention-2 counts causal FLOPs."""
    return arch.layers * tokens**2 * attention_width(arch)


def prefill_flops(params: ParamCounts, arch: Architecture, tokens: int) -> float:
    """2·N·P matmul FLOPs plus causal attention."""
    return 2 * matmul_params(params, arch) * tokens + prefill_attention_flops(arch, tokens)


def allreduce_transfer_seconds(size_bytes: float, ranks: int, link_bytes_per_second: float) -> float:
    """Ring all-reduce bandwidth term (nccl-tests PERFORMANCE.md): S/B · 2(n−1)/n."""
    return size_bytes / link_bytes_per_second * 2 * (ranks - 1) / ranks


def allreduce_seconds(size_bytes: float, ranks: int, link_bytes_per_second: float) -> float:
    """One all-reduce: the per-collective latency plus the bandwidth term; 0 on one rank."""
    if ranks <= 1:
        return 0.0
    return COLLECTIVE_LATENCY_SECONDS + allreduce_transfer_seconds(size_bytes, ranks, link_bytes_per_second)


@dataclass(frozen=True)
class Link:
    """A point-to-point path between pipeline stages: a message of S bytes takes latency + S / rate (the
    α-β model, Hockney 1994; nccl-tests PERFORMANCE.md: for SendRecv the bus bandwidth equals the algorithm
    bandwidth S / t, no ring factor)."""

    bytes_per_second: float
    latency_seconds: float

    def seconds(self, size_bytes: float) -> float:
        return self.latency_seconds + size_bytes / self.bytes_per_second


def inter_node_link(interconnect: Interconnect) -> Link:
    """Stages on different nodes send over the plan's fabric (catalog/fabrics.yaml): its NIC rate per GPU at the
    share inter-node NCCL traffic reaches (train_time.INTER_NODE_ACHIEVABLE_FRACTION, as the training model's
    collectives), after its latency. The message goes over each sending GPU's own NIC share (no slicing over TP)."""
    return Link(interconnect.bytes_per_second_per_gpu * INTER_NODE_ACHIEVABLE_FRACTION, interconnect.latency_seconds)


@dataclass(frozen=True)
class ReplicaModel:
    """One replica configuration as the latency model sees it (bytes per GPU)."""

    gpu: GpuSpec
    arch: Architecture
    params: ParamCounts
    precision: str
    dtype: str  # compute dtype of the matmuls
    tp: int
    pp: int
    weights_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    # The fabric between PP stages when the replica spans nodes (one TP-filled stage per node, serve_shapes.py);
    # None: the replica sits in one node and its stages talk over the GPU-to-GPU link.
    inter_node: Link | None = None
    dp: int = 1  # attention data-parallel ranks (serve_attention_dp.py): `batch` is the replica's, split over them
    speculation: Speculation | None = (
        None  # speculative decoding (serve_speculative.py): decode_step is per output token
    )

    @property
    def flops_per_second(self) -> float:
        return matmul_flops_per_second(self.gpu, self.dtype)

    @property
    def bytes_per_second(self) -> float:
        return memory_bytes_per_second(self.gpu)

    @property
    def link_bytes_per_second(self) -> float:
        """Intra-node link rate a collective reaches (the training model's NVLink share, nccl#1264)."""
        return self.gpu.intra_node_bandwidth_bytes_per_second * NVLINK_ACHIEVABLE_FRACTION

    @property
    def pp_link(self) -> Link:
        """What a PP stage-to-stage send crosses: the plan's fabric across nodes, else the intra-node link."""
        return self.inter_node or Link(self.link_bytes_per_second, COLLECTIVE_LATENCY_SECONDS)

    @property
    def weight_bytes_per_second(self) -> float:
        """HBM rate at which the GEMMs stream the weights (lower for fp8 GEMMs, see FP8_GEMM_BANDWIDTH_FRACTION)."""
        if self.dtype != "fp8":
            return self.bytes_per_second
        fraction = min(self.gpu.achievable_memory_bandwidth_fraction, FP8_GEMM_BANDWIDTH_FRACTION)
        return self.gpu.memory_bandwidth_bytes_per_second * fraction


def expert_params(arch: Architecture) -> int:
    """One expert's MLP matrices (gate, up and down when gated)."""
    return (3 if arch.gated_mlp else 2) * arch.hidden * (arch.moe_ffn_hidden or arch.ffn_hidden)


def routed_expert_bytes_per_gpu(m: ReplicaModel) -> float:
    """Routed-expert weights on one GPU (MoE); 0 for dense models."""
    a = m.arch
    if not a.is_moe:
        return 0.0
    routed = a.moe_layer_count * a.experts * expert_params(a)
    stage_share = layers_per_stage(a, m.pp) / a.layers
    return routed * weight_bytes_per_param(m.precision, a.hidden) * stage_share / (m.tp * m.dp)


def experts_touched_fraction(arch: Architecture, tokens: float) -> float:
    """Share of routed experts a step of `tokens` tokens reads, routing uniform and independent:
    1 − (1 − k/E)^tokens (1 for dense models)."""
    if not arch.is_moe:
        return 1.0
    return 1 - (1 - arch.experts_per_token / arch.experts) ** max(1.0, tokens)


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


def weight_read_bytes_per_gpu(m: ReplicaModel, tokens: float) -> float:
    """Weight bytes one forward pass of `tokens` tokens streams from HBM on one GPU: all weights less the
    untouched experts and the input embedding table (rows are gathered, not streamed)."""
    untouched = routed_expert_bytes_per_gpu(m) * (1 - experts_touched_fraction(m.arch, tokens))
    embedding_row_table = 0.0
    if m.pp == 1 and not m.arch.tied_embeddings:
        width = WEIGHT_ELEMENT_BYTES[m.precision] if m.precision in ("bf16", "fp16") else ACTIVATION_BYTES
        embedding_row_table = m.arch.vocab * m.arch.hidden * width / m.tp
    return m.weights_bytes_per_gpu - untouched - embedding_row_table


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


def attention_flops_per_second(m: ReplicaModel) -> float:
    """Attention (QK^T, AV) runs in 16 bits whatever the weights' format (FlashAttention/FlashInfer
    kernels dequantise an fp8 KV cache to bf16/fp16)."""
    dtype = "bf16" if "bf16" in m.gpu.dense_tflops else "fp16"
    return matmul_flops_per_second(m.gpu, dtype)


def elementwise_seconds(m: ReplicaModel, tokens: float) -> float:
    """The memory-bound kernels between the GEMMs (norms, rotary, SiLU·mul, residual adds) over `tokens` tokens on
    one GPU's layers: every activation byte Korthikanti et al. count (train_memory.activation_bytes_per_layer, as
    the training model does) written by one kernel and read by the next, at the achievable HBM rate. Counting the
    training-time dropout masks too, it is an upper bound by their ~2 of ~34 bytes per token and hidden unit."""
    if not m.arch.layers or tokens <= 0:
        return 0.0
    per_layer = activation_bytes_per_layer(m.arch, 1, max(1, round(tokens)), m.tp, False, "none", True)
    return FORWARD_PASSES * per_layer * layers_per_stage(m.arch, m.pp) / m.bytes_per_second


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


def prefill_compute_seconds(m: ReplicaModel, tokens: int) -> float:
    """Prefill FLOPs of one prompt spread over all tp·pp GPUs: matmuls at the precision's rate,
    attention at the 16-bit rate."""
    linear = 2 * matmul_params(m.params, m.arch) * tokens / m.flops_per_second
    attention = prefill_attention_flops(m.arch, tokens) / attention_flops_per_second(m)
    return (linear + attention) / (m.tp * m.pp)


def prefill_latency_seconds(m: ReplicaModel, tokens: int, chunk_tokens: int) -> float:
    """Time to prefill one prompt alone (the TTFT floor): its FLOPs over the TP group (PP stages run one
    after another), never below one weight read per chunk of max_num_batched_tokens (chunked prefill),
    plus 2 all-reduces of chunk·h·2 B per layer per chunk and the stage-to-stage sends."""
    chunks = math.ceil(tokens / chunk_tokens)
    compute = prefill_compute_seconds(m, tokens) * m.pp
    memory = chunks * m.pp * weight_read_bytes_per_gpu(m, min(tokens, chunk_tokens)) / m.weight_bytes_per_second
    return max(compute, memory) + m.pp * elementwise_seconds(m, tokens) + prefill_comm_seconds(m, tokens, chunks)


def prefill_comm_seconds(m: ReplicaModel, tokens: int, chunks: float) -> float:
    """TP: 2 all-reduces per layer per chunk, carrying tokens·h·2 B in all; PP: one send per stage boundary."""
    total_bytes = tokens * m.arch.hidden * ACTIVATION_BYTES
    link = m.link_bytes_per_second
    comm = 0.0
    if m.tp > 1:
        comm += (
            2
            * m.arch.layers
            * (chunks * COLLECTIVE_LATENCY_SECONDS + allreduce_transfer_seconds(total_bytes, m.tp, link))
        )
    if m.pp > 1:
        pp_link = m.pp_link
        comm += (m.pp - 1) * (chunks * pp_link.latency_seconds + total_bytes / pp_link.bytes_per_second)
    comm += expert_exchange_seconds(m.arch, m.dp, tokens, m.arch.layers, link, COLLECTIVE_LATENCY_SECONDS)
    return comm


def prefill_occupancy_seconds(m: ReplicaModel, tokens: int, chunk_tokens: int) -> float:
    """Replica time one prompt's prefill takes from other work at full load: prompts are packed into
    chunks of max_num_batched_tokens, so one weight read serves a whole chunk (tokens/chunk reads per
    prompt); PP stages work on different chunks at once."""
    reads = tokens / chunk_tokens
    compute = prefill_compute_seconds(m, tokens)
    memory = reads * weight_read_bytes_per_gpu(m, chunk_tokens) / m.weight_bytes_per_second
    rank = max(compute, memory) + elementwise_seconds(m, tokens) + prefill_comm_seconds(m, tokens, reads) / m.pp
    return rank / m.dp  # DP ranks prefill different prompts side by side


@lru_cache(maxsize=4096)
def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c (Erlang C), via the stable Erlang B recursion."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    rho = offered_load / servers
    return blocking / (1 - rho * (1 - blocking))


def mmc_wait_p99_seconds(servers: int, utilization: float, service_seconds: float) -> float:
    """p99 of the M/M/c waiting time: S·ln(C/0.01)/(c(1−ρ)), 0 when fewer than 1% of arrivals wait."""
    waiting = erlang_c(servers, round(utilization * servers, 9))
    if waiting <= P99_TAIL:
        return 0.0
    return service_seconds * math.log(waiting / P99_TAIL) / (servers * (1 - utilization))


@dataclass(frozen=True)
class BatchPoint:
    """A replica at max concurrency `batch`: capacity at full load and p99 latencies at utilisation ρ."""

    batch: int
    step: StepTime
    prefill_latency_seconds: float
    prefill_occupancy_seconds: float
    cycle_seconds: float  # B requests through B slots at full load
    tokens_per_second: float  # output tokens/s at full load (capacity)
    requests_per_second: float  # capacity
    wait_p99_seconds: float
    ttft_p99_seconds: float
    tpot_p99_seconds: float


def evaluate_batch(
    m: ReplicaModel,
    batch: int,
    *,
    prompt_tokens: int,
    output_tokens: int,
    chunk_tokens: int,
    utilization: float,
) -> BatchPoint:
    context = prompt_tokens + output_tokens / 2  # average context a decode step attends to
    step = decode_step(m, batch, context)
    prefill = prefill_latency_seconds(m, prompt_tokens, chunk_tokens)
    occupancy = prefill_occupancy_seconds(m, prompt_tokens, chunk_tokens)
    cycle = batch * occupancy + output_tokens * step.seconds
    capacity = batch / cycle
    wait = mmc_wait_p99_seconds(batch, utilization, cycle)
    ttft = wait + step.seconds + prefill
    arrivals = utilization * capacity * output_tokens * step.seconds  # mean prefills during one decode
    arrivals_p99 = arrivals + P99_Z * math.sqrt(arrivals)
    tpot = step.seconds + arrivals_p99 * occupancy / output_tokens
    return BatchPoint(
        batch=batch,
        step=step,
        prefill_latency_seconds=prefill,
        prefill_occupancy_seconds=occupancy,
        cycle_seconds=cycle,
        tokens_per_second=capacity * output_tokens,
        requests_per_second=capacity,
        wait_p99_seconds=wait,
        ttft_p99_seconds=ttft,
        tpot_p99_seconds=tpot,
    )


# The operating point: what a user sees at the traffic the plan states, not at the capacity limit. A replica of
# max concurrency B serves λ requests/s; Little's law gives the sequences in flight N = λ × (TTFT + output × TPOT),
# and a decode step runs the N in flight (not B), so the point is the fixed point of N (Little 1961; vLLM's
# scheduler batches every running sequence each step). As λ → 0, TTFT → one prefill and one step, TPOT → one step.
LOAD_POINT_ITERATIONS = 30


@dataclass(frozen=True)
class LoadPoint:
    """Latencies of a replica at arrival rate λ: p50 and p99, with the utilisation and sequences in flight."""

    arrival_rate: float
    utilization: float
    in_flight: float
    ttft_p50_seconds: float
    ttft_p99_seconds: float
    tpot_p50_seconds: float
    tpot_p99_seconds: float
    step_seconds: float = 0.0  # one decode step at the sequences in flight: the inter-token latency most tokens see


def mmc_wait_quantile_seconds(servers: int, utilization: float, service_seconds: float, tail: float) -> float:
    """The (1 − tail) quantile of the M/M/c waiting time, P(W > t) = C·exp(−c(1−ρ)t/S) (Erlang C)."""
    waiting = erlang_c(servers, round(utilization * servers, 9))
    if waiting <= tail:
        return 0.0
    return service_seconds * math.log(waiting / tail) / (servers * (1 - utilization))


def operating_point(
    m: ReplicaModel, batch: int, *, prompt_tokens: int, output_tokens: int, chunk_tokens: int, arrival_rate: float
) -> LoadPoint:
    """The replica's latencies at λ = arrival_rate (below its capacity at max concurrency `batch`)."""
    context = prompt_tokens + output_tokens / 2
    full = decode_step(m, batch, context)
    prefill = prefill_latency_seconds(m, prompt_tokens, chunk_tokens)
    occupancy = prefill_occupancy_seconds(m, prompt_tokens, chunk_tokens)
    cycle = batch * occupancy + output_tokens * full.seconds
    utilization = min(arrival_rate * cycle / batch, 0.999)
    in_flight = 1.0
    for _ in range(LOAD_POINT_ITERATIONS):
        step = decode_step(m, max(1, min(batch, math.ceil(in_flight - 1e-9))), context)
        arrivals = arrival_rate * output_tokens * step.seconds  # prefills that land during one request's decode
        tpot_p50 = step.seconds + arrivals * occupancy / output_tokens
        ttft_p50 = mmc_wait_quantile_seconds(batch, utilization, cycle, 0.5) + step.seconds + prefill
        in_flight = min(float(batch), max(1.0, arrival_rate * (ttft_p50 + output_tokens * tpot_p50)))
    tpot_p99 = step.seconds + (arrivals + P99_Z * math.sqrt(arrivals)) * occupancy / output_tokens
    ttft_p99 = mmc_wait_quantile_seconds(batch, utilization, cycle, P99_TAIL) + step.seconds + prefill
    return LoadPoint(
        arrival_rate=arrival_rate,
        utilization=utilization,
        in_flight=in_flight,
        ttft_p50_seconds=ttft_p50,
        ttft_p99_seconds=ttft_p99,
        tpot_p50_seconds=tpot_p50,
        tpot_p99_seconds=tpot_p99,
        step_seconds=step.seconds,
    )
