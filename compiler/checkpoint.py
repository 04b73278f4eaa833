"""The checkpoint a serving engine loads: its quantization (the plan's `model.quantization`, else what the preset's own
repository ships, else 16-bit) and the precision a plan that names none is served in.

One place for both, read by serve_checks (before the passes, to refuse what an engine would refuse) and by the passes
that decide them (resolve_model, size_serving), so the check and the decision cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog.catalog import Catalog
from .catalog.types import ShippedCheckpoint
from .plan.spec_model import ModelSpec

# Plan precisions each checkpoint quantization can be served in. none: a 16-bit checkpoint, served as is or quantized
# by the engine at load time. fp8: FP8 (W8A8) checkpoints. awq: 4-bit weights (AutoAWQ). gptq: 4- or 8-bit weights.
# compressed-tensors (llm-compressor): W8A8-FP8, W8A8-INT8 or W4A16 schemes. An FP8 checkpoint stays FP8 whatever
# vLLM's --dtype says: Fp8LinearMethod.create_weights allocates float8_e4m3fn weights when the checkpoint is
# FP8-serialized and params_dtype (--dtype) only otherwise (vllm-project/vllm @0071b24,
# vllm/model_executor/layers/quantization/fp8.py); --dtype sets the activations and the unquantized layers.
SERVES_AS = {
    "none": ("fp32", "fp16", "bf16", "fp8", "fp4", "int8", "int4"),
    "fp8": ("fp8",),
    "nvfp4": ("fp4",),
    "awq": ("int4",),
    "gptq": ("int4", "int8"),
    "compressed-tensors": ("fp8", "fp4", "int8", "int4"),
}


@dataclass(frozen=True)
class Checkpoint:
    quantization: str  # CheckpointQuantization
    weight_block: int  # fp8 block scaling: one fp32 scale per weight_block² weights; 0 = none counted
    shipped: ShippedCheckpoint | None  # the catalog entry the quantization was decided from (None: given or 16-bit)
    repository: str  # the preset's repository it ships in ('' when not decided from the catalog)


def shipped_checkpoint(model: ModelSpec, catalog: Catalog) -> ShippedCheckpoint | None:
    """The preset's repository's own format where the engine loads that repository: model.hf_id not given or the
    preset's hf_repo (model.weights is where a copy of it is read from)."""
    if not model.preset:
        return None
    preset = catalog.models[model.preset]
    if preset.checkpoint is None or (model.hf_id and model.hf_id != preset.hf_repo):
        return None
    return preset.checkpoint


def checkpoint(model: ModelSpec, catalog: Catalog) -> Checkpoint:
    """model.quantization when given (with the shipped block scales when it names the shipped method), else the
    preset repository's shipped quantization, else none."""
    shipped = shipped_checkpoint(model, catalog)
    if model.quantization is not None:
        same = shipped is not None and shipped.quantization == model.quantization
        return Checkpoint(model.quantization, shipped.weight_block if same else 0, None, "")
    if shipped is not None:
        return Checkpoint(shipped.quantization, shipped.weight_block, shipped, catalog.models[model.preset].hf_repo)
    return Checkpoint("none", 0, None, "")


def serving_precision(precision: str, given: bool, quantization: str) -> str:
    """The precision a model is served in: the plan's when given; else the one precision a pre-quantized checkpoint
    serves in (fp8 for an FP8 checkpoint); else the plan's default."""
    if given or quantization == "none" or len(SERVES_AS[quantization]) != 1:
        return precision
    return SERVES_AS[quantization][0]
