"""Training FLOPs per token and the rates GEMMs and attention kernels run at.

FLOPs (the MFU numerator, PaLM, Chowdhery et al. 2022, App. B): 6·N + 12·L·H·Q·T per token, N the
parameters that take part in matmuls (active ones for MoE; the input embedding is a lookup, the LM head a
GEMM even when tied), H·Q = heads × head dim, T the sequence length. Recompute adds hardware FLOPs only
(HFU): full recompute repeats each layer's forward (2·N_layers + 4·L·H·Q·T; the LM head is not recomputed,
Narayanan et al. 2021 eq. (3) counts 96·B·s·l·h² = 4 × 24), selective the attention core (4·L·H·Q·T,
Korthikanti et al. 2022 §5); torchtitan's op-level SAC (the FSDP path's "selective", train_memory.OP_SAC) re-runs
the matrices it did not save (2 FLOPs per parameter per token: k, o and up in a SwiGLU block) and the block's
memory-bound kernels, not the attention kernel, whose output it saved; its TP all-reduces are not saved either.
Multi-token prediction, where the launch trains it (layout.MTP_FRAMEWORKS; DeepSeek-V3 technical report, arXiv
2412.19437, §2.2): per module and token, one more layer (its active GEMM parameters and attention, 12·H·Q·T), the
2d → d projection and the shared output head's GEMM for that module's loss (`mtp_matmul_params`), 6 FLOPs each; full
recompute repeats the module's layer and projection (Megatron-LM checkpoints the MTP layer with
--recompute-granularity full, multi_token_prediction.py), not its head.
"""

from __future__ import annotations

import math

from ...catalog.params import ParamCounts, mtp_projection_params
from ...catalog.types import Architecture, GpuSpec
from .activations import (
    OP_SAC,
    op_sac_recomputed_params_per_layer,
)

COMPUTE_DTYPE = {"fp32": "tf32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
# Flash attention's attention kernels run in 16-bit even in fp8 recipes (Transformer Engine's default).
ATTENTION_DTYPE = {"fp32": "tf32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}
# FlashAttention-2's share of the dense 16-bit peak, forward + backward (Dao 2023, "FlashAttention-2", abstract:
# 50-73% of the theoretical maximum on A100; the lower end, 0.50, is its backward-dominated fwd+bwd figure).
# On parts with fp8 tensor cores (Hopper and later) FA2 reaches 35% (Shah et al. 2024, "FlashAttention-3",
# abstract: "FlashAttention-2 achieving only 35% utilization on H100"), as it uses none of the asynchronous
# paths those parts add.
ATTENTION_KERNEL_FRACTION_AMPERE = 0.50
ATTENTION_KERNEL_FRACTION_HOPPER = 0.35
# The Triton FlashAttention of 2022 (flash_attn_triton.py; MPT's `attn_impl: triton`, llm-foundry's MPT configs
# until 2024) is 1.3-2.5x slower than FlashAttention-2 (Dao 2023 §4.1); taken at the range's geometric middle.
TRITON_FLASH_SLOWDOWN = math.sqrt(1.3 * 2.5)
ATTENTION_KERNELS = ("flash2", "triton-flash")

# FP8 GEMMs reach less of the peak than the large bf16 GEMMs behind
# `achievable_matmul_fraction`. Measured: deepseek-ai/DeepGEMM README.md @7a70b43, "Normal GEMMs for dense
# models", H800 SXM5 (an H100 SXM's 132 SMs, 3.35 TB/s HBM3 and 1979 dense fp8 TFLOP/s), the fastest kernels of
# that study (1.0-2.7x a tuned CUTLASS 3.6). Decode shapes (M = 64 and 128, 12 rows) stream the weights at a
# median 2298.5 GB/s; prefill shapes (M = 4096, 6 rows) run at a median 1041.5 TFLOP/s. Applied to every part
# with fp8 tensor cores (Ada's too: the nearest measurement).
FP8_GEMM_BANDWIDTH_FRACTION = 2298.5e9 / 3.35e12  # 0.686
FP8_GEMM_MATMUL_FRACTION = 1041.5e12 / 1979e12  # 0.526

# GEMM FLOPs per parameter per token: forward 2, backward 2 for the input gradient and 2 for the weight gradient
# (Kaplan et al. 2020 §2.1; Narayanan et al. 2021 §3.5). A frozen base (LoRA, QLoRA) skips the weight gradients: 4
# (Hu et al. 2021, LoRA §4.2: "we do not need to calculate the gradients for the vast majority of the parameters";
# PEFT and torchtune set requires_grad=False on the base, so autograd computes no dW), while the adapters pay 6.
FULL_FLOPS_PER_PARAM = 6
FROZEN_FLOPS_PER_PARAM = 4


def compute_dtype(precision: str, gpu: GpuSpec) -> str:
    """The GEMM dtype of a precision; fp32 on a part without TF32 (Volta) runs in plain fp32."""
    dtype = COMPUTE_DTYPE[precision]
    return "fp32" if dtype == "tf32" and "tf32" not in gpu.dense_tflops else dtype


def matmul_flops_per_second(gpu: GpuSpec, dtype: str) -> float:
    """A GEMM's achievable rate: the catalog's large-GEMM share of the dense peak, fp8 at no more than DeepGEMM's."""
    fraction = gpu.achievable_matmul_fraction
    if dtype == "fp8":
        fraction = min(fraction, FP8_GEMM_MATMUL_FRACTION)
    return gpu.peak_flops_per_second(dtype) * fraction


def matmul_params(arch: Architecture, params: ParamCounts) -> float:
    """Active parameters used in GEMMs: all but the input embedding lookup; a tied LM head still is a GEMM."""
    if arch.kind == "cnn" or not arch.layers:
        return float(params.active)
    input_lookup = params.embedding - params.lm_head
    tied_head = arch.vocab * arch.hidden if arch.tied_embeddings and arch.kind == "decoder" else 0
    return float(params.active - input_lookup + tied_head)


def layer_matmul_params(arch: Architecture, params: ParamCounts) -> float:
    """Active GEMM parameters of all transformer layers (the LM head and embeddings excluded)."""
    return max(0.0, matmul_params(arch, params) - output_head_params(arch, params))


def output_head_params(arch: Architecture, params: ParamCounts) -> float:
    """The LM head's GEMM parameters: the untied head, or the tied embedding it multiplies by."""
    return params.lm_head or (arch.vocab * arch.hidden if arch.tied_embeddings and arch.kind == "decoder" else 0)


def mtp_module_matmul_params(arch: Architecture, params: ParamCounts) -> float:
    """Active GEMM parameters of one MTP module without the head: its layer (built as the model's last, an MoE layer
    in DeepSeek-V3: top-k and shared experts) and the 2d → d projection."""
    return params.per_layer_attention + params.per_layer_mlp_active + mtp_projection_params(arch)


def mtp_matmul_params(arch: Architecture, params: ParamCounts) -> float:
    """Active GEMM parameters one token passes through in one MTP module: the module and the shared output head."""
    return mtp_module_matmul_params(arch, params) + output_head_params(arch, params)


def attention_width(arch: Architecture) -> float:
    """H·Q of PaLM's 12·L·H·Q·T: heads × head dim (MLA: the mean of the q·k and v head widths)."""
    if arch.uses_mla:
        return arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim) / 2
    return arch.heads * arch.attention_head_dim if arch.heads else 0.0


def model_flops_per_token(arch: Architecture, params: ParamCounts, seq_len: int, mtp_layers: int = 0) -> float:
    """PaLM App. B: 6·N + 12·L·H·Q·T (CNNs: 3 × the forward FLOPs per sample given in the catalog); `mtp_layers`
    trained MTP modules add 6·N_mtp + 12·H·Q·T each (module docstring)."""
    if arch.kind == "cnn" or not arch.layers:
        return 3 * arch.gflops_per_sample * 1e9 if arch.gflops_per_sample else 6.0 * params.active
    layers = arch.layers + mtp_layers
    mtp = mtp_layers * mtp_matmul_params(arch, params)
    return 6 * (matmul_params(arch, params) + mtp) + 12 * layers * attention_width(arch) * seq_len


def frozen_base_flops_saved_per_token(arch: Architecture, params: ParamCounts, adapter_params: float) -> float:
    """What a frozen base (LoRA, QLoRA) takes off 6·N: the base's weight gradients, less the adapters' own 6 FLOPs
    per parameter."""
    frozen = (FULL_FLOPS_PER_PARAM - FROZEN_FLOPS_PER_PARAM) * matmul_params(arch, params)
    return frozen - FULL_FLOPS_PER_PARAM * adapter_params


def hardware_flops_per_token(
    arch: Architecture, params: ParamCounts, seq_len: int, recompute: str, mtp_layers: int = 0
) -> float:
    """Model FLOPs plus what recompute repeats (HFU numerator); MTP modules recompute as layers do (module docstring;
    OP_SAC is the FSDP path's, which trains none)."""
    attention_forward = 4 * (arch.layers + mtp_layers) * attention_width(arch) * seq_len
    layer_matmul = layer_matmul_params(arch, params) + mtp_layers * mtp_module_matmul_params(arch, params)
    extra = {
        "none": 0.0,
        "selective": attention_forward,
        "full": 2 * layer_matmul + attention_forward,
        OP_SAC: 2 * arch.layers * op_sac_recomputed_params_per_layer(arch) if arch.layers else 0.0,
    }[recompute]
    return model_flops_per_token(arch, params, seq_len, mtp_layers) + extra


def attention_kernel_fraction(gpu: GpuSpec, kernel: str = "flash2") -> float:
    """The flash-attention kernel's share of the 16-bit peak, forward + backward."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention kernel {kernel!r}: one of {ATTENTION_KERNELS}")
    fraction = ATTENTION_KERNEL_FRACTION_HOPPER if "fp8" in gpu.dense_tflops else ATTENTION_KERNEL_FRACTION_AMPERE
    return fraction / TRITON_FLASH_SLOWDOWN if kernel == "triton-flash" else fraction
