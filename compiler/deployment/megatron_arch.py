"""Megatron-LM arguments for the parts of the sized architecture beyond the dense shape: MoE experts, their layer
pattern, shared experts and router; DeepSeek's multi-head latent attention (MLA) and multi-token prediction (MTP);
position encoding. Flag names and meanings are Megatron-LM's (megatron/training/arguments.py; TransformerConfig and
MLATransformerConfig in megatron/core/transformer/transformer_config.py). An architecture Megatron's GPT model cannot
build is refused for the Megatron framework by name (`refuse_unexpressible`).
"""

from __future__ import annotations

from ..catalog.params import mtp_params as catalog_mtp_params
from ..catalog.types import Architecture
from ..diagnostics import FieldRefused

Arg = tuple[str, str | None]

# What needs each architecture flag, for a refusal that names it (megatron_version.refusal).
PURPOSE = {
    "--moe-ffn-hidden-size": "the experts' width (architecture.moe_ffn_hidden)",
    "--moe-layer-freq": "the dense-layer pattern of the MoE model (architecture.dense_layers / interleave_moe_layer_step)",
    "--moe-shared-expert-intermediate-size": "the shared experts (architecture.shared_experts)",
    "--moe-router-score-function": "the sigmoid router (architecture.router_score)",
    "--moe-router-enable-expert-bias": "auxiliary-loss-free routing (architecture.router_expert_bias)",
    "--moe-router-topk-scaling-factor": "the routed-weight scale (architecture.router_topk_scale)",
    "--moe-router-num-groups": "group-limited routing (architecture.router_groups)",
    "--moe-router-group-topk": "group-limited routing (architecture.router_group_topk)",
    "--multi-latent-attention": "multi-head latent attention (architecture.kv_lora_rank)",
    "--q-lora-rank": "MLA query compression (architecture.q_lora_rank)",
    "--kv-lora-rank": "multi-head latent attention (architecture.kv_lora_rank)",
    "--qk-head-dim": "multi-head latent attention (architecture.qk_nope_head_dim)",
    "--qk-pos-emb-head-dim": "multi-head latent attention (architecture.qk_rope_head_dim)",
    "--v-head-dim": "multi-head latent attention (architecture.v_head_dim)",
    "--mtp-num-layers": "multi-token prediction (architecture.mtp_layers)",
    "--grad-reduce-in-bf16": "the bf16 gradients the memory was sized with (train.megatron.grad_reduce)",
    "--use-rope-scaling": "Llama 3.1 RoPE scaling (architecture.rope_scaling_factor)",
    "--rope-scaling-factor": "Llama 3.1 RoPE scaling (architecture.rope_scaling_factor)",
    "--overlap-moe-expert-parallel-comm": "the MoE all-to-all overlap the sizing priced (parallelism.ep_overlap: "
    "false prices the layout without it)",
}


def position_type(arch: Architecture) -> str:
    """--position-embedding-type: learned absolute positions, RoPE, or none (MLA applies its own decoupled RoPE)."""
    return "learned_absolute" if arch.learned_positions else "rope"


def layer_pattern(arch: Architecture) -> str:
    """--moe-layer-freq as Megatron's list expression (1 = experts, 0 = dense MLP), one entry per layer: the leading
    `dense_layers`, then every `interleave_moe_layer_step`-th layer with experts (transformers Llama4TextConfig:
    layer i has experts when i mod step = step - 1)."""
    step, dense, layers = max(1, arch.interleave_moe_layer_step), arch.dense_layers, arch.layers
    rest = layers - dense
    lead = f"[0]*{dense}+" if dense else ""
    if step == 1:
        return f"({lead}[1]*{rest})"
    block = f"[0]*{step - 1}+[1]" if step > 2 else "[0]+[1]"
    if dense % step == 0 and rest % step == 0:
        return f"({lead}({block})*{rest // step})"
    pattern = [0] * dense + [1 if i % step == step - 1 else 0 for i in range(dense, layers)]
    return "[" + ",".join(map(str, pattern)) + "]"


def moe_args(arch: Architecture) -> list[Arg]:
    if not arch.is_moe:
        return []
    args: list[Arg] = [
        ("--num-experts", str(arch.experts)),
        ("--moe-router-topk", str(arch.experts_per_token)),
        ("--moe-ffn-hidden-size", str(arch.moe_ffn_hidden or arch.ffn_hidden)),
    ]
    if arch.moe_layer_count != arch.layers:
        args.append(("--moe-layer-freq", layer_pattern(arch)))
    if arch.shared_experts:  # Megatron has one shared-expert MLP: n shared experts of width f_e are one of n·f_e
        width = arch.shared_experts * (arch.moe_ffn_hidden or arch.ffn_hidden)
        args.append(("--moe-shared-expert-intermediate-size", str(width)))
    return args + router_args(arch)


def router_args(arch: Architecture) -> list[Arg]:
    args: list[Arg] = []
    if arch.router_score != "softmax":  # softmax is Megatron's default
        args.append(("--moe-router-score-function", arch.router_score))
    if arch.router_expert_bias:
        args.append(("--moe-router-enable-expert-bias", None))
    if arch.router_topk_scale:
        args.append(("--moe-router-topk-scaling-factor", f"{arch.router_topk_scale:g}"))
    if arch.router_groups:
        args += [
            ("--moe-router-num-groups", str(arch.router_groups)),
            ("--moe-router-group-topk", str(arch.router_group_topk)),
        ]
    return args


def mla_args(arch: Architecture) -> list[Arg]:
    """MLA ranks and head widths (MLATransformerConfig: q_lora_rank None = an uncompressed query projection)."""
    if not arch.uses_mla:
        return []
    args: list[Arg] = [("--multi-latent-attention", None)]
    if arch.q_lora_rank:
        args.append(("--q-lora-rank", str(arch.q_lora_rank)))
    return args + [
        ("--kv-lora-rank", str(arch.kv_lora_rank)),
        ("--qk-head-dim", str(arch.qk_nope_head_dim)),
        ("--qk-pos-emb-head-dim", str(arch.qk_rope_head_dim)),
        ("--v-head-dim", str(arch.v_head_dim)),
    ]


def mtp_args(arch: Architecture) -> list[Arg]:
    """Multi-token prediction modules trained beside the model (DeepSeek-V3 §2.2: depth 1); Megatron shares the
    embedding and output layer with the main model."""
    return [("--mtp-num-layers", str(arch.mtp_layers))] if arch.mtp_layers else []


def rotary_base(arch: Architecture) -> str:
    """RoPE's base as Megatron-LM parses it: `--rotary-base` is an int (arguments.py, type=int, core_v0.8.0 through
    the pinned commit), so 1e+06 is refused by argparse; written as digits."""
    return str(int(arch.rope_theta))


def refuse_unexpressible(arch: Architecture) -> None:
    """Megatron's GPT model has no ALiBi: --position-embedding-type takes learned_absolute, rope, mrope, relative,
    yarn or none (every release to core_v0.19.0). Training a BLOOM-style model there would train another model.
    Its --rotary-base is an integer: a fractional RoPE base would train another model too."""
    if arch.rope_theta and arch.rope_theta != int(arch.rope_theta):
        raise FieldRefused(
            ("model", "architecture", "rope_theta"),
            f"RoPE base {arch.rope_theta:g} is not a whole number, and Megatron-LM's --rotary-base takes an integer "
            "(megatron/training/arguments.py): it would train a different model; use train.framework deepspeed or "
            "fsdp",
            "framework-cannot-express",
        )
    if arch.alibi:
        raise FieldRefused(
            ("train", "framework"),
            "the model uses ALiBi attention biases (architecture.alibi), and Megatron-LM's GPT model has no ALiBi "
            "(--position-embedding-type: learned_absolute, rope, mrope, relative, yarn, none): it would train a "
            "different model; use train.framework deepspeed or fsdp with a script whose model has ALiBi",
            "framework-cannot-express",
        )


def mtp_params(arch: Architecture) -> int:
    """Parameters of the MTP modules Megatron builds (megatron/core/transformer/multi_token_prediction.py
    MultiTokenPredictionLayer): catalog/params.mtp_params, which the training sizing counts on the last pipeline
    stage where Megatron-LM places the module (sizing/train/layout.MTP_FRAMEWORKS)."""
    return catalog_mtp_params(arch)
