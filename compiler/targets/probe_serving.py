"""The serving probe's files (`mlinfra-compile probe` of a vLLM plan): the plan's own engine launch (engine/vllm/:
serve.sh and config.yaml, as compiled), probe_serve.py (which starts it and runs vLLM's own `vllm bench serve`),
the environment checks, settings.json, probe.sbatch, probe-job.yaml (Kubernetes plans), plan.json and REPORT.md."""

from __future__ import annotations

import yaml

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, dump_json, dump_yaml_documents, render, runtime_script, stable
from .k8s_common import probe_job


def serving_settings(plan: ResolvedPlan, engine: dict[str, str]) -> dict:
    probe = plan.probe
    config = yaml.safe_load(engine["vllm/config.yaml"])
    return {
        **_node_settings(plan),
        "model": config["model"],
        "served_model_name": config.get("served_model_name", config["model"]),
        "serving": probe.serving.model_dump(mode="json"),
        "plan_text": probe.serving.plan_text,
    }


def triton_settings(plan: ResolvedPlan) -> dict:
    """What probe_triton.py reads: the node checks, the model and its batches."""
    return {**_node_settings(plan), "triton": plan.probe.triton.model_dump(mode="json")}


def _node_settings(plan: ResolvedPlan) -> dict:
    """What every serving probe script reads first: the plan, the node checks, the served shape and the time limit."""
    probe = plan.probe
    return {
        "kind": "serving",
        "plan": probe.plan,
        "gpu_id": probe.gpu_id,
        "expected_device": probe.expected_device,
        "expected_power_watts": probe.expected_power_watts,
        "architecture": probe.architecture.model_dump(mode="json"),
        "precision": probe.precision,
        "time_limit_seconds": probe.time_limit_seconds,
    }


def render_triton_probe(plan: ResolvedPlan, checks: str) -> list[OutputFile]:
    """A Triton vision plan's probe: its model repository and launch (engine/triton/, as compiled), probe_triton.py
    (tritonserver from serve.sh, then perf_analyzer per batch), the checks, settings.json, probe.sbatch, plan.json and
    REPORT.md."""
    from ..pipeline import render_files

    probe = plan.probe
    engine = {f.path: f for f in render_files(plan, only=("triton",))}
    sbatch = render(
        "probe/probe_triton.sbatch.j2",
        probe=probe,
        directives=[f"--{d.flag}={d.value}" for d in probe.slurm_directives],
    )
    report = render("probe/REPORT.md.j2", probe=probe, collectives="none", layouts=[], decisions=probe.decisions)
    return [
        OutputFile("probe_triton.py", runtime_script("probe_triton.py"), 0o755),
        OutputFile("probe_environment.py", checks),
        OutputFile("probe.sbatch", sbatch, 0o755),
        OutputFile("settings.json", dump_json(triton_settings(plan))),
        OutputFile("plan.json", dump_json(stable(plan.model_dump(mode="json")))),
        OutputFile("REPORT.md", report),
        *(OutputFile(f"engine/{path}", f.text, f.mode) for path, f in engine.items()),
    ]


def render_serving_probe(plan: ResolvedPlan, checks: str) -> list[OutputFile]:
    from ..pipeline import render_files

    probe = plan.probe
    if probe.triton is not None:
        return render_triton_probe(plan, checks)
    engine = {f.path: f.text for f in render_files(plan, only=("vllm",))}
    settings_text = dump_json(serving_settings(plan, engine))
    script = runtime_script("probe_serve.py")
    sbatch = render(
        "probe/probe_serve.sbatch.j2", probe=probe, directives=[f"--{d.flag}={d.value}" for d in probe.slurm_directives]
    )
    report = render("probe/REPORT.md.j2", probe=probe, collectives="none", layouts=[], decisions=probe.decisions)
    files = [
        OutputFile("probe_serve.py", script, 0o755),
        OutputFile("probe_environment.py", checks),
        OutputFile("probe.sbatch", sbatch, 0o755),
        OutputFile("settings.json", settings_text),
        OutputFile("plan.json", dump_json(stable(plan.model_dump(mode="json")))),
        OutputFile("REPORT.md", report),
        *(
            OutputFile(f"engine/{path}", text, 0o755 if path.endswith(".sh") else 0o644)
            for path, text in engine.items()
        ),
    ]
    if probe.kubernetes:
        carried = {f.path: f.text for f in files if f.path.endswith((".py", ".sh", ".yaml", "settings.json"))}
        files.append(OutputFile("probe-job.yaml", dump_yaml_documents(_serving_job(plan, carried))))
    return files


def _serving_job(plan: ResolvedPlan, carried: dict[str, str]) -> list[dict]:
    """A ConfigMap with the probe's files and a one-pod Job in the plan's vLLM image on the replica's GPUs."""
    command = "cp -rL /probe/. /tmp/probe && cd /tmp/probe && python3 probe_serve.py --out /tmp/probe/probe-results.json --print-results"
    return probe_job(plan, plan.probe, command, carried)
