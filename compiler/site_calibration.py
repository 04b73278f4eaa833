"""A site calibration file (`cluster.calibration`): training steps measured on the user's own cluster at stated
layouts. The catalog's achievable matmul share of each measured GPU is replaced by the one that predicts those
steps (their mean predicted ÷ measured is 1, found by bisection: the step time falls as the share grows), so
every plan compiled with the file is sized for that site; the report says so with the numbers before and after.

    site: cluster-a
    measured_at: "2026-11-20"
    source: "probe job 4711 on gpu017 (mlinfra-compile probe)"
    points:
      - {gpu: h100-sxm-80gb, model: llama-3.1-8b, gpus: 8, tp: 1, pp: 1, zero_stage: 2, micro_batch: 1,
         global_batch: 64, seq_len: 4096, recompute: none, step_seconds: 6.2}
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog.catalog import Catalog
from .catalog.params import count_params
from .catalog.types import Architecture, CatalogId, CatalogText
from .diagnostics import PlanInputError
from .resolved import Decision
from .sizing.search_cache import SearchCache
from .sizing.training import TrainRequest, search_training
from .source import load_yaml_file
from .units import format_seconds

BISECTION_STEPS = 30
SHARE_BOUNDS = (0.01, 1.0)  # an achievable share of the datasheet peak
TOKENS = 1e9  # any count: the step time does not depend on it


class CalibrationError(ValueError):
    """A calibration file that cannot be read, does not validate or names what the catalog lacks."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SitePoint(_Strict):
    gpu: CatalogId
    model: CatalogId | None = Field(None, description="a catalog preset id (or give the architecture)")
    architecture: Architecture | None = Field(None, description="the measured shape, e.g. a probe's reduced layers")
    gpus: int = Field(ge=1, le=1_000_000)
    tp: int = Field(1, ge=1, le=1024)
    pp: int = Field(1, ge=1, le=1024)
    zero_stage: Literal[0, 1, 2, 3] = 0
    micro_batch: int = Field(1, ge=1, le=100_000)
    global_batch: int = Field(ge=1, le=100_000_000, description="sequences per optimizer step")
    seq_len: int = Field(ge=1, le=10_000_000)
    recompute: Literal["none", "selective", "full"] = "none"
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    step_seconds: float = Field(gt=1e-6, le=1e6, description="the measured time of one optimizer step")

    @model_validator(mode="after")
    def one_shape(self) -> "SitePoint":
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give model (a preset id) or architecture, not both")
        return self

    def shape(self, catalog: Catalog) -> Architecture:
        return self.architecture or catalog.models[self.model].architecture


class SiteCalibration(_Strict):
    site: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    measured_at: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    source: CatalogText
    points: list[SitePoint] = Field(min_length=1, max_length=100)


def load_site_calibration(path: Path) -> SiteCalibration:
    try:
        data = load_yaml_file(path).data
        return SiteCalibration.model_validate(data)
    except PlanInputError as exc:
        first = exc.diagnostics[0]
        raise CalibrationError(f"{path}:{first.line}:{first.column}: {first.message}" if first.line else f"{path}: {first.message}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CalibrationError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def _predicted_step(point: SitePoint, catalog: Catalog, share: float, searches: SearchCache) -> float | None:
    gpu = catalog.gpus[point.gpu].model_copy(update={"achievable_matmul_fraction": share})
    arch = point.shape(catalog)
    req = TrainRequest(arch=arch, params=count_params(arch), tokens=TOKENS, seq_len=point.seq_len,
                       global_batch_sequences=point.global_batch, gpu_ids=(point.gpu,), gpu_count=point.gpus,
                       interconnect=catalog.interconnects["ib-400g"], storage=catalog.storage["lustre"],
                       precision=point.precision, max_gpus=point.gpus,
                       pins={"tp": point.tp, "pp": point.pp, "zero_stage": point.zero_stage, "micro_batch": point.micro_batch,
                             "recompute": point.recompute, "offload": False})
    chosen = search_training(req, {**catalog.gpus, point.gpu: gpu}, searches).chosen
    return chosen.step.total if chosen is not None else None


def _mean_ratio(points: list[SitePoint], catalog: Catalog, share: float, searches: SearchCache) -> float:
    """Geometric mean of predicted ÷ measured over the GPU's points."""
    ratios = []
    for p in points:
        predicted = _predicted_step(p, catalog, share, searches)
        if predicted is None:
            raise CalibrationError(f"point {p.model or 'inline architecture'} on {p.gpus} × {p.gpu} (TP{p.tp} PP{p.pp} ZeRO-{p.zero_stage} "
                                   f"mb{p.micro_batch}) does not fit: the layout cannot be sized")
        ratios.append(predicted / p.step_seconds)
    return statistics.geometric_mean(ratios)


def calibrate(catalog: Catalog, site: SiteCalibration) -> tuple[Catalog, list[Decision]]:
    """The catalog with each measured GPU's matmul share fitted to the site's points, and the decisions saying so."""
    unknown = sorted({p.gpu for p in site.points if p.gpu not in catalog.gpus} | {p.model for p in site.points if p.model and p.model not in catalog.models})
    if unknown:
        raise CalibrationError(f"points name what the catalog lacks: {', '.join(unknown)}")
    gpus, decisions, searches = dict(catalog.gpus), [], SearchCache()
    for gpu_id in sorted({p.gpu for p in site.points}):
        points = [p for p in site.points if p.gpu == gpu_id]
        before_share = catalog.gpus[gpu_id].achievable_matmul_fraction
        before = _mean_ratio(points, catalog, before_share, searches)
        low, high = SHARE_BOUNDS
        for _ in range(BISECTION_STEPS):  # predicted ÷ measured falls as the share grows
            mid = (low + high) / 2
            low, high = (mid, high) if _mean_ratio(points, catalog, mid, searches) > 1 else (low, mid)
        share = round((low + high) / 2, 4)
        after = _mean_ratio(points, catalog, share, searches)
        bound = " (the share's bound: no share explains these steps; check the measurement)" if abs(after - 1) > 0.05 else ""
        gpus[gpu_id] = catalog.gpus[gpu_id].model_copy(update={"achievable_matmul_fraction": share})
        measured = ", ".join(format_seconds(p.step_seconds) for p in points)
        decisions.append(Decision(
            topic=f"site calibration ({gpu_id})",
            choice=f"achievable matmul share {before_share:.3f} → {share:.3f}",
            reason=f"{len(points)} step(s) measured at {site.site} on {site.measured_at} ({site.source}): {measured}; "
                   f"predicted ÷ measured {before:.3g} with the catalog's share, {after:.3g} with the site's{bound}"))
    return Catalog(gpus=gpus, models=catalog.models, interconnects=catalog.interconnects, storage=catalog.storage,
                   residuals=catalog.residuals), decisions
