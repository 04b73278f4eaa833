"""Catalog entry types: GPUs and model architectures, as read from the packaged YAML catalogs.

Units live in field names. Every entry carries its `source` and `as_of` date.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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

    def peak_flops_per_second(self, dtype: Dtype) -> float:
        return self.dense_tflops[dtype] * 1e12


ModelKind = Literal["decoder", "encoder", "vision-transformer", "cnn"]


class Architecture(Frozen):
    """A model's shape, from its config.json or paper. Transformer fields are 0 for CNNs."""

    kind: ModelKind = "decoder"
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0  # 0 means hidden // heads
    ffn_hidden: int = 0
    vocab: int = 0
    max_position: int = 0
    gated_mlp: bool = True
    experts: int = 1
    experts_per_token: int = 1
    shared_experts: int = 0
    moe_ffn_hidden: int = 0  # 0 means ffn_hidden
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model (DeepSeek-V3: 3)
    tied_embeddings: bool = False
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    attention_bias: bool = False
    mlp_bias: bool = False
    # DeepSeek multi-head latent attention (MLA); 0 means plain (GQA/MHA) attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Vision models
    image_size: int = 0
    patch_size: int = 0
    # CNNs (and a direct figure for any model): parameters and forward GFLOPs per sample from the paper
    params_override: int = 0
    gflops_per_sample: float = 0.0

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
