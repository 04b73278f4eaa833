"""`mlinfra-compile probe PLAN -o OUT`: a one-node measurement job for a training plan (out/<plan>-probe/), and
`mlinfra-compile calibrate RESULTS.json -o FILE`: its results as a site calibration file (site_calibration.py).

What the probe measures and how its job runs is decided by the decide_probe pass (deployment/probe.py: the reduced
shape, the layouts, the limits, each with its reason) and rendered from `plan.probe` (targets/probe.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from .deployment.probe import ProbeError
from .plan.resolved import ResolvedPlan
from .probe_environment import environment_warnings
from .probe_job import step_roofline
from .probe_results import (  # noqa: F401  (load_results: the CLI's)
    LayoutResult,
    ServingResults,
    TrainingResults,
    TritonResults,
    load_results,
)
from .targets.base import with_header
from .targets.probe import job_files, render_probe
from .writer import RenderedPlan


def probe_files(plan: ResolvedPlan) -> RenderedPlan:
    """out/<plan>-probe/: the files of a plan resolved with its probe section (pipeline.resolve(probe=True)); the
    reduced jobs' files carry their own headers."""
    own = [
        f if f.path.startswith("engine/") else with_header(f, plan.plan_file, plan.name)  # the engine's: headed
        for f in render_probe(plan)
    ]
    files = tuple(sorted(own + job_files(plan.probe), key=lambda f: f.path))
    return RenderedPlan(plan.probe.name, files, plan.probe.runs_dir)


CALIBRATION_HEADER = (
    "# Written by mlinfra-compile calibrate from probe results; name it in a plan as cluster.calibration.\n"
)
ROUND_TRIP_TOLERANCE = 0.05  # a probed layout's calibrated prediction within 5% of its measurement


def _architecture(layout: LayoutResult, where: str) -> dict:
    """The reduced plan's inline architecture (the shape the job trained)."""
    try:
        plan = yaml.safe_load(layout.plan_text)
        arch = plan["model"]["architecture"]
        if not isinstance(arch, dict) or "cluster" in plan and "catalog" in (plan["cluster"] or {}):
            raise TypeError("an inline architecture and no catalog file are expected")
        return arch
    except (yaml.YAMLError, TypeError, KeyError) as exc:
        raise ProbeError(f"{where}.plan_text: not the reduced plan the probe wrote ({type(exc).__name__})") from None


def _layout_training(plan_text: str, where: str) -> tuple[float, dict | None]:
    """(the dropout the layout's reduced plan trained with, as its compile decided it (recipe.decide.decide_dropout);
    its LoRA adapters, None for full training); a plan_text that does not compile is a ProbeError naming the layout."""
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .pipeline import resolve_text
    from .recipe.decide import decide_dropout

    try:
        plan = resolve_text(plan_text)
    except PlanInputError as exc:
        raise ProbeError(
            f"{where}.plan_text: the layout's plan does not compile: {exc.diagnostics[0].message}"
        ) from None
    except InfeasiblePlan as exc:
        raise ProbeError(f"{where}.plan_text: the layout's plan does not fit: {exc}") from None
    train = plan.spec.train
    adapters = {"method": train.method, "rank": train.lora.rank, "targets": list(train.lora.targets)}
    lora = adapters if train.method in ("lora", "qlora") else None
    return float(decide_dropout(plan)[0]), lora


def _points(results: TrainingResults) -> list[dict]:
    points = []
    for i, l in enumerate(results.layouts):
        where = f"layouts.{i}"
        architecture = _architecture(l, where)  # the shape first: its error names what is wrong with plan_text
        dropout, lora = _layout_training(l.plan_text, where)
        points.append(
            {
                "gpu": results.gpu_id,
                "architecture": architecture,
                "gpus": l.tp * l.pp * l.dp,
                "tp": l.tp,
                "pp": l.pp,
                "zero_stage": l.zero_stage,
                "micro_batch": l.micro_batch,
                "global_batch": l.global_batch,
                "seq_len": results.seq_len,
                "recompute": l.recompute,
                "precision": results.precision,
                "framework": l.framework,
                "offload": l.offload,
                "dropout": dropout,
                **({"lora": lora} if lora else {}),
                "step_seconds": l.step_seconds,
            }
        )
    return points


def _memory(results: TrainingResults) -> dict | None:
    """The site's memory factor: the largest measured ÷ predicted peak reserved memory over the layouts; none when
    nothing was measured, or measured on a CPU (a resident set, not a caching allocator's peak: no GPU margin)."""
    if results.environment.device != "cuda":
        return None
    points = [
        {
            "layout": l.name,
            "measured_allocated_bytes": l.peak_allocated_bytes,
            "measured_reserved_bytes": l.peak_reserved_bytes,
            "predicted_allocated_bytes": l.predicted_allocated_bytes,
            "predicted_reserved_bytes": l.predicted_reserved_bytes,
        }
        for l in results.layouts
        if l.peak_reserved_bytes > 0
    ]
    factor = max((p["measured_reserved_bytes"] / p["predicted_reserved_bytes"] for p in points), default=0.0)
    if factor <= 0:
        return None
    return {"gpu": results.gpu_id, "device": results.environment.device, "factor": round(factor, 4), "points": points}


def _interconnect(results: TrainingResults) -> dict | None:
    """The collectives the probe measured inside a node and, on two nodes, across them (bus bandwidth, nccl-tests'
    definition): calibrate fits the site's intra- and inter-node shares to the largest all-reduce of each."""
    intra, inter = results.collectives_intra_node, results.collectives_inter_node
    if not intra and not inter:
        return None
    fabric = {
        "gpu": results.gpu_id,
        "interconnect": results.interconnect,
        "device": results.environment.device,
        "ranks_per_node": results.processes_per_node,
    }
    for key, points in (("intra_node", intra), ("inter_node", inter)):
        if points:
            fabric[key] = [p.model_dump(mode="json") for p in points]
    return fabric


def _serving_points(results: ServingResults) -> list[dict]:
    """The engine's medians as serving steps: time to first token at concurrency 1 is one prefill of a prompt; time
    per output token at concurrency C is one decode step of C sequences at the mean context (prompt + half the
    output). A prompt is as long as the engine counted it where it reported its count (the probe's prompts are words
    meant as one token each; a tokenizer may split them otherwise), else the length asked for."""
    common = {
        "gpu": results.gpu_id,
        "architecture": results.architecture.model_dump(mode="json", exclude_defaults=True),
        "precision": results.precision,
        "tp": results.tp,
    }
    points = []
    for p in results.points:
        prompt = p.prompt_tokens(results.prompt_tokens)
        if p.concurrency == 1:
            points.append(
                {**common, "phase": "prefill", "batch": 1, "tokens": prompt, "step_seconds": p.median_ttft_ms / 1e3}
            )
        context = prompt + results.output_tokens / 2
        points.append(
            {
                **common,
                "phase": "decode",
                "batch": p.concurrency,
                "tokens": context,
                "step_seconds": p.median_tpot_ms / 1e3,
            }
        )
    return sorted(points, key=lambda point: point["phase"] == "decode")


def _vision_points(results: TritonResults) -> list[dict]:
    """Each batch as the server timed it (perf_analyzer's server compute time per batch): one vision batch."""
    return [
        {
            "gpu": results.gpu_id,
            "architecture": results.architecture.model_dump(mode="json", exclude_defaults=True),
            "precision": results.precision,
            "engine": "triton",
            "batch": p.batch,
            "tokens": results.prompt_tokens,
            "step_seconds": p.server_compute_infer_ms / 1e3,
        }
        for p in results.points
    ]


def _serving_data(results: ServingResults | TritonResults, site: str) -> dict:
    env = results.environment
    if isinstance(results, TritonResults):
        how = f"Triton's perf_analyzer (server compute time) at batch {', '.join(str(p.batch) for p in results.points)}"
        key, points = "vision_points", _vision_points(results)
    else:
        triton = results.engine == "triton-vllm"
        bench = "Triton's perf_analyzer --streaming (vllm backend)" if triton else "vLLM's `vllm bench serve`"
        how = f"{bench} at concurrency {', '.join(str(p.concurrency) for p in results.points)}"
        key, points = "serving_points", _serving_points(results)
    source = f"mlinfra-compile serving probe of plan {results.plan} on {env.host} ({results.device_name}): {how}"
    data = {"site": site, "measured_at": results.measured_at, "source": source[:1000], key: points}
    warnings = results_warnings(results)
    if warnings:
        data["warnings"] = warnings
    return data


def site_calibration_data(results: TrainingResults | ServingResults | TritonResults, site: str) -> dict:
    """The site calibration file's content for one probe's results: every layout it measured as a point (priced as
    its job was: framework, layout, reduced shape), the memory factor, the collectives, the warnings; serving results:
    the engine's measured steps."""
    if isinstance(results, (ServingResults, TritonResults)):
        return _serving_data(results, site)
    env = results.environment
    source = (
        f"mlinfra-compile probe of plan {results.plan} on {env.host} ({results.device_name}, torch {env.torch}); "
        f"layouts {', '.join(l.name for l in results.layouts)}; GEMM {results.gemm_tflops:.3g} TFLOP/s, "
        f"copy {results.copy_bytes_per_second:.3g} B/s"
    )
    data = {
        "site": site,
        "measured_at": results.measured_at,
        "source": source[:1000],
        "points": _points(results),
    }
    memory = _memory(results)
    if memory:
        data["memory"] = memory
    fabric = _interconnect(results)
    if fabric:
        data["interconnect"] = fabric
    warnings = results_warnings(results)
    if warnings:
        data["warnings"] = warnings
    return data


def site_calibration_text(data: dict) -> str:
    return CALIBRATION_HEADER + yaml.safe_dump(data, sort_keys=False, width=1 << 30)


def results_warnings(results: TrainingResults | ServingResults | TritonResults) -> list[str]:
    """The environment checks (probe_environment.py) on the results' recorded environment against what the plan's GPU
    catalog entry led the probe to expect: the same checks the probe ran on the node (none without `expected`)."""
    if results.expected is None:
        return []
    return environment_warnings(results.environment.model_dump(), results.expected.model_dump())


def _serving_round_trip(
    results: ServingResults | TritonResults, text: str
) -> tuple[list[tuple[str, float, float]], list[str]]:
    """The plan compiled with the site file (a plan that no longer meets its targets is a note, not an error: the
    site is what it is), and each measured step's prediction with the fitted shares."""
    from .catalog.catalog import load_catalog
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .pipeline import resolve_in
    from .site_calibration import calibrate
    from .site_calibration_file import CalibrationError, SiteCalibration
    from .site_calibration_fit import predicted_serving_step, predicted_vision_batch

    site = SiteCalibration.model_validate(yaml.safe_load(text))
    try:
        catalog, _ = calibrate(load_catalog(), site)
    except CalibrationError as exc:
        raise ProbeError(f"the site file does not calibrate: {exc}") from None
    gpu = catalog.gpus[results.gpu_id]
    own = SiteCalibration.model_validate(site_calibration_data(results, site.site))  # this probe's points alone
    checked = [
        (
            f"{p.phase} step at batch {p.batch}",
            predicted_serving_step(
                p, catalog, gpu.achievable_matmul_fraction, gpu.achievable_memory_bandwidth_fraction
            ),
            p.step_seconds,
        )
        for p in own.serving_points
    ]
    checked += [
        (
            f"batch of {p.batch} (server compute)",
            predicted_vision_batch(p, catalog, gpu.achievable_matmul_fraction),
            p.step_seconds,
        )
        for p in own.vision_points
    ]
    notes = []
    with tempfile.TemporaryDirectory(prefix="mlinfra-calibrate-") as folder:
        Path(folder, "site-calibration.yaml").write_text(text, encoding="utf-8")
        try:
            plan = yaml.safe_load(results.plan_text)
        except yaml.YAMLError:
            plan = None  # not YAML: refused below like any other text that is not the plan
        cluster = plan.get("cluster") if isinstance(plan, dict) else None
        if not isinstance(plan, dict) or not isinstance(cluster or {}, dict) or "catalog" in (cluster or {}):
            raise ProbeError("plan_text: not the plan the probe wrote")
        plan.setdefault("cluster", {})["calibration"] = "site-calibration.yaml"
        try:
            resolve_in(Path(folder), yaml.safe_dump(plan, sort_keys=False))
        except PlanInputError as exc:
            raise ProbeError(
                f"plan_text: the site file does not compile the plan: {exc.diagnostics[0].message}"
            ) from None
        except InfeasiblePlan as exc:
            notes.append(f"with this site's measured steps the plan does not meet its targets: {exc}")
    return checked, notes


def round_trip(
    results: TrainingResults | ServingResults | TritonResults, text: str
) -> tuple[list[tuple[str, float, float]], list[str]]:
    """The site file checked as a plan uses it: each probed layout's reduced plan compiled with the file as its
    cluster.calibration (a failure is a ProbeError naming the layout); (layout, calibrated prediction, measured)
    and notes."""
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .pipeline import resolve_in

    if isinstance(results, (ServingResults, TritonResults)):
        return _serving_round_trip(results, text)
    checked = []
    with tempfile.TemporaryDirectory(prefix="mlinfra-calibrate-") as folder:
        Path(folder, "site-calibration.yaml").write_text(text, encoding="utf-8")
        for i, layout in enumerate(results.layouts):
            plan = yaml.safe_load(layout.plan_text)
            plan.setdefault("cluster", {})["calibration"] = "site-calibration.yaml"
            try:
                resolved = resolve_in(Path(folder), yaml.safe_dump(plan, sort_keys=False))
            except PlanInputError as exc:
                message = exc.diagnostics[0].message
                raise ProbeError(f"layouts.{i} ({layout.name}): the site file does not compile it: {message}") from None
            except InfeasiblePlan as exc:
                raise ProbeError(f"layouts.{i} ({layout.name}): with the site file it does not fit: {exc}") from None
            checked.append((f"layout {layout.name}", step_roofline(resolved), layout.step_seconds))
    return checked, []


def merged_site_data(all_results: list[TrainingResults | ServingResults | TritonResults], site: str) -> dict:
    """One site file for several probes' results: a staged service's stages (deployment/probe_stages.py), each a
    serving probe on its own GPU type, their points side by side (each names its GPU, so each GPU's shares are fitted
    to its own). A training probe's results calibrate alone: its memory factor and collectives are one job's."""
    if len(all_results) == 1:
        return site_calibration_data(all_results[0], site)
    if any(isinstance(r, TrainingResults) for r in all_results):
        raise ProbeError(
            "a training probe's results calibrate alone (its memory factor and collectives are one job's); several "
            "results files are the serving probes of a staged service's stages"
        )
    parts = [site_calibration_data(r, site) for r in all_results]
    data = {
        "site": site,
        "measured_at": max(p["measured_at"] for p in parts),
        "source": "; ".join(p["source"] for p in parts)[:1000],
    }
    for key in ("serving_points", "vision_points"):
        points = [point for p in parts for point in p.get(key, [])]
        if points:
            data[key] = points
    warnings = list(dict.fromkeys(w for p in parts for w in p.get("warnings", [])))
    if warnings:
        data["warnings"] = warnings
    return data


def checked_site_file(all_results: list[TrainingResults | ServingResults | TritonResults], site: str):
    """The site file's text, validated as compile reads it and compiled against with each probed layout's plan (each
    stage's plan, named by its plan when there are several)."""
    from pydantic import ValidationError

    from .site_calibration_file import SiteCalibration

    data = merged_site_data(all_results, site)
    try:
        SiteCalibration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise ProbeError(f"the site file would not validate: {where}: {first['msg']}") from None
    text = site_calibration_text(data)
    checked, notes = [], []
    for results in all_results:
        own_checked, own_notes = round_trip(results, text)
        prefix = f"{results.plan}: " if len(all_results) > 1 else ""
        checked += [(prefix + name, predicted, measured) for name, predicted, measured in own_checked]
        notes += [prefix + note for note in own_notes]
    return text, (checked, notes)
