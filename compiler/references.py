"""Names in the plan that must exist in a catalog (preset, GPU, fabric), checked with a location."""

from __future__ import annotations

from .catalog.catalog import Catalog
from .diagnostics import did_you_mean
from .plan.spec import PlanSpec
from .source import LoadedYaml, refuse_at


def check_references(spec: PlanSpec, catalog: Catalog, loaded: LoadedYaml) -> None:
    problems: list[tuple[tuple, str, str]] = []

    def unknown(loc: tuple, what: str, value: str, known) -> None:
        problems.append(
            (loc, f"unknown {what} '{value}'{did_you_mean(value, known)}", f"unknown-{what.split()[-1].lower()}")
        )

    models = [(("model", "preset"), spec.model)] if spec.model else []
    gpu_lists = [(("cluster", "gpus"), spec.cluster.gpus or [])]
    for i, stage in enumerate((spec.serve.stages or []) if spec.serve else []):
        models.append((("serve", "stages", i, "model", "preset"), stage.model))
        gpu_lists.append((("serve", "stages", i, "gpus"), stage.gpus or []))
    for loc, model in models:
        if model.preset and model.preset not in catalog.models:
            unknown(loc, "model preset", model.preset, catalog.models)
    if spec.cluster.gpu and spec.cluster.gpu not in catalog.gpus:
        unknown(("cluster", "gpu"), "GPU", spec.cluster.gpu, catalog.gpus)
    for loc, gpus in gpu_lists:
        for i, gpu in enumerate(gpus):
            if gpu not in catalog.gpus:
                unknown(loc + (i,), "GPU", gpu, catalog.gpus)
    if spec.cluster.interconnect not in catalog.interconnects:
        unknown(("cluster", "interconnect"), "interconnect", spec.cluster.interconnect, catalog.interconnects)
    if spec.cluster.storage not in catalog.storage:
        unknown(("cluster", "storage"), "storage", spec.cluster.storage, catalog.storage)
    refuse_at(problems, loaded)
