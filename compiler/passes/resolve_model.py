"""Pass: the model's architecture and parameter counts, from a preset, an inline shape or a count alone."""

from __future__ import annotations

from ..catalog.catalog import Catalog
from ..catalog.params import count_params
from ..catalog.types import Architecture
from ..checkpoint import Checkpoint, checkpoint
from ..plan.resolved import Decision, ModelInfo, ResolvedPlan
from ..plan.spec_model import ModelSpec
from ..sizing.reasons import Reason, because
from .context import PassContext
from .wording import model_choice, words

# A count alone gets a Llama-2-like shape. Kaplan et al. 2020 (eq. 2.1) give N ≈ 12·L·d² for a
# transformer body; Llama-2-7B's d/L = 4096/32 = 128 (its config.json) fixes the aspect ratio, so
# L = (N / (12·128²))^(1/3). Head dim 128, gated MLP of width 8d/3 (keeps 12d² per layer), vocab 32000.
ASSUMED_ASPECT_RATIO = 128
ASSUMED_HEAD_DIM = 128
ASSUMED_VOCAB = 32000


def assumed_architecture(params: float) -> Architecture:
    layers = max(1, round((params / (12 * ASSUMED_ASPECT_RATIO**2)) ** (1 / 3)))
    hidden = max(ASSUMED_HEAD_DIM, round(layers * ASSUMED_ASPECT_RATIO / ASSUMED_HEAD_DIM) * ASSUMED_HEAD_DIM)
    heads = hidden // ASSUMED_HEAD_DIM
    return Architecture(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=round(8 * hidden / 3 / 256) * 256,
        vocab=ASSUMED_VOCAB,
        max_position=131072,
    )


def model_info(
    model: ModelSpec, fallback_name: str, catalog: Catalog, serving: bool = True
) -> tuple[ModelInfo, Reason]:
    """The resolved model and the reason for its shape. A served model carries its checkpoint's quantization
    (compiler/checkpoint.py); a trained one reads 16-bit weights (unused.py refuses model.quantization there)."""
    if model.preset:
        preset = catalog.models[model.preset]
        arch, ident, name, hf_id, assumed = preset.architecture, preset.id, preset.name, preset.hf_repo, False
        why = because("preset", preset=preset.id, source=preset.source)
    elif model.architecture:
        arch = Architecture(**model.architecture.model_dump())
        ident, name, hf_id, assumed, why = "custom", fallback_name, "", False, because("architecture-given")
    else:
        arch = assumed_architecture(model.params)
        ident, name, hf_id, assumed = "custom", fallback_name, "", True
        why = because("shape-from-count", layers=arch.layers, hidden=arch.hidden, aspect_ratio=ASSUMED_ASPECT_RATIO)
    counts = count_params(arch)
    ckpt = checkpoint(model, catalog) if serving else None
    info = ModelInfo(
        id=ident,
        name=name,
        hf_id=model.hf_id or hf_id or f"local/{fallback_name}",
        weights_uri=model.weights or "",
        quantization=ckpt.quantization if ckpt else "none",
        weight_block=ckpt.weight_block if ckpt else 0,
        architecture=arch,
        params_total=counts.total,
        params_active=counts.active,
        assumed=assumed,
    )
    return info, why


def checkpoint_decision(model: ModelSpec, catalog: Catalog, prefix: str = "") -> list[Decision]:
    """The checkpoint's quantization where it was decided from the catalog (model.quantization not given)."""
    ckpt = checkpoint(model, catalog)
    if ckpt.shipped is None:
        return []
    why = because(
        "checkpoint-shipped",
        preset=model.preset,
        repository=ckpt.repository,
        quantization=ckpt.quantization,
        block=ckpt.weight_block,
        source=ckpt.shipped.source,
    )
    return [Decision(topic=f"{prefix}checkpoint", choice=checkpoint_choice(ckpt), reason=words(why))]


def checkpoint_choice(ckpt: Checkpoint) -> str:
    blocks = f", one fp32 scale per {ckpt.weight_block}×{ckpt.weight_block} block" if ckpt.weight_block else ""
    return f"{ckpt.quantization} weights{blocks}"


def resolve_model(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    if plan.spec.model is None:  # a staged service: each stage resolves its own model
        return plan
    serving = plan.workload == "serve"
    info, why = model_info(plan.spec.model, plan.name, ctx.catalog, serving)
    decision = Decision(
        topic="model", choice=model_choice(info.name, info.params_total, info.params_active), reason=words(why)
    )
    decisions = [decision] + (checkpoint_decision(plan.spec.model, ctx.catalog) if serving else [])
    warnings = plan.warnings + ([words(because("shape-assumed", why=why))] if info.assumed else [])
    return plan.model_copy(update={"model": info, "decisions": plan.decisions + decisions, "warnings": warnings})
