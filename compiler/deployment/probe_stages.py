"""A staged service (serve.stages) is probed stage by stage: each stage as a single-stage plan of its own, which the
compiler sizes as the staged plan sizes that stage (passes/size_serving.py `_size_pipeline`: the stage's model,
precision, engine, GPU types and SLO at the rate it receives, under the plan's serve and cluster settings), then probed
as any serving plan (deployment/probe.py). Each stage's probe folder holds its plan as probe results carry it, so
`calibrate` checks the measured points by compiling that stage, and a site file calibrated from every stage's results
calibrates the staged plan (its points name their GPUs)."""

from __future__ import annotations

import re

import yaml

from ..plan.probe import Probe, ProbeService, UnprobedStage
from ..plan.resolved import ResolvedPlan
from ..plan.spec_fields import DNS1123_LABEL
from ..plan.spec_serve import StageSpec
from .probe import ProbeError


def stage_plan_name(plan: ResolvedPlan, stage: StageSpec) -> str:
    """`<plan>-<stage>`: the stage plan's name, so its probe folder is `<plan>-<stage>-probe`."""
    name = f"{plan.name}-{stage.name}"
    if not re.fullmatch(DNS1123_LABEL, name):
        raise ProbeError(
            f"stage {stage.name}: its probe is the plan {name!r}, longer than a plan name may be (63 characters); "
            "shorten the plan's or the stage's name"
        )
    return name


def stage_plan_text(plan: ResolvedPlan, stage: StageSpec) -> str:
    """The stage as a plan: the staged plan as given (without a site calibration, as every probe's plan_text), its
    stages replaced by the stage's model, precision, engine, SLO and GPU types, the traffic it receives (the request
    rate × items_per_request, its own prompt and output lengths where it gives them)."""
    data = plan.spec.model_dump(mode="json", exclude_unset=True)
    given = stage.model_dump(mode="json", exclude_unset=True)
    data["name"] = stage_plan_name(plan, stage)
    data["model"] = given["model"]
    data.pop("precision", None)
    if "precision" in given:
        data["precision"] = given["precision"]
    serve = data["serve"]
    del serve["stages"]
    serve["engine"] = stage.engine
    serve.pop("slo", None)
    if given.get("slo"):
        serve["slo"] = given["slo"]
    traffic = serve["traffic"]
    traffic["requests_per_second"] = plan.spec.serve.traffic.requests_per_second * stage.items_per_request
    for field in ("prompt_tokens", "output_tokens"):
        if field in given:
            traffic[field] = given[field]
    cluster = data.setdefault("cluster", {})
    cluster.pop("calibration", None)
    if stage.gpus:
        cluster.pop("gpu", None)
        cluster["gpus"] = list(stage.gpus)
    first = {key: data.pop(key) for key in ("name", "workload", "model", "precision") if key in data}
    return yaml.safe_dump({**first, **data}, sort_keys=False, width=1 << 30)


def with_service(
    probe: Probe, plan: ResolvedPlan, stage: StageSpec, stage_probes: list[Probe], unprobed: list[UnprobedStage]
) -> Probe:
    """A stage's probe told of its siblings: one calibrate of every probed stage's results writes the staged plan's site
    file (a probe folder's sibling's runs folder and folder are the same relative paths from any of them); on
    Kubernetes the REPORT's last step is that calibrate. `unprobed`: the stages no probe measures, said in the REPORT."""
    runs = " ".join(f"{p.runs_dir}/probe-results.json" for p in stage_probes)
    retrieved = " ".join(f"../{p.name}/probe-results.json" for p in stage_probes)
    service = ProbeService(
        plan=plan.name,
        stage=stage.name,
        probes=[p.name for p in stage_probes],
        calibrate=f"mlinfra-compile calibrate {runs} -o site-calibration.yaml",
        calibrate_kubernetes=f"mlinfra-compile calibrate {retrieved} -o site-calibration.yaml",
        unprobed=unprobed,
    )
    kubernetes = probe.kubernetes
    if kubernetes is not None:
        commands = [*kubernetes.commands[:-1], service.calibrate_kubernetes]
        kubernetes = kubernetes.model_copy(update={"commands": commands})
    return probe.model_copy(update={"service": service, "kubernetes": kubernetes})
