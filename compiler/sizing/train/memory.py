"""Training memory per GPU, term by term: model states (ZeRO paper), activations (Korthikanti et al. 2022), runtime.

Model states: model_states.py (the ZeRO paper's bytes per parameter, DeepSpeed's allocation, Megatron's sharding
over TP × PP stages).

Activations: activations.py (Korthikanti et al. 2022, generalised; the losses' logits); the dropout masks Table 2
counts only where the recipe's dropout is > 0 (`Workload.dropout`, activations.py docstring).

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

Multi-token prediction (Layout.mtp_layers: where the framework's launch trains it, Megatron-LM): the last stage holds
each MTP module's states (model_states.held_params), one layer's activations per module for every micro-batch in
flight, and the logits of each module's own cross-entropy beside the main loss's (Megatron-LM's process_mtp_loss runs
the shared output layer and the loss once per depth; megatron/core/transformer/multi_token_prediction.py); the saved
input of the module's 2d → d projection (4·s·b·d bytes, under a tenth of a layer's activations) is not counted.

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

from ...catalog.types import Architecture
from .activations import (
    OP_SAC,
    WEIGHT_BYTES,
    LayerShape,
    activation_bytes_per_layer,
    cnn_activation_bytes,
    fp8_gemm_inputs,
    loss_bytes_per_logit,
    loss_for,
    op_sac_bytes_per_layer,
    recompute_kind,
    stores_dropout_masks,
)
from .layout import Layout, Workload
from .model_states import (
    FSDP2_REDUCE_BYTES,
    StageSlice,
    ceil_div,
    gathered_layer_bytes,
    held_params,
    model_states_on_gpu,
)
from .parallel import cp_allgather_kv_bytes, cp_by_allgather, microbatches_in_flight

GIB = 2**30
MIB = 2**20

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
    shape = LayerShape(arch, work.seq_len, lay.micro_batch, lay.tp, lay.sequence_parallel)
    recompute = _recompute(work, lay)
    masks = stores_dropout_masks(work.dropout)  # the recipe's dropout: masks only with p > 0 (activations.py)
    fp8 = fp8_gemm_inputs(work.precision, lay.framework)  # Transformer Engine keeps FP8 GEMM inputs
    if recompute == OP_SAC:
        per_layer = op_sac_bytes_per_layer(*shape, lay.cp)
    else:
        per_layer = activation_bytes_per_layer(shape, recompute, work.flash_attention, lay.cp, masks, fp8)
    full_layer = 0.0
    if recompute in ("full", OP_SAC):  # the backward re-runs one layer and holds its full activations meanwhile
        full_layer = activation_bytes_per_layer(shape, "none", work.flash_attention, lay.cp, masks, fp8)
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
    split = layout.stage_layers or (ceil_div(arch.layers, pp),) * pp
    ranks = range(pp) if len(set(split[1:-1])) > 1 else sorted({0, min(1, pp - 1), pp - 1})
    return [(r, split[r], r == 0, r == pp - 1) for r in ranks]


def _stage_states(work: Workload, layout: Layout, layers: int, first: bool, last: bool) -> tuple[float, ...]:
    """(weights, gradients, optimizer, cpu, gathered, accumulating) bytes of one stage's GPU: its model states, the
    layers FSDP holds gathered, and under FSDP2 pipelining the whole stage's weights and fp32 gradients."""
    arch, lay = work.arch, layout
    if arch.layers:
        stage = StageSlice(layers, first, last, lay.mtp_layers(work))
        held, experts = held_params(arch, work.params, lay.tp, lay.pp, stage, lay.ep)
    else:
        held, experts = float(work.params.total), 0.0
    shard = _shard_ranks(lay)
    weights, gradients, optimizer, cpu = model_states_on_gpu(work, lay, held, experts, shard)
    gathered = gathered_layer_bytes(work, lay, shard)
    accumulating = 0.0
    if pipeline_without_sync(lay.framework, lay.pp, lay.zero, shard, arch):
        unsharded = lay.with_changes(zero=0, offload=False, offload_params=False)
        whole_weights, whole_gradients, _, _ = model_states_on_gpu(work, unsharded, held, experts, 1)
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
    mtp = lay.mtp_layers(work) if last else 0  # each MTP module: one more layer and its own loss's logits
    activations = in_flight * (layers + mtp) * per_layer + full_layer + _gathered_kv(work, lay)
    if not arch.layers:
        activations += cnn_activation_bytes(arch, work.precision, lay.micro_batch) / lay.tp
    if last:
        activations += (1 + mtp) * _logits(work, lay)
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
