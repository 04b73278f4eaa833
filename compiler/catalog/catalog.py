"""The catalogs one compile uses: packaged entries plus the plan's own additions.

One object, built once per plan by the pipeline and handed to every pass (passes/context.py): GPUs, model
presets, inter-node fabrics and storage kinds. Nothing below the pipeline loads a catalog of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .fabrics import Interconnect, Storage, load_fabrics
from .loader import load_gpus, load_models
from .residuals import Residual, load_residuals
from .types import GpuSpec, ModelPreset


@dataclass(frozen=True)
class SiteLinks:
    """A site calibration file's measured link shares (site_calibration.py): of `gpu`'s intra-node link and of the
    `interconnect` fabric's NICs; None where the probe measured no such collective."""

    gpu: str
    interconnect: str
    intra_node_fraction: float | None
    inter_node_fraction: float | None


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuSpec]
    models: dict[str, ModelPreset]
    interconnects: dict[str, Interconnect]
    storage: dict[str, Storage]
    residuals: dict[str, Residual]  # how far predictions land from published figures, per family (ranges)
    # a site calibration file's memory factor (site_calibration.py): measured ÷ predicted peak on the site's own GPUs,
    # which full-training memory fits use instead of the published rows; with the words that say where it comes from
    site_memory_factor: float | None = None
    site_memory_source: str = ""
    site_links: SiteLinks | None = None  # a site calibration file's measured interconnect shares
    # the GPUs whose shares a site calibration fitted to measured training steps, to measured LLM serving steps and to
    # measured vision batches: on them the fit is the median (attach_ranges), the published residuals only its spread
    site_fitted_training: tuple[str, ...] = ()
    site_fitted_serving: tuple[str, ...] = ()
    site_fitted_vision: tuple[str, ...] = ()


def load_catalog(extra_gpus: Path | None = None) -> Catalog:
    fabrics = load_fabrics()
    return Catalog(
        gpus=load_gpus(extra_gpus),
        models=load_models(),
        interconnects=dict(fabrics.interconnects),
        storage=dict(fabrics.storage),
        residuals=load_residuals(),
    )


def packaged_ids(kind: str) -> list[str]:
    """The ids of one packaged catalog (gpus, models, interconnects, storage): what the plan schema offers editors
    to complete. A user catalog may add more, so the schema lists them as examples, not as an enum."""
    catalog = load_catalog()
    return sorted(getattr(catalog, kind))
