"""The plan's model section: a catalog preset, a parameter count or an inline architecture, and the checkpoint the
engines load."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..catalog.types import Architecture, CheckpointQuantization
from .spec_fields import MAX_DIMENSION, MAX_PARAMS, Count, SafeText, Spec, offers


class ArchitectureSpec(Architecture):
    """A model architecture given inline (same fields as the catalog's presets)."""

    @field_validator("*")
    @classmethod
    def not_negative(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value <= MAX_DIMENSION:
            raise PydanticCustomError(
                "out-of-range", "expected a number from 0 to {top}", {"top": f"{MAX_DIMENSION:g}"}
            )
        return value

    @model_validator(mode="after")
    def shape_is_complete(self) -> ArchitectureSpec:
        """The sizes the sizing divides by: a transformer needs them ≥ 1, a CNN its parameters and FLOPs."""
        if self.kind == "cnn":
            needed = {"params_override": self.params_override, "gflops_per_sample": self.gflops_per_sample}
        else:
            needed = {
                "layers": self.layers,
                "hidden": self.hidden,
                "heads": self.heads,
                "kv_heads": self.kv_heads,
                "ffn_hidden": self.ffn_hidden or self.moe_ffn_hidden,
                "vocab": self.vocab,
                "experts": self.experts,
                "experts_per_token": self.experts_per_token,
            }
            if self.kind == "vision-transformer":
                needed |= {"image_size": self.image_size, "patch_size": self.patch_size}
        missing = [k for k, v in needed.items() if v <= 0]
        if missing:
            raise PydanticCustomError(
                "invalid-architecture",
                "a {kind} architecture needs {fields} ≥ 1",
                {"kind": self.kind, "fields": ", ".join(missing)},
            )
        if self.kind != "cnn" and (self.kv_heads > self.heads or self.heads % self.kv_heads):
            raise PydanticCustomError(
                "invalid-architecture",
                "heads ({h}) must be a multiple of kv_heads ({kv})",
                {"h": self.heads, "kv": self.kv_heads},
            )
        if self.alibi and self.learned_positions:
            raise PydanticCustomError("invalid-architecture", "give alibi or learned_positions, not both", {})
        if self.router_group_topk > self.router_groups:
            raise PydanticCustomError("invalid-architecture", "router_group_topk ≤ router_groups", {})
        if self.experts_per_token > self.experts or self.dense_layers > self.layers:
            raise PydanticCustomError(
                "invalid-architecture", "experts_per_token ≤ experts and dense_layers ≤ layers", {}
            )
        if self.interleave_moe_layer_step < 1 or (self.interleave_moe_layer_step > 1 and not self.is_moe):
            raise PydanticCustomError(
                "invalid-architecture",
                "interleave_moe_layer_step must be ≥ 1, and above 1 only for an MoE "
                "model (experts > 1; got {step} with {experts} experts)",
                {"step": self.interleave_moe_layer_step, "experts": self.experts},
            )
        if self.kind != "cnn" and self.is_moe and not self.moe_layer_count:
            raise PydanticCustomError(
                "invalid-architecture",
                "no layer has experts: with dense_layers {dense} and "
                "interleave_moe_layer_step {step} every one of the {layers} layers is dense",
                {"dense": self.dense_layers, "step": self.interleave_moe_layer_step, "layers": self.layers},
            )
        return self


class ModelSpec(Spec):
    preset: str | None = Field(None, description="a catalog preset id", json_schema_extra=offers("models"))
    params: Count | None = Field(
        None, description="a parameter count alone; a Llama-like shape is assumed and the report says so"
    )
    architecture: ArchitectureSpec | None = Field(None, description="an explicit architecture")
    weights: SafeText | None = Field(
        None,
        description="where serving / fine-tuning loads weights from (URI or path)",
        examples=["s3://bucket/llama3-8b"],
    )
    hf_id: SafeText | None = Field(
        None, description="the model id engines load (Hugging Face repo id); defaults to the preset's repo"
    )
    quantization: CheckpointQuantization | None = Field(
        None,
        description="how the checkpoint the engine loads (hf_id / weights) is already quantized: none = 16-bit weights; fp8, nvfp4 (NVIDIA ModelOpt NVFP4, e.g. nvidia/DeepSeek-R1-FP4), awq, gptq or compressed-tensors = a pre-quantized checkpoint whose method the engine reads from its config.json (serve plans). Not given: what the preset's own repository ships (the catalog's checkpoint entry: fp8 for deepseek-v3 and deepseek-r1), else none; give none for a 16-bit conversion of an FP8 repository",
    )

    @field_validator("params")
    @classmethod
    def params_of_a_real_model(cls, params: float | None) -> float | None:
        """The shape assumed from a count (resolve_model.assumed_architecture) must lie within the architecture
        bounds: 1e14 assumes 798 layers of width 102,144; the largest published models hold about 2e12."""
        if params is not None and params > MAX_PARAMS:
            raise PydanticCustomError(
                "out-of-range",
                "more than {top} parameters, beyond any real model (the largest published hold about 2e12)",
                {"top": f"{MAX_PARAMS:g}"},
            )
        return params

    @model_validator(mode="after")
    def exactly_one_source(self) -> ModelSpec:
        given = [k for k in ("preset", "params", "architecture") if getattr(self, k) is not None]
        if len(given) != 1:
            raise PydanticCustomError(
                "model-source",
                "give exactly one of preset, params or architecture (got {given})",
                {"given": ", ".join(given) or "none"},
            )
        return self
