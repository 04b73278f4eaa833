"""Training memory per GPU, term by term: model states (ZeRO paper), activations (Korthikanti et al. 2022), runtime.

Model states (Rajbhandari et al. 2019, "ZeRO", §3 and Fig. 1), bytes per parameter a GPU holds:
  weights w (2 in 16-bit mixed precision; 4 in fp32; fp8 training keeps bf16 weights and casts per GEMM, as
  Transformer Engine does), gradients w, optimizer K. Mixed-precision AdamW keeps an fp32 master + m + v:
  K = 12 (the paper's K). 8-bit Adam (Dettmers et al. 2022, "8-bit Optimizers via Block-wise
  Quantization"): 1-byte m and v + fp32 master = 6. SGD with momentum: momentum 4 + master 4 = 8.
  Adafactor (Shazeer & Stern 2018, §3): no momentum (β1 = 0) and a second moment factored into one row and
  one column vector per matrix, 4·(1/rows + 1/cols) bytes per parameter, + master 4. In fp32 training the
  weights are the master copy, so K loses its 4-byte master.
  Baseline DP holds (2 + 2 + K)·Ψ; ZeRO-1 shards K over the N_d ranks, ZeRO-2 also the gradients, ZeRO-3
  also the weights (FSDP SHARD_GRAD_OP ≙ 2, FULL_SHARD ≙ 3, HYBRID_SHARD ≙ 3 over the ranks of one node:
  pass `zero_shard_ranks`). CPU offload (ZeRO-Offload, Ren et al. 2021) moves the optimizer states and the
  gradient partition they update to host memory, and at stage 3 (ZeRO-Infinity) the weights too.
  DeepSpeed allocates differently from the paper at stages 2/3 (an fp32 gradient partition, a gather buffer
  of the largest layer): `deepspeed_model_states` reproduces its estimators for framework="deepspeed".
Megatron sharding: transformer layers split over PP stages (⌈L/p⌉ on a stage), their matrices over TP; the
  norms are replicated on the TP ranks. The input embedding (vocab-parallel over TP) sits on the first stage,
  the LM head (or, when tied, a copy of the embedding) and the final norm on the last; memory is that of the
  worse of the two stages.

Activations: activations.py (Korthikanti et al. 2022, generalised; the losses' logits).

Choices where frameworks differ (`MemoryOptions`; the plan's `train` fields of the same names), each default the
one Megatron-LM / DeepSpeed / FSDP mixed precision use, with the recipe that differs named:
  * master_weights "fp32" (Megatron `--bf16` keeps fp32 main params, DeepSpeed's bf16 optimizer an fp32 copy, FSDP
    MixedPrecision keeps fp32 sharded params) or "none": pure 16-bit training, torchtune's default (`dtype: bf16`
    loads the model in bf16 and torch.optim creates its states `zeros_like(param)`, so m and v are 16-bit too);
  * loss "standard": under Megatron-LM and DeepSpeed fp32 logits and their fp32 gradient, s·b·V/t × (4 + 4) on the
    last stage (Megatron's vocab-parallel cross-entropy keeps the softmax in place of the logits; DeepSpeed's
    pre-training stacks, Megatron-DeepSpeed and GPT-NeoX, call the same one); under FSDP, DDP and a single process
    PyTorch's eager `F.cross_entropy(logits.float())` (torchtitan train.py at 9dec370 / components/loss.py at e7c0cae,
    Hugging Face's ForCausalLMLoss): log_softmax keeps its fp32 output, and its backward holds that output, the fp32
    gradient nll_loss hands it and the fp32 gradient it returns at once, 4 + 4 + 4 = 12 bytes per logit (torchtitan
    frees the 16-bit logits before the backward, `del pred`); "chunked": torchtune's CEWithChunkedOutputLoss
    (pytorch/torchtune#1390, num_output_chunks 8) keeps the 16-bit logits (2 bytes) and upcasts one chunk of 8 at a
    time (fp32 copy + its gradient, 8/8 = 1 byte per logit); "fused": a fused linear cross-entropy (Liger-Kernel
    LigerFusedLinearCrossEntropyLoss, Apple's Cut Cross-Entropy) never materialises the logits (counted as 0);
    "flash-attn": flash-attn's Triton CrossEntropyLoss (flash_attn/losses/cross_entropy.py; llm-foundry's MPT default
    `loss_fn: fused_crossentropy`) saves the 16-bit logits and their fp32 log-sum-exp rows, and its backward writes a
    16-bit gradient (`torch.empty_like(logits)`): 2 + 2 bytes per logit;
    "auto" is chunked for LoRA/QLoRA (every torchtune LoRA/QLoRA recipe config names CEWithChunkedOutputLoss) and
    standard for full training;
  * optimizer_in_backward: torchtune's `optimizer_in_bwd` steps each parameter from a post-accumulate-grad hook and
    frees its gradient, so one tensor's gradient (the largest) is live instead of all of them;
  * adamw-8bit-paged: bitsandbytes' paged optimizers put their 8-bit states in CUDA unified memory, which the
    driver pages to host memory under pressure (bitsandbytes docs, "Paged optimizers"); counted as host-backed
    (`cpu_offload_bytes`), not against the GPU;
  * activation_offload: torchtune's `enable_activation_offloading` (OffloadActivations) moves the checkpointed layer
    inputs to host memory; with full recompute only the layer being recomputed stays;
  * reshard_after_forward (FSDP2 `fully_shard` default True): False keeps every layer's gathered weights from the
    forward to the backward, so at ZeRO-3 the weights are held whole at the peak (ZeRO-2's weights);
  * FSDP2 stages under PP (the FSDP2 script's pipeline()): no gradient sync until the step's end, so a rank holds its
    stages' 16-bit weights whole and their fp32 unsharded gradients (`pipeline_without_sync`, torch 2.13 source);
  * gradients live at the peak: with `zero_grad(set_to_none=True)` (PyTorch's default since 2.0) gradients do not
    exist during the forward of an un-accumulated step, so a single-replica or FSDP step without gradient
    accumulation peaks at max(activations + logits, gradients) on top of weights and optimizer states, not their
    sum; with accumulation, pipelines, DDP buckets or DeepSpeed/Megatron contiguous buffers they are all live;
  * PyTorch DDP (more than one replica) keeps its all-reduce buckets beside the gradients: two copies
    (`gradient_as_bucket_view=False`, the default; pytorch/pytorch#41954 measured the view saving one gradient size);
  * at ZeRO-3 outside DeepSpeed, FSDP holds the gathered layer and the next one it prefetches (FSDP docs,
    `backward_prefetch=BACKWARD_PRE` default; FSDP2 prefetches one layer ahead): 2 × the largest layer at the
    weight width (NF4 for a QLoRA base).

Allocator (`allocated` vs `reserved`): what torch.cuda.max_memory_allocated counts is `allocated`; the caching
allocator holds more (`reserved`). Without expandable segments (PyTorch's default) GMLake (Guo et al., ASPLOS
2024) measured 15% average fragmentation (1 − allocated/reserved; up to 33%) over eight LLM trainings on A100-80GB:
reserved = allocated / 0.85, the average, not the worst case. With `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`
(PyTorch docs, "CUDA memory management") a segment grows by mapping 2 MiB pages through the CUDA virtual-memory API
instead of caching fixed-size blocks — the mechanism GMLake's stitching uses to remove that fragmentation — so
reserved is allocated rounded up to the page, counted as equal. The CUDA context and NCCL buffers are outside both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...catalog.params import ParamCounts
from ...catalog.types import Architecture
from .activations import (
    OP_SAC,
    WEIGHT_BYTES,
    activation_bytes_per_layer,
    cnn_activation_bytes,
    loss_bytes_per_logit,
    loss_for,
    op_sac_bytes_per_layer,
    recompute_kind,
)
from .layout import Layout, Workload
from .parallel import cp_allgather_kv_bytes, cp_by_allgather, microbatches_in_flight, routed_expert_params

GIB = 2**30
MIB = 2**20

FP32_MASTER_BYTES = 4
# Optimizer states per trainable parameter in mixed precision, fp32 master included (see module docstring).
OPTIMIZER_STATE_BYTES = {"adamw": 12, "adamw-8bit": 6, "adamw-8bit-paged": 6, "sgd": 8, "adafactor": 4}
# The same states without a master copy, kept in the parameters' own 16-bit dtype (torch.optim states are
# `zeros_like(param)`); 8-bit states stay 1 byte each (bitsandbytes, Dettmers et al. 2022).
PURE_16BIT_STATE_BYTES = {"adamw": 4, "adamw-8bit": 2, "adamw-8bit-paged": 2, "sgd": 2, "adafactor": 0}
PAGED_OPTIMIZERS = ("adamw-8bit-paged",)
# QLoRA (Dettmers et al. 2023, §3): 4-bit NormalFloat weights, one fp32 absmax per 64-weight block quantised to
# 8 bits with a second-level fp32 constant per 256 blocks: 8/64 + 32/(64·256) = 0.127 bits per parameter.
NF4_BITS_PER_PARAM = 4 + 8 / 64 + 32 / (64 * 256)
# LoRA (Hu et al. 2021): a rank-r pair B·A on a d_in × d_out matrix adds r·(d_in + d_out) parameters.
LORA_TARGETS_DEFAULT = ("q", "k", "v", "o")

# Runtime, reported as `other`:
# CUDA context with the driver's kernel images: pytorch/pytorch#107667 (ptrblck, 2023): ~300 MB with lazy module
# loading (CUDA ≥ 11.7), > 1000 MB with eager loading; #28113 saw 200-700 MB. A training process loads most of
# cuBLAS/cuDNN/NCCL, so the eager figure is used.
CUDA_CONTEXT_BYTES = 1 * GIB
# NCCL per communicator: a 4 MiB FIFO (NCCL_BUFFSIZE default, NVIDIA/nccl#285) per channel and direction, up to
# 32 channels on NVLink-class links (NVIDIA/nccl#1685 shows 32 channels on 8×H100); #986: memory grows with
# channels and communicators. One communicator per parallel dimension in use (DP, TP, PP).
NCCL_BYTES_PER_COMMUNICATOR = 32 * 2 * 4 * MIB
# PyTorch's caching allocator strands memory: GMLake (Guo et al., ASPLOS 2024) measured 15% average
# fragmentation (1 − allocated/reserved) over eight LLM trainings on A100-80GB, so reserved = allocated / 0.85.
ALLOCATOR_FRAGMENTATION = 0.15
# What the driver leaves to processes: nvidia-smi shows 81559 MiB of an H100's 81920 MiB (ECC, driver) — see
# compiler/catalog/gpus.yaml header; the same share is taken for every part.
DEVICE_VISIBLE_SHARE = 81559 / 81920

# PyTorch DDP copies gradients into its all-reduce buckets unless gradient_as_bucket_view=True (default False);
# pytorch/pytorch#41954, which added the view: "roberta_base with ~1GB parameters, peak memory dropped ~1GB".
DDP_GRADIENT_COPIES = 2
# FSDP's gathered layers at ZeRO-3: the one computing and the one prefetched (module docstring).
FSDP_GATHERED_LAYERS = 2
# The FSDP2 script's gradient reduction dtype (MixedPrecisionPolicy reduce_dtype; torchtitan's
# mixed_precision_reduce default "float32"): the width of FSDP2's accumulated unsharded gradient under PP (below).
FSDP2_REDUCE_BYTES = 4


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU (the worse pipeline stage), and what offload moved to the host."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    other: int
    total: int
    cpu_offload_bytes: int
    allocated: int = 0  # what torch.cuda.max_memory_allocated would count at the peak
    reserved: int = 0  # allocated + what the caching allocator strands (module docstring)
    gathered: int = 0  # of `weights`: the layers FSDP holds gathered at ZeRO-3 (a working buffer, not a shard)
    accumulating: int = 0  # of `gradients`: FSDP2's unsharded gradients accumulated across a pipeline's micro-batches

    @property
    def model_states(self) -> int:
        return self.weights + self.gradients + self.optimizer


def usable_memory_bytes(gpu_memory_bytes: int) -> int:
    """What a training process can allocate: the device memory the driver exposes (runtime is in `other`)."""
    return int(gpu_memory_bytes * DEVICE_VISIBLE_SHARE)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def stage_params(arch: Architecture, params: ParamCounts, tp: int, pp: int) -> tuple[float, float]:
    """(first stage, last stage) parameters held by one GPU of that stage under Megatron TP×PP sharding."""
    if not arch.layers:  # CNNs: no transformer structure, replicated whole
        return float(params.total), float(params.total)
    layers = _ceil_div(arch.layers, pp)
    first = held_params(arch, params, tp, pp, layers, first=True, last=pp == 1)[0]
    last = held_params(arch, params, tp, pp, layers, first=pp == 1, last=True)[0]
    return first, last


def held_params(
    arch: Architecture, params: ParamCounts, tp: int, pp: int, layers: int, first: bool, last: bool, ep: int = 1
) -> tuple[float, float]:
    """(parameters, of which routed experts) one GPU of a stage of `layers` layers holds: the layers' matrices over
    TP (routed experts over EP too, train_layout docstring), their norms replicated, the input embedding on the
    first stage, the LM head (or, when tied, Megatron's copy of the word embeddings) and the final norm on the last."""
    routed = routed_expert_params(arch, params)
    dense_matrices = params.per_layer_attention + params.per_layer_mlp_total - routed
    experts = layers * routed / (tp * ep)
    body = layers * (dense_matrices / tp + params.per_layer_norm) + experts
    embedding_in = params.embedding - params.lm_head
    head = params.lm_head or (arch.vocab * arch.hidden if arch.tied_embeddings and pp > 1 else 0)
    final_norm = arch.hidden * (2 if arch.norm == "layernorm" else 1)
    held = body + (embedding_in / tp if first else 0.0) + (head / tp + final_norm if last else 0.0)
    return held, experts


# the base layers Megatron and transformers' TP plan split on their input (RowParallelLinear); the others on their output
ROW_PARALLEL_TARGETS = ("o", "down")


def lora_trainable_params(arch: Architecture, rank: int, targets: tuple[str, ...], tp: int = 1) -> float:
    """Adapter parameters over all layers: r·(d_in + d_out) per targeted matrix (Hu et al. 2021, §4.1); with `tp`,
    those one TP rank holds when the adapters are sharded as their base layers (PEFT's LoraParallelLinear,
    huggingface/peft src/peft/tuners/lora/tp_layer.py, which fsdp/lora_tp.py follows): a column-parallel base's
    B split on d_out (r·d_in + r·d_out/tp), a row-parallel base's A split on d_in (r·d_in/tp + r·d_out)."""
    d, q, kv = arch.hidden, arch.heads * arch.attention_head_dim, arch.kv_heads * arch.attention_head_dim
    f = arch.moe_ffn_hidden or arch.ffn_hidden
    experts = (arch.experts + arch.shared_experts) if arch.is_moe else 1
    shapes = {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "gate": (d, f), "up": (d, f), "down": (f, d)}
    per_layer = 0
    for target in targets or LORA_TARGETS_DEFAULT:
        if target not in shapes:
            continue
        copies = experts if target in ("gate", "up", "down") else 1
        d_in, d_out = shapes[target]
        split = (d_in / tp + d_out) if target in ROW_PARALLEL_TARGETS else (d_in + d_out / tp)
        per_layer += copies * rank * (split if tp > 1 else d_in + d_out)
    return per_layer * arch.layers


def optimizer_bytes_per_param(
    arch: Architecture, optimizer: str, precision: str, master_weights: str = "fp32"
) -> float:
    """K of the ZeRO paper for this optimizer and precision (module docstring); without a master copy (pure 16-bit)
    the states are in the weights' own width."""
    if master_weights == "none" and WEIGHT_BYTES[precision] == 2:
        if optimizer == "adafactor":
            rows, cols = max(1, arch.hidden), max(1, arch.ffn_hidden or arch.hidden)
            return 2 * (1 / rows + 1 / cols)
        return PURE_16BIT_STATE_BYTES[optimizer]
    if optimizer == "adafactor":
        rows, cols = max(1, arch.hidden), max(1, arch.ffn_hidden or arch.hidden)
        k = FP32_MASTER_BYTES + 4 * (1 / rows + 1 / cols)
    else:
        k = OPTIMIZER_STATE_BYTES[optimizer]
    return k - (FP32_MASTER_BYTES if precision in ("fp32", "tf32") else 0)


def deepspeed_model_states(
    params: float, largest_layer: float, ranks: int, stage: int, offload_optimizer: bool, offload_params: bool
) -> tuple[float, float, float, float]:
    """Model states as DeepSpeed 0.19 allocates them for 16-bit Adam (`estimate_zero2_model_states_mem_needs`,
    `estimate_zero3_model_states_mem_needs` in deepspeed/runtime/zero/stage_1_and_2.py and stage3.py):
    stage 2 keeps the 16-bit weights whole (2 B/param) and per rank an fp16 + fp32 gradient partition and the
    fp32 master, m, v (18 B/param/N); stage 3 keeps the same 18 B/param/N and gathers the largest layer into a
    4 B/param buffer. Returns (weights, gradients, optimizer) on the GPU and bytes on the CPU (DeepSpeed's
    1.5× host buffer factor left out)."""
    shard = params / ranks
    if stage == 2:
        if offload_optimizer:
            return 2 * params, 0.0, 0.0, 16 * params
        return 2 * params, 6 * shard, 12 * shard, 0.0
    gather = 4 * largest_layer
    if offload_optimizer and offload_params:
        return gather, 0.0, 0.0, 18 * shard
    if offload_optimizer:
        return gather + 2 * shard, 0.0, 0.0, 16 * shard
    return gather + 2 * shard, 4 * shard, 12 * shard, 0.0


def _communicators(layout: Layout) -> int:
    lay = layout
    return max(1, (lay.tp > 1) + (lay.pp > 1) + (lay.dp > 1) + (lay.cp > 1) + (lay.ep > 1))


def _shard_ranks(layout: Layout) -> int:
    """The ranks ZeRO shards over: the HSDP group, else DP·CP (Megatron shards over dp·cp, FSDP over dp_shard × cp)."""
    return max(1, layout.shard_group or layout.data_ranks)


def _recompute(work: Workload, layout: Layout) -> str:
    return recompute_kind(layout.recompute, layout.framework) if work.arch.layers else layout.recompute


def _layer_activations(work: Workload, layout: Layout) -> tuple[float, float]:
    """(bytes a layer keeps for its backward per micro-batch in flight, bytes of the one layer the backward re-runs
    under recompute): Korthikanti et al.'s terms for the recompute kind, what selective-op SAC keeps, and under
    all-gather CP the whole sequence's K/V beyond the local s/CP (parallel.cp_allgather_kv_bytes)."""
    arch, lay = work.arch, layout
    shape = (arch, work.seq_len, lay.micro_batch, lay.tp, lay.sequence_parallel)
    recompute = _recompute(work, lay)
    if recompute == OP_SAC:
        per_layer = op_sac_bytes_per_layer(*shape, lay.cp)
    else:
        per_layer = activation_bytes_per_layer(*shape, recompute, work.flash_attention, lay.cp)
    full_layer = 0.0
    if recompute in ("full", OP_SAC):  # the backward re-runs one layer and holds its full activations meanwhile
        full_layer = activation_bytes_per_layer(*shape, "none", work.flash_attention, lay.cp)
        if recompute == OP_SAC:  # what the recompute adds to the outputs the block kept
            full_layer = max(0.0, full_layer - per_layer)
        elif work.memory.activation_offload:  # the checkpointed layer inputs wait in host memory
            per_layer = 0.0
    if lay.cp > 1 and arch.layers and cp_by_allgather(lay.framework):
        beyond_local = _gathered_kv(work, lay) * (lay.cp - 1) / lay.cp  # the whole sequence's K/V beyond s/cp
        if recompute in ("full", OP_SAC):  # re-gathered by the layer being recomputed
            full_layer += beyond_local
        else:  # saved for the backward by every layer
            per_layer += beyond_local
    return per_layer, full_layer


def _gathered_kv(work: Workload, layout: Layout) -> float:
    """All-gather CP's K/V of one layer (or its gradient), held on top of the layers' activations."""
    if layout.cp > 1 and work.arch.layers and cp_by_allgather(layout.framework):
        return cp_allgather_kv_bytes(work.arch, work.seq_len, layout.micro_batch, layout.tp)
    return 0.0


def _logits(work: Workload, layout: Layout) -> float:
    """The loss's logits on the last stage, at the loss implementation's bytes per logit."""
    arch = work.arch
    if not (arch.vocab and arch.kind == "decoder"):
        return 0.0
    loss = loss_for(work.memory.loss, work.method)
    per_logit = loss_bytes_per_logit(loss, layout.framework, work.memory.eager_loss)
    return work.seq_len * layout.micro_batch * arch.vocab / (layout.tp * layout.cp) * per_logit


def _stages(work: Workload, layout: Layout) -> list[tuple[int, int, bool, bool]]:
    """(rank, layers, first, last) of the stages that bound the memory: the first, second and last bound every regular
    split (in-flight falls with the rank); a stated per-stage list is checked stage by stage."""
    arch, pp = work.arch, layout.pp
    if not arch.layers:
        return [(0, 0, True, True)]
    split = layout.stage_layers or (_ceil_div(arch.layers, pp),) * pp
    ranks = range(pp) if len(set(split[1:-1])) > 1 else sorted({0, min(1, pp - 1), pp - 1})
    return [(r, split[r], r == 0, r == pp - 1) for r in ranks]


def _stage_states(work: Workload, layout: Layout, layers: int, first: bool, last: bool) -> tuple[float, ...]:
    """(weights, gradients, optimizer, cpu, gathered, accumulating) bytes of one stage's GPU: its model states, the
    layers FSDP holds gathered, and under FSDP2 pipelining the whole stage's weights and fp32 gradients."""
    arch, lay = work.arch, layout
    if arch.layers:
        held, experts = held_params(arch, work.params, lay.tp, lay.pp, layers, first, last, lay.ep)
    else:
        held, experts = float(work.params.total), 0.0
    shard = _shard_ranks(lay)
    weights, gradients, optimizer, cpu = _model_states(work, lay, held, experts, shard)
    gathered = _gathered(work, lay, shard)
    accumulating = 0.0
    if pipeline_without_sync(lay.framework, lay.pp, lay.zero, shard, arch):
        unsharded = lay.with_changes(zero=0, offload=False, offload_params=False)
        whole_weights, whole_gradients, _, _ = _model_states(work, unsharded, held, experts, 1)
        if work.memory.reshard_after_forward:  # the stage's whole 16-bit weights replace the two-layer buffer
            weights += max(gathered, whole_weights) - gathered
            gathered = max(gathered, whole_weights)
        gradients = accumulating = whole_gradients / WEIGHT_BYTES[work.precision] * FSDP2_REDUCE_BYTES
    return weights, gradients, optimizer, cpu, gathered, accumulating


def _stage_memory(work: Workload, layout: Layout, stage: tuple[int, int, bool, bool]) -> MemoryBreakdown:
    """One stage's peak: model states + the activations of its micro-batches in flight + runtime and allocator."""
    arch, lay, options = work.arch, layout, work.memory
    rank, layers, first, last = stage
    weights, gradients, optimizer, cpu, gathered, accumulating = _stage_states(work, lay, layers, first, last)
    per_layer, full_layer = _layer_activations(work, lay)
    in_flight = microbatches_in_flight(lay.pp, lay.vp, rank, lay.microbatches(work))
    activations = in_flight * layers * per_layer + full_layer + _gathered_kv(work, lay)
    if not arch.layers:
        activations += cnn_activation_bytes(arch, work.precision, lay.micro_batch) / lay.tp
    if last:
        activations += _logits(work, lay)
    # gradients and activations not live together: an un-accumulated step of one replica or of FSDP (docstring)
    apart = lay.microbatches(work) == 1 and lay.pp == 1 and (lay.dp == 1 or lay.framework == "fsdp")
    allocated = weights + optimizer + (max(gradients, activations) if apart else gradients + activations)
    fragmentation = ALLOCATOR_FRAGMENTATION / (1 - ALLOCATOR_FRAGMENTATION)
    reserve = 0.0 if options.expandable_segments else allocated * fragmentation
    other = CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_COMMUNICATOR * _communicators(lay) + reserve
    return MemoryBreakdown(
        int(weights),
        int(gradients),
        int(optimizer),
        int(activations),
        int(other),
        int(allocated + other),
        int(cpu),
        int(allocated),
        int(allocated + reserve),
        int(gathered),
        int(accumulating),
    )


def memory_per_gpu(work: Workload, layout: Layout) -> MemoryBreakdown:
    """Peak bytes on one GPU of the worst pipeline stage: model states + activations + runtime.

    `layout.stage_layers`: layers per stage (parallel.pipeline_split; default ⌈L/p⌉ on every stage); CP divides the
    activations and joins the ZeRO shard group (Megatron shards over dp·cp, FSDP over dp_shard × cp; under FSDP the
    all-gathered K/V on top, parallel.cp_allgather_kv_bytes); EP divides the routed experts and their states; VP
    chunks per rank hold more micro-batches in flight (parallel.microbatches_in_flight)."""
    stages = [_stage_memory(work, layout, stage) for stage in _stages(work, layout)]
    return max(stages, key=lambda stage: stage.total)  # the first of equal totals, as the stages are listed


def pipeline_without_sync(framework: str, pp: int, zero_stage: int, shard: int, arch: Architecture) -> bool:
    """FSDP2 stages under torch.distributed.pipelining (fsdp/fsdp_tp.py's pipeline()): every micro-batch's backward
    runs with gradient sync off and the stage left unsharded (torch 2.13 torch/distributed/pipelining/stage.py
    `backward_maybe_with_nosync`: set_requires_gradient_sync(False), set_reshard_after_backward(False)); the stage's
    one reduce-scatter and reshard run once per step in `perform_reduce_grad` (schedules.py: after the last backward
    of Schedule1F1B, a REDUCE_GRAD action per stage in Interleaved1F1B). Meanwhile each parameter group keeps its
    16-bit all-gather output and accumulates its unsharded gradient in the reduce dtype (fsdp/_fully_shard/
    _fsdp_param.py `to_accumulated_grad_if_needed`, `accumulate_unsharded_grad_if_needed`), for every stage
    (chunk) the rank holds: after a backward the whole stage's weights are gathered and its fp32 gradients live
    to the step's end (measured: tests/test_fsdp_pp_memory_real.py)."""
    return framework == "fsdp" and pp > 1 and zero_stage >= 3 and shard > 1 and bool(arch.layers)


def largest_tensor_params(arch: Architecture, tp: int) -> float:
    """The largest single weight tensor on a GPU: the embedding (or LM head) or an MLP matrix, split over TP."""
    f = arch.moe_ffn_hidden or arch.ffn_hidden
    return max(arch.vocab * arch.hidden, arch.hidden * f, arch.hidden * arch.hidden) / tp


def _gathered(work: Workload, layout: Layout, shard: int) -> float:
    """FSDP (ZeRO-3 outside DeepSpeed) holds the layer it computes with and the one it prefetches (docstring)."""
    arch, lay = work.arch, layout
    if lay.zero < 3 or shard <= 1 or not work.memory.reshard_after_forward or lay.framework == "deepspeed":
        return 0.0
    if not arch.layers:
        return 0.0
    layer = (work.params.per_layer_attention + work.params.per_layer_mlp_total) / lay.tp
    base_bytes = NF4_BITS_PER_PARAM / 8 if work.method == "qlora" else WEIGHT_BYTES[work.precision]
    return FSDP_GATHERED_LAYERS * layer * base_bytes


def _expert_model_states(
    work: Workload, layout: Layout, held: float, experts: float, shard: int
) -> tuple[float, float, float, float]:
    """Full weights with EP: each GPU holds 1/ep of the experts, and ZeRO shards them over shard/ep ranks instead of
    shard (parallel.py docstring)."""
    lay = layout
    w = WEIGHT_BYTES[work.precision]
    k = optimizer_bytes_per_param(work.arch, work.optimizer, work.precision, work.memory.master_weights)
    expert_shard = max(1, shard // lay.ep)
    dense = held - experts
    weight_shard = shard if lay.zero >= 3 and work.memory.reshard_after_forward else 1
    expert_weight_shard = expert_shard if weight_shard > 1 else 1
    weights = dense * w / weight_shard + experts * w / expert_weight_shard + _gathered(work, lay, shard)
    gradients = (dense * w / shard + experts * w / expert_shard) if lay.zero >= 2 else held * w
    optimizer = (dense * k / shard + experts * k / expert_shard) if lay.zero >= 1 else held * k
    if lay.framework == "ddp" and shard > 1:
        gradients *= DDP_GRADIENT_COPIES
    cpu = 0.0
    if lay.offload:
        cpu += optimizer + gradients
        optimizer = gradients = 0.0
    return weights, gradients, optimizer, cpu


def _adapter_model_states(work: Workload, layout: Layout, held: float, shard: int) -> tuple[float, float, float]:
    """LoRA / QLoRA: the frozen base (QLoRA's linear layers in 4 bits) sharded as ZeRO-3 shards weights, the adapters
    with their gradients and optimizer states."""
    arch, lay, params = work.arch, layout, work.params
    w = WEIGHT_BYTES[work.precision]
    k = optimizer_bytes_per_param(arch, work.optimizer, work.precision, work.memory.master_weights)
    weight_shard = shard if lay.zero >= 3 and work.memory.reshard_after_forward else 1
    base_bytes = NF4_BITS_PER_PARAM / 8 if work.method == "qlora" else w
    layer_matrices = (params.per_layer_attention + params.per_layer_mlp_total) * _ceil_div(arch.layers, lay.pp) / lay.tp
    quantised = min(held, layer_matrices) if work.method == "qlora" else 0.0  # QLoRA quantises the linear layers only
    frozen = quantised * base_bytes + (held - quantised) * w
    trainable = lora_trainable_params(arch, work.lora_rank, work.lora_targets, lay.tp) / lay.pp
    weights = frozen / weight_shard + _gathered(work, lay, shard) + trainable * w
    gradients = trainable * w / (shard if lay.zero >= 2 else 1)
    optimizer = trainable * k / (shard if lay.zero >= 1 else 1)
    return weights, gradients, optimizer


def _model_states(
    work: Workload, layout: Layout, held: float, experts: float, shard: int
) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, cpu) bytes for `held` parameters on one GPU; `experts` of them are routed
    experts, whose states shard over the shard/ep expert-data-parallel ranks (parallel.py docstring)."""
    lay, options = layout, work.memory
    w = WEIGHT_BYTES[work.precision]
    if experts and lay.ep > 1 and work.method == "full":
        return _expert_model_states(work, lay, held, experts, shard)
    # without resharding after the forward every gathered layer stays until the backward: weights held whole
    weight_shard = shard if lay.zero >= 3 and options.reshard_after_forward else 1
    gathered = _gathered(work, lay, shard)
    if work.method == "full":
        deepspeed_allocates = w == 2 and work.optimizer == "adamw" and options.master_weights == "fp32"
        if lay.framework == "deepspeed" and deepspeed_allocates and lay.zero >= 2:
            largest = work.params.largest_layer / lay.tp
            return deepspeed_model_states(held, largest, shard, lay.zero, lay.offload, lay.offload_params)
        k = optimizer_bytes_per_param(work.arch, work.optimizer, work.precision, options.master_weights)
        weights = held * w / weight_shard + gathered
        gradients = held * w / (shard if lay.zero >= 2 else 1)
        optimizer = held * k / (shard if lay.zero >= 1 else 1)
    else:
        weights, gradients, optimizer = _adapter_model_states(work, lay, held, shard)
    return _placed(work, lay, (weights, gradients, optimizer), gathered, shard)


def _placed(
    work: Workload, layout: Layout, states: tuple[float, float, float], gathered: float, shard: int
) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, cpu): the states where the framework keeps them — one gradient tensor at a
    time (optimizer in backward), DDP's second gradient copy, paged or offloaded optimizer states on the host."""
    lay = layout
    weights, gradients, optimizer = states
    cpu = 0.0
    if work.memory.optimizer_in_backward:  # one tensor's gradient at a time
        gradients = min(gradients, largest_tensor_params(work.arch, lay.tp) * WEIGHT_BYTES[work.precision])
    elif lay.framework == "ddp" and shard > 1:  # DDP's all-reduce buckets hold a second gradient copy
        gradients *= DDP_GRADIENT_COPIES
    if work.optimizer in PAGED_OPTIMIZERS:  # unified memory the driver pages to the host under pressure
        cpu += optimizer
        optimizer = 0.0
    if lay.offload:  # ZeRO-Offload keeps the gradient partition next to the optimizer states on the host
        cpu += optimizer + gradients
        optimizer = gradients = 0.0
    if lay.offload_params and lay.zero >= 3:
        cpu += weights - gathered
        weights = gathered
    return weights, gradients, optimizer, cpu


def model_state_bytes_zero_paper(params: float, zero_stage: int, ranks: int, k: float = 12) -> float:
    """The ZeRO paper's Fig. 1 accounting: (2 + 2 + K)·Ψ, then /N_d on what each stage shards."""
    if zero_stage == 0:
        return (4 + k) * params
    if zero_stage == 1:
        return 4 * params + k * params / ranks
    if zero_stage == 2:
        return 2 * params + (2 + k) * params / ranks
    return (4 + k) * params / ranks


def checkpoint_bytes(
    params: ParamCounts, optimizer: str, method: str, lora_trainable: int = 0, master_weights: str = "fp32"
) -> int:
    """A resumable checkpoint: 16-bit weights + the optimizer's fp32 state, 2 + K bytes per trained parameter
    (BLOOM-176B: 176e9 × 14 B = 2.46e12 B against the reported 2.3 TB, bigscience tr11 README); pure 16-bit training
    saves its 16-bit states instead. LoRA and QLoRA save the adapters and their states only; the frozen base is
    already on storage."""
    trained = params.total if method == "full" else lora_trainable
    states = PURE_16BIT_STATE_BYTES[optimizer] if master_weights == "none" else OPTIMIZER_STATE_BYTES[optimizer]
    return int(trained * (2 + states))
