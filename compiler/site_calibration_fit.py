"""Fitting a site's measured steps: the sizing's prediction of each measured training, prefill and decode step at a
given achievable share, and the share (found by bisection) whose predictions match the measurements."""

from __future__ import annotations

import math
import statistics

from .catalog.catalog import Catalog
from .catalog.params import count_params
from .site_calibration_file import CalibrationError, ServingPoint, SitePoint, VisionPoint
from .sizing.search_cache import SearchCache
from .sizing.serve.decode import decode_step
from .sizing.serve.memory import kv_bytes_per_token_per_gpu, weights_bytes_per_gpu
from .sizing.serve.prefill import prefill_occupancy_seconds
from .sizing.serve.replica import ReplicaModel, compute_dtype
from .sizing.train.search import TrainRequest, search_training

BISECTION_STEPS = 40
# an achievable share of the datasheet peak; the floor lets a CPU run of the probe (a test of the loop) be fitted too
SHARE_BOUNDS = (1e-9, 1.0)

TOKENS = 1e9  # any count: the step time does not depend on it


def predicted_step(point: SitePoint, catalog: Catalog, share: float, searches: SearchCache) -> float | None:
    """The step model's time for the measured layout (its TP, PP, ZeRO pinned); its collectives (TP's all-reduces, DP's
    gradients) at the site's measured intra-node share when the file has one, as the recompiled plan prices them;
    the optimizer pass at the catalog entry's (the fitted) optimizer share."""
    step = predicted_step_parts(point, catalog, share, searches)
    return step.total if step is not None else None


def predicted_step_parts(point: SitePoint, catalog: Catalog, share: float, searches: SearchCache):
    """predicted_step's StepTime (its matmul, optimizer and other terms), None where the layout cannot be sized."""
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
        **({"dropout": point.dropout} if point.dropout is not None else {}),
        **(
            {"method": point.lora.method, "lora_rank": point.lora.rank, "lora_targets": tuple(point.lora.targets)}
            if point.lora
            else {}
        ),
    )
    chosen = search_training(req, {**catalog.gpus, point.gpu: gpu}, searches).chosen
    return chosen.step if chosen is not None else None


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


def predicted_serving_step(point: ServingPoint, catalog: Catalog, matmul: float, hbm: float) -> float:
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


def predicted_vision_batch(point: VisionPoint, catalog: Catalog, matmul: float) -> float:
    """The vision sizing's time for the measured batch (sizing/serve/vision.py batch_time, the engine's fusion) with
    the GPU's matmul share at `matmul`, its HBM share the catalog's."""
    from .sizing.serve.vision import batch_time, cnn_fusion, flops_per_item, weights_bytes

    gpu = catalog.gpus[point.gpu].model_copy(update={"achievable_matmul_fraction": matmul})
    arch = point.shape(catalog)
    params = count_params(arch)
    flops = flops_per_item(arch, params, point.tokens)
    dtype = compute_dtype(point.precision, gpu)
    if dtype is None:
        raise CalibrationError(f"vision point on {point.gpu}: the GPU has no {point.precision} math")
    fusion = cnn_fusion(point.engine, gpu.edge)
    weights = weights_bytes(params, point.precision)
    return batch_time(arch, gpu, dtype, point.precision, flops, weights, point.batch, fusion).seconds


# A vision batch enters the matmul-share fit only where the share moves its prediction: halving the share lengthens
# the predicted batch by at least this factor (a quarter of the batch or more scales with the share). Below it the
# vision sizing has the batch bound by weight and activation reads (resnet-50 at batch 1: ×1.00-1.20 on the catalog's
# T4, L4, A10G and H100; at batch 32 on a T4 ×1.17), and the share fitted to it would move by the measurement's
# deviation ÷ that small sensitivity: perf_analyzer's own 10% stability band alone would move it by half or more, and
# a batch-1 point's launch time (the runtime's kernels, which no term of the onnxruntime sizing holds) would drag it
# to its bound.
MIN_VISION_SENSITIVITY = 1.25


def vision_sensitivity(point: VisionPoint, catalog: Catalog) -> float:
    """How much longer the vision sizing predicts the batch when the GPU's matmul share (the catalog's) halves."""
    share = catalog.gpus[point.gpu].achievable_matmul_fraction
    return predicted_vision_batch(point, catalog, share / 2) / predicted_vision_batch(point, catalog, share)


def predictions(
    points: list, catalog: Catalog, share: float, searches: SearchCache, hbm: float | None = None
) -> list[float]:
    """Each point's predicted step: training steps and prefills at matmul share `share`, decodes also at HBM share
    `hbm` (None: the catalog's)."""
    predicted = []
    for p in points:
        if isinstance(p, VisionPoint):
            seconds = predicted_vision_batch(p, catalog, share)
        elif isinstance(p, ServingPoint):
            gpu = catalog.gpus[p.gpu]
            seconds = predicted_serving_step(
                p, catalog, share, gpu.achievable_memory_bandwidth_fraction if hbm is None else hbm
            )
        else:
            seconds = predicted_step(p, catalog, share, searches)
        if seconds is None:
            raise CalibrationError(
                f"point {p.model or 'inline architecture'} on {p.gpus} × {p.gpu} (TP{p.tp} PP{p.pp} ZeRO-{p.zero_stage} "
                f"mb{p.micro_batch}) does not fit: the layout cannot be sized"
            )
        predicted.append(seconds)
    return predicted


def mean_ratio(points: list, catalog: Catalog, share: float, searches: SearchCache, hbm: float | None = None) -> float:
    """Geometric mean of predicted ÷ measured over the GPU's points."""
    predicted = predictions(points, catalog, share, searches, hbm)
    return statistics.geometric_mean([x / p.step_seconds for x, p in zip(predicted, points)])


def bisect_share(ratio) -> float:
    """The share in SHARE_BOUNDS where predicted ÷ measured (falling as the share grows) crosses 1."""
    low, high = SHARE_BOUNDS
    for _ in range(BISECTION_STEPS):
        mid = math.sqrt(low * high)  # geometric: the same relative precision at any share
        low, high = (mid, high) if ratio(mid) > 1 else (low, mid)
    return float(f"{math.sqrt(low * high):.4g}")


# The once-per-step share is fitted only where the points separate it from the per-micro-batch time: the optimizer's
# fraction of the predicted step differs between points by this factor or more (the probe's micro-batches ÷2, ×1,
# ×2 give 4×); closer points leave it at the catalog's.
SEPARATION = 2.0


def fit_optimizer_share(points: list[SitePoint], catalog: Catalog, share: float, searches: SearchCache) -> float | None:
    """The HBM share of the optimizer's once-per-step pass that, with the matmul share, best explains training steps
    measured at different micro-batches. Least squares on the relative error of t ≈ x·M + y·O + R, with M the step's
    matmul-share-bound time (T(share/2) − T(share): exact for terms ∝ 1/share), O its optimizer pass and R the rest at
    the catalog's shares; y says how much slower the optimizer pass runs than the catalog's share says. None where
    the points do not separate the two or the share would leave SHARE_BOUNDS."""
    if len(points) < 2:
        return None
    steps = [predicted_step_parts(p, catalog, share, searches) for p in points]
    halved = [predicted_step_parts(p, catalog, share / 2, searches) for p in points]
    if any(s is None or s.optimizer <= 0 for s in steps + halved):
        return None
    fractions = [s.optimizer / s.total for s in steps]
    if max(fractions) < SEPARATION * min(fractions):
        return None
    rows = []  # (M, O, measured − R) ÷ measured: minimise Σ (a·x + b·y − c)²
    for step, slow, point in zip(steps, halved, points):
        bound = slow.total - step.total
        rest = step.total - bound - step.optimizer
        rows.append((bound / point.step_seconds, step.optimizer / point.step_seconds, 1 - rest / point.step_seconds))
    saa, sab, sbb = (sum(a * a for a, _, _ in rows), sum(a * b for a, b, _ in rows), sum(b * b for _, b, _ in rows))
    sac, sbc = sum(a * c for a, _, c in rows), sum(b * c for _, b, c in rows)
    det = saa * sbb - sab * sab
    slower = (saa * sbc - sab * sac) / det if det > 0 else 0.0
    if slower <= 0:
        return None
    gpu = catalog.gpus[points[0].gpu]
    fitted = (gpu.achievable_optimizer_bandwidth_fraction or gpu.achievable_memory_bandwidth_fraction) / slower
    return float(f"{fitted:.4g}") if SHARE_BOUNDS[0] <= fitted <= SHARE_BOUNDS[1] else None
