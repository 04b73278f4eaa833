"""A site calibration file (`cluster.calibration`): steps measured on the user's own cluster. Training steps at
stated layouts, serving prefills and vision batches (a Triton probe's; only those the share moves: a read-bound batch,
batch 1 always, fits no share, site_calibration_fit.MIN_VISION_SENSITIVITY) refit the catalog's achievable matmul
share of each measured GPU; serving decode
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

from dataclasses import replace
from typing import NamedTuple

from .catalog.catalog import Catalog
from .plan.resolved import Decision
from .site_calibration_file import CalibrationError, ServingPoint, SiteCalibration, VisionPoint
from .site_calibration_fit import (
    MIN_VISION_SENSITIVITY,
    bisect_share,
    fit_optimizer_share,
    mean_ratio,
    predictions,
    vision_sensitivity,
)
from .site_calibration_links import fit_links
from .sizing.search_cache import SearchCache
from .units import format_bytes, format_seconds


class ShareFit(NamedTuple):
    """One share refitted to a GPU's points: the share, predicted ÷ measured (geometric mean) and each point's
    prediction, before (the catalog's share) and after (the site's)."""

    share_before: float
    share_after: float
    ratio_before: float
    ratio_after: float
    predicted_before: list[float]
    predicted_after: list[float]


def _decision(gpu_id: str, what: str, fit: ShareFit, points: list, site: SiteCalibration) -> Decision:
    bound = (
        " (the share's bound: no share explains these steps; check the measurement)"
        if abs(fit.ratio_after - 1) > 0.05
        else ""
    )
    measured = ", ".join(
        f"{format_seconds(p.step_seconds)} (predicted {format_seconds(b)} → {format_seconds(a)})"
        for p, b, a in zip(points, fit.predicted_before, fit.predicted_after)
    )
    kind = "matmul" if what == "matmul" else "HBM bandwidth"
    return Decision(
        topic=f"site calibration ({gpu_id}{'' if what == 'matmul' else ', HBM'})",
        choice=f"achievable {kind} share {_share_text(fit.share_before)} → {_share_text(fit.share_after)}",
        reason=f"{len(points)} {_what_points(points)} measured at {site.site} on {site.measured_at} ({site.source}): {measured}; "
        f"predicted ÷ measured {fit.ratio_before:.3g} with the catalog's share, {fit.ratio_after:.3g} with the site's{bound}",
    )


def _share_text(share: float) -> str:
    """Three decimals, as the catalog writes shares; a CPU run's tiny share in three significant figures."""
    return f"{share:.3f}" if share >= 0.001 else f"{share:.3g}"


def _what_points(points: list) -> str:
    kinds = sorted({_kind(p) for p in points})
    return "/".join(kinds) + " step(s)"


def _kind(point) -> str:
    if isinstance(point, VisionPoint):
        return "vision batch"
    if isinstance(point, ServingPoint):
        return "decode" if point.phase == "decode" else "prefill"
    return "training"


# A GPU with both compute points (prefills, training steps) and decode steps: each fit moves the other's predictions
# (a prefill also reads the weights and runs memory-bound kernels at the HBM share; a decode step's GEMMs run at the
# matmul share), so the two fits alternate, each round starting from the other's last result.
FIT_ROUNDS = 3


def _fit_gpu(
    gpu_id: str, points: tuple[list, list], measured: Catalog, site: SiteCalibration, searches: SearchCache
) -> tuple[Catalog, list[Decision]]:
    """The catalog with the GPU's shares fitted to its compute points and decode steps (`points`), alternating
    where it has both (FIT_ROUNDS); the decisions compare the catalog's shares with the last round's."""
    compute, decodes = points
    baseline = measured.gpus[gpu_id]
    decisions: list[Decision] = []
    for _ in range(FIT_ROUNDS if compute and decodes else 1):
        decisions = []
        if compute:
            measured, decisions = _fit_compute(gpu_id, compute, measured, site, searches, baseline)
        if decodes:
            share = measured.gpus[gpu_id].achievable_matmul_fraction
            hbm, decision = _fit_decodes(gpu_id, decodes, measured, share, (site, searches), baseline)
            fitted = measured.gpus[gpu_id].model_copy(update={"achievable_memory_bandwidth_fraction": hbm})
            measured, decisions = _with_gpu(measured, fitted), [*decisions, decision]
    return measured, decisions


def _fit_compute(
    gpu_id: str, compute: list, measured: Catalog, site: SiteCalibration, searches: SearchCache, baseline
) -> tuple[Catalog, list[Decision]]:
    """The catalog with the GPU's optimizer share (where its training steps separate it) and then its matmul share
    fitted to its training and prefill steps, and the decisions saying so (`baseline`: the catalog's entry)."""
    entry = measured.gpus[gpu_id]
    share, decisions = baseline.achievable_matmul_fraction, []
    at_catalog = _with_gpu(measured, baseline)
    before, first = mean_ratio(compute, at_catalog, share, searches), predictions(compute, at_catalog, share, searches)
    training = [p for p in compute if not isinstance(p, (ServingPoint, VisionPoint))]
    optimizer = fit_optimizer_share(training, measured, share, searches)
    if optimizer is not None:
        measured = _with_gpu(measured, entry.model_copy(update={"achievable_optimizer_bandwidth_fraction": optimizer}))
        decisions.append(_optimizer_decision(gpu_id, baseline, optimizer, training, site))
    share = bisect_share(lambda s: mean_ratio(compute, measured, s, searches))
    after, last = mean_ratio(compute, measured, share, searches), predictions(compute, measured, share, searches)
    fit = ShareFit(baseline.achievable_matmul_fraction, share, before, after, first, last)
    decision = _decision(gpu_id, "matmul", fit, compute, site)
    fitted = measured.gpus[gpu_id].model_copy(update={"achievable_matmul_fraction": share})
    return _with_gpu(measured, fitted), [decision, *decisions]


def _optimizer_decision(gpu_id: str, entry, optimizer: float, training: list, site: SiteCalibration) -> Decision:
    before = entry.achievable_optimizer_bandwidth_fraction or entry.achievable_memory_bandwidth_fraction
    batches = ", ".join(f"{p.global_batch * p.tp * p.pp / p.gpus:g}" for p in training)
    return Decision(
        topic=f"site calibration ({gpu_id}, per step)",
        choice=f"optimizer pass HBM share {_share_text(before)} → {_share_text(optimizer)}",
        reason=f"{len(training)} training steps measured at {site.site} at {batches} sequences per GPU per step separate the time a "
        "step spends once (the optimizer over its states, and whatever else runs once per step) from the time per "
        "micro-batch: least squares of both shares on the steps' relative errors (site_calibration_fit."
        "fit_optimizer_share), then the matmul share refitted with it",
    )


def _fit_decodes(
    gpu_id: str, decodes: list, catalog: Catalog, share: float, context: tuple[SiteCalibration, SearchCache], baseline
) -> tuple[float, Decision]:
    """The GPU's HBM share fitted to its decode steps (at the fitted matmul share) and the decision saying so, from
    the catalog's (`baseline`)."""
    site, searches = context
    hbm = baseline.achievable_memory_bandwidth_fraction
    before, first = (
        mean_ratio(decodes, catalog, share, searches, hbm),
        predictions(decodes, catalog, share, searches, hbm),
    )
    fitted = bisect_share(lambda h: mean_ratio(decodes, catalog, share, searches, h))
    after, last = (
        mean_ratio(decodes, catalog, share, searches, fitted),
        predictions(decodes, catalog, share, searches, fitted),
    )
    return fitted, _decision(gpu_id, "hbm", ShareFit(hbm, fitted, before, after, first, last), decodes, site)


def _held_decision(gpu_id: str, held: list[VisionPoint], catalog: Catalog) -> Decision:
    """Why these vision batches fit no share: the matmul share barely moves them, and the HBM share is not theirs."""
    moved = ", ".join(f"batch {p.batch} ×{vision_sensitivity(p, catalog):.3g}" for p in held)
    return Decision(
        topic=f"site calibration ({gpu_id}, vision batches)",
        choice=f"{len(held)} of the measured batches fit no share",
        reason=f"halving the matmul share lengthens their predicted batch by less than ×{MIN_VISION_SENSITIVITY:g} "
        f"({moved}): the vision sizing has them bound by weight and activation reads, and what such a batch measures "
        "beyond those (at batch 1 mostly the runtime's kernel launches) no term of the onnxruntime sizing holds; the "
        "HBM share is not fitted to them either, because it is the GPU's decode share too and would carry that "
        "launch time into every plan on the GPU; calibrate prints their predictions against the measurements",
    )


def _with_gpu(catalog: Catalog, gpu) -> Catalog:
    return replace(catalog, gpus={**catalog.gpus, gpu.id: gpu})


def _memory_decision(site: SiteCalibration) -> tuple[float, str, Decision]:
    mem = site.memory
    source = f"measured ÷ predicted peak reserved memory at {site.site} ({mem.device} on {mem.gpu}), the largest of {len(mem.points)} layout(s)"
    measured = ", ".join(
        f"{p.layout} {format_bytes(p.measured_reserved_bytes)} reserved / {format_bytes(p.measured_allocated_bytes)} "
        f"allocated vs predicted {format_bytes(p.predicted_reserved_bytes)} / {format_bytes(p.predicted_allocated_bytes)}"
        for p in mem.points
    )
    decision = Decision(
        topic="site calibration (memory)",
        choice=f"memory factor {mem.factor:.3f}",
        reason=f"{source} measured on {site.measured_at} ({site.source}): {measured}"
        + "; full-training memory fits use it (never below 1) instead of the published rows"
        + (" — measured on a CPU: a test of the loop, not a GPU margin" if mem.device == "cpu" else ""),
    )
    return mem.factor, source, decision


def calibrate(catalog: Catalog, site: SiteCalibration) -> tuple[Catalog, list[Decision]]:
    """The catalog with each measured GPU's optimizer and matmul shares fitted to its training and prefill steps,
    then its HBM share to its decode steps, and the decisions saying so."""
    everything = list(site.points) + list(site.serving_points) + list(site.vision_points)
    named = everything + [x for x in (site.memory, site.interconnect) if x is not None]
    unknown = sorted(
        {p.gpu for p in named if p.gpu not in catalog.gpus}
        | {p.model for p in everything if p.model and p.model not in catalog.models}
    )
    if unknown:
        raise CalibrationError(f"points name what the catalog lacks: {', '.join(unknown)}")
    decisions, searches = [], SearchCache()
    links, link_decision = fit_links(catalog, site) if site.interconnect is not None else (None, None)
    measured = replace(catalog, site_links=links)  # training steps are refitted with the site's own link shares
    for gpu_id in sorted({p.gpu for p in everything}):
        held = [
            p for p in site.vision_points if p.gpu == gpu_id and vision_sensitivity(p, catalog) < MIN_VISION_SENSITIVITY
        ]
        compute = [
            p
            for p in everything
            if p.gpu == gpu_id
            and not (isinstance(p, ServingPoint) and p.phase == "decode")
            and not any(p is h for h in held)
        ]
        decodes = [p for p in site.serving_points if p.gpu == gpu_id and p.phase == "decode"]
        measured, fitted = _fit_gpu(gpu_id, (compute, decodes), measured, site, searches)
        decisions += fitted + ([_held_decision(gpu_id, held, catalog)] if held else [])
    factor, source = None, ""
    if site.memory is not None:
        factor, source, decision = _memory_decision(site)
        decisions.append(decision)
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
        gpus=measured.gpus,
        models=catalog.models,
        interconnects=catalog.interconnects,
        storage=catalog.storage,
        residuals=catalog.residuals,
        site_memory_factor=factor,
        site_memory_source=source,
        site_links=links,
        site_fitted_training=tuple(sorted({p.gpu for p in site.points})),
        site_fitted_serving=tuple(sorted({p.gpu for p in site.serving_points})),
        site_fitted_vision=tuple(sorted({p.gpu for p in site.vision_points})),
    ), decisions
