"""A site calibration file (`cluster.calibration`): steps measured on the user's own cluster. Training steps at
stated layouts and serving prefills refit the catalog's achievable matmul share of each measured GPU; serving decode
steps (memory-bound: they stream the weights and the KV cache) then refit its achievable HBM share. Each share is
the one whose predictions match the measurements (geometric mean of predicted ÷ measured is 1, found by bisection:
a step's time falls as the share grows), so every plan compiled with the file is sized for that site; the report
says so with the numbers before and after. Collectives (all-reduce bus bandwidth inside a node and across two) give
the site's intra- and inter-node link shares, which the training sizing's collectives use instead of the published
ones; the environment warnings a probe raised (another GPU, a capped power limit) are repeated in the report.

    site: cluster-a
    measured_at: "2026-11-20"
    source: "probe job 4711 on gpu017 (mlinfra-compile probe)"
    points:
      - {gpu: h100-sxm-80gb, model: llama-3.1-8b, gpus: 8, tp: 1, pp: 1, zero_stage: 2, micro_batch: 1,
         global_batch: 64, seq_len: 4096, recompute: none, step_seconds: 6.2}
    serving_points:   # one GPU, no TP: prefill of `batch` prompts of `tokens`, or one decode step at `tokens` context
      - {gpu: h100-sxm-80gb, model: llama-3.1-8b, phase: decode, batch: 16, tokens: 1004, step_seconds: 0.0095}
    interconnect:     # bus bandwidth (nccl-tests' definition); inter_node: two nodes over `interconnect`
      gpu: h100-sxm-80gb
      interconnect: ib-400g
      device: cuda
      ranks_per_node: 8
      intra_node: [{op: all_reduce, bytes: 268435456, ranks: 8, bus_bytes_per_second: 3.6e11}]
      inter_node: [{op: all_reduce, bytes: 268435456, ranks: 16, bus_bytes_per_second: 3.5e11}]
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog.catalog import Catalog, SiteLinks
from .catalog.params import count_params
from .catalog.types import Architecture, CatalogId, CatalogText
from .diagnostics import PlanInputError
from .plan.resolved import Decision
from .plan.spec_model import ArchitectureSpec
from .sizing.search_cache import SearchCache
from .sizing.serve.decode import decode_step
from .sizing.serve.memory import kv_bytes_per_token_per_gpu, weights_bytes_per_gpu
from .sizing.serve.prefill import prefill_occupancy_seconds
from .sizing.serve.replica import ReplicaModel, compute_dtype
from .sizing.train.communication import INTER_NODE_ACHIEVABLE_FRACTION, NVLINK_ACHIEVABLE_FRACTION
from .sizing.train.search import TrainRequest, search_training
from .source import load_yaml_file
from .units import format_bytes, format_seconds

BISECTION_STEPS = 40
# an achievable share of the datasheet peak; the floor lets a CPU run of the probe (a test of the loop) be fitted too
SHARE_BOUNDS = (1e-9, 1.0)
# a link share: a CPU's gloo over loopback reaches ~1e-3 of NVLink; below 1e-5 nothing was measured
LINK_SHARE_BOUNDS = (1e-5, 1.0)
TOKENS = 1e9  # any count: the step time does not depend on it


class CalibrationError(ValueError):
    """A calibration file that cannot be read, does not validate or names what the catalog lacks."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SitePoint(_Strict):
    gpu: CatalogId
    model: CatalogId | None = Field(None, description="a catalog preset id (or give the architecture)")
    architecture: ArchitectureSpec | None = Field(
        None, description="the measured shape, e.g. a probe's reduced layers (checked as a plan's inline architecture)"
    )
    gpus: int = Field(ge=1, le=1_000_000)
    tp: int = Field(1, ge=1, le=1024)
    pp: int = Field(1, ge=1, le=1024)
    zero_stage: Literal[0, 1, 2, 3] = 0
    micro_batch: int = Field(1, ge=1, le=100_000)
    global_batch: int = Field(ge=1, le=100_000_000, description="sequences per optimizer step")
    seq_len: int = Field(ge=1, le=10_000_000)
    recompute: Literal["none", "selective", "full"] = "none"
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    framework: Literal["auto", "deepspeed", "fsdp", "megatron", "ddp"] = Field(
        "auto", description="the framework that ran the step (a probe's job: the plan's); auto: the search's choice"
    )
    offload: bool = Field(False, description="optimizer states offloaded to the host (DeepSpeed ZeRO-Offload)")
    step_seconds: float = Field(gt=1e-6, le=1e6, description="the measured time of one optimizer step")

    @model_validator(mode="after")
    def one_shape(self) -> SitePoint:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give model (a preset id) or architecture, not both")
        return self

    def shape(self, catalog: Catalog) -> Architecture:
        return self.architecture or catalog.models[self.model].architecture


class ServingPoint(_Strict):
    """One serving step measured on one replica (TP `tp`): a prefill of `batch` prompts of `tokens` tokens,
    `prefill_group` prompts per forward, or one decode step of `batch` sequences at `tokens` tokens of context."""

    gpu: CatalogId
    model: CatalogId | None = Field(None, description="a catalog preset id (or give the architecture)")
    architecture: ArchitectureSpec | None = Field(
        None, description="the measured shape, e.g. a probe's reduced layers (checked as a plan's inline architecture)"
    )
    precision: Literal["bf16", "fp16"] = "bf16"
    phase: Literal["prefill", "decode"]
    batch: int = Field(ge=1, le=100_000)
    tokens: float = Field(ge=1, le=10_000_000, description="prefill: prompt tokens; decode: context tokens")
    prefill_group: int = Field(1, ge=1, le=100_000)
    tp: int = Field(1, ge=1, le=1024, description="the replica's tensor parallelism (the engine's own, measured)")
    step_seconds: float = Field(gt=1e-9, le=1e6)

    @model_validator(mode="after")
    def one_shape(self) -> ServingPoint:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give model (a preset id) or architecture, not both")
        return self

    def shape(self, catalog: Catalog) -> Architecture:
        return self.architecture or catalog.models[self.model].architecture


class MemoryPoint(_Strict):
    """One layout's peak memory on one GPU: measured (torch.cuda.max_memory_reserved/allocated; a CPU run: its
    resident set) and what train_memory predicted for the same shape and layout."""

    layout: CatalogText
    measured_allocated_bytes: int = Field(ge=0, le=2**50)
    measured_reserved_bytes: int = Field(ge=0, le=2**50)
    predicted_allocated_bytes: int = Field(ge=1, le=2**50)
    predicted_reserved_bytes: int = Field(ge=1, le=2**50)

    @property
    def ratio(self) -> float:
        return self.measured_reserved_bytes / self.predicted_reserved_bytes


class SiteMemory(_Strict):
    """The memory factor a full-training memory fit uses at this site: the largest measured ÷ predicted peak reserved
    memory over the probe's layouts (a margin covers the worst layout measured), never below 1 when applied."""

    gpu: CatalogId
    device: CatalogText = Field(
        description="what measured it: cuda (the caching allocator's counters) or cpu (resident set)"
    )
    factor: float = Field(gt=0, le=1000)
    points: list[MemoryPoint] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def factor_from_points(self) -> SiteMemory:
        largest = max(p.ratio for p in self.points)
        if abs(self.factor - largest) > 0.001 * largest + 0.0005:
            raise ValueError(
                f"factor {self.factor} is not the largest measured ÷ predicted of its points ({largest:.3f})"
            )
        return self


class CollectivePoint(_Strict):
    """One collective's bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md: all-reduce algbw × 2(n−1)/n,
    all-gather algbw × (n−1)/n), over `ranks` ranks at `bytes` bytes."""

    op: Literal["all_reduce", "all_gather"]
    bytes: int = Field(ge=1, le=2**40)
    ranks: int = Field(ge=2, le=1_000_000)
    bus_bytes_per_second: float = Field(gt=0, le=1e15)


class SiteInterconnect(_Strict):
    """The collectives a probe measured: inside one node of `gpu`, and across two nodes over `interconnect`."""

    gpu: CatalogId
    interconnect: CatalogId
    device: CatalogText = Field(description="cuda (NCCL) or cpu (gloo: a test of the loop)")
    ranks_per_node: int = Field(ge=1, le=1024)
    intra_node: list[CollectivePoint] = Field(default_factory=list, max_length=100)
    inter_node: list[CollectivePoint] = Field(default_factory=list, max_length=100)


class SiteCalibration(_Strict):
    site: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    measured_at: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    source: CatalogText
    points: list[SitePoint] = Field(default_factory=list, max_length=100)
    serving_points: list[ServingPoint] = Field(default_factory=list, max_length=100)
    memory: SiteMemory | None = None
    interconnect: SiteInterconnect | None = None
    warnings: list[CatalogText] = Field(
        default_factory=list,
        max_length=20,
        description="where the measured node differs from the catalog entry (probe_environment.py)",
    )

    @model_validator(mode="after")
    def some_points(self) -> SiteCalibration:
        if not self.points and not self.serving_points:
            raise ValueError("give points (training steps) or serving_points")
        return self


def load_site_calibration(path: Path) -> SiteCalibration:
    loaded = None
    try:
        loaded = load_yaml_file(path)
        return SiteCalibration.model_validate(loaded.data)
    except PlanInputError as exc:
        first = exc.diagnostics[0]
        raise CalibrationError(
            f"{path}:{first.line}:{first.column}: {first.message}" if first.line else f"{path}: {first.message}"
        ) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = loaded.position(tuple(first["loc"]))
        field = ".".join(map(str, first["loc"]))
        raise CalibrationError(f"{path}:{where.line}:{where.column}: {field}: {first['msg']}") from None


def _predicted_step(point: SitePoint, catalog: Catalog, share: float, searches: SearchCache) -> float | None:
    """The step model's time for the measured layout (its TP, PP, ZeRO pinned); its collectives (TP's all-reduces, DP's
    gradients) at the site's measured intra-node share when the file has one, as the recompiled plan prices them."""
    gpu = catalog.gpus[point.gpu].model_copy(update={"achievable_matmul_fraction": share})
    arch = point.shape(catalog)
    links = catalog.site_links
    req = TrainRequest(
        site_intra_node=(links.gpu, links.intra_node_fraction)
        if links and links.intra_node_fraction is not None
        else None,
        arch=arch,
        params=count_params(arch),
        tokens=TOKENS,
        seq_len=point.seq_len,
        global_batch_sequences=point.global_batch,
        gpu_ids=(point.gpu,),
        gpu_count=point.gpus,
        interconnect=catalog.interconnects["ib-400g"],
        storage=catalog.storage["lustre"],
        precision=point.precision,
        max_gpus=point.gpus,
        pins={
            "tp": point.tp,
            "pp": point.pp,
            "zero_stage": point.zero_stage,
            "micro_batch": point.micro_batch,
            "recompute": point.recompute,
            "offload": point.offload,
        },
        framework=point.framework,
    )
    chosen = search_training(req, {**catalog.gpus, point.gpu: gpu}, searches).chosen
    return chosen.step.total if chosen is not None else None


def _serving_model(point: ServingPoint, catalog: Catalog, gpu) -> ReplicaModel:
    arch = point.shape(catalog)
    params = count_params(arch)
    return ReplicaModel(
        gpu=gpu,
        arch=arch,
        params=params,
        precision=point.precision,
        dtype=compute_dtype(point.precision, gpu),
        tp=point.tp,
        pp=1,
        weights_bytes_per_gpu=weights_bytes_per_gpu(params, arch, point.precision, point.tp, 1),
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(arch, 2, point.tp, 1),
    )


def _predicted_serving_step(point: ServingPoint, catalog: Catalog, matmul: float, hbm: float) -> float:
    """The serving latency model's time for the measured step (sizing/serve/decode.py, prefill.py): a prefill of
    `batch` prompts packed `prefill_group` per forward is batch × one prompt's occupancy; a decode step is decode_step
    at that batch."""
    gpu = catalog.gpus[point.gpu].model_copy(
        update={"achievable_matmul_fraction": matmul, "achievable_memory_bandwidth_fraction": hbm}
    )
    m = _serving_model(point, catalog, gpu)
    tokens = round(point.tokens)
    if point.phase == "prefill":
        return point.batch * prefill_occupancy_seconds(m, tokens, point.prefill_group * tokens)
    return decode_step(m, point.batch, point.tokens).seconds


def _predictions(
    points: list, catalog: Catalog, share: float, searches: SearchCache, hbm: float | None = None
) -> list[float]:
    """Each point's predicted step: training steps and prefills at matmul share `share`, decodes also at HBM share
    `hbm` (None: the catalog's)."""
    predicted = []
    for p in points:
        if isinstance(p, ServingPoint):
            gpu = catalog.gpus[p.gpu]
            seconds = _predicted_serving_step(
                p, catalog, share, gpu.achievable_memory_bandwidth_fraction if hbm is None else hbm
            )
        else:
            seconds = _predicted_step(p, catalog, share, searches)
        if seconds is None:
            raise CalibrationError(
                f"point {p.model or 'inline architecture'} on {p.gpus} × {p.gpu} (TP{p.tp} PP{p.pp} ZeRO-{p.zero_stage} "
                f"mb{p.micro_batch}) does not fit: the layout cannot be sized"
            )
        predicted.append(seconds)
    return predicted


def _mean_ratio(points: list, catalog: Catalog, share: float, searches: SearchCache, hbm: float | None = None) -> float:
    """Geometric mean of predicted ÷ measured over the GPU's points."""
    predicted = _predictions(points, catalog, share, searches, hbm)
    return statistics.geometric_mean([x / p.step_seconds for x, p in zip(predicted, points)])


def _bisect(ratio) -> float:
    """The share in SHARE_BOUNDS where predicted ÷ measured (falling as the share grows) crosses 1."""
    low, high = SHARE_BOUNDS
    for _ in range(BISECTION_STEPS):
        mid = math.sqrt(low * high)  # geometric: the same relative precision at any share
        low, high = (mid, high) if ratio(mid) > 1 else (low, mid)
    return float(f"{math.sqrt(low * high):.4g}")


def _decision(
    gpu_id: str,
    what: str,
    before_share: float,
    share: float,
    before: float,
    after: float,
    points: list,
    site: SiteCalibration,
    predicted: tuple[list[float], list[float]],
) -> Decision:
    bound = (
        " (the share's bound: no share explains these steps; check the measurement)" if abs(after - 1) > 0.05 else ""
    )
    measured = ", ".join(
        f"{format_seconds(p.step_seconds)} (predicted {format_seconds(b)} → {format_seconds(a)})"
        for p, b, a in zip(points, *predicted)
    )
    return Decision(
        topic=f"site calibration ({gpu_id}{'' if what == 'matmul' else ', HBM'})",
        choice=f"achievable {'matmul' if what == 'matmul' else 'HBM bandwidth'} share {_share_text(before_share)} → {_share_text(share)}",
        reason=f"{len(points)} {_what_points(points)} measured at {site.site} on {site.measured_at} ({site.source}): {measured}; "
        f"predicted ÷ measured {before:.3g} with the catalog's share, {after:.3g} with the site's{bound}",
    )


def _share_text(share: float) -> str:
    """Three decimals, as the catalog writes shares; a CPU run's tiny share in three significant figures."""
    return f"{share:.3f}" if share >= 0.001 else f"{share:.3g}"


def _what_points(points: list) -> str:
    kinds = sorted(
        {
            ("decode" if p.phase == "decode" else "prefill") if isinstance(p, ServingPoint) else "training"
            for p in points
        }
    )
    return "/".join(kinds) + " step(s)"


def calibrate(catalog: Catalog, site: SiteCalibration) -> tuple[Catalog, list[Decision]]:
    """The catalog with each measured GPU's matmul share fitted to its training and prefill steps, then its HBM share
    to its decode steps, and the decisions saying so."""
    everything = list(site.points) + list(site.serving_points)
    named = everything + [x for x in (site.memory, site.interconnect) if x is not None]
    unknown = sorted(
        {p.gpu for p in named if p.gpu not in catalog.gpus}
        | {p.model for p in everything if p.model and p.model not in catalog.models}
    )
    if unknown:
        raise CalibrationError(f"points name what the catalog lacks: {', '.join(unknown)}")
    gpus, decisions, searches = dict(catalog.gpus), [], SearchCache()
    links, link_decision = _links(catalog, site) if site.interconnect is not None else (None, None)
    measured = replace(catalog, site_links=links)  # training steps are refitted with the site's own link shares
    for gpu_id in sorted({p.gpu for p in everything}):
        compute = [
            p for p in everything if p.gpu == gpu_id and not (isinstance(p, ServingPoint) and p.phase == "decode")
        ]
        decodes = [p for p in site.serving_points if p.gpu == gpu_id and p.phase == "decode"]
        entry = catalog.gpus[gpu_id]
        share = entry.achievable_matmul_fraction
        if compute:
            before, first = (
                _mean_ratio(compute, measured, share, searches),
                _predictions(compute, measured, share, searches),
            )
            share = _bisect(lambda s, compute=compute: _mean_ratio(compute, measured, s, searches))
            after, last = (
                _mean_ratio(compute, measured, share, searches),
                _predictions(compute, measured, share, searches),
            )
            decisions.append(
                _decision(
                    gpu_id,
                    "matmul",
                    entry.achievable_matmul_fraction,
                    share,
                    before,
                    after,
                    compute,
                    site,
                    (first, last),
                )
            )
        hbm = entry.achievable_memory_bandwidth_fraction
        if decodes:
            before, first = (
                _mean_ratio(decodes, catalog, share, searches, hbm),
                _predictions(decodes, catalog, share, searches, hbm),
            )
            hbm = _bisect(lambda h, decodes=decodes, share=share: _mean_ratio(decodes, catalog, share, searches, h))
            after, last = (
                _mean_ratio(decodes, catalog, share, searches, hbm),
                _predictions(decodes, catalog, share, searches, hbm),
            )
            decisions.append(
                _decision(
                    gpu_id,
                    "hbm",
                    entry.achievable_memory_bandwidth_fraction,
                    hbm,
                    before,
                    after,
                    decodes,
                    site,
                    (first, last),
                )
            )
        gpus[gpu_id] = entry.model_copy(
            update={"achievable_matmul_fraction": share, "achievable_memory_bandwidth_fraction": hbm}
        )
    factor, source = None, ""
    if site.memory is not None:
        mem = site.memory
        factor = mem.factor
        source = f"measured ÷ predicted peak reserved memory at {site.site} ({mem.device} on {mem.gpu}), the largest of {len(mem.points)} layout(s)"
        decisions.append(
            Decision(
                topic="site calibration (memory)",
                choice=f"memory factor {mem.factor:.3f}",
                reason=f"{source} measured on {site.measured_at} ({site.source}): "
                + ", ".join(
                    f"{p.layout} {format_bytes(p.measured_reserved_bytes)} reserved / {format_bytes(p.measured_allocated_bytes)} "
                    f"allocated vs predicted {format_bytes(p.predicted_reserved_bytes)} / {format_bytes(p.predicted_allocated_bytes)}"
                    for p in mem.points
                )
                + "; full-training memory fits use it (never below 1) instead of the published rows"
                + (" — measured on a CPU: a test of the loop, not a GPU margin" if mem.device == "cpu" else ""),
            )
        )
    if link_decision is not None:
        decisions.append(link_decision)
    if site.warnings:
        decisions.append(
            Decision(
                topic="site calibration (environment)",
                choice=f"{len(site.warnings)} warning(s)",
                reason=f"the probe's node at {site.site} differs from the catalog: " + "; ".join(site.warnings),
            )
        )
    return Catalog(
        gpus=gpus,
        models=catalog.models,
        interconnects=catalog.interconnects,
        storage=catalog.storage,
        residuals=catalog.residuals,
        site_memory_factor=factor,
        site_memory_source=source,
        site_links=links,
    ), decisions


def _plateau(points: list[CollectivePoint]) -> CollectivePoint | None:
    """The largest all-reduce: nccl-tests' plateau bus bandwidth, the rate the sizing's all-reduce formula uses."""
    return max((p for p in points if p.op == "all_reduce"), key=lambda p: p.bytes, default=None)


def _share(measured: float, link: float) -> float:
    return float(f"{min(LINK_SHARE_BOUNDS[1], max(LINK_SHARE_BOUNDS[0], measured / link)):.4g}")


def _listed(points: list[CollectivePoint]) -> str:
    return ", ".join(
        f"{p.op.replace('_', '-')} {format_bytes(p.bytes)} {p.bus_bytes_per_second / 1e9:.3g} GB/s" for p in points
    )


def _links(catalog: Catalog, site: SiteCalibration) -> tuple[SiteLinks, Decision]:
    """The site's link shares: the largest all-reduce's bus bandwidth ÷ the catalog's link rate inside a node (the
    GPU's intra-node bandwidth) and across two (the fabric's per-GPU NIC rate × the node's ranks, as
    train_time.dp_collective_bandwidth prices a ring that crosses nodes)."""
    fabric = site.interconnect
    if fabric.interconnect not in catalog.interconnects:
        raise CalibrationError(f"interconnect names what the catalog lacks: {fabric.interconnect}")
    gpu, nic = catalog.gpus[fabric.gpu], catalog.interconnects[fabric.interconnect]
    intra, inter = _plateau(fabric.intra_node), _plateau(fabric.inter_node)
    intra_share = (
        _share(intra.bus_bytes_per_second, gpu.intra_node_bandwidth_bytes_per_second)
        if (intra and gpu.intra_node_bandwidth_bytes_per_second > 0)
        else None
    )
    node_rate = nic.bytes_per_second_per_gpu * fabric.ranks_per_node
    inter_share = _share(inter.bus_bytes_per_second, node_rate) if inter else None
    changes, parts = [], []
    if intra_share is not None:
        changes.append(f"intra-node share {NVLINK_ACHIEVABLE_FRACTION:.3g} → {intra_share:.4g}")
        parts.append(
            f"inside a node ({intra.ranks} ranks): {_listed(fabric.intra_node)}; predicted "
            f"{gpu.intra_node_bandwidth_bytes_per_second * NVLINK_ACHIEVABLE_FRACTION / 1e9:.3g} GB/s "
            f"({gpu.id}'s {gpu.intra_node_bandwidth_bytes_per_second / 1e9:.3g} GB/s link × {NVLINK_ACHIEVABLE_FRACTION:.3g})"
        )
    if inter_share is not None:
        changes.append(f"inter-node share {INTER_NODE_ACHIEVABLE_FRACTION:.3g} → {inter_share:.4g}")
        parts.append(
            f"across two nodes ({inter.ranks} ranks, {fabric.interconnect}): {_listed(fabric.inter_node)}; predicted "
            f"{node_rate * INTER_NODE_ACHIEVABLE_FRACTION / 1e9:.3g} GB/s ({fabric.ranks_per_node} × "
            f"{nic.bytes_per_second_per_gpu / 1e9:.3g} GB/s NICs × {INTER_NODE_ACHIEVABLE_FRACTION:.3g})"
        )
    bounded = [s for s in (intra_share, inter_share) if s is not None and s in LINK_SHARE_BOUNDS]
    reason = (
        f"bus bandwidth (nccl-tests doc/PERFORMANCE.md) measured at {site.site} on {site.measured_at} ({site.source}); "
        + "; ".join(parts)
        + f"; the largest all-reduce gives each share, which the training sizing's collectives use "
        f"on {gpu.id} over {fabric.interconnect}"
        + (" (a share at its bound: check the measurement)" if bounded else "")
        + (" — measured with gloo on a CPU: a test of the loop, not a GPU's links" if fabric.device == "cpu" else "")
    )
    decision = Decision(
        topic="site calibration (interconnect)",
        choice="; ".join(changes) or "no share (no all-reduce measured)",
        reason=reason,
    )
    return SiteLinks(gpu.id, fabric.interconnect, intra_share, inter_share), decision
