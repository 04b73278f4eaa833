"""The LLM serving search: GPU type × TP × PP × precision × batch meeting a latency SLO at a traffic, at least cost.

Pure: `search_llm(req, gpus)` reads only its arguments. Each configuration is evaluated by
serve_llm_config.py; the choice, the Pareto front and the replica counts follow serve_types.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..reasons import Reason, because
from .engine_limits import engine_limits
from .llm_config import evaluate_config, memory_for
from .replica import compute_dtype
from .shapes import PP_DEGREES, TP_DEGREES, parallel_shapes
from .types import ServeCandidate, ServeRejection, ServeRequest, ServeSearchResult, pareto_front, rank_key

if TYPE_CHECKING:
    from ...catalog.types import GpuSpec


def smallest_fit(req: ServeRequest, gpus: dict[str, GpuSpec]) -> tuple[int, str, int, int, str] | None:
    """The fewest GPUs of any catalog type (then the cheapest) whose memory holds the model and one
    context — also outside the plan's allowed GPUs and pins, to say what would fit."""
    fits = []
    for gpu in sorted(gpus.values(), key=lambda g: g.id):
        if gpu.edge:
            continue
        per_node = gpu.gpus_per_node
        for precision in req.precisions:
            if compute_dtype(precision, gpu) is None:
                continue
            cap, chunk = engine_limits(req, gpu)
            shapes = [(tp, 1) for tp in TP_DEGREES if tp <= per_node]
            if req.engine == "vllm":  # TGI and Triton run a replica on one node (parallel_shapes)
                shapes += [(per_node, pp) for pp in PP_DEGREES[1:]]
            for tp, pp in shapes:
                if req.arch.heads % tp:
                    continue
                mem = memory_for(req, gpu, precision, tp, pp, 1, chunk)
                if mem.kv_cache_tokens >= req.context_len:
                    fits.append(
                        (
                            tp * pp,
                            tp * pp * gpu.price_usd_per_gpu_hour.get(req.pricing, math.inf),
                            (tp * pp, gpu.id, tp, pp, precision),
                        )
                    )
                    break
    return min(fits)[2] if fits else None


def search_llm(req: ServeRequest, gpus: dict[str, GpuSpec]) -> ServeSearchResult:
    candidates, rejected, near, warnings, evaluated = [], [], [], [], 0
    for gpu_id in req.gpu_ids:
        gpu = gpus.get(gpu_id)
        if gpu is None:
            rejected.append(ServeRejection(gpu_id, because("not-in-catalog")))
            continue
        if req.pricing not in gpu.price_usd_per_gpu_hour:
            rejected.append(ServeRejection(gpu_id, because("no-price", pricing=req.pricing)))
            continue
        shapes, shape_rejections = parallel_shapes(req, gpu)
        rejected += shape_rejections
        for precision in req.precisions:
            dtype = compute_dtype(precision, gpu)
            if dtype is None:
                rejected.append(
                    ServeRejection(
                        f"{gpu.id} {precision}", because("no-tensor-cores", gpu_name=gpu.name, precision=precision)
                    )
                )
                continue
            fitted_without_pp = False
            for tp, pp in shapes:
                if pp > 1 and not req.pp and fitted_without_pp:
                    continue  # PP only when a node's TP group cannot hold the model (formulas.md §7)
                evaluated += 1
                fit, rejection, closest = evaluate_config(req, gpu, precision, dtype, tp, pp)
                fitted_without_pp |= pp == 1 and bool(fit or closest)
                if fit:
                    candidates.append(fit)
                if rejection:
                    rejected.append(rejection)
                if closest:
                    near.append(closest)
    if "int4" in req.precisions:
        warnings.append(because("int4-weight-only"))
    kept = tuple(rejected)
    if not candidates:
        return ServeSearchResult(
            None, (), kept, evaluated, no_fit_reason(req, gpus, rejected, near), nearest_of(req, near), tuple(warnings)
        )
    chosen = min(candidates, key=lambda c: rank_key(req, c))
    pareto = pareto_front(candidates)
    if req.budget_usd_per_month is not None and chosen.usd_per_month > req.budget_usd_per_month:
        cheapest = min(candidates, key=lambda c: (c.usd_per_month, rank_key(req, c)))
        reason = because(
            "slo-config-over-budget",
            cheapest=cheapest.description,
            usd=cheapest.usd_per_month,
            budget=req.budget_usd_per_month,
        )
        if cheapest.usd_per_month <= req.budget_usd_per_month:
            chosen = cheapest
            warnings.append(because("latency-over-budget", cheapest=cheapest.description))
        else:
            return ServeSearchResult(None, pareto, kept, evaluated, reason, cheapest, tuple(warnings))
    if chosen.max_concurrency < 8 and req.ttft_p99_seconds is None and req.tpot_p99_seconds is None:
        warnings.append(because("few-requests-in-kv", concurrency=chosen.max_concurrency, gpu_id=chosen.gpu_id))
    return ServeSearchResult(chosen, pareto, kept, evaluated, None, None, tuple(warnings))


def nearest_of(req: ServeRequest, near: list[ServeCandidate]) -> ServeCandidate | None:
    def ratio(c: ServeCandidate) -> float:
        return max(
            c.ttft_seconds / req.ttft_p99_seconds if req.ttft_p99_seconds else 0.0,
            c.tpot_seconds / req.tpot_p99_seconds if req.tpot_p99_seconds else 0.0,
        )

    return min(near, key=lambda c: (round(ratio(c), 9), rank_key(req, c))) if near else None


def no_fit_reason(
    req: ServeRequest, gpus: dict[str, GpuSpec], rejected: list[ServeRejection], near: list[ServeCandidate]
) -> Reason:
    if near:
        best = nearest_of(req, near)
        return because("no-config-meets-slo", closest=best.description, ttft=best.ttft_seconds, tpot=best.tpot_seconds)
    fit = smallest_fit(req, gpus)
    if rejected and all(
        r.reason.code == "no-tensor-cores" for r in rejected
    ):  # a precision, not memory, rules them out
        return because("no-gpu-for-precision", precisions=req.precisions, rejection=rejected[0], fit=fit)
    if fit:
        return because("fits-outside-allowed", model_id=req.model_id, allowed=req.gpu_ids, fit=fit)
    if rejected:
        return because("fits-no-gpu", model_id=req.model_id, rejection=rejected[0])
    return because("no-gpu-to-evaluate", model_id=req.model_id, allowed=req.gpu_ids)
