"""Parameter counts computed from an architecture, term by term.

Per transformer layer (d = hidden, h_q = heads × head_dim, h_kv = kv_heads × head_dim, f = MLP width):
- attention, GQA/MHA (Ainslie et al. 2023): q d·h_q + k d·h_kv + v d·h_kv + o h_q·d. With attention_bias the
  q/k/v biases add h_q + 2·h_kv; the o-projection bias (+ d) exists in the LayerNorm-era models (GPT-3, BERT,
  ViT) but not in Qwen2/2.5, which biases q/k/v only (Qwen2Attention: o_proj bias=False), so it follows `norm`;
- attention, DeepSeek MLA (DeepSeek-V2 paper §2.1, DeepSeek-V3 config.json): q down d·r_q + q norm r_q +
  q up r_q·H·(d_nope + d_rope), kv down d·(r_kv + d_rope) + kv norm r_kv + kv up r_kv·H·(d_nope + d_v),
  o H·d_v·d (with q_lora_rank 0 the query is a plain d·H·(d_nope + d_rope) projection);
- MLP: gated (SwiGLU, Shazeer 2020: gate, up, down) 3·d·f, non-gated 2·d·f; mlp_bias adds f (2f gated) + d;
- MoE (Mixtral, DeepSeek): each routed expert is an MLP of width f_e, the router is d·E, shared experts are
  MLPs of width f_e that every token uses; the first `dense_layers` layers keep a dense MLP of width f, and so
  do the layers between MoE ones when `interleave_moe_layer_step` > 1 (Llama 4 Maverick: layers 1, 3, …, 47 of
  48 have experts; transformers Llama4TextConfig.moe_layers);
- norms: 2 per layer, d each (RMSNorm: a scale) or 2d (LayerNorm: scale and bias), and one final norm.
Outside the layers: token embeddings V·d, learned positions P·d (GPT-3, BERT), BERT's token-type embeddings
2·d, and an output head: the LM head V·d unless tied to the embeddings, BERT's pooler d·d + d (the
published 335M of bert-large counts BertModel with its pooler; the MLM head is tied and not counted), or
the ViT classifier d·C + C over C = `vocab` classes. ViT replaces the token embedding by the patch
projection 3·p²·d + d, a class token d and positions (N + 1)·d for N = (image / patch)² patches.
"Active" (per token) counts the top-k routed experts and the shared ones instead of all experts.
CNNs carry their published count in `params_override`.
Multi-token prediction (DeepSeek-V3 technical report, arXiv 2412.19437, §2.2) is not in `total`: each of the
`mtp_layers` modules is an RMSNorm over the main model's hidden state and one over the next token's embedding, the
projection M of their concatenation 2d → d, one transformer layer and a final norm (Megatron-LM's
MultiTokenPredictionLayer: enorm, hnorm, eh_proj without bias, transformer_layer, final_layernorm in
megatron/core/transformer/multi_token_prediction.py); the embedding and output head are the main model's
(`mtp_params`). A checkpoint that ships the module counts it apart (DeepSeek-V3 README: 671B + 14B MTP weights).
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import Architecture


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    embedding: int  # input embedding (+ positions) + an untied LM head
    per_layer_attention: int
    per_layer_mlp_total: int  # an MoE layer: all experts + router + shared experts
    per_layer_mlp_active: int
    per_layer_norm: int
    largest_layer: int  # the biggest single block of parameters (a layer, or the embedding)
    lm_head: int = 0  # output head: untied LM head, BERT pooler or ViT classifier


def _norm(arch: Architecture, width: int) -> int:
    return width * (2 if arch.norm == "layernorm" else 1)


def _attention(arch: Architecture) -> int:
    d = arch.hidden
    if arch.uses_mla:
        q_head = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        q = (
            (d * arch.q_lora_rank + arch.q_lora_rank + arch.q_lora_rank * arch.heads * q_head)
            if arch.q_lora_rank
            else d * arch.heads * q_head
        )
        kv = (
            d * (arch.kv_lora_rank + arch.qk_rope_head_dim)
            + arch.kv_lora_rank
            + arch.kv_lora_rank * arch.heads * (arch.qk_nope_head_dim + arch.v_head_dim)
        )
        return q + kv + arch.heads * arch.v_head_dim * d
    h_q = arch.heads * arch.attention_head_dim
    h_kv = arch.kv_heads * arch.attention_head_dim
    weights = d * h_q + 2 * d * h_kv + h_q * d
    bias = (h_q + 2 * h_kv + (d if arch.norm == "layernorm" else 0)) if arch.attention_bias else 0
    return weights + bias


def _mlp(arch: Architecture, width: int) -> int:
    matrices = 3 if arch.gated_mlp else 2
    bias = (width * (2 if arch.gated_mlp else 1) + arch.hidden) if arch.mlp_bias else 0
    return matrices * arch.hidden * width + bias


DETECTOR_MLP_LAYERS = (
    3  # DETR / YOLOS prediction heads: 3-layer MLPs (Carion et al. 2020 §3.2; transformers YolosMLPPredictionHead)
)
BOX_COORDINATES = 4  # (centre x, centre y, width, height), normalised


def _detector_heads(arch: Architecture) -> int:
    """Class head over `vocab` classes + "no object", and box head, each a 3-layer MLP of width d."""
    d = arch.hidden
    hidden_layers = (DETECTOR_MLP_LAYERS - 1) * (d * d + d)
    return 2 * hidden_layers + (d * (arch.vocab + 1) + arch.vocab + 1) + (d * BOX_COORDINATES + BOX_COORDINATES)


def count_params(arch: Architecture) -> ParamCounts:
    if arch.kind == "cnn" or (arch.params_override and not arch.layers):
        n = arch.params_override
        return ParamCounts(n, n, 0, 0, 0, 0, 0, n)
    d, layers = arch.hidden, arch.layers
    attention = _attention(arch)
    norms = 2 * _norm(arch, d)
    dense_mlp = _mlp(arch, arch.ffn_hidden)
    if arch.is_moe:
        expert = _mlp(arch, arch.moe_ffn_hidden or arch.ffn_hidden)
        router = d * arch.experts
        moe_total = arch.experts * expert + router + arch.shared_experts * expert
        moe_active = arch.experts_per_token * expert + router + arch.shared_experts * expert
        moe_layers = arch.moe_layer_count
    else:
        moe_total = moe_active = dense_mlp
        moe_layers = 0
    dense_layers = layers - moe_layers
    body_total = layers * (attention + norms) + dense_layers * dense_mlp + moe_layers * moe_total
    body_active = layers * (attention + norms) + dense_layers * dense_mlp + moe_layers * moe_active
    positions = arch.max_position * d if arch.learned_positions else 0
    if arch.kind == "vision-transformer":
        patches = (arch.image_size // arch.patch_size) ** 2 if arch.patch_size else 0
        patch_embed = 3 * arch.patch_size**2 * d + d
        queries = arch.detection_queries
        positions = arch.position_tokens or patches + 1 + queries
        # patch projection, positions, class token (+ YOLOS's [DET] tokens)
        embedding = patch_embed + positions * d + d + queries * d
        head = (
            _detector_heads(arch) if arch.head == "detector" else d * arch.vocab + arch.vocab
        )  # classifier over `vocab` classes
    else:
        embedding = arch.vocab * d + positions
        head = 0 if arch.tied_embeddings else arch.vocab * d
    if arch.kind == "encoder":
        embedding += 2 * d  # token-type embeddings (BERT)
        head = d * d + d  # pooler (dense + bias); the MLM head is tied to the embeddings
    final_norm = _norm(arch, d)
    total = body_total + embedding + head + final_norm
    active = body_active + embedding + head + final_norm
    per_layer_mlp_total = moe_total if moe_layers else dense_mlp
    per_layer_mlp_active = moe_active if moe_layers else dense_mlp
    largest = max(attention + norms + per_layer_mlp_total, embedding, head)
    return ParamCounts(
        total=total,
        active=active,
        embedding=embedding + head,
        per_layer_attention=attention,
        per_layer_mlp_total=per_layer_mlp_total,
        per_layer_mlp_active=per_layer_mlp_active,
        per_layer_norm=norms,
        largest_layer=largest,
        lm_head=head,
    )


def mtp_projection_params(arch: Architecture) -> int:
    """One MTP module's projection of [hidden; embedding] (2d) to d, without bias (DeepSeek-V3 §2.2: M_k)."""
    return 2 * arch.hidden * arch.hidden


def mtp_layer_params(arch: Architecture, counts: ParamCounts) -> int:
    """One MTP module's transformer layer: built like the model's last layer (an MoE layer in DeepSeek-V3)."""
    return counts.per_layer_attention + counts.per_layer_norm + counts.per_layer_mlp_total


def mtp_params(arch: Architecture) -> int:
    """Parameters of the `mtp_layers` multi-token-prediction modules (module docstring): per module its three norms
    (enorm, hnorm, final) over d, the 2d → d projection and one transformer layer; the embedding and output head are
    shared with the main model, so not counted again. DeepSeek-V3: 11.61B (one MoE layer 11.51B + 2·7168² + norms)."""
    if not arch.mtp_layers or not arch.layers:
        return 0
    counts = count_params(arch)
    norms = 3 * _norm(arch, arch.hidden)
    return arch.mtp_layers * (norms + mtp_projection_params(arch) + mtp_layer_params(arch, counts))
