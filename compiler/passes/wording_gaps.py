"""What each framework path cannot run, in words: the sentence of a `no-framework-path` reason
(training.framework_gap), the constraint and then the capability behind it."""

from __future__ import annotations

_FSDP_TP = "FSDP2 × TP × PP (fsdp/fsdp_tp.py)"
# what the FSDP2 path lacks for a model-parallel layout (training.fsdp_tp_missing), and who has it
_FSDP_TP_MISSING = {
    "cp": lambda vp: (
        "framework fsdp runs context parallelism only alone: fsdp/fsdp_tp.py all-gathers K/V over the CP ranks (Llama 3 "
        "§3.3.2) for full weights without TP, PP, adapters or an HSDP group (CP × TP, CP × PP and CP × HSDP are not "
        "built); Megatron-LM has CP with TP and PP (--context-parallel-size: framework megatron or auto)"
    ),
    "ep": lambda vp: (
        f"framework fsdp has no expert parallelism: {_FSDP_TP} shards routed experts like any weight, with no "
        f"all-to-all dispatch; Megatron-LM has EP (--expert-model-parallel-size: framework megatron or auto)"
    ),
    "adapters": lambda vp: (
        f"framework fsdp trains QLoRA only without TP/PP: {_FSDP_TP} trains full weights or LoRA (fsdp/lora_tp.py), "
        f"and a 4-bit base has no DTensor TP path"
    ),
    "lora-without-tp": lambda vp: (
        f"framework fsdp trains LoRA under model parallelism only with TP: {_FSDP_TP} shards the adapters as the TP plan "
        f"shards their base layers (fsdp/lora_tp.py), and a layout without TP has none; without PP, LoRA runs "
        f"under FSDP or DeepSpeed (ZeRO)"
    ),
    "offload": lambda vp: (
        f"framework fsdp does not offload with TP/PP/CP: {_FSDP_TP} runs fully_shard on the GPU; DeepSpeed offloads, "
        f"without TP/PP/CP"
    ),
    "zero": lambda vp: (
        f"framework fsdp runs TP/PP/CP only at ZeRO-3: {_FSDP_TP} shards weights, gradients and optimizer states "
        f"(fully_shard); Megatron-LM runs TP/PP/CP at ZeRO-0 or 1 (its distributed optimizer)"
    ),
    "vp-chunks": lambda vp: (
        f"VP{vp} under framework fsdp: {_FSDP_TP} splits each stage into {vp} chunks of at least one layer, and a "
        f"stage has fewer layers"
    ),
    "": lambda vp: (
        f"framework fsdp runs model parallelism only as {_FSDP_TP}: TP and PP/VP, or CP alone, at ZeRO-3, no "
        f"offload, full weights or LoRA with TP, no EP; Megatron-LM has EP"
    ),
}


# what each framework path cannot do (training.framework_gap): the constraint, then the capability behind it
FRAMEWORK_GAPS = {
    "adapters-model-parallel": lambda framework, detail, vp: (
        f"{detail} with TP/PP/CP/EP: no framework path — the Megatron-LM arguments emitted train full weights only, "
        f"the DeepSpeed configs have no tensor or pipeline parallelism and FSDP2 × TP × PP runs LoRA (not QLoRA) at "
        f"ZeRO-3 without CP or EP (framework fsdp, zero_stage 3)"
    ),
    "model-parallel": lambda framework, detail, vp: (
        f"framework {framework} has no tensor, pipeline, context or expert parallelism in the configs emitted "
        f"(Megatron-LM has)"
    ),
    "fsdp-model-parallel": lambda framework, detail, vp: _FSDP_TP_MISSING[detail](vp),
    "megatron-zero": lambda framework, detail, vp: (
        f"{detail} with model parallelism: no framework path — Megatron-LM shards only optimizer states (ZeRO-1, "
        f"its distributed optimizer) and does not offload"
    ),
    "hsdp-megatron": lambda framework, detail, vp: "an HSDP shard group is FSDP's (HYBRID_SHARD); Megatron-LM has none",
    "hsdp": lambda framework, detail, vp: (
        f"HSDP shard group {detail}: hybrid sharding is FSDP's at ZeRO-3 without offload — the Accelerate FSDP1 "
        f"config within one node (HYBRID_SHARD), {_FSDP_TP} for any group of full or LoRA weights "
        f"(fully_shard over [dp_replicate, dp_shard])"
    ),
    "uneven-split": lambda framework, detail, vp: (
        f"pipeline stages of {detail} layers{f' with VP{vp}' if vp > 1 else ''}: Megatron-LM states only equal "
        f"middle stages with a different first/last{', each divisible by VP' if vp > 1 else ''}"
    ),
    "ddp-sharding": lambda framework, detail, vp: f"{detail}: PyTorch DDP does not shard",
    "fsdp-stage": lambda framework, detail, vp: (
        f"{detail}: FSDP shards gradients (SHARD_GRAD_OP) or everything (FULL_SHARD); CPU offload needs FULL_SHARD"
    ),
    "offload-stage": lambda framework, detail, vp: f"{detail} offload: ZeRO-Offload needs stage 2 or 3",
}
