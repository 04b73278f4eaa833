"""Versioned catalogs (GPUs, models, fabrics) with a source and an as_of date per entry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .loader import CatalogError, load_gpus, load_models
from .params import ParamCounts, count_params
from .types import Architecture, GpuSpec, ModelPreset

__all__ = [
    "Architecture", "Catalog", "CatalogError", "GpuSpec", "ModelPreset", "ParamCounts",
    "count_params", "load_catalog", "load_gpus", "load_models",
]


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuSpec]
    models: dict[str, ModelPreset]


def load_catalog(extra_gpus: Path | None = None) -> Catalog:
    return Catalog(gpus=load_gpus(extra_gpus), models=load_models())
