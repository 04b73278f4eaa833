"""Speculative decoding with the checkpoint's multi-token-prediction (MTP) module (vLLM `--speculative-config
{"method": "mtp", "num_speculative_tokens": k}`).

One decode round: the draft (the MTP module: `mtp_layers` transformer layers and the shared LM head, DeepSeek-V3
report §2.2) proposes k tokens one after another, then the target model verifies them in one forward pass of k + 1
tokens per sequence. With each draft token accepted with probability α, independently, a round yields
E = (1 − α^(k+1)) / (1 − α) tokens (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding", eq. 1). The time per output token is (verify + k · draft) / E:

* verify: the decode step of B·(k + 1) tokens (weights read once, GEMM FLOPs × (k + 1)) whose attention reads each
  sequence's KV once (the memory-bound regime: the attention term of B sequences, not of B·(k + 1));
* draft: the decode step of the MTP module alone (its layer's weights, the LM head, its layer's KV) at batch B.

α: the plan's `serve.speculative.acceptance_rate`, else DeepSeek-V3 report §5.4.3 ("the acceptance rate of the second
token prediction ranges between 85% and 90%"), sized at the low end; the decision shows E over that range.
The MTP module's prefill and its 2·d² input projection are left out (one layer of 61, ~1% of the prefill).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture

PUBLISHED_MTP_ACCEPTANCE = (0.85, 0.90)  # DeepSeek-V3 technical report §5.4.3, second-token acceptance


@dataclass(frozen=True)
class Speculation:
    draft_tokens: int  # k
    acceptance_rate: float  # α the sizing uses
    acceptance_range: tuple[float, float]  # (low, high) the decision reports
    draft_arch: Architecture  # the MTP module as a decoder of `mtp_layers` layers with the shared embedding and head
    draft_params: ParamCounts
    draft_weights_bytes_per_gpu: int  # its layers and the LM head on one GPU (the embedding and head are shared)
    draft_kv_bytes_per_token_per_gpu: int


def draft_architecture(arch: Architecture) -> Architecture:
    """The MTP module as the latency model sees it: `mtp_layers` layers of the target's kind (DeepSeek-V3: one MoE
    layer), the target's embedding and LM head."""
    return arch.model_copy(update={"layers": arch.mtp_layers, "dense_layers": 0, "interleave_moe_layer_step": 1})


def tokens_per_round(acceptance_rate: float, draft_tokens: int) -> float:
    """E = (1 − α^(k+1)) / (1 − α): the expected tokens one verify pass yields (Leviathan et al. 2023, eq. 1)."""
    return (1 - acceptance_rate ** (draft_tokens + 1)) / (1 - acceptance_rate)


def acceptance_for(tokens: float, draft_tokens: int) -> float:
    """The α whose tokens_per_round is `tokens` (bisection; for stating published mean acceptance lengths)."""
    low, high = 1e-9, 1 - 1e-9
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if tokens_per_round(middle, draft_tokens) < tokens else (low, middle)
    return (low + high) / 2
