"""One serving replica as the latency model sees it (`ReplicaModel`: GPU, architecture, precision, TP/PP/DP, bytes
per GPU) and the rates and bytes every step term reads: GEMM, attention and HBM rates, the weights a forward pass
streams, the memory-bound kernels, the all-reduces and the stage-to-stage link."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..train.activations import LayerShape, activation_bytes_per_layer
from ..train.communication import INTER_NODE_ACHIEVABLE_FRACTION, NVLINK_ACHIEVABLE_FRACTION
from ..train.flops import FP8_GEMM_BANDWIDTH_FRACTION, matmul_flops_per_second
from ..train.time import FORWARD_PASSES
from .memory import ACTIVATION_BYTES, WEIGHT_ELEMENT_BYTES, layers_per_stage, weight_bytes_per_param

if TYPE_CHECKING:
    from ...catalog.fabrics import Interconnect
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture, GpuSpec
    from .speculative import Speculation

# Small-message all-reduce latency: NVIDIA/nccl issue #583, nccl-tests all_reduce_perf on 2× A100 SXM4,
# 32 B: 10.1 µs; NVIDIA/nccl-tests issue #123 (DGX-A100, Ring LL, 2 GPUs): 10 µs. Used for every
# collective and point-to-point message.
COLLECTIVE_LATENCY_SECONDS = 10e-6

# A served model runs with dropout off, so no kernel writes a dropout mask: vLLM's model files build their layers
# with no dropout module at all (vllm/model_executor/models/llama.py: RMSNorm, QKVParallelLinear, Attention,
# SiluAndMul), and a PyTorch model in eval mode (Triton's and TGI's PyTorch paths) calls F.dropout with
# training=False, and ATen's `_dropout_impl` returns its input when `!train` (aten/src/ATen/native/Dropout.cpp).
# Table 2's masks (activations.py) are a training-only term.
SERVING_DROPOUT_MASKS = False

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
    weight_block: int = 0  # a block-scaled fp8 checkpoint's scale blocks (memory.weight_bytes_per_param)

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
    return routed * weight_bytes_per_param(m.precision, a.hidden, m.weight_block) * stage_share / (m.tp * m.dp)


def experts_touched_fraction(arch: Architecture, tokens: float) -> float:
    """Share of routed experts a step of `tokens` tokens reads, routing uniform and independent:
    1 − (1 − k/E)^tokens (1 for dense models)."""
    if not arch.is_moe:
        return 1.0
    return 1 - (1 - arch.experts_per_token / arch.experts) ** max(1.0, tokens)


def weight_read_bytes_per_gpu(m: ReplicaModel, tokens: float) -> float:
    """Weight bytes one forward pass of `tokens` tokens streams from HBM on one GPU: all weights less the
    untouched experts and the input embedding table (rows are gathered, not streamed)."""
    untouched = routed_expert_bytes_per_gpu(m) * (1 - experts_touched_fraction(m.arch, tokens))
    embedding_row_table = 0.0
    if m.pp == 1 and not m.arch.tied_embeddings:
        width = WEIGHT_ELEMENT_BYTES[m.precision] if m.precision in ("bf16", "fp16") else ACTIVATION_BYTES
        embedding_row_table = m.arch.vocab * m.arch.hidden * width / m.tp
    return m.weights_bytes_per_gpu - untouched - embedding_row_table


def attention_flops_per_second(m: ReplicaModel) -> float:
    """Attention (QK^T, AV) runs in 16 bits whatever the weights' format (FlashAttention/FlashInfer
    kernels dequantise an fp8 KV cache to bf16/fp16)."""
    dtype = "bf16" if "bf16" in m.gpu.dense_tflops else "fp16"
    return matmul_flops_per_second(m.gpu, dtype)


def elementwise_seconds(m: ReplicaModel, tokens: float) -> float:
    """The memory-bound kernels between the GEMMs (norms, rotary, SiLU·mul, residual adds) over `tokens` tokens on
    one GPU's layers, prefill and decode alike: every activation byte Korthikanti et al. count
    (activations.activation_bytes_per_layer, as the training model does) written by one kernel and read by the next,
    at the achievable HBM rate, without dropout masks (SERVING_DROPOUT_MASKS)."""
    if not m.arch.layers or tokens <= 0:
        return 0.0
    shape = LayerShape(m.arch, 1, max(1, round(tokens)), m.tp, False)
    per_layer = activation_bytes_per_layer(shape, "none", True, dropout_masks=SERVING_DROPOUT_MASKS)
    return FORWARD_PASSES * per_layer * layers_per_stage(m.arch, m.pp) / m.bytes_per_second
