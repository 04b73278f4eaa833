"""The catalogs one compile uses: packaged entries plus the plan's own additions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .loader import load_gpus, load_models
from .types import GpuSpec, ModelPreset


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuSpec]
    models: dict[str, ModelPreset]


def load_catalog(extra_gpus: Path | None = None) -> Catalog:
    return Catalog(gpus=load_gpus(extra_gpus), models=load_models())
