"""Multi-stage services: each stage sized for the rate it receives, and the GPU ratio between stages."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..reasons import Reason, because
from .search import search_serving
from .types import ServeRequest, ServeSearchResult

if TYPE_CHECKING:
    from ...catalog.types import GpuSpec


@dataclass(frozen=True)
class PipelineStage:
    """One stage of a service: its own request (model, SLO, GPUs) and the items it handles per request
    entering the service (e.g. 1 image → 1 caption)."""

    name: str
    request: ServeRequest
    items_per_request: float = 1.0


@dataclass(frozen=True)
class PipelineResult:
    stages: tuple[tuple[str, ServeSearchResult], ...]
    gpus: tuple[tuple[str, int], ...]  # GPUs per stage (at peak)
    gpu_ratio: tuple[tuple[str, float], ...]  # stage GPUs per GPU of the last stage
    usd_per_month: float
    infeasible_reason: Reason | None


def size_pipeline(
    stages: tuple[PipelineStage, ...], gpus: dict[str, GpuSpec], requests_per_second: float, peak_factor: float = 1.0
) -> PipelineResult:
    """Size each stage for the rate it receives (stages are decoupled by queues, so each meets its own
    SLO at its own rate) and report the GPU ratio between stages."""
    results = []
    for stage in stages:
        req = replace(
            stage.request, requests_per_second=requests_per_second * stage.items_per_request, peak_factor=peak_factor
        )
        results.append((stage.name, search_serving(req, gpus)))
    failed = [(name, r.infeasible_reason) for name, r in results if r.chosen is None]
    counts = tuple((name, r.chosen.gpus if r.chosen else 0) for name, r in results)
    last = counts[-1][1] if counts else 0
    ratio = tuple((name, n / last if last else 0.0) for name, n in counts)
    cost = sum(r.chosen.usd_per_month for _, r in results if r.chosen)
    reason = because("stages-infeasible", failures=tuple(failed)) if failed else None
    return PipelineResult(tuple(results), counts, ratio, cost, reason)
