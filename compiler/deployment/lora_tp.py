"""LoRA × TP × PP: the "lora" section of fsdp/fsdp_tp.json, which fsdp/lora_tp.py applies (adapters sharded as their
base layers are: PEFT's LoraParallelLinear, huggingface/peft src/peft/tuners/lora/tp_layer.py).

Rank, alpha and targets are the plan's train.lora; the scaling is alpha/rank (Hu et al. 2021, §4.1, PEFT LoraConfig
without use_rslora); dropout is PEFT's LoraConfig default, 0.0 (the plan states none). Each targeted module keeps the
TP style of its base layer, and the TP plan's key for it becomes "<module>.base_layer", the layer the adapter wraps.
"""

from __future__ import annotations

from ..plan.framework_configs import LoraTp
from ..plan.spec import PlanSpec

# train.lora.targets → Hugging Face Llama module names (transformers' LlamaDecoderLayer), the TP plan's keys
LORA_MODULES = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}
LORA_DROPOUT = 0.0  # PEFT LoraConfig.lora_dropout default
BASE_LAYER = "base_layer"  # PEFT's name for the layer a LoRA module wraps
# what each TP style gives the adapter's (lora_A, lora_B) over the TP mesh (fsdp/lora_tp.py PLACEMENTS)
ADAPTER_PLACEMENTS = {
    "colwise": ("Replicate", "Shard(0)"),
    "rowwise": ("Shard(1)", "Replicate"),
    "rowwise_to_sequence_shards": ("Shard(1)", "Replicate"),
}  # SP: its output reduce-scattered over the sequence


def lora_settings(spec: PlanSpec, block_tp_plan: dict[str, str]) -> tuple[LoraTp, dict[str, str]]:
    """(the "lora" section, the block TP plan with each targeted module's key moved to its base layer)."""
    lora = spec.train.lora
    modules = {LORA_MODULES[t]: block_tp_plan[LORA_MODULES[t]] for t in lora.targets}
    section = LoraTp(
        rank=lora.rank,
        alpha=lora.alpha,
        scaling=lora.alpha / lora.rank,
        dropout=LORA_DROPOUT,
        modules=modules,
        placements={name: ADAPTER_PLACEMENTS[style] for name, style in modules.items()},
    )
    plan = {(f"{name}.{BASE_LAYER}" if name in modules else name): style for name, style in block_tp_plan.items()}
    return section, plan


def describe(lora: LoraTp) -> str:
    modules = ", ".join(f"{name} ({lora.modules[name]}: A {a}, B {b})" for name, (a, b) in lora.placements.items())
    return (
        f"rank {lora.rank}, alpha {lora.alpha:g} (scaling {lora.scaling:g}), dropout {lora.dropout:g} "
        f"on {modules}; base weights frozen, adapters fully_shard over dp_shard"
    )
