"""FSDP2 × TP: the settings fsdp/fsdp_tp.py reads (fsdp/fsdp_tp.json), decided from the sized layout.

The composition is torchtitan's (torchtitan/models/llama3/parallelize.py, torchtitan/distributed/parallel_dims.py):
a 2-D DeviceMesh [dp_shard, tp] with TP innermost, so the TP ranks are consecutive ranks of one node; each
transformer block is first tensor-parallelised over the mesh's tp dimension (`parallelize_module`), then fully
sharded over dp_shard (`fully_shard`, ZeRO-3), then the root module is sharded. The TP plan is the one Hugging Face
transformers ships for Llama (LlamaConfig.base_model_tp_plan: q/k/v and gate/up ColwiseParallel, o and down
RowwiseParallel; LlamaForCausalLM._tp_plan: lm_head "colwise_gather_output"), which Mistral and Qwen2 share, so a
checkpoint the plan names loads into the model it shards. No sequence parallelism (torchtitan's default): a Hugging
Face decoder passes hidden_states to its attention by keyword and builds its rotary tables and causal mask from
the embedding output's length, which sequence parallelism would shard; the sizing counts activations without it.
Mixed precision: parameters gathered in the plan's 16-bit type, gradients reduced in fp32 (torchtitan
TrainingConfig.mixed_precision_reduce = "float32"). Activation checkpointing wraps whole blocks (torchtitan
activation_checkpoint mode "full") when the sizing recomputes.
"""

from __future__ import annotations

from ..resolved import ResolvedPlan
from ..spec import PlanSpec

MESH_DIM_NAMES = ("dp_shard", "tp")
# style names fsdp_tp.py maps to torch.distributed.tensor.parallel styles (its STYLES table)
BLOCK_TP_PLAN = {
    "self_attn.q_proj": "colwise",
    "self_attn.k_proj": "colwise",
    "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise",
    "mlp.gate_proj": "colwise",
    "mlp.up_proj": "colwise",
    "mlp.down_proj": "rowwise",
}
MODEL_TP_PLAN = {"lm_head": "colwise_gather_output"}
PARAM_DTYPE = {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "float16", "fp32": "float32"}
REDUCE_DTYPE = "float32"


def uses_fsdp_tp(plan: ResolvedPlan) -> bool:
    return plan.parallelism is not None and plan.parallelism.framework == "fsdp" and plan.parallelism.tp > 1


def settings(plan: ResolvedPlan, spec: PlanSpec) -> dict:
    """fsdp/fsdp_tp.json: the mesh, the TP plan and the sharding options, as fsdp_tp.py applies them."""
    par = plan.parallelism
    return {
        "mesh_dim_names": list(MESH_DIM_NAMES),
        "mesh_shape": [par.dp, par.tp],
        "world_size": par.dp * par.tp,
        "block_tp_plan": dict(BLOCK_TP_PLAN),
        "model_tp_plan": dict(MODEL_TP_PLAN),
        "sequence_parallel": False,
        "reshard_after_forward": spec.train.reshard_after_forward,
        "param_dtype": PARAM_DTYPE[spec.precision],
        "reduce_dtype": REDUCE_DTYPE,
        "activation_checkpoint": "full" if par.recompute != "none" else "none",
        "micro_batch": par.micro_batch,
        "grad_accum": par.grad_accum,
        "seq_len": plan.training.seq_len,
    }


def describe(config: dict) -> str:
    dp, tp = config["mesh_shape"]
    return (f"DeviceMesh [dp_shard {dp}, tp {tp}]: parallelize_module (TP{tp}, transformers' Llama TP plan) then fully_shard "
            f"(ZeRO-3 over {dp}) per block; params {config['param_dtype']}, reduce {config['reduce_dtype']}, "
            f"activation checkpoint {config['activation_checkpoint']}")
