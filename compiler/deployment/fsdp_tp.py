"""FSDP2 × TP: the settings fsdp/fsdp_tp.py reads (fsdp/fsdp_tp.json), decided from the sized layout.

The composition is torchtitan's (torchtitan/models/llama3/parallelize.py, torchtitan/distributed/parallel_dims.py):
a 2-D DeviceMesh [dp_shard, tp] with TP innermost, so the TP ranks are consecutive ranks of one node; each
transformer block is first tensor-parallelised over the mesh's tp dimension (`parallelize_module`), then fully
sharded over dp_shard (`fully_shard`, ZeRO-3), then the root module is sharded. The TP plan is the one Hugging Face
transformers ships for Llama (LlamaConfig.base_model_tp_plan: q/k/v and gate/up ColwiseParallel, o and down
RowwiseParallel; LlamaForCausalLM._tp_plan: lm_head "colwise_gather_output"), which Mistral and Qwen2 share, so a
checkpoint the plan names loads into the model it shards. Sequence parallelism when the sizing credits it
(parallelism.sequence_parallel, sizing/training.py `sequence_parallel`): torchtitan's apply_tp with SP
(torchtitan/models/llama3/parallelize.py, its Hugging Face backend's names) — the embedding's output, the norms and the
o/down projections' outputs sharded over the sequence, gathered before attention and the MLP (PrepareModuleInput; a
Hugging Face decoder layer passes hidden_states by keyword). The shards stay DTensors with their global shape, so
LlamaModel builds its positions and causal mask from the whole sequence. With TP, with or without SP, the head leaves
its logits sharded over the vocabulary for torch's loss_parallel (torchtitan's default): the s·b·V/t logits the sizing
counts (transformers' colwise_gather_output would hold all s·b·V).
Mixed precision: parameters gathered in the plan's 16-bit type, gradients reduced in fp32 (torchtitan
TrainingConfig.mixed_precision_reduce = "float32"). Activation checkpointing wraps whole blocks (torchtitan
activation_checkpoint mode "full") when the sizing recomputes fully; "selective" is torchtitan's op-level selective AC
(mode "selective", selective_ac_option "op"; torchtitan/parallelisms/parallelize_llama.py `_save_list` and
`_apply_ac_to_transformer_block` at 9dec370): each block under checkpoint_wrapper with a
torch.utils.checkpoint.create_selective_checkpoint_contexts policy that must-saves the outputs of the ops in
OP_SAC_SAVE_OPS except every second aten.mm of the block, and prefers to recompute the rest — what the sizing counts
(compiler/sizing/train_memory.py op_sac_bytes_per_layer). Without TP (1-D FSDP with selective recompute) the mesh is
[dp_shard, 1] and the TP plans are empty: only fully_shard and the policy apply.

With PP (torchtitan's 3-D composition, torchtitan/distributed/pipeline_parallel.py pipeline_llm): the mesh is
[pp, dp_shard, tp] (torchtitan's ParallelDims order, PP outermost), the model is cut into pp·vp stages by module
names (embed_tokens and layers on the first, layers, norm and lm_head on the last), each stage is parallelised as
above, and torch.distributed.pipelining runs them: Schedule1F1B with one stage per rank, ScheduleInterleaved1F1B
with vp stages per rank, stage s on PP rank s mod pp (torchtitan's "loop" placement). Its bubble is the sizing's,
(p−1)/(v·m) (Narayanan et al. 2021 §2.2.2; torch's interleaved schedule is Megatron's when m is a multiple of p).
The schedule splits each rank's local batch (micro_batch × grad_accum sequences) into grad_accum micro-batches and
averages their gradients (scale_grads), so one `step` is one optimizer step.

With CP (context parallelism, full weights without TP or PP: sizing/training.py fsdp_cp_runs): the mesh is
[dp_shard, cp, tp] (torchtitan's ParallelDims order) and fully_shard runs over dp_shard × cp flattened (torchtitan's
dp_shard_cp: its "FSDP 1, CP 8" is ZeRO-3 over the 8 CP ranks), so gradients average over dp × cp. The attention is
the Llama 3 paper's all-gather CP (§3.3.2, sizing/train_layout.py): each sequence is cut into 2·cp chunks, CP rank i
keeps chunks i and 2·cp−1−i (`cp_rank_chunks`: equal causal work per rank), every layer all-gathers K and V over the
CP ranks and attends its local queries to the keys at or before their global positions; rotary embeddings take the
global positions. Each rank's loss is the mean over its tokens (all ranks hold as many), so the gradient average over
dp × cp is the gradient of the mean over every token.
"""

from __future__ import annotations

from ..plan.framework_configs import FsdpTpSettings
from ..plan.resolved import Parallelism, ResolvedPlan
from ..plan.spec import PlanSpec
from ..sizing.train.frameworks import FSDP2_REDUCE_DTYPE, runs_on_fsdp2
from .lora_tp import lora_settings

CONTEXT_FSDP_MESH_DIM = "dp_shard_cp"  # dp_shard × cp flattened: fully_shard over both (torchtitan's dp_shard_cp)
CONTEXT_PARALLEL = "allgather-kv"  # Llama 3 §3.3.2: K/V all-gathered over the CP ranks, local queries
# torch.distributed.pipelining schedule class names (schedules.get_schedule_class)
SCHEDULE_1F1B, SCHEDULE_INTERLEAVED = "1F1B", "Interleaved1F1B"
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
LOSS_PARALLEL_MODEL_PLAN = {"lm_head": "colwise_to_vocab_shards"}  # with TP: logits stay sharded for loss_parallel
# with sequence parallelism (fsdp_tp.py's SEQUENCE_PARALLEL_STYLES): added to / replacing the plans above
SEQUENCE_PARALLEL_BLOCK_PLAN = {
    "input_layernorm": "sequence_parallel",
    "self_attn": "gather_sequence_hidden_states",
    "self_attn.o_proj": "rowwise_to_sequence_shards",
    "post_attention_layernorm": "sequence_parallel",
    "mlp": "gather_sequence",
    "mlp.down_proj": "rowwise_to_sequence_shards",
}
SEQUENCE_PARALLEL_MODEL_PLAN = {
    "embed_tokens": "embedding_to_sequence_shards",
    "norm": "sequence_parallel",
    "lm_head": "colwise_sequence_to_vocab_shards",
}
# torchtitan's _save_list (parallelize_llama.py at 9dec370, the same at e7c0cae but for aten.abs, which it dropped),
# as torch.ops names fsdp_tp.py resolves; every OP_SAC_MM_RECOMPUTE_EVERY-th aten.mm of a block is recomputed.
OP_SAC_SAVE_OPS = (
    "aten.mm.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_flash_attention.default",
    "_c10d_functional.reduce_scatter_tensor.default",
    "aten.max.default",
)
OP_SAC_MM_RECOMPUTE_EVERY = 2
ACTIVATION_CHECKPOINT = {"none": "none", "full": "full", "selective": "selective-op"}
PARAM_DTYPE = {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "float16", "fp32": "float32"}
REDUCE_DTYPE = FSDP2_REDUCE_DTYPE  # sizing/training.py: the bytes step_time prices


def uses_fsdp_tp(plan: ResolvedPlan) -> bool:
    """FSDP layouts the FSDP2 script runs: TP, PP or CP, 1-D FSDP with selective recompute (torchtitan's op-level SAC,
    which Accelerate's FSDP1 plugin cannot apply; the sizing only chooses it where this script runs it), and 1-D HSDP
    whose shard group is not one node (sizing/training.py runs_on_fsdp2, the rule the sizing prices it by)."""
    par = plan.parallelism
    return par is not None and runs_on_fsdp2(
        par.framework, par.tp, par.pp, par.recompute, par.shard_group_gpus, plan.hardware.gpus_per_node, par.cp
    )


def hsdp_degrees(plan: ResolvedPlan) -> tuple[int, int]:
    """(dp_replicate, dp_shard): the data-parallel ranks as replicas × shard group. HSDP (parallelism.shard_group_gpus,
    the ranks of one FSDP shard group; the sizing checked it tiles DP): fully_shard shards parameters, gradients and
    optimizer states over dp_shard and replicates them over dp_replicate (FSDP2's 2-D mesh, Replicate() × Shard(0));
    without it every DP rank is one shard (dp_replicate 1)."""
    par = plan.parallelism
    shard = par.shard_group_gpus or par.dp
    return par.dp // shard, shard


def mesh_dims(plan: ResolvedPlan) -> list[tuple[str, int]]:
    """The DeviceMesh, outermost first, in torchtitan's ParallelDims order (torchtitan/distributed/parallel_dims.py:
    pp, dp_replicate, dp_shard, cp, tp): PP when > 1, dp_replicate when HSDP replicates, dp_shard, CP when > 1, TP innermost (its
    ranks consecutive, one node), so a shard group is dp_shard·tp consecutive ranks and replicas sit dp_shard·tp apart —
    the rank order the sizing's collective bandwidths assume (sizing/train_time.py dp_collective_bandwidth)."""
    par = plan.parallelism
    replicate, shard = hsdp_degrees(plan)
    dims = [("pp", par.pp)] if par.pp > 1 else []
    dims += [("dp_replicate", replicate)] if replicate > 1 else []
    return dims + [("dp_shard", shard)] + ([("cp", par.cp)] if par.cp > 1 else []) + [("tp", par.tp)]


def fsdp_mesh_dims(dims: list[tuple[str, int]]) -> dict:
    """What fully_shard and the data loader take from the mesh: fully_shard over dp_shard, [dp_replicate, dp_shard]
    under HSDP (its 2-D mesh: replicate over the 0th dim, shard over the 1st — fully_shard's docs, torch 2.13), or with
    CP over dp_shard × cp flattened into one dim (torchtitan's dp_shard_cp; CP runs without HSDP: fsdp_cp_runs); the
    sequences a rank reads index the data-parallel dims, replicas outer (torchtitan's "batch" dim; CP ranks share them)."""
    names = [name for name, _ in dims if name in ("dp_replicate", "dp_shard")]
    if any(name == "cp" for name, _ in dims):
        return {
            "fsdp_mesh_dims": [CONTEXT_FSDP_MESH_DIM],
            "flatten_mesh_dims": {CONTEXT_FSDP_MESH_DIM: ["dp_shard", "cp"]},
            "data_parallel_mesh_dims": names,
        }
    return {"fsdp_mesh_dims": names, "flatten_mesh_dims": {}, "data_parallel_mesh_dims": names}


def virtual_stage_layers(split: list[int], vp: int) -> list[int]:
    """Layers of each of the pp·vp pipeline stages, in stage order (stage s = chunk s // pp of PP rank s mod pp):
    each rank's decided layers cut into vp chunks as evenly as they go, a rank's spare layers on its later chunks
    for the first rank (its first chunk also embeds) and on its earlier ones elsewhere (the last chunk of the last
    rank also runs the head) — torchtitan's split with the embedding and the loss counted as one layer each when
    Megatron's account-embedding-loss split is decided."""
    pp, chunks = len(split), []
    for rank, layers in enumerate(split):
        base, spare = divmod(layers, vp)
        sizes = [base + (c >= vp - spare if rank == 0 else c < spare) for c in range(vp)]
        chunks.append(sizes)
    return [chunks[s % pp][s // pp] for s in range(pp * vp)]


def stage_modules(stage_layers: list[int]) -> list[list[str]]:
    """Module names of each stage (Hugging Face Llama's, which fsdp_tp.py's stage builder reads)."""
    names, first = [], 0
    for index, count in enumerate(stage_layers):
        modules = ["embed_tokens"] if index == 0 else []
        modules += [f"layers.{i}" for i in range(first, first + count)]
        modules += ["norm", "lm_head"] if index == len(stage_layers) - 1 else []
        names.append(modules)
        first += count
    return names


def settings(plan: ResolvedPlan, spec: PlanSpec) -> FsdpTpSettings:
    """fsdp/fsdp_tp.json: the mesh, the TP plan and the sharding options, as fsdp_tp.py applies them."""
    par = plan.parallelism
    sp = par.sequence_parallel
    dims = mesh_dims(plan)
    block_tp_plan = (BLOCK_TP_PLAN | (SEQUENCE_PARALLEL_BLOCK_PLAN if sp else {})) if par.tp > 1 else {}
    lora = None
    if spec.train.method == "lora":  # adapters sharded as their base layers (compiler/deployment/lora_tp.py)
        lora, block_tp_plan = lora_settings(spec, block_tp_plan)
    return FsdpTpSettings(
        mesh_dim_names=[name for name, _ in dims],
        mesh_shape=[size for _, size in dims],
        **fsdp_mesh_dims(dims),
        world_size=par.dp * par.cp * par.tp * par.pp,
        block_tp_plan=block_tp_plan,
        model_tp_plan=(
            MODEL_TP_PLAN | LOSS_PARALLEL_MODEL_PLAN | (SEQUENCE_PARALLEL_MODEL_PLAN if sp else {})
            if par.tp > 1
            else {}
        ),
        sequence_parallel=sp,
        loss_parallel=par.tp > 1,
        reshard_after_forward=spec.train.reshard_after_forward,
        param_dtype=PARAM_DTYPE[spec.precision],
        reduce_dtype=REDUCE_DTYPE,
        **activation_checkpoint(par.recompute),
        micro_batch=par.micro_batch,
        grad_accum=par.grad_accum,
        seq_len=plan.training.seq_len,
        **(pipeline_settings(par) if par.pp > 1 else {}),
        **(context_parallel_settings(par.cp) if par.cp > 1 else {}),  # fsdp_cp_runs: TP1 PP1, full weights, no HSDP
        lora=lora,
    )


def pipeline_settings(par: Parallelism) -> dict:
    """The schedule and the stage split (PP > 1): keys of fsdp_tp.json."""
    stages = virtual_stage_layers(par.pp_stage_layers, par.vp)
    return {
        "pp": par.pp,
        "vp": par.vp,
        "pipeline_schedule": SCHEDULE_INTERLEAVED if par.vp > 1 else SCHEDULE_1F1B,
        "pipeline_microbatches": par.grad_accum,
        "pp_stage_layers": list(par.pp_stage_layers),
        "stage_layers": stages,
        "stage_modules": stage_modules(stages),
    }


def context_parallel_settings(cp: int) -> dict:
    """The CP attention (CP > 1): keys of fsdp_tp.json."""
    return {"cp": cp, "context_parallel": CONTEXT_PARALLEL, "cp_rank_chunks": cp_rank_chunks(cp)}


def cp_rank_chunks(cp: int) -> list[list[int]]:
    """The sequence's 2·cp equal chunks each CP rank keeps, in order: rank i chunks i and 2·cp−1−i (Llama 3 §3.3.2), so
    under the causal mask every rank's queries meet the same number of keys (chunk i sees i+1 chunks, its partner
    2·cp−i: 2·cp+1 in all)."""
    return [[rank, 2 * cp - 1 - rank] for rank in range(cp)]


def describe_context_parallel(config: FsdpTpSettings) -> tuple[str, str]:
    """The CP decision as (choice, reason) for the report."""
    cp, seq_len = config.cp, config.seq_len
    chunks = ", ".join(f"rank {rank}: {'+'.join(map(str, pair))}" for rank, pair in enumerate(config.cp_rank_chunks))
    return (
        f"CP{cp}, K/V all-gathered per layer ({config.context_parallel}); {seq_len} tokens in {2 * cp} chunks of "
        f"{seq_len // (2 * cp)} ({chunks}); fully_shard over dp_shard × cp",
        "the Llama 3 paper's context parallelism (§3.3.2): local queries attend to the gathered keys at or before "
        "their global positions, chunks i and 2·cp−1−i balance the causal work; the all-gather is not overlapped "
        "with compute (with GQA K/V are small), as the sizing counts it; fsdp/fsdp_tp.py applies it to a "
        "transformers model's attention (AttentionInterface)",
    )


def describe_sequence_parallel(config: FsdpTpSettings) -> tuple[str, str]:
    """The sequence-parallelism decision as (choice, reason) for the report."""
    tp, seq_len = config.mesh_shape[-1], config.seq_len
    if config.sequence_parallel:
        return (
            "on: embedding, norms and block outputs sharded over the sequence, logits over the vocabulary "
            "(loss_parallel)",
            f"TP{tp} splits each {seq_len}-token sequence evenly: torchtitan's apply_tp with SP stores 1/{tp} of "
            "the activations TP alone replicates (Korthikanti et al. 2022), as the sizing counts; the training "
            "script runs its loss and backward under fsdp_tp.loss_parallel(settings)",
        )
    return (
        "off: transformers' TP plan, logits sharded over the vocabulary (loss_parallel)",
        f"a {seq_len}-token sequence does not split evenly over TP{tp}; the sizing counts activations without it",
    )


def activation_checkpoint(recompute: str) -> dict:
    """The checkpointing fsdp_tp.py applies per block (module docstring): none, full, or torchtitan's op-level SAC with
    the ops whose outputs it saves."""
    mode = ACTIVATION_CHECKPOINT[recompute]
    if mode != "selective-op":
        return {"activation_checkpoint": mode}
    return {
        "activation_checkpoint": mode,
        "activation_checkpoint_save_ops": list(OP_SAC_SAVE_OPS),
        "activation_checkpoint_mm_recompute_every": OP_SAC_MM_RECOMPUTE_EVERY,
    }


def describe(config: FsdpTpSettings) -> str:
    sizes = dict(zip(config.mesh_dim_names, config.mesh_shape))
    dims = ", ".join(f"{name} {size}" for name, size in sizes.items())
    tp, shards = sizes["tp"], sizes["dp_shard"] * sizes.get("cp", 1)
    tensor_parallel = f"parallelize_module (TP{tp}, transformers' Llama TP plan) then " if tp > 1 else "no TP plan; "
    replicas = f", replicated over {sizes['dp_replicate']} (HSDP)" if "dp_replicate" in sizes else ""
    text = (
        f"DeviceMesh [{dims}]: {tensor_parallel}fully_shard "
        f"(ZeRO-3 over {shards}{' = dp_shard × cp' if 'cp' in sizes else ''}{replicas}) per block; "
        f"params {config.param_dtype}, reduce {config.reduce_dtype}, "
        f"activation checkpoint {config.activation_checkpoint}"
    )
    if config.pp is not None:
        text += (
            f"; {len(config.stage_layers)} pipeline stages of {'/'.join(map(str, config.stage_layers))} "
            f"layers under torch.distributed.pipelining Schedule{config.pipeline_schedule}, "
            f"{config.pipeline_microbatches} micro-batches per step"
        )
    return text


def describe_hsdp(config: FsdpTpSettings) -> tuple[str, str] | None:
    """The HSDP groups as (choice, reason) for the report, or None without replicas."""
    sizes = dict(zip(config.mesh_dim_names, config.mesh_shape))
    if "dp_replicate" not in sizes:
        return None
    replicas, shard, tp = sizes["dp_replicate"], sizes["dp_shard"], sizes["tp"]
    return (
        f"{replicas} replicas × shard groups of {shard} data-parallel ranks ({shard * tp} consecutive GPUs with "
        f'TP{tp}); fully_shard over mesh["dp_replicate", "dp_shard"]',
        f"parallelism.shard_group_gpus {shard}: parameters, gradients and optimizer states sharded over the group only "
        f"(1/{shard} per rank, as sized); each micro-batch's gradients reduce-scatter inside the group and the "
        f"{replicas} replicas all-reduce their shard once per step (fsdp_tp.sync_replicas: FSDP2 "
        f"set_requires_all_reduce on the last micro-batch; PyTorch FSDP HYBRID_SHARD, Zhao et al. 2023 §3.2.2)",
    )
