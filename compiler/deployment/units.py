"""The units of a serve plan: the whole service, or each stage of a multi-stage service.

A unit's `plan` is a view of the ResolvedPlan whose model/hardware/serving/memory sections are the unit's own, so
code that reads a plan (engine arguments, node selectors) sees the unit's own GPU and model. Shared by the
deployment pass and the serving targets (replaces vllm.EngineUnit and k8s_serving.ServingUnit's construction).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan.resolved import ResolvedPlan


@dataclass(frozen=True)
class UnitView:
    stage: str  # "" for a single service
    plan: ResolvedPlan
    input_queue: str = ""
    output_queue: str = ""


def unit_views(plan: ResolvedPlan) -> list[UnitView]:
    if plan.workload != "serve" or plan.serving is None:
        return []
    if not plan.stages:
        return [UnitView("", plan)]
    outputs = [stage.queue for stage in plan.stages[1:]] + [""]
    return [
        UnitView(
            stage.name,
            plan.model_copy(
                update={
                    "model": stage.model,
                    "hardware": stage.hardware,
                    "serving": stage.serving,
                    "memory_per_gpu_bytes": stage.memory_per_gpu_bytes,
                }
            ),
            stage.queue,
            output,
        )
        for stage, output in zip(plan.stages, outputs)
    ]
