"""Pass: size a serve plan — GPU type, TP/PP, precision, batch, replicas (compiler/sizing/serve_search.py: LLMs in
serve_llm_search.py, non-generative models in vision.py).

A staged service (serve.stages) sizes every stage for the rate it receives (sizing/serve/stages.size_pipeline);
the top-level sections then describe the last stage and `stages` lists them all.
"""

from __future__ import annotations

from typing import NamedTuple

from ..catalog.catalog import Catalog
from ..catalog.params import count_params
from ..checkpoint import serving_precision
from ..diagnostics import InfeasiblePlan
from ..plan.resolved import (
    Alternative,
    Cost,
    Decision,
    ModelInfo,
    Parallelism,
    Rejection,
    ResolvedPlan,
    Serving,
    Stage,
)
from ..plan.spec import PlanSpec
from ..plan.spec_serve import SloSpec
from ..sizing.reasons import because
from ..sizing.serve.search import search_serving
from ..sizing.serve.stages import PipelineResult, PipelineStage, size_pipeline
from ..sizing.serve.types import (
    DEFAULT_TARGET_UTILIZATION,
    HOURS_PER_MONTH,
    MAX_REJECTED,
    ServeRequest,
)
from .context import PassContext
from .price_on_node import price_notes
from .resolve_model import checkpoint_decision, model_info
from .serving_sections import sections
from .wording import rejection_rows, words
from .wording_serving import serving_decisions, serving_infeasible, stage_ratio_decision


class _Served(NamedTuple):
    """What one served model (the plan's, or one stage's) sets apart from the rest of the plan."""

    model: ModelInfo
    precision: str
    engine: str
    gpu_ids: list[str]
    slo: SloSpec
    prompt_tokens: int | None = None
    output_tokens: int | None = None


def _request(spec: PlanSpec, served: _Served, catalog: Catalog) -> ServeRequest:
    """The serving search's request for one served model."""
    model, precision, engine, gpu_ids, slo, prompt_tokens, output_tokens = served
    serve, arch = spec.serve, model.architecture
    return ServeRequest(
        arch=arch,
        params=count_params(arch),
        model_id=model.id,
        precisions=tuple(serve.precisions or [precision]),
        weight_block=model.weight_block,
        kv_cache_dtype=serve.kv_cache_dtype,
        engine=engine,
        context_len=serve.context_len,
        requests_per_second=serve.traffic.requests_per_second or 0.0,
        prompt_tokens=prompt_tokens or serve.traffic.prompt_tokens,
        output_tokens=output_tokens or serve.traffic.output_tokens,
        peak_factor=serve.traffic.peak_factor,
        ttft_p99_seconds=slo.ttft_p99,
        tpot_p99_seconds=slo.tpot_p99,
        latency_p99_seconds=slo.latency_p99,
        gpu_ids=tuple(gpu_ids) or tuple(sorted(g.id for g in catalog.gpus.values() if not g.edge)),
        gpu_count=spec.cluster.count,
        tp=spec.parallelism.tp,
        pp=spec.parallelism.pp,
        gpus_per_node=spec.cluster.gpus_per_node,
        interconnect=catalog.interconnects[spec.cluster.interconnect],
        pricing=spec.cluster.pricing,
        optimize="cost" if spec.optimize == "cost" else "latency",
        budget_usd_per_month=spec.budget.usd_per_month,
        max_batch=serve.max_num_seqs,
        concurrency=serve.traffic.concurrency,
        min_replicas=serve.min_replicas,
        target_utilization=serve.target_utilization or DEFAULT_TARGET_UTILIZATION,
        attention_dp=serve.attention_dp,
        speculative_tokens=serve.speculative.num_speculative_tokens if serve.speculative else 0,
        acceptance_rate=serve.speculative.acceptance_rate if serve.speculative else None,
        replica_floor=spec.cluster.scheduler
        in ("kubernetes", "both"),  # the autoscaler keeps the floor; Slurm runs no replicas of its own
    )


def _precision(precision: str, given: bool, model: ModelInfo, prefix: str = "") -> tuple[str, list[Decision]]:
    """The precision the model is served in (compiler/checkpoint.py) and, where the checkpoint decided it, why."""
    served = serving_precision(precision, given, model.quantization)
    if served == precision:
        return precision, []
    why = because("precision-from-checkpoint", quantization=model.quantization, precision=served)
    return served, [Decision(topic=f"{prefix}precision", choice=served, reason=words(why))]


def _size_single(plan: ResolvedPlan, catalog: Catalog) -> ResolvedPlan:
    spec = plan.spec
    precision, precision_decisions = _precision(spec.precision, "precision" in spec.model_fields_set, plan.model)
    result = search_serving(
        _request(
            spec,
            _Served(plan.model, precision, spec.serve.engine, spec.cluster.gpu_choices, spec.serve.slo),
            catalog,
        ),
        catalog.gpus,
    )
    if result.chosen is None:
        raise InfeasiblePlan(serving_infeasible(result, ""))
    c = result.chosen
    hardware, serving, memory = sections(spec, spec.serve.engine, spec.serve.slo, c, catalog)
    node_decisions, node_warnings = price_notes(c.node_price)
    return plan.model_copy(
        update={
            "hardware": hardware,
            "parallelism": Parallelism(tp=c.tp, pp=c.pp, dp=c.replicas, framework=spec.serve.engine),
            "memory_per_gpu_bytes": memory,
            "serving": serving,
            "cost": Cost(
                usd_per_hour=c.usd_per_hour,
                usd_per_month=c.usd_per_month,
                usd_per_million_tokens=c.usd_per_million_tokens,
                budget_usd_per_month=spec.budget.usd_per_month,
                alert_at=spec.budget.alert_at,
            ),
            "alternatives": [
                Alternative(
                    description=a.description,
                    usd=a.usd_per_month,
                    seconds=a.latency_seconds,
                    chosen=a == c,
                    ttft_seconds=a.ttft_seconds if a.tpot_seconds else 0.0,
                    tpot_seconds=a.tpot_seconds,
                )
                for a in result.pareto
            ],
            "rejected": [Rejection(description=d, reason=r) for d, r in rejection_rows(result.rejected, MAX_REJECTED)],
            "decisions": plan.decisions
            + precision_decisions
            + serving_decisions(
                spec, c, result.evaluated, hardware, vision=plan.model.architecture.kind in VISION_KINDS
            )
            + node_decisions,
            "warnings": plan.warnings + [words(w) for w in result.warnings] + node_warnings,
            "search_evaluated": result.evaluated,
        }
    )


def _size_stages(plan: ResolvedPlan, catalog: Catalog) -> ResolvedPlan:
    """Size every stage for the rate it receives; the top-level sections describe the last stage."""
    spec = plan.spec
    models = [model_info(stage.model, stage.name, catalog)[0] for stage in spec.serve.stages]
    precisions = [
        _precision(stage.precision, "precision" in stage.model_fields_set, model, f"{stage.name}: ")
        for stage, model in zip(spec.serve.stages, models)
    ]
    pipeline = _size_pipeline(spec, models, [precision for precision, _ in precisions], catalog)
    if pipeline.infeasible_reason:
        raise InfeasiblePlan(words(pipeline.infeasible_reason))
    checkpoint = [
        d
        for stage, (_, decided) in zip(spec.serve.stages, precisions)
        for d in checkpoint_decision(stage.model, catalog, f"{stage.name}: ") + decided
    ]
    stages, decisions, warnings = _stage_sections(
        plan.model_copy(update={"decisions": plan.decisions + checkpoint}), pipeline, models, catalog
    )
    ratios = dict(pipeline.gpu_ratio)
    decisions.append(stage_ratio_decision([(s.name, ratios[s.name]) for s in stages]))
    last = stages[-1]
    total_usd = pipeline.usd_per_month
    return plan.model_copy(
        update={
            "model": last.model,
            "hardware": last.hardware,
            "serving": last.serving,
            "memory_per_gpu_bytes": last.memory_per_gpu_bytes,
            "parallelism": Parallelism(
                tp=last.serving.tp, pp=last.serving.pp, dp=last.serving.replicas, framework=last.serving.engine
            ),
            "stages": stages,
            "cost": Cost(
                usd_per_hour=total_usd / HOURS_PER_MONTH,
                usd_per_month=total_usd,
                budget_usd_per_month=spec.budget.usd_per_month,
                usd_per_million_tokens=_usd_per_million_output_tokens(total_usd / HOURS_PER_MONTH, last.serving, spec),
                alert_at=spec.budget.alert_at,
            ),
            "decisions": decisions,
            "warnings": warnings,
            "search_evaluated": sum(r.evaluated for _, r in pipeline.stages),
        }
    )


def _size_pipeline(spec: PlanSpec, models: list[ModelInfo], precisions: list[str], catalog: Catalog) -> PipelineResult:
    """Each stage's request, sized together for the rate each receives."""
    return size_pipeline(
        tuple(
            PipelineStage(
                stage.name,
                _request(
                    spec,
                    _Served(
                        model,
                        precision,
                        stage.engine,
                        stage.gpus or spec.cluster.gpu_choices,
                        stage.slo,
                        stage.prompt_tokens,
                        stage.output_tokens,
                    ),
                    catalog,
                ),
                stage.items_per_request,
            )
            for stage, model, precision in zip(spec.serve.stages, models, precisions)
        ),
        catalog.gpus,
        spec.serve.traffic.requests_per_second,
        spec.serve.traffic.peak_factor,
    )


def _stage_sections(
    plan: ResolvedPlan, pipeline: PipelineResult, models: list[ModelInfo], catalog: Catalog
) -> tuple[list[Stage], list[Decision], list[str]]:
    """Each stage's sections, the queue from the stage before, and the plan's decisions and warnings with each
    stage's added."""
    spec = plan.spec
    stages, decisions, warnings, previous = [], list(plan.decisions), list(plan.warnings), ""
    ratios = dict(pipeline.gpu_ratio)
    for (name, result), stage, model in zip(pipeline.stages, spec.serve.stages, models):
        c = result.chosen
        hardware, serving, memory = sections(spec, stage.engine, stage.slo, c, catalog)
        stages.append(
            Stage(
                name=name,
                model=model,
                hardware=hardware,
                serving=serving,
                memory_per_gpu_bytes=memory,
                usd_per_month=c.usd_per_month,
                gpus_per_last_stage_gpu=ratios[name],
                queue=f"{plan.name}-{previous}-to-{name}" if previous else "",
            )
        )
        decisions += serving_decisions(
            spec, c, result.evaluated, hardware, prefix=f"{name}: ", vision=model.architecture.kind in VISION_KINDS
        )
        node_decisions, node_warnings = price_notes(c.node_price, f"{name}: ")
        decisions += node_decisions
        warnings += [words(w) for w in result.warnings] + node_warnings
        previous = name
    return stages, decisions, warnings


LLM_ENGINES = ("vllm", "tgi")
VISION_KINDS = ("cnn", "vision-transformer")


def _usd_per_million_output_tokens(usd_per_hour: float, last: Serving, spec: PlanSpec) -> float:
    """The whole service's cost per million tokens the last stage generates at average traffic (0 when it
    generates none: a vision-only service)."""
    stage = spec.serve.stages[-1]
    tokens_per_hour = (
        spec.serve.traffic.requests_per_second * (stage.output_tokens or spec.serve.traffic.output_tokens) * 3600
    )
    return usd_per_hour / (tokens_per_hour / 1e6) if last.tpot_seconds and tokens_per_hour else 0.0


def _check_engine(engine: str, model: ModelInfo, precisions: list[str], where: str) -> None:
    """Engines that cannot run a model make the plan infeasible, said plainly (not a crash in a target)."""
    if engine in LLM_ENGINES and model.architecture.kind != "decoder":
        raise InfeasiblePlan(
            words(
                because(
                    "engine-serves-decoders", where=where, engine=engine, model=model.name, kind=model.architecture.kind
                )
            )
        )
    if engine == "tgi" and "fp32" in precisions:
        raise InfeasiblePlan(words(because("tgi-no-fp32", where=where)))
    if "fp32" in precisions:  # sizing/serve/memory and latency have no fp32 weights, KV cache or matmul rate
        raise InfeasiblePlan(words(because("fp32-serving-not-modelled", where=where)))


def size_serving(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    catalog = ctx.catalog
    if plan.workload != "serve":
        return plan
    if plan.spec.serve.stages:
        for stage in plan.spec.serve.stages:
            _check_engine(
                stage.engine,
                model_info(stage.model, stage.name, catalog)[0],
                plan.spec.serve.precisions or [stage.precision],
                f"stage {stage.name}: ",
            )
    else:
        _check_engine(plan.spec.serve.engine, plan.model, plan.spec.serve.precisions or [plan.spec.precision], "")
    if plan.spec.serve.stages:
        return _size_stages(plan, catalog)
    return _size_single(plan, catalog)
