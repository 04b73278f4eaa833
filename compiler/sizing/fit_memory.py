"""Training memory per GPU: model states (ZeRO paper) and activations (Korthikanti et al. 2022), by term.

Model states (Rajbhandari et al. 2019, "ZeRO", §3 and Fig. 1), per parameter held by a GPU:
  weights  w bytes (2 in 16-bit mixed precision, 4 in fp32; fp8 training keeps bf16 weights, Transformer
           Engine's recipe), gradients w bytes, optimizer K bytes: mixed-precision Adam keeps fp32 master +
           m + v = 12 (K = 12); 8-bit Adam (Dettmers et al. 2022) 1-byte m and v + fp32 master = 6;
           SGD with momentum 4 + fp32 master 4 = 8; Adafactor (Shazeer & Stern 2018) factors the second
           moment into row/column vectors (negligible) and keeps no momentum: fp32 master only = 4.
           In fp32 training the weights are the master copy, so K drops the 4-byte master.
  Megatron shards layer parameters over TP×PP; the embedding is split over TP and held by the first
  stage (the LM head by the last). ZeRO stage 1 shards the optimizer over DP, stage 2 also gradients,
  stage 3 also weights (FSDP SHARD_GRAD_OP ≈ 2, FULL_SHARD ≈ 3). CPU offload moves the optimizer states
  (and at stage 3 the weights) off the GPU.

Activations per transformer layer and micro-batch, 16-bit (Korthikanti et al. 2022, Table 2 and §4):
  s·b·h·(34 + 5·a·s/h), from attention 11·sbh + 5·a·s²·b, MLP 19·sbh, two LayerNorms 4·sbh. Generalised:
  * GQA: K and V are g = kv_heads/heads as wide as Q, so the attention's 11 becomes 7 + 4·g;
  * MLP of width f: input 2·sbh + dropout mask sbh + (non-gated) activation input and output 2·2·sbf, or
    (gated) gate and up outputs and their product 3·2·sbf; f = 4h non-gated gives Korthikanti's 19;
  * MoE: the expert term counts experts_per_token experts (each token visits k experts);
  * TP divides everything but the 10·sbh of LayerNorm inputs, block inputs and dropout masks; sequence
    parallelism divides those too (the paper's 34/t); flash attention stores no s² scores (5·a·s²·b gone);
  * selective recompute drops the scores term; full recompute stores only the layer input 2·sbh (/t with SP);
  * 1F1B pipeline: the first stage holds min(pp, micro-batches) micro-batches of its L/pp layers (§4.2.3);
  * the loss holds fp32 logits s·b·V/t × 4 bytes and their gradient (×2) on the last stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.params import ParamCounts
from ..catalog.types import Architecture

GIB = 2**30
WEIGHT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
OPTIMIZER_BYTES_MIXED = {"adamw": 12, "adamw-8bit": 6, "sgd": 8, "adafactor": 4}
FP32_MASTER_BYTES = 4
# QLoRA (Dettmers et al. 2023, §3): NF4 weights 4 bits + double-quantised constants 0.127 bits per parameter.
QLORA_BITS_PER_PARAM = 4 + 0.127
# CUDA context + cuBLAS workspace + NCCL buffers: PyTorch's CUDA context alone takes ~500 MiB on
# H100/A100 (nvidia-smi of `torch.cuda.init()`), NCCL's default 4 MiB buffers over up to 32 channels and
# both directions add ~256 MiB per communicator; 1.5 GiB covers the usual 2-3 communicators (DP, TP, PP).
RUNTIME_RESERVED_BYTES = int(1.5 * GIB)
# PyTorch's caching allocator fragments: usable = 90% of the device (DeepSpeed/Megatron practice of a 10%
# reserve; PyTorch issue #74476 reports 5-15% fragmentation for transformer training).
ALLOCATOR_USABLE_SHARE = 0.90
LOGITS_BYTES = 4  # fp32 logits, as the cross-entropy of Megatron and HF compute them
LOGITS_COPIES = 2  # the logits and their gradient


@dataclass(frozen=True)
class MemoryBreakdown:
    weights: int
    gradients: int
    optimizer: int
    activations: int
    other: int
    total: int
    cpu_offload_bytes: int


def usable_memory_bytes(gpu_memory_bytes: int) -> int:
    """What a plan may fill, runtime included: the allocator's fragmentation reserve is kept free."""
    return int(gpu_memory_bytes * ALLOCATOR_USABLE_SHARE)


def params_on_first_stage(arch: Architecture, params: ParamCounts, tp: int, pp: int) -> float:
    """Parameters the worst (first) pipeline stage holds on one GPU; with pp = 1 also the LM head."""
    per_layer = params.per_layer_attention + params.per_layer_mlp_total + params.per_layer_norm
    layers = max(1, -(-arch.layers // pp)) if arch.layers else 1
    embedding_in = params.embedding - params.lm_head
    held = layers * per_layer + embedding_in + (params.lm_head if pp == 1 else 0)
    if not arch.layers:  # CNNs: no transformer structure
        held = params.total
    return held / tp


def lora_trainable_params(arch: Architecture, rank: int, targets: tuple[str, ...]) -> int:
    """A LoRA pair B·A of rank r on a d_in × d_out matrix adds r·(d_in + d_out) parameters (Hu et al. 2021)."""
    d, q, kv = arch.hidden, arch.heads * arch.attention_head_dim, arch.kv_heads * arch.attention_head_dim
    f = arch.moe_ffn_hidden or arch.ffn_hidden
    shapes = {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "gate": (d, f), "up": (d, f), "down": (f, d)}
    per_layer = sum(rank * sum(shapes[t]) for t in targets if t in shapes)
    return per_layer * arch.layers


def activation_bytes_per_layer(arch: Architecture, seq_len: int, micro_batch: int, tp: int, sequence_parallel: bool,
                               recompute: str, flash_attention: bool) -> float:
    s, b, h, t = seq_len, micro_batch, arch.hidden, tp
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    g = arch.kv_heads / arch.heads if arch.heads else 1
    f = (arch.moe_ffn_hidden or arch.ffn_hidden) * (arch.experts_per_token if arch.is_moe else 1)
    attention = (7 + 4 * g) * sbh
    mlp = 3 * sbh + (6 if arch.gated_mlp else 4) * s * b * f
    norms = 4 * sbh
    replicated = 10 * sbh  # LayerNorm inputs, block inputs, dropout masks: split by TP only with SP
    sharded = attention + mlp + norms - replicated
    total = sharded / t + (replicated / t if sequence_parallel else replicated)
    if not flash_attention and recompute == "none":
        total += 5 * arch.heads * s * s * b / t
    return total


def _deepspeed_model_states(params: float, largest_layer: float, gpus: int, stage: int, offload_optimizer: bool,
                            offload_params: bool) -> tuple[float, float, float, float]:
    """Model states as DeepSpeed allocates them (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py,
    `estimate_zero{2,3}_model_states_mem_needs`): stage 2 keeps 2 B/param of fp16 weights plus
    18 B/param/N (fp16 and fp32 gradient partitions, fp32 master, two moments); stage 3 keeps
    18 B/param/N plus a 4 B/param buffer of the largest layer it gathers. Returns weights, gradients,
    optimizer states on the GPU and bytes on the CPU (DeepSpeed's own 1.5× CPU buffer factor left out)."""
    shard = params / gpus
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


def memory_per_gpu(arch: Architecture, params: ParamCounts, *, precision: str, optimizer: str, method: str,
                   lora_rank: int, lora_targets: tuple[str, ...], tp: int, pp: int, dp: int, zero_stage: int,
                   offload_optimizer: bool, offload_params: bool, seq_len: int, micro_batch: int, microbatches: int,
                   recompute: str, sequence_parallel: bool, flash_attention: bool, framework: str = "") -> MemoryBreakdown:
    held = params_on_first_stage(arch, params, tp, pp)
    w = WEIGHT_BYTES[precision]
    k = OPTIMIZER_BYTES_MIXED[optimizer] - (FP32_MASTER_BYTES if precision == "fp32" else 0)
    cpu = 0.0
    if method == "full":
        trainable = held
        weights = held * w / (dp if zero_stage == 3 else 1)
        gradients = trainable * w / (dp if zero_stage >= 2 else 1)
        optimizer_bytes = trainable * k / (dp if zero_stage >= 1 else 1)
    else:
        base = QLORA_BITS_PER_PARAM / 8 if method == "qlora" else w
        trainable = lora_trainable_params(arch, lora_rank, lora_targets) / (tp * pp)
        weights = held * base + trainable * w
        gradients = trainable * w
        optimizer_bytes = trainable * (OPTIMIZER_BYTES_MIXED[optimizer]) / (dp if zero_stage >= 1 else 1)
    if framework == "deepspeed" and method == "full" and w == 2 and optimizer == "adamw" and zero_stage >= 2:
        weights, gradients, optimizer_bytes, cpu = _deepspeed_model_states(held, params.largest_layer / tp, dp, zero_stage,
                                                                           offload_optimizer, offload_params)
        offload_optimizer = offload_params = False  # already placed
    if offload_optimizer:
        cpu += optimizer_bytes + gradients  # ZeRO-Offload keeps the gradient partition on the CPU too
        optimizer_bytes = gradients = 0
    if offload_params and zero_stage == 3:
        cpu += weights
        weights = 0
    in_flight = min(pp, microbatches)
    layers_on_stage = -(-arch.layers // pp) if arch.layers else 0
    activations = in_flight * layers_on_stage * activation_bytes_per_layer(
        arch, seq_len, micro_batch, tp, sequence_parallel, recompute, flash_attention)
    if pp == 1 and arch.vocab and arch.kind == "decoder":
        activations += seq_len * micro_batch * arch.vocab / tp * LOGITS_BYTES * LOGITS_COPIES
    other = RUNTIME_RESERVED_BYTES
    total = weights + gradients + optimizer_bytes + activations + other
    return MemoryBreakdown(int(weights), int(gradients), int(optimizer_bytes), int(activations), int(other),
                           int(total), int(cpu))
