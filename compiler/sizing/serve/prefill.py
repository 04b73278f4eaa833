"""LLM serving: prefilling a prompt on a replica (the TTFT floor) and what it takes from other work at full load.

* Prefill (TTFT floor): 2·N·P matmul FLOPs + causal attention L·P²·H·(d_qk + d_v), at the achievable
  dense rate of the compute dtype, split over TP; never faster than one read of the weights.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .attention_dp import expert_exchange_seconds
from .memory import ACTIVATION_BYTES
from .replica import (
    COLLECTIVE_LATENCY_SECONDS,
    ReplicaModel,
    allreduce_transfer_seconds,
    attention_flops_per_second,
    attention_width,
    elementwise_seconds,
    matmul_params,
    weight_read_bytes_per_gpu,
)

if TYPE_CHECKING:
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture


def prefill_attention_flops(arch: Architecture, tokens: int) -> float:
    """Causal attention of a P-token prompt: L·P²·H·(d_qk + d_v) — half of the unmasked 2·2·L·P²·H·d of
    llm-foundry's `attn_flops_per_seq`, as FlashAttention-2 counts causal FLOPs."""
    return arch.layers * tokens**2 * attention_width(arch)


def prefill_flops(params: ParamCounts, arch: Architecture, tokens: int) -> float:
    """2·N·P matmul FLOPs plus causal attention."""
    return 2 * matmul_params(params, arch) * tokens + prefill_attention_flops(arch, tokens)


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
