"""Catalog entry types: GPUs and model architectures, as read from the packaged YAML catalogs.

Units live in field names. Every entry carries its `source` and `as_of` date.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Catalog ids name files, Kubernetes labels and comment lines of generated scripts: a strict alphabet, no spaces.
CATALOG_ID = r"^[a-z0-9][a-z0-9._-]{0,62}$"
# nvidia.com/gpu.product values are Kubernetes label values; Slurm GRES type names are one word.
LABEL_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
GRES_TYPE = r"^[A-Za-z0-9_.-]{1,63}$"


def _printable(text: str) -> str:
    """Catalog names and sources reach comments, reports and terminals: every character must be printable
    (no line breaks, no control or bidi characters)."""
    bad = next((c for c in text if not c.isprintable()), None)
    if bad is not None:
        raise PydanticCustomError("invalid-format", "character {c} is not allowed", {"c": repr(bad)})
    return text


CatalogId = Annotated[str, Field(pattern=CATALOG_ID)]
CatalogText = Annotated[str, Field(max_length=1000), AfterValidator(_printable)]

Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]
# How a checkpoint's weights are stored (config.json quantization_config): none = 16-bit; fp8 (W8A8 FP8), nvfp4 (NVIDIA
# ModelOpt NVFP4), awq, gptq, compressed-tensors (llm-compressor) = pre-quantized, the engine reads the method from it.
CheckpointQuantization = Literal["none", "fp8", "nvfp4", "awq", "gptq", "compressed-tensors"]
Pricing = Literal["on-demand", "spot", "reserved"]


# Bounds of a catalog figure, or zero where zero means "none" (a free GPU, no NVLink); the upper bounds are
# 100-1000x today's largest parts (B200: 180 GB, 8 TB/s, 4.5 PFLOP/s fp8; 8-GPU nodes), not estimates.
FIGURE_RANGES: dict[str, tuple[float, float]] = {
    "memory_bytes": (2**20, 2**50),
    "memory_bandwidth_bytes_per_second": (1e6, 1e15),
    "intra_node_bandwidth_bytes_per_second": (1e6, 1e14),
    "gpus_per_node": (1, 64),
    "tdp_watts": (1, 1e5),
    # down to 1e-9: a site file fitted to a CPU run of the probe (a test of the loop) holds shares of 1e-8 to 1e-5
    "achievable_matmul_fraction": (1e-9, 1),
    "achievable_memory_bandwidth_fraction": (1e-9, 1),
    "dense_tflops": (1e-3, 1e6),
    "price_usd_per_gpu_hour": (1e-4, 1e4),
}
ZERO_MEANS_NONE = {"intra_node_bandwidth_bytes_per_second", "tdp_watts", "price_usd_per_gpu_hour"}


Provider = Literal["aws", "gcp", "azure", "on-prem", "edge"]


class NodeType(Frozen):
    """A server the GPU is sold or built in: what a pod or a Slurm job shares when it takes some of its GPUs."""

    id: CatalogId = Field(description="instance type or system name, lowercase (p4d.24xlarge, a3-highgpu-8g, dgx-h100)")
    name: CatalogText
    provider: Provider = Field(description="who sells it: decides the Kubernetes system reserve formula")
    vcpus: int = Field(ge=1, le=4096, description="logical CPUs the kubelet or slurmd counts (hardware threads)")
    memory_bytes: int = Field(ge=2**20, le=2**50, description="host memory")
    gpus: int = Field(ge=1, le=64)
    local_nvme_bytes: int = Field(0, ge=0, le=2**60, description="local NVMe instance storage (0: none)")
    efa_interfaces: int = Field(0, ge=0, le=64, description="AWS EFA devices a pod can request (vpc.amazonaws.com/efa)")
    max_pods: int = Field(
        110,
        ge=1,
        le=10_000,
        description="kubelet maxPods: amazon-eks-ami eni-max-pods.txt on AWS (EKS reserves memory by it), else the "
        "Kubernetes default 110",
    )
    price_usd_per_hour: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="on-demand list price of the whole node (None: no sourced price); a pod that outgrows the GPU's "
        "priced node is costed at this node's price / gpus",
    )
    price_source: CatalogText = Field("", description="where price_usd_per_hour is from, or why there is none")
    source: CatalogText


class GpuSpec(Frozen):
    """One accelerator. Throughput figures are dense (not sparse) peaks from the datasheet."""

    id: CatalogId = Field(description="lowercase <chip>-<form>-<memory>, e.g. h100-sxm-80gb")
    name: CatalogText
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
    achievable_optimizer_bandwidth_fraction: float | None = Field(
        None,
        ge=1e-9,
        le=1,
        description="share of peak HBM bandwidth a training step's once-per-step pass (the optimizer over its states) "
        "reaches; a site calibration fits it where probed micro-batches separate per-step from per-micro-batch time "
        "(None: achievable_memory_bandwidth_fraction)",
    )
    k8s_product_label: Annotated[str, Field(pattern=LABEL_VALUE)] = Field(
        description="value of the nvidia.com/gpu.product node label"
    )
    slurm_gres_type: Annotated[str, Field(pattern=GRES_TYPE)] = Field(description="GRES type name, e.g. h100")
    edge: bool = False
    node_types: list[NodeType] = Field(
        default_factory=list,
        description="servers this GPU comes in; the first is the one the price is from (pods are sized to fit a share of one)",
    )
    source: CatalogText
    as_of: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]

    @model_validator(mode="after")
    def figures_in_range(self) -> GpuSpec:
        """The sizing divides and multiplies by these figures: each must lie in FIGURE_RANGES (far beyond any real
        accelerator, so the arithmetic stays finite: a bandwidth of 5e-324 or a price of 1e308 is refused)."""
        figures = {
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_second": self.memory_bandwidth_bytes_per_second,
            "intra_node_bandwidth_bytes_per_second": self.intra_node_bandwidth_bytes_per_second,
            "gpus_per_node": self.gpus_per_node,
            "tdp_watts": self.tdp_watts,
            "achievable_matmul_fraction": self.achievable_matmul_fraction,
            "achievable_memory_bandwidth_fraction": self.achievable_memory_bandwidth_fraction,
            **{f"dense_tflops.{k}": v for k, v in self.dense_tflops.items()},
            **{f"price_usd_per_gpu_hour.{k}": v for k, v in self.price_usd_per_gpu_hour.items()},
        }
        bad = [
            f"{k} (allowed {low:g} to {high:g})"
            for k, v in figures.items()
            for kind in [k.split(".")[0]]
            for low, high in [FIGURE_RANGES[kind]]
            if not (low <= v <= high or (v == 0 and kind in ZERO_MEANS_NONE))
        ]
        if bad:
            raise PydanticCustomError("out-of-range", "out of range: {bad}", {"bad": ", ".join(bad)})
        return self

    def peak_flops_per_second(self, dtype: Dtype) -> float:
        return self.dense_tflops[dtype] * 1e12


ModelKind = Literal["decoder", "encoder", "vision-transformer", "cnn"]

# The most any published model has of each dimension, with a wide margin (docs/safety.md): a bound refuses a typo
# (layers: 1e12) before the sizing spends minutes or memory on a shape no one trains or serves.
ARCHITECTURE_LIMITS: dict[str, tuple[int, str]] = {
    "layers": (10_000, "DeepNet (Wang et al. 2022) trained 1,000 layers; Llama 3.1 405B has 126"),
    "hidden": (131_072, "Megatron-Turing NLG 530B has 20,480, PaLM 540B 18,432, Llama 3.1 405B 16,384"),
    "heads": (4_096, "published models have at most 128 (Llama 3.1 405B, DeepSeek-V3)"),
    "kv_heads": (4_096, "at most heads"),
    "head_dim": (4_096, "published models use 64 to 256"),
    "ffn_hidden": (1_048_576, "the widest published MLP is 73,728 (PaLM 540B)"),
    "moe_ffn_hidden": (1_048_576, "as ffn_hidden"),
    "vocab": (4_194_304, "published vocabularies hold at most 262,144 tokens (Gemma 3)"),
    "max_position": (1 << 30, "the longest published context is 10M tokens (Llama 4 Scout)"),
    "experts": (1_048_576, "PEER (He 2024) routes over 1,048,576 experts; DeepSeek-V3 has 256"),
    "shared_experts": (1_024, "DeepSeekMoE uses 2, Qwen1.5-MoE 4"),
    "dense_layers": (10_000, "at most layers"),
    "mtp_layers": (1_024, "DeepSeek-V3 ships 1"),
    "interleave_moe_layer_step": (10_000, "at most layers"),
    "q_lora_rank": (131_072, "DeepSeek-V3: 1,536"),
    "kv_lora_rank": (131_072, "DeepSeek-V3: 512"),
    "qk_rope_head_dim": (4_096, "DeepSeek-V3: 64"),
    "qk_nope_head_dim": (4_096, "DeepSeek-V3: 128"),
    "v_head_dim": (4_096, "DeepSeek-V3: 128"),
    "image_size": (16_384, "vision models read at most a few thousand pixels a side"),
    "patch_size": (16_384, "at most image_size"),
    "detection_queries": (100_000, "DETR-style detectors use 100 to 900"),
    "position_tokens": (16_777_216, "YOLOS stores 4,251"),
}


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
    mtp_layers: int = Field(
        0,
        description="multi-token-prediction modules shipped with the checkpoint (config.json num_nextn_predict_layers; DeepSeek-V3: 1), a draft for speculative decoding; not in the parameter counts",
    )
    interleave_moe_layer_step: int = Field(
        1,
        description="MoE models: every n-th layer after the leading dense ones has experts, the others a dense MLP of "
        "ffn_hidden (config.json interleave_moe_layer_step; Llama 4 Maverick: 2; 1 = every layer)",
    )
    learned_positions: bool = Field(
        False, description="learned absolute position embeddings (GPT-3, BERT) rather than RoPE"
    )
    alibi: bool = Field(
        False, description="ALiBi attention biases instead of position embeddings (BLOOM, MPT; Press et al. 2022)"
    )
    # MoE routers (config.json of the DeepSeek-V3 family); defaults are Mixtral's softmax top-k router.
    router_score: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="MoE router scoring function (config.json scoring_func)"
    )
    router_expert_bias: bool = Field(
        False,
        description="auxiliary-loss-free balancing: a per-expert bias added to the scores for the top-k choice (DeepSeek-V3 topk_method noaux_tc, e_score_correction_bias)",
    )
    router_topk_scale: float = Field(
        0.0, description="factor on the routed experts' weights (config.json routed_scaling_factor); 0 = none"
    )
    router_groups: int = Field(
        0, description="group-limited routing: expert groups (config.json n_group); 0 = no grouping"
    )
    router_group_topk: int = Field(0, description="groups each token may route to (config.json topk_group)")
    tied_embeddings: bool = Field(False, description="LM head shares the embedding matrix")
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="normalisation layer kind")
    attention_bias: bool = Field(False, description="biases on q/k/v/o projections")
    mlp_bias: bool = Field(False, description="biases on MLP matrices")
    rope_theta: float = Field(0.0, description="RoPE base (config.json rope_theta); 0 = not in the catalog")
    rope_scaling_factor: float = Field(
        0.0, description="Llama 3.x RoPE scaling factor (config.json rope_scaling.factor, rope_type llama3); 0 = none"
    )
    norm_eps: float = Field(0.0, description="normalisation epsilon (config.json rms_norm_eps); 0 = not in the catalog")
    # DeepSeek multi-head latent attention (MLA); 0 means plain (GQA/MHA) attention.
    q_lora_rank: int = Field(0, description="MLA query compression rank (0 = no MLA)")
    kv_lora_rank: int = Field(0, description="MLA KV latent rank (0 = no MLA)")
    qk_rope_head_dim: int = Field(0, description="MLA rotary part of q/k per head")
    qk_nope_head_dim: int = Field(0, description="MLA non-rotary part of q/k per head")
    v_head_dim: int = Field(0, description="MLA value head width")
    # Vision models
    image_size: int = Field(0, description="input image side in pixels (vision)")
    patch_size: int = Field(0, description="ViT patch side in pixels")
    head: Literal["classifier", "detector"] = Field(
        "classifier",
        description="vision models: what the output is — class logits over `vocab` classes, or detections (boxes and class logits)",
    )
    detection_queries: int = Field(
        0, description="detectors: objects predicted per image (DETR object queries, YOLOS [DET] tokens)"
    )
    position_tokens: int = Field(
        0,
        description="ViT: learned position embeddings stored in the checkpoint when they cover another grid than image_size (YOLOS: its 800×1333 training grid); 0 = the serving grid",
    )
    # CNNs (and a direct figure for any model): parameters and forward GFLOPs per sample from the paper
    params_override: int = Field(0, description="parameter count given directly (CNNs)")
    gflops_per_sample: float = Field(0.0, description="forward GFLOPs per sample given directly (CNNs)")
    activation_bytes_per_sample: int = Field(
        0,
        description="CNNs without a layer_table: bytes of 16-bit activations one training sample keeps for its backward (0: unknown)",
    )
    layer_table: Literal["", "resnet-50", "mobilenet-v2", "yolo11n", "yolo11s"] = Field(
        "",
        description="CNNs: the per-layer shape table (compiler/sizing/cnn_layers.py) serving and training size layer by layer; '' = whole-model roofline",
    )

    @field_validator(*ARCHITECTURE_LIMITS)
    @classmethod
    def within_real_models(cls, value: int, info: ValidationInfo) -> int:
        top, reason = ARCHITECTURE_LIMITS[info.field_name]
        if value > top:
            raise PydanticCustomError(
                "out-of-range",
                "more than {top}, beyond any real model ({reason})",
                {"top": f"{top:,}", "reason": reason},
            )
        return value

    @property
    def is_ultralytics_detector(self) -> bool:
        """An Ultralytics detector (the YOLO11 layer tables: boxes and classes per anchor in one output0 tensor), which
        the generated repositories do not describe; DETR-style Hub detectors (head: detector) they do."""
        return self.layer_table.startswith("yolo")

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layer_count(self) -> int:
        """Layers with routed experts: of the layers after `dense_layers`, those whose index i satisfies
        i mod step = step − 1 (transformers Llama4TextConfig: moe_layers = range(step − 1, layers, step))."""
        if not self.is_moe:
            return 0
        step = max(1, self.interleave_moe_layer_step)
        return max(
            0, self.layers // step - self.dense_layers // step
        )  # indices below n with i mod step = step − 1: n // step

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank > 0


class ShippedCheckpoint(Frozen):
    """How the preset's own repository (hf_repo) stores its weights when they are not 16-bit (its config.json
    quantization_config), with the source that says so."""

    quantization: CheckpointQuantization = Field(description="the method vLLM reads from the repo's config.json")
    weight_block: int = Field(
        0,
        ge=0,
        le=65_536,
        description="fp8 block scaling: one fp32 scale per weight_block × weight_block weights (config.json "
        "weight_block_size); 0 = per-tensor or per-channel scales (negligible bytes)",
    )
    source: CatalogText

    @model_validator(mode="after")
    def quantized_with_blocks_only_for_fp8(self) -> ShippedCheckpoint:
        if self.quantization == "none":
            raise PydanticCustomError("invalid-checkpoint", "a 16-bit repository needs no checkpoint entry", {})
        if self.weight_block and self.quantization != "fp8":
            raise PydanticCustomError("invalid-checkpoint", "weight_block is for fp8 block-scaled checkpoints", {})
        return self


class ModelPreset(Frozen):
    id: CatalogId
    name: CatalogText
    architecture: Architecture
    published_params: float = Field(description="total parameters as the model's authors state them")
    published_active_params: float = 0.0
    hf_repo: Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)?$")] = ""
    checkpoint: ShippedCheckpoint | None = Field(
        None, description="how hf_repo's weights ship when they are not 16-bit (None: 16-bit, as most repos)"
    )
    source: CatalogText
    as_of: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
