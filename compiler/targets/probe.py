"""The probe's files (`mlinfra-compile probe`, out/<plan>-probe/), projected from `plan.probe` alone: probe.py and the
environment checks it imports (probe_environment.py), settings.json, probe.sbatch, probe-job.yaml (Kubernetes plans),
plan.json and REPORT.md. Not a compile target: the probe command renders these instead of the plan's own files
(compiler/probe.py)."""

from __future__ import annotations

from importlib import resources

from ..deployment.probe_model import Probe
from ..resolved import ResolvedPlan
from ..units import format_bytes
from .base import OutputFile, dump_json, dump_yaml_documents, render, stable
from .k8s_common import gpu_node_selector, labels, tolerations


def settings(probe: Probe) -> dict:
    """What probe.py reads: the probe section without its reasons and job settings, the shape flattened."""
    arch = probe.architecture
    shape = {
        "hidden": arch.hidden,
        "heads": arch.heads,
        "kv_heads": arch.kv_heads,
        "head_dim": arch.attention_head_dim,
        "ffn_hidden": probe.mlp_hidden,
        "vocab": arch.vocab,
        "layers": probe.layers,
    }
    data = probe.model_dump(
        mode="json",
        exclude={
            **dict.fromkeys(("decisions", "kubernetes", "slurm_directives", "slurm_time", "name"), True),
            "layouts": {"__all__": {"plan_text"}},
        },
    )
    return {**data, **shape}


def job_files(probe: Probe) -> list[OutputFile]:
    """Each layout's reduced plan and its compile (launcher, framework configuration, plan.json) under its folder:
    the plan's own emitted job, which probe.sbatch runs with probe_train.py."""
    from ..pipeline import render as render_plan
    from ..probe_job import resolve_text

    files = []
    if probe.layouts:
        files.append(OutputFile("probe_train.py", render("probe/probe_train.py.j2"), 0o755))
    for layout in probe.layouts:
        job = render_plan(resolve_text(layout.plan_text))
        files.append(OutputFile(f"{layout.folder}/probe-plan.yaml", layout.plan_text))
        files.extend(OutputFile(f"{layout.folder}/{f.path}", f.text, f.mode) for f in job.files)
    return files


def render_probe(plan: ResolvedPlan) -> list[OutputFile]:
    probe = plan.probe
    script, settings_text = render("probe/probe.py.j2"), dump_json(settings(probe))
    checks = environment_checks()
    sbatch = render(
        "probe/probe.sbatch.j2",
        probe=probe,
        inter_node=probe.nodes == 2,
        directives=[f"--{d.flag}={d.value}" for d in probe.slurm_directives],
    )
    sizes = ", ".join(format_bytes(b) for b in probe.collective_bytes)
    collectives = (
        f"all-reduce, all-gather at {sizes}"
        + (f"; again across 2 nodes ({probe.interconnect})" if probe.nodes == 2 else "")
        if sizes
        else "none (one process)"
    )
    report = render(
        "probe/REPORT.md.j2",
        probe=probe,
        collectives=collectives,
        layouts=[
            {
                "name": l.name,
                "folder": l.folder,
                "job": f"{l.framework} ({l.launch_kind})",
                "tp": l.tp,
                "micro_batch": l.micro_batch,
                "recompute": l.recompute,
                "zero_stage": l.zero_stage,
                "step": f"{l.predicted_step_seconds:.4g} s",
                "allocated": format_bytes(l.predicted_allocated_bytes),
                "reserved": format_bytes(l.predicted_reserved_bytes),
                "why": l.why,
            }
            for l in probe.layouts
        ],
        decisions=[d.model_dump() for d in probe.decisions],
    )
    files = [
        OutputFile("probe.py", script, 0o755),
        OutputFile("probe_environment.py", checks),
        OutputFile("probe.sbatch", sbatch, 0o755),
        OutputFile("settings.json", settings_text),
        OutputFile("plan.json", dump_json(stable(plan.model_dump(mode="json")))),
        OutputFile("REPORT.md", report),
    ]
    if probe.kubernetes:
        files.append(
            OutputFile(
                "probe-job.yaml", dump_yaml_documents(_kubernetes_job(plan, probe, script, checks, settings_text))
            )
        )
    return files


def environment_checks() -> str:
    """compiler/probe_environment.py as it is: the same checks run on the node (probe.py imports it) and in calibrate."""
    package = __package__.rpartition(".")[0]  # compiler in a checkout, mlinfra_compile installed
    return resources.files(package).joinpath("probe_environment.py").read_text(encoding="utf-8")


def _kubernetes_job(plan: ResolvedPlan, probe: Probe, script: str, checks: str, settings_text: str) -> list[dict]:
    """A ConfigMap with probe.py and settings.json and a one-pod Job on one GPU node of the plan's type: the results
    are printed to the log (`kubectl logs job/<plan>-probe > probe-results.json`)."""
    meta = {"name": probe.name, "namespace": plan.deployment.kubernetes.namespace, "labels": labels(plan, "probe")}
    command = (
        'python3 -m torch.distributed.run --standalone --nproc-per-node="$PROBE_PROCESSES" /probe/probe.py '
        "--settings /probe/settings.json --out /tmp/probe-results.json >&2 && cat /tmp/probe-results.json"
    )
    container = {
        "name": "probe",
        "image": probe.kubernetes.image,
        "command": ["bash", "-c", command],
        "env": [{"name": "PROBE_PROCESSES", "value": str(probe.processes)}],
        "resources": {"limits": {"nvidia.com/gpu": probe.processes}},
        "volumeMounts": [
            {"name": "probe", "mountPath": "/probe", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    pod = {
        "restartPolicy": "Never",
        "nodeSelector": gpu_node_selector(plan),
        "tolerations": tolerations(plan),
        "containers": [container],
        "volumes": [
            {"name": "probe", "configMap": {"name": probe.name}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": probe.time_limit_seconds,
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
        },
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {"probe.py": script, "probe_environment.py": checks, "settings.json": settings_text},
    }
    return [config, job]
