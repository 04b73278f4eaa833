"""Catalog entry types: GPUs and model architectures, as read from the packaged YAML catalogs.

Units live in field names. Every entry carries its `source` and `as_of` date.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"]
Pricing = Literal["on-demand", "spot", "reserved"]


class GpuSpec(Frozen):
    """One accelerator. Throughput figures are dense (not sparse) peaks from the datasheet."""

    id: str = Field(description="lowercase <chip>-<form>-<memory>, e.g. h100-sxm-80gb")
    name: str
    vendor: Literal["nvidia", "amd"] = "nvidia"
    memory_bytes: int
    memory_bandwidth_bytes_per_second: float
    dense_tflops: dict[Dtype, float] = Field(description="dense peak TFLOP/s (TOP/s for int) per dtype")
    intra_node_bandwidth_bytes_per_second: float = Field(
        description="per-GPU unidirectional NVLink / Infinity Fabric (or PCIe) bandwidth"
    )
    gpus_per_node: int
    tdp_watts: float
    price_usd_per_gpu_hour: dict[Pricing, float]
    achievable_matmul_fraction: float = Field(
        description="share of dense peak a large bf16 GEMM reaches in practice (measured, with source)"
    )
    achievable_memory_bandwidth_fraction: float = Field(
        description="share of peak HBM bandwidth a streaming kernel reaches (measured, with source)"
    )
    k8s_product_label: str = Field(description="value of the nvidia.com/gpu.product node label")
    slurm_gres_type: str = Field(description="GRES type name, e.g. h100")
    edge: bool = False
    source: str
    as_of: str

    @model_validator(mode="after")
    def figures_in_range(self) -> "GpuSpec":
        """The sizing divides by these figures; a user catalog entry with a zero, negative or infinite one is refused."""
        positive = {"memory_bytes": self.memory_bytes, "memory_bandwidth_bytes_per_second": self.memory_bandwidth_bytes_per_second,
                    "gpus_per_node": self.gpus_per_node, **{f"dense_tflops.{k}": v for k, v in self.dense_tflops.items()}}
        at_least_zero = {"intra_node_bandwidth_bytes_per_second": self.intra_node_bandwidth_bytes_per_second, "tdp_watts": self.tdp_watts,
                         **{f"price_usd_per_gpu_hour.{k}": v for k, v in self.price_usd_per_gpu_hour.items()}}
        fractions = {"achievable_matmul_fraction": self.achievable_matmul_fraction,
                     "achievable_memory_bandwidth_fraction": self.achievable_memory_bandwidth_fraction}
        bad = ([k for k, v in positive.items() if not 0 < v < math.inf] + [k for k, v in at_least_zero.items() if not 0 <= v < math.inf]
               + [k for k, v in fractions.items() if not 0 < v <= 1])
        if bad:
            raise PydanticCustomError("out-of-range", "out of range: {bad} (sizes and rates > 0, prices ≥ 0, fractions in (0, 1])", {"bad": ", ".join(bad)})
        return self

    def peak_flops_per_second(self, dtype: Dtype) -> float:
        return self.dense_tflops[dtype] * 1e12


ModelKind = Literal["decoder", "encoder", "vision-transformer", "cnn"]


class Architecture(Frozen):
    """A model's shape, from its config.json or paper. Transformer fields are 0 for CNNs."""

    kind: ModelKind = Field("decoder", description="decoder LLM, encoder (BERT), vision transformer or CNN")
    layers: int = Field(0, description="transformer blocks")
    hidden: int = Field(0, description="model width d")
    heads: int = Field(0, description="attention (query) heads")
    kv_heads: int = Field(0, description="key/value heads (GQA); = heads for MHA")
    head_dim: int = Field(0, description="per-head width; 0 means hidden / heads")
    ffn_hidden: int = Field(0, description="MLP intermediate width (dense layers)")
    vocab: int = Field(0, description="vocabulary size")
    max_position: int = Field(0, description="longest supported context")
    gated_mlp: bool = Field(True, description="SwiGLU-style MLP with three matrices")
    experts: int = Field(1, description="routed MoE experts (1 = dense)")
    experts_per_token: int = Field(1, description="experts each token is routed to (top-k)")
    shared_experts: int = Field(0, description="always-active experts (DeepSeek)")
    moe_ffn_hidden: int = Field(0, description="expert intermediate width; 0 means ffn_hidden")
    dense_layers: int = Field(0, description="leading layers with a dense MLP in an MoE model")
    learned_positions: bool = Field(False, description="learned absolute position embeddings (GPT-3, BERT) rather than RoPE")
    tied_embeddings: bool = Field(False, description="LM head shares the embedding matrix")
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="normalisation layer kind")
    attention_bias: bool = Field(False, description="biases on q/k/v/o projections")
    mlp_bias: bool = Field(False, description="biases on MLP matrices")
    # DeepSeek multi-head latent attention (MLA); 0 means plain (GQA/MHA) attention.
    q_lora_rank: int = Field(0, description="MLA query compression rank (0 = no MLA)")
    kv_lora_rank: int = Field(0, description="MLA KV latent rank (0 = no MLA)")
    qk_rope_head_dim: int = Field(0, description="MLA rotary part of q/k per head")
    qk_nope_head_dim: int = Field(0, description="MLA non-rotary part of q/k per head")
    v_head_dim: int = Field(0, description="MLA value head width")
    # Vision models
    image_size: int = Field(0, description="input image side in pixels (vision)")
    patch_size: int = Field(0, description="ViT patch side in pixels")
    # CNNs (and a direct figure for any model): parameters and forward GFLOPs per sample from the paper
    params_override: int = Field(0, description="parameter count given directly (CNNs)")
    gflops_per_sample: float = Field(0.0, description="forward GFLOPs per sample given directly (CNNs)")
    activation_bytes_per_sample: int = Field(
        0, description="CNNs: bytes of 16-bit activations one training sample keeps for its backward (0: unknown)")

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank > 0


class ModelPreset(Frozen):
    id: str
    name: str
    architecture: Architecture
    published_params: float = Field(description="total parameters as the model's authors state them")
    published_active_params: float = 0.0
    hf_repo: str = ""
    source: str
    as_of: str
