"""The probe's files (`mlinfra-compile probe`, out/<plan>-probe/), projected from `plan.probe` alone: probe.py and the
environment checks it imports (probe_environment.py), settings.json, probe.sbatch, probe-job.yaml (Kubernetes plans),
plan.json and REPORT.md. Not a compile target: the probe command renders these instead of the plan's own files
(compiler/probe.py)."""

from __future__ import annotations

from importlib import resources

from ..plan.probe import Probe
from ..plan.resolved import ResolvedPlan
from ..units import format_bytes
from .base import OutputFile, dump_json, dump_yaml_documents, render, runtime_script, stable
from .k8s_common import probe_job
from .probe_serving import render_serving_probe


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
            **dict.fromkeys(("decisions", "kubernetes", "slurm_directives", "slurm_time", "name", "service"), True),
            "layouts": {"__all__": {"plan_text"}},
        },
    )
    return {**data, **shape}


def job_files(probe: Probe) -> list[OutputFile]:
    """Each layout's reduced plan and its compile (launcher, framework configuration, plan.json) under its folder:
    the plan's own emitted job, which probe.sbatch runs with probe_train.py."""
    from ..pipeline import render as render_plan
    from ..pipeline import resolve_text

    files = []
    if probe.layouts:
        files.append(OutputFile("probe_train.py", runtime_script("probe_train.py"), 0o755))
        files.append(OutputFile("probe_model.py", runtime_script("probe_model.py")))  # probe_train.py imports it
    for layout in probe.layouts:
        job = render_plan(resolve_text(layout.plan_text))
        files.append(OutputFile(f"{layout.folder}/probe-plan.yaml", layout.plan_text))
        files.extend(
            OutputFile(f"{layout.folder}/{f.path}", f.text, f.mode)
            for f in job.files
            if _job_needs(f"{layout.folder}/{f.path}") or f.path == "REPORT.md"  # no charts, alerts, sbatch
        )
    return files


def render_probe(plan: ResolvedPlan) -> list[OutputFile]:
    probe = plan.probe
    checks = environment_checks()
    if probe.kind == "serving":
        return render_serving_probe(plan, checks)
    script, settings_text = runtime_script("probe.py"), dump_json(settings(probe))
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
        OutputFile("probe_microbench.py", runtime_script("probe_microbench.py")),
        OutputFile("probe_environment.py", checks),
        OutputFile("probe.sbatch", sbatch, 0o755),
        OutputFile("settings.json", settings_text),
        OutputFile("plan.json", dump_json(stable(plan.model_dump(mode="json")))),
        OutputFile("REPORT.md", report),
    ]
    if probe.kubernetes:
        carried = {f.path: f.text for f in files if f.path.endswith(".py") or f.path == "settings.json"}
        carried.update((f.path, f.text) for f in job_files(probe) if _job_needs(f.path))
        files.append(OutputFile("probe-job.yaml", dump_yaml_documents(_kubernetes_job(plan, probe, carried))))
    return files


# what a reduced job needs to run (its launcher, framework configuration, plan.json): the ConfigMap carries only these
JOB_RUN_FOLDERS = ("launch/", "deepspeed/", "fsdp/", "megatron/", "torchrun/")


def _job_needs(path: str) -> bool:
    top, _, rest = path.partition("/")
    return not rest or rest in ("plan.json", "probe-plan.yaml") or rest.startswith(JOB_RUN_FOLDERS)


def environment_checks() -> str:
    """compiler/probe_environment.py as it is: the same checks run on the node (probe.py imports it) and in calibrate."""
    package = __package__.rpartition(".")[0]  # compiler in a checkout, mlinfra_compile installed
    return resources.files(package).joinpath("probe_environment.py").read_text(encoding="utf-8")


def _layout_run(layout) -> str:
    """One layout's job in the pod's shell: its launcher, its log kept, Megatron-LM's log read into results."""
    results, log = f"$PWD/probe-results.d/{layout.folder}.json", f"probe-results.d/{layout.folder}.log"
    parse = (
        f' && MLINFRA_PROBE_RESULTS="{results}" python3 probe_train.py --megatron-log {log}'
        if layout.launch_kind == "megatron"
        else ""
    )
    return (
        f'(MLINFRA_PROBE_RESULTS="{results}" bash {layout.folder}/launch/torchrun.sh 2>&1 | tee {log} >&2){parse} || '
        f'echo "probe: layout {layout.name} did not finish" >&2; '
    )


def _kubernetes_job(plan: ResolvedPlan, probe: Probe, carried: dict[str, str]) -> list[dict]:
    """A ConfigMap with the probe's files and its reduced jobs' and a one-pod Job on one GPU node of the plan's type:
    each job runs under its own launcher, then probe.py prints the results between marker lines in the log."""
    runs = "".join(_layout_run(l) for l in probe.layouts)
    command = (
        "cp -rL /probe/. /tmp/probe && cd /tmp/probe && mkdir -p probe-results.d && "
        f"export MLINFRA_PROBE_WARMUP_STEPS={probe.warmup_steps} MLINFRA_PROBE_STEPS={probe.steps}; {runs}"
        'python3 -m torch.distributed.run --standalone --nproc-per-node="$PROBE_PROCESSES" probe.py '
        "--settings settings.json --out /tmp/probe/probe-results.json --print-results"
    )
    return probe_job(plan, probe, command, carried, env=[{"name": "PROBE_PROCESSES", "value": str(probe.processes)}])
