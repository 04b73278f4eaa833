"""Attention data parallelism for MoE serving (vLLM `--data-parallel-size N --enable-expert-parallel`).

vLLM docs, "Data Parallel Deployment": each of the N DP ranks is its own engine core with its own scheduler,
KV cache and batch (`max_num_seqs` is per rank), holding the attention layers (split by its own TP); the expert
layers form one group of DP × TP GPUs, expert-parallel with --enable-expert-parallel, and every rank's forward
passes are aligned (idle ranks run dummy passes). "Expert Parallel Deployment": the default all-to-all backend,
`allgather_reducescatter`, gathers every rank's tokens before the experts and reduce-scatters the results after.

What the sizing does with it (a replica = N ranks of TP GPUs):
* weights per GPU: all but the routed experts whole per rank (÷ TP), the routed experts ÷ (N × TP)
  (serve_memory.weights_bytes_per_gpu);
* KV cache: per rank, for that rank's sequences; the replica's concurrency is N × the rank's;
* decode step at a replica batch B: each rank runs B / N sequences through attention and the dense GEMMs, the
  experts see all B tokens (the experts touched and their rows per expert at B), plus `expert_exchange_seconds`;
* prefill: a rank prefills its own prompts, N ranks side by side (occupancy ÷ N).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...catalog.types import Architecture

ACTIVATION_BYTES = 2  # bf16/fp16 hidden states (serve_memory.ACTIVATION_BYTES)


def expert_exchange_seconds(
    arch: Architecture,
    dp: int,
    rank_tokens: float,
    stage_layers: int,
    link_bytes_per_second: float,
    latency_seconds: float,
) -> float:
    """Per MoE layer on the GPU's stage, one all-gather of every rank's tokens' hidden states before the experts and
    one reduce-scatter after (vLLM's allgather_reducescatter backend). Each moves S = N·tokens·h·2 bytes in all and
    takes lat + S/B·(N−1)/N (nccl-tests PERFORMANCE.md: all-gather and reduce-scatter bus bandwidth = algbw·(n−1)/n).
    0 without attention DP or for a dense model."""
    if dp <= 1 or not arch.is_moe or not arch.layers:
        return 0.0
    moe_layers = arch.moe_layer_count * stage_layers / arch.layers
    gathered = dp * rank_tokens * arch.hidden * ACTIVATION_BYTES
    one = latency_seconds + gathered / link_bytes_per_second * (dp - 1) / dp
    return moe_layers * 2 * one
