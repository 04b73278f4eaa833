"""Activation and loss bytes of a training step, per transformer layer and micro-batch (memory.py sums them).

Activations, bytes per transformer layer and micro-batch, 16-bit (Korthikanti et al. 2022, §4.1, Table 2):
  s·b·h·(34 + 5·a·s/h) = attention 11·sbh + 5·a·s²·b, MLP 19·sbh, two LayerNorm inputs 4·sbh, where
    attention 11 = QKV input 2 + Q and K 4 + V 2 + out-projection input 2 + its dropout mask 1; scores: softmax
    output 2·as²b + dropout mask as²b + dropout output (the V-GEMM's input) 2·as²b;
    MLP 19 = input 2 + first GEMM output (GeLU input) 8 + GeLU output 8 + dropout mask 1 (width 4h).
  Dropout (1 byte per element of each mask): the paper's count stores three masks, the sbh ones after the attention
  block and after the MLP and the as²b one on the scores. A model trained with dropout 0 stores none: ATen's
  `dropout` (aten/src/ATen/native/Dropout.cpp, which torch.nn.functional.dropout calls) takes the fused
  `native_dropout` kernel, the one that returns a mask, only when `is_fused_kernel_acceptable` (p > 0 and p < 1), and
  `_dropout_impl` returns its input itself when p == 0; Megatron-LM's bias-dropout-add calls that F.dropout and adds
  the residual (megatron/core/fusions/fused_bias_dropout.py `_bias_dropout_add_func` @d98e8a6), and its unfused core
  attention passes the softmax output through `torch.nn.Dropout(config.attention_dropout)` to the V-GEMM
  (transformer/dot_product_attention.py `forward`), so with p = 0 that GEMM saves the softmax output itself: the
  scores keep 2·as²b, not 5. Without dropout a layer is s·b·h·(32 + 2·a·s/h). The dropout is the recipe's
  (recipe.decide.decide_dropout: the plan's train.recipe.dropout, else its family's published value).
  Generalised here, each term derived the same way (m = 1 with dropout masks, 0 without):
  * GQA (Ainslie et al. 2023): K and V are g = kv_heads/heads as wide as Q: Q 2 + K,V 4·g; attention
    = 2 + 2 + 4·g + 2 + m = 6 + 4·g + m (MHA with dropout: 11);
  * MLP of width f: input 2·sbh + dropout mask m·sbh + non-gated: activation input and output 2·(2·sbf), or
    gated (SwiGLU): gate and up outputs + their product 3·(2·sbf); f = 4h non-gated gives the paper's 19;
  * MoE: every token visits experts_per_token experts (+ shared experts), so the f term counts that many
    expert widths; the router's logits s·b·E (fp32, 4 bytes) are kept for its softmax backward;
  * TP divides every term but the replicated (8 + 2·m)·sbh (Table 2: 10 + 24/t): the two LayerNorm inputs 4, the
    inputs of the column-parallel QKV and first MLP GEMMs 4 (each rank holds them whole) and the two sbh dropout
    masks 2·m; the 24 that TP divides are Q, K, V 6 and the out-projection input 2 in attention and the MLP's 8 + 8.
    Sequence parallelism divides the replicated ones too (34/t, 32/t without dropout);
  * flash attention (Dao et al. 2022) keeps no s×s scores: the (2 + 3·m)·a·s²·b term is gone (it stores O and the
    softmax statistics, counted in the out-projection input; its dropout regenerates the mask from the RNG state);
  * selective recompute recomputes the attention core: the scores term is gone (Table 2 "34·sbh/t");
  * full recompute stores only each layer's input 2·sbh (/t with SP) and re-runs the layer in the backward,
    which then needs one layer's full activations at a time;
  * "selective" is the framework's own selective recompute: Megatron-LM's core-attention recompute above, and on
    the FSDP path torchtitan's op-level selective AC (`op_sac_bytes_per_layer`), which keeps the outputs of chosen
    ops and recomputes the rest of the block, one block at a time in the backward like full recompute;
  * 1F1B pipeline: stage i holds p − i micro-batches in flight, so the first holds min(p, m) (§4.2.3), the
    last one;
  * FP8 under Transformer Engine (Megatron-LM's fp8): a GEMM keeps the FP8 cast of its input for the weight
    gradient, 1 byte an element (TE 2.x transformer_engine/pytorch/module/layernorm_linear.py `_LayerNormLinear`
    saves the quantized `ln_out`, module/linear.py `_Linear` its quantized input): the QKV and first-MLP inputs
    4 → 2·sbh and the second MLP GEMM's input 2 → 1·sbf; the out-projection's FP8 copy of O adds 1·sbh, as the
    attention kernel keeps O in 16 bits for its own backward. A layer keeps (1 + f/h)·sbh/t less with SP.
    torchao's float8 (torchtitan) saves the 16-bit input: only Megatron-LM's fp8 takes it (`fp8_gemm_inputs`).
"""

from __future__ import annotations

from typing import NamedTuple

from ...catalog.types import Architecture
from ..cnn.layers import table_for
from ..cnn.train import stored_elements_per_item

# Bytes per element of the weights (fp8 training keeps bf16 weights and casts per GEMM, memory.py docstring).
WEIGHT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}

SDPA_LOGSUMEXP_BYTES = 4  # flash / efficient SDPA return fp32 log-sum-exp rows (one per query and head)

ACTIVATION_BYTES = 2  # 16-bit activations (Korthikanti et al. count 2 bytes per element, 1 per dropout mask)

MASK_BYTES = 1  # a dropout mask: one byte per element (Korthikanti et al.; ATen's native_dropout returns a bool mask)

# A workload that states no dropout is priced as Table 2 counts it, masks included: Megatron-LM's TransformerConfig
# defaults hidden_dropout and attention_dropout to 0.1 (megatron/core/transformer/transformer_config.py @d98e8a6). A
# compiled plan always states the recipe's (recipe.decide.decide_dropout).
UNSTATED_DROPOUT = 0.1

LOGITS_BYTES = 4  # fp32 logits, as Megatron's and HF's cross-entropy compute them

LOGITS_COPIES = 2  # the logits and their gradient

# Bytes per logit each loss keeps at its peak (module docstring): standard fp32 logits + gradient; chunked 16-bit
# logits + one of 8 chunks upcast with its gradient (torchtune CEWithChunkedOutputLoss, num_output_chunks=8);
# fused never materialises them.
CHUNKED_LOSS_CHUNKS = 8

LOSS_BYTES_PER_LOGIT = {
    "standard": LOGITS_BYTES * LOGITS_COPIES,
    "chunked": 2 + LOGITS_BYTES * LOGITS_COPIES / CHUNKED_LOSS_CHUNKS,
    "fused": 0.0,
    "flash-attn": 2 * ACTIVATION_BYTES,
}

# PyTorch's eager cross-entropy over fp32-upcast logits, at the backward of its log_softmax: the saved fp32 output,
# the incoming fp32 gradient and the returned one (module docstring); Megatron's fused loss keeps the 8 above.
EAGER_CROSS_ENTROPY_LIVE_COPIES = 3

EAGER_STANDARD_LOSS_BYTES_PER_LOGIT = LOGITS_BYTES * EAGER_CROSS_ENTROPY_LIVE_COPIES

# Frameworks whose "standard" loss is Megatron's vocab-parallel cross-entropy (Megatron-LM; DeepSpeed's pre-training
# stacks Megatron-DeepSpeed and GPT-NeoX call it too).
FUSED_LOSS_FRAMEWORKS = ("megatron", "deepspeed")

# Launch kinds whose script computes the loss with PyTorch's eager cross-entropy whatever the framework: the Hugging
# Face Trainer calls the model's own loss (transformers loss_utils.ForCausalLMLoss: `logits.float()` then
# F.cross_entropy), also under DeepSpeed.
EAGER_LOSS_LAUNCH_KINDS = ("hf-trainer",)


def loss_bytes_per_logit(loss: str, framework: str, eager: bool = False) -> float:
    """Bytes per logit the loss keeps at its peak: "standard" is Megatron's fused loss under Megatron-LM and DeepSpeed
    and PyTorch's eager cross-entropy elsewhere, or wherever the script's own loss is eager (module docstring)."""
    if loss == "standard" and (eager or framework not in FUSED_LOSS_FRAMEWORKS):
        return EAGER_STANDARD_LOSS_BYTES_PER_LOGIT
    return LOSS_BYTES_PER_LOGIT[loss]


def loss_for(loss: str, method: str) -> str:
    """The plan's `loss`, "auto" resolved: chunked for LoRA/QLoRA (torchtune's recipes), standard for full."""
    if loss != "auto":
        return loss
    return "chunked" if method in ("lora", "qlora") else "standard"


ROUTER_LOGIT_BYTES = 4  # fp32 router logits (Mixtral/Megatron MoE routers run in fp32)


def cnn_element_bytes(precision: str) -> int:
    """A CNN activation's width in training: fp32 under fp32/TF32, 16-bit otherwise (AMP keeps 16-bit tensors)."""
    return 4 if WEIGHT_BYTES[precision] == 4 else 2


def cnn_activation_bytes(arch: Architecture, precision: str, samples: int) -> float:
    """Activations `samples` CNN samples keep for the backward: from the layer table (cnn_train) when the model has
    one, else the catalog's 16-bit figure, doubled when they are fp32 (TF32 training keeps fp32 activations)."""
    table = table_for(arch)
    if table:
        return stored_elements_per_item(table) * samples * cnn_element_bytes(precision)
    return arch.activation_bytes_per_sample * samples * (2 if WEIGHT_BYTES[precision] == 4 else 1)


class LayerShape(NamedTuple):
    """What sizes one transformer layer's activations for one micro-batch on one GPU."""

    arch: Architecture
    seq_len: int
    micro_batch: int
    tp: int
    sequence_parallel: bool


def activation_bytes_per_layer(
    shape: LayerShape,
    recompute: str,
    flash_attention: bool,
    cp: int = 1,
    dropout_masks: bool = True,
    fp8_inputs: bool = False,
) -> float:
    """Stored activations of one transformer layer for one micro-batch (module docstring, Korthikanti Table 2);
    context parallelism splits every term along the sequence (train_layout docstring). `dropout_masks`: the layer
    trains with dropout > 0 and keeps its masks, as Table 2 counts (`stores_dropout_masks`); `fp8_inputs`: its
    GEMMs keep FP8 inputs (Transformer Engine, `fp8_gemm_inputs`)."""
    if cp > 1:
        return activation_bytes_per_layer(shape, recompute, flash_attention, 1, dropout_masks, fp8_inputs) / cp
    arch, seq_len, micro_batch, tp, sequence_parallel = shape
    s, b, h, t = seq_len, micro_batch, arch.hidden, tp
    sbh = s * b * h
    sp = t if sequence_parallel else 1
    if recompute == "full":
        return ACTIVATION_BYTES * sbh / sp
    m = MASK_BYTES if dropout_masks else 0
    g = arch.kv_heads / arch.heads if arch.heads else 1.0
    experts = (arch.experts_per_token + arch.shared_experts) if arch.is_moe else 1
    f = (arch.moe_ffn_hidden or arch.ffn_hidden) * experts if arch.is_moe else arch.ffn_hidden
    x = 1 if fp8_inputs else 0  # FP8: the GEMM inputs 1 byte, the out-projection's copy of O 1 more
    attention = (6 + 4 * g + m) * sbh  # its QKV input 2 − x, O kept by the kernel 2 and by the out-projection x
    mlp = (2 - x + m) * sbh + ((3 if arch.gated_mlp else 2) * ACTIVATION_BYTES - x) * s * b * f
    norms = 4 * sbh
    replicated = (8 - 2 * x + 2 * m) * sbh  # LayerNorm and column-parallel GEMM inputs, masks: /t only with SP
    total = (attention + mlp + norms - replicated) / t + replicated / sp
    if arch.is_moe:
        total += s * b * arch.experts * ROUTER_LOGIT_BYTES / sp
    if not flash_attention and recompute == "none":
        total += score_bytes_per_element(dropout_masks) * arch.heads * s * s * b / t
    return total


def fp8_gemm_inputs(precision: str, framework: str) -> bool:
    """Whether the GEMMs keep FP8 inputs for the backward: fp8 under Megatron-LM, whose GEMMs are Transformer
    Engine's (module docstring); torchao's float8 elsewhere saves the 16-bit input."""
    return precision == "fp8" and framework == "megatron"


def score_bytes_per_element(dropout_masks: bool) -> int:
    """Bytes a layer keeps per element of its s×s attention scores without flash attention (module docstring): the
    softmax output 2, and with dropout its mask 1 and output 2 (Table 2's 5·as²b); without dropout the V-GEMM saves
    the softmax output itself (2·as²b)."""
    return ACTIVATION_BYTES + (MASK_BYTES + ACTIVATION_BYTES if dropout_masks else 0)


def stores_dropout_masks(dropout: float) -> bool:
    """Whether a layer keeps dropout masks for its backward: only with p > 0 (module docstring: ATen's dropout returns
    its input itself at p == 0)."""
    return dropout > 0


# torchtitan's op-level selective AC (`selective_ac_option = "op"`, the default of its llama3 configs), in
# torchtitan/parallelisms/parallelize_llama.py `_save_list` / `_apply_ac_to_transformer_block` at 9dec370 (Dec 2024,
# the H100 benchmark's commit; the same at e7c0cae, June 2025, torchtitan/models/llama3/parallelize_llama.py): per
# checkpointed block, CheckpointPolicy.MUST_SAVE for the outputs of aten.mm except every second one (a counter per
# block), flash / efficient SDPA, _c10d_functional.reduce_scatter_tensor and max; PREFER_RECOMPUTE for the rest.
OP_SAC = "op"  # the sizing's name for it: what "selective" means on the FSDP path (`recompute_kind`)


def recompute_kind(recompute: str, framework: str) -> str:
    """The plan's recompute as the sizing prices it: "selective" is the framework's own selective recompute,
    torchtitan's op-level SAC on the FSDP path (fsdp/fsdp_tp.py applies it), Megatron-LM's core attention elsewhere."""
    return OP_SAC if recompute == "selective" and framework == "fsdp" else recompute


def block_matmuls(arch: Architecture) -> list[tuple[str, float, bool]]:
    """The block's aten.mm calls in forward order, as torchtitan's Llama block runs them (q, k, v, o; w1 gate, w3 up,
    w2 down; a non-gated MLP up, down): (name, output width per token, rowwise: a TP-partial output of full width).
    MoE layers count their token's expert widths (top-k + shared) as one MLP, as `activation_bytes_per_layer`."""
    q = arch.heads * arch.attention_head_dim
    kv = arch.kv_heads * arch.attention_head_dim
    experts = (arch.experts_per_token + arch.shared_experts) if arch.is_moe else 1
    f = (arch.moe_ffn_hidden or arch.ffn_hidden) * experts
    mlp = [("gate", f, False), ("up", f, False)] if arch.gated_mlp else [("up", f, False)]
    return [
        ("q", q, False),
        ("k", kv, False),
        ("v", kv, False),
        ("o", arch.hidden, True),
        *mlp,
        ("down", arch.hidden, True),
    ]


def op_sac_saved(arch: Architecture) -> tuple[list[str], list[str]]:
    """(saved, recomputed) matrices under torchtitan's policy: the 1st, 3rd, 5th ... mm of a block are saved."""
    names = [name for name, _, _ in block_matmuls(arch)]
    return names[0::2], names[1::2]


def op_sac_recomputed_params_per_layer(arch: Architecture) -> float:
    """GEMM parameters of the matrices torchtitan's op-level SAC re-runs in the backward (`op_sac_saved`): the FLOPs
    it adds are 2 per parameter per token (train_time)."""
    _, recomputed = op_sac_saved(arch)
    widths = {name: width for name, width, _ in block_matmuls(arch)}
    inputs = {"o": arch.heads * arch.attention_head_dim, "down": widths["up"]}
    return sum(inputs.get(name, arch.hidden) * widths[name] for name in recomputed)


def op_sac_bytes_per_layer(
    arch: Architecture, seq_len: int, micro_batch: int, tp: int, sequence_parallel: bool, cp: int = 1
) -> float:
    """What torchtitan's op-level SAC keeps per block and micro-batch (OP_SAC source above), 16-bit unless stated:
    the block input 2·sbh (the checkpoint's argument; /t with SP), the saved mm outputs 2·s·b·width (colwise /t; a
    rowwise output is the TP-partial sum of full width), the SDPA output 2·s·b·H·Q/t and its fp32 logsumexp
    4·b·heads·s/t, and with SP the reduce-scatter outputs of the two rowwise matrices 2·sbh/t each."""
    s, b, t = seq_len / cp, micro_batch, tp
    sp = t if sequence_parallel else 1
    saved, _ = op_sac_saved(arch)
    total = ACTIVATION_BYTES * s * b * arch.hidden / sp
    for name, width, rowwise in block_matmuls(arch):
        if name in saved:
            total += ACTIVATION_BYTES * s * b * width / (1 if rowwise else t)
    total += ACTIVATION_BYTES * s * b * arch.heads * arch.attention_head_dim / t
    total += SDPA_LOGSUMEXP_BYTES * b * arch.heads * s / t
    if sequence_parallel and t > 1:
        total += 2 * ACTIVATION_BYTES * s * b * arch.hidden / t
    return total
