"""Training model states per GPU: weights, gradients and optimizer states, as the ZeRO paper counts them and as the
frameworks allocate them (memory.py adds the activations and the runtime).

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
  worse of the two stages. The multi-token-prediction modules Megatron-LM trains (--mtp-num-layers) sit on the last
  stage with a copy of the word embeddings (`held_params`).
"""

from __future__ import annotations

from typing import NamedTuple

from ...catalog.params import ParamCounts, mtp_projection_params
from ...catalog.types import Architecture
from .activations import WEIGHT_BYTES
from .layout import Layout, Workload
from .parallel import routed_expert_params

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

# PyTorch DDP copies gradients into its all-reduce buckets unless gradient_as_bucket_view=True (default False);
# pytorch/pytorch#41954, which added the view: "roberta_base with ~1GB parameters, peak memory dropped ~1GB".
DDP_GRADIENT_COPIES = 2
# FSDP's gathered layers at ZeRO-3: the one computing and the one prefetched (memory.py docstring).
FSDP_GATHERED_LAYERS = 2
# The FSDP2 script's gradient reduction dtype (MixedPrecisionPolicy reduce_dtype; torchtitan's
# mixed_precision_reduce default "float32"): the width of FSDP2's accumulated unsharded gradient under PP (below).
FSDP2_REDUCE_BYTES = 4
# Megatron-LM keeps a bf16 model's gradients in an fp32 main_grad buffer and reduces them in fp32: validate_args
# ("bfloat16 requires gradient accumulation and all-reduce to be done in fp32": accumulate_allreduce_grads_in_fp32
# with the default --main-grads-dtype fp32; megatron/training/arguments.py at the pinned commit and core_v0.8.0), the
# buffer's dtype float32 under grad_reduce_in_fp32 (megatron/core/distributed/param_and_grad_buffer.py); Megatron's
# distributed-optimizer guide: "bf16 param, fp32 grads: 6 + 12/d" bytes per parameter. Measured on an H200 (device
# run 4, benchmarks/calibration/h200-megatron-run4): the 2-B count left 5.6 GB of an 8-layer Llama under-predicted.
MEGATRON_BF16_GRADIENT_BYTES = 4
# With --grad-reduce-in-bf16 the buffer is bf16 and Megatron's optimizer steps on an fp32 copy of the gradients it
# owns (Float16OptimizerWithFloat16Params: main_param.grad = main_grad.float(); the distributed optimizer: its shard),
# kept between steps. Measured on an H200 (device run 4, benchmarks/calibration/h200-megatron-run4): the 2-layer MoE
# plan's allocated memory rose by 6,036 MiB = 2 B x 3.16B parameters at ZeRO-0 when its gradients went to bf16.
FP32_GRADIENT_COPY_BYTES = 4


def fp32_gradient_copy_bytes(work: Workload, layout: Layout, owned_params: float) -> float:
    """Megatron-LM's fp32 copy of the gradients a rank's optimizer owns, when the buffer is bf16 (above); none where
    the optimizer reads the bf16 gradients itself (MemoryOptions.fp32_gradient_copy: NeMo 1.x's apex
    DistributedFusedAdam)."""
    megatron_bf16 = layout.framework == "megatron" and work.precision in ("bf16", "fp8")
    if not (megatron_bf16 and work.memory.bf16_gradients and work.memory.fp32_gradient_copy):
        return 0.0
    return owned_params * FP32_GRADIENT_COPY_BYTES


def gradient_bytes_per_param(work: Workload, layout: Layout) -> float:
    """Bytes of one parameter's gradient as the framework holds it: the weights' width, but Megatron-LM's fp32
    main_grad for bf16 (and fp8, which Megatron runs with --bf16) models, unless the plan reduces them in bf16."""
    if layout.framework == "megatron" and work.precision in ("bf16", "fp8") and not work.memory.bf16_gradients:
        return MEGATRON_BF16_GRADIENT_BYTES
    return WEIGHT_BYTES[work.precision]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def stage_params(arch: Architecture, params: ParamCounts, tp: int, pp: int) -> tuple[float, float]:
    """(first stage, last stage) parameters held by one GPU of that stage under Megatron TP×PP sharding."""
    if not arch.layers:  # CNNs: no transformer structure, replicated whole
        return float(params.total), float(params.total)
    layers = ceil_div(arch.layers, pp)
    first = held_params(arch, params, tp, pp, StageSlice(layers, first=True, last=pp == 1))[0]
    last = held_params(arch, params, tp, pp, StageSlice(layers, first=pp == 1, last=True))[0]
    return first, last


class StageSlice(NamedTuple):
    """A pipeline stage as the parameters it holds see it: its layers, whether it is the first or the last, and the
    multi-token-prediction modules it runs (the last stage's, Layout.mtp_layers)."""

    layers: int
    first: bool
    last: bool
    mtp: int = 0


def held_params(
    arch: Architecture, params: ParamCounts, tp: int, pp: int, stage: StageSlice, ep: int = 1
) -> tuple[float, float]:
    """(parameters, of which routed experts) one GPU of a stage of `layers` layers holds: the layers' matrices over
    TP (routed experts over EP too, train_layout docstring), their norms replicated, the input embedding on the
    first stage, the LM head (or, when tied, Megatron's copy of the word embeddings) and the final norm on the last.
    `mtp`: multi-token-prediction modules on the last stage (Layout.mtp_layers), each one more layer of the same
    split, its 2d → d projection over TP (a ColumnParallelLinear) and its three norms (catalog/params.mtp_params);
    with PP the last stage also keeps a copy of the word embeddings for them (megatron/core/models/common/
    language_module/language_module.py: "we also need to maintain duplicated embedding weights in mtp process
    stage"), unless a tied head already is that copy."""
    layers, first, last, mtp = stage
    routed = routed_expert_params(arch, params)
    dense_matrices = params.per_layer_attention + params.per_layer_mlp_total - routed
    mtp = mtp if last else 0
    experts = (layers + mtp) * routed / (tp * ep)
    body = layers * (dense_matrices / tp + params.per_layer_norm) + experts
    embedding_in = params.embedding - params.lm_head
    head = params.lm_head or (arch.vocab * arch.hidden if arch.tied_embeddings and pp > 1 else 0)
    final_norm = arch.hidden * (2 if arch.norm == "layernorm" else 1)
    held = body + (embedding_in / tp if first else 0.0) + (head / tp + final_norm if last else 0.0)
    if mtp:
        module = (dense_matrices + mtp_projection_params(arch)) / tp + params.per_layer_norm + 3 * final_norm
        embedding_copy = embedding_in / tp if not first and not (arch.tied_embeddings and pp > 1) else 0.0
        held += mtp * module + embedding_copy
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


def largest_tensor_params(arch: Architecture, tp: int) -> float:
    """The largest single weight tensor on a GPU: the embedding (or LM head) or an MLP matrix, split over TP."""
    f = arch.moe_ffn_hidden or arch.ffn_hidden
    return max(arch.vocab * arch.hidden, arch.hidden * f, arch.hidden * arch.hidden) / tp


def gathered_layer_bytes(work: Workload, layout: Layout, shard: int) -> float:
    """FSDP (ZeRO-3 outside DeepSpeed) holds the layer it computes with and the one it prefetches (memory.py
    docstring)."""
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
    weights = dense * w / weight_shard + experts * w / expert_weight_shard + gathered_layer_bytes(work, lay, shard)
    g = gradient_bytes_per_param(work, lay)
    gradients = (dense * g / shard + experts * g / expert_shard) if lay.zero >= 2 else held * g
    owned = (dense / shard + experts / expert_shard) if lay.zero >= 1 else held
    gradients += fp32_gradient_copy_bytes(work, lay, owned)
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
    layer_matrices = (params.per_layer_attention + params.per_layer_mlp_total) * ceil_div(arch.layers, lay.pp) / lay.tp
    quantised = min(held, layer_matrices) if work.method == "qlora" else 0.0  # QLoRA quantises the linear layers only
    frozen = quantised * base_bytes + (held - quantised) * w
    trainable = lora_trainable_params(arch, work.lora_rank, work.lora_targets, lay.tp) / lay.pp
    weights = frozen / weight_shard + gathered_layer_bytes(work, lay, shard) + trainable * w
    gradients = trainable * w / (shard if lay.zero >= 2 else 1)
    optimizer = trainable * k / (shard if lay.zero >= 1 else 1)
    return weights, gradients, optimizer


def model_states_on_gpu(
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
    gathered = gathered_layer_bytes(work, lay, shard)
    if work.method == "full":
        deepspeed_allocates = w == 2 and work.optimizer == "adamw" and options.master_weights == "fp32"
        if lay.framework == "deepspeed" and deepspeed_allocates and lay.zero >= 2:
            largest = work.params.largest_layer / lay.tp
            return deepspeed_model_states(held, largest, shard, lay.zero, lay.offload, lay.offload_params)
        k = optimizer_bytes_per_param(work.arch, work.optimizer, work.precision, options.master_weights)
        weights = held * w / weight_shard + gathered
        gradients = held * gradient_bytes_per_param(work, lay) / (shard if lay.zero >= 2 else 1)
        gradients += fp32_gradient_copy_bytes(work, lay, held / (shard if lay.zero >= 1 else 1))
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
    params: ParamCounts,
    optimizer: str,
    method: str,
    lora_trainable: int = 0,
    master_weights: str = "fp32",
    mtp_params: int = 0,
) -> int:
    """A resumable checkpoint: 16-bit weights + the optimizer's fp32 state, 2 + K bytes per trained parameter
    (BLOOM-176B: 176e9 × 14 B = 2.46e12 B against the reported 2.3 TB, bigscience tr11 README); pure 16-bit training
    saves its 16-bit states instead. LoRA and QLoRA save the adapters and their states only; the frozen base is
    already on storage. `mtp_params`: trained multi-token-prediction modules, saved with the model."""
    trained = params.total + mtp_params if method == "full" else lora_trainable
    states = PURE_16BIT_STATE_BYTES[optimizer] if master_weights == "none" else OPTIMIZER_STATE_BYTES[optimizer]
    return int(trained * (2 + states))
