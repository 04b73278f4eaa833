"""The naive peer: llm-analysis 0.2.2 (cli-analysis/llm-analysis), called through its Python API on our catalog.

Model shapes and GPUs come from compiler/catalog (never its Hugging Face lookups), mapped into its dataclasses
(llm_analysis/config.py). Its efficiencies are set explicitly: flops_efficiency 0.5 (the figure its constant.py's
comment gives for Megatron-LM training; its own default is 1) and hbm_memory_efficiency its own default,
llm_analysis.constant's HBM_MEMORY_EFFICIENCY (1.0: what `infer`/`train` use unless told otherwise; a naive user sets
only the MFU).

What its model cannot say, and the nearest expression used (benchmarks/peer_rows.py counts the rows left out):
* a gated (SwiGLU) MLP: its MLP has two matrices, so ffn_embed_dim is 3/2 of the intermediate width (the weights'
  bytes are right); its FLOPs are 16·b·s·h² per MLP whatever the width (its formula, kept);
* MoE: experts and top-k are its moe_num_experts / moe_top_k (shared experts added to both); leading dense layers,
  MLA (DeepSeek) and head_dim ≠ hidden/heads are not expressible: the catalog's heads and KV heads are used;
* pure bf16 training (no fp32 master copy): master_weights_dtype_bytes 2 with the optimizer states' bytes as the
  rest, so weights, gradients and states have their real widths.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logging.getLogger("__name__").setLevel(logging.ERROR)  # llm-analysis logs under this literal name, at INFO and up

try:
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import DtypeConfig, GPUConfig, ModelConfig, ParallelismConfig
    from llm_analysis.constant import HBM_MEMORY_EFFICIENCY
except ImportError:  # not installed: benchmarks/coverage.py says so, the tests skip (fail under CI=true)
    LLMAnalysis = None

FLOPS_EFFICIENCY = 0.5
# its own gpu_configs (a100-sxm-80gb.json, h100-sxm-80gb.json): 8 µs, the floor of one NVLink message
INTRA_NODE_MIN_MESSAGE_SECONDS = 8e-06
BITS = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "fp4": 4, "int4": 4}


def available() -> bool:
    return LLMAnalysis is not None


@dataclass(frozen=True)
class PeerLayout:
    """A training row as llm-analysis's training() takes it."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 0
    micro_batch: int = 1
    accumulation: int = 1  # gradient accumulation steps
    recompute: str = "none"  # none | selective | full
    precision: str = "bf16"
    master_bytes: int = 4  # 4: fp32 master weights; 2: pure bf16
    state_bytes: int = 8  # optimizer states per parameter (AdamW fp32: 8; bf16: 4; 8-bit: 2)
    flash_attention: bool = True

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


def model_config(arch, max_seq_len: int) -> ModelConfig:
    """Our Architecture as its ModelConfig (see the module docstring for what is approximated)."""
    width = (arch.moe_ffn_hidden or arch.ffn_hidden) if arch.experts > 1 else arch.ffn_hidden
    ffn = width * 3 // 2 if arch.gated_mlp else width
    shared = arch.shared_experts if arch.experts > 1 else 0
    return ModelConfig(
        name=f"catalog-{arch.layers}l-{arch.hidden}d",
        num_layers=arch.layers,
        n_head=arch.heads,
        hidden_dim=arch.hidden,
        vocab_size=arch.vocab,
        max_seq_len=max(max_seq_len, arch.max_position),
        num_key_value_heads=arch.kv_heads or arch.heads,
        ffn_embed_dim=ffn,
        expansion_ratio=ffn / arch.hidden,  # both given: its divisibility check is for the 4·h default only
        moe_num_experts=arch.experts + shared,
        moe_top_k=arch.experts_per_token + shared if arch.experts > 1 else 1,
    )


def gpu_config(gpu) -> GPUConfig:
    """Our GpuSpec as its GPUConfig: GB are its 1024³ bytes of memory, its 10⁹ bytes/s of bandwidth."""
    peaks = gpu.dense_tflops
    return GPUConfig(
        name=gpu.id,
        mem_per_GPU_in_GB=gpu.memory_bytes / 2**30,
        hbm_bandwidth_in_GB_per_sec=gpu.memory_bandwidth_bytes_per_second / 1e9,
        intra_node_bandwidth_in_GB_per_sec=gpu.intra_node_bandwidth_bytes_per_second / 1e9,
        intra_node_min_message_latency=INTRA_NODE_MIN_MESSAGE_SECONDS,
        peak_fp16_TFLOPS=peaks.get("bf16") or peaks["fp16"],
        peak_i8_TFLOPS=peaks.get("fp8") or peaks.get("int8"),
        peak_i4_TFLOPS=peaks.get("fp4") or peaks.get("int4"),
    )


def dtype_config(precision: str) -> DtypeConfig:
    """Weights and activations at the precision's width (its GEMM peak is the wider one's), embeddings 16-bit."""
    bits = BITS[precision]
    return DtypeConfig(name=f"w{bits}a{bits}e16", weight_bits=bits, activation_bits=bits, embedding_bits=16)


def analysis(arch, gpu, precision: str, parallel: ParallelismConfig, max_seq_len: int) -> LLMAnalysis:
    return LLMAnalysis(
        model_config(arch, max_seq_len),
        gpu_config(gpu),
        dtype_config(precision),
        parallel,
        flops_efficiency=FLOPS_EFFICIENCY,
        hbm_memory_efficiency=HBM_MEMORY_EFFICIENCY,
    )


def training(arch, gpu, layout: PeerLayout, seq_len: int, tokens: float | None = None) -> dict:
    """llm-analysis's training() summary at the layout: latency_per_iter, gpu_hours (with tokens), memory per GPU."""
    parallel = ParallelismConfig(tp_size=layout.tp, pp_size=layout.pp, dp_size=layout.dp)
    peer = analysis(arch, gpu, layout.precision, parallel, seq_len)
    return peer.training(
        batch_size_per_gpu=layout.micro_batch,
        # the global batch, not the accumulation: with it training() skips its "fits in memory" assertion (the
        # rows ran; a layout its memory model overfills still has a step time)
        global_batch_size=layout.micro_batch * layout.accumulation * layout.dp,
        seq_len=seq_len,
        total_num_tokens=tokens,
        activation_recomputation=ActivationRecomputation[layout.recompute.upper()],
        ds_zero=DSZeRO(layout.zero),
        master_weights_dtype_bytes=layout.master_bytes,
        other_op_bytes=layout.state_bytes
        - (layout.master_bytes if layout.master_bytes < 4 else 0),  # its op = this + master
        flash_attn=layout.flash_attention,
        mlp_gated_linear_units=arch.gated_mlp,
    )


def tokens_per_second_per_gpu(summary: dict, seq_len: int) -> float:
    return summary["global_batch_size"] * seq_len / summary["latency_per_iter"] / summary["total_num_gpus"]


def memory_bytes(summary: dict) -> float:
    return summary["(weight+op_state+grad+act)_memory_per_gpu"]


@dataclass(frozen=True)
class ServePoint:
    """One serving point as llm-analysis's inference() takes it: a replica of `tp` GPUs running `batch` requests."""

    precision: str
    kv_bytes: float  # KV-cache bytes per element
    tp: int
    batch: int
    prompt_tokens: int
    output_tokens: int


def inference(arch, gpu, point: ServePoint) -> dict:
    """llm-analysis's inference() summary: prefill_latency (TTFT), decode_latency (one step: TPOT),
    total_tokens_per_sec (batch ÷ per-token latency, prefill included: a replica's output tokens/s)."""
    parallel = ParallelismConfig(tp_size=point.tp)
    context = point.prompt_tokens + point.output_tokens
    peer = analysis(arch, gpu, point.precision, parallel, context)
    return peer.inference(
        batch_size_per_gpu=point.batch,
        seq_len=point.prompt_tokens,
        num_tokens_to_generate=point.output_tokens,
        kv_cache_dtype_bytes=point.kv_bytes,
    )
