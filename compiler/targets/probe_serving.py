"""The serving probe's files (`mlinfra-compile probe` of a vLLM plan): the plan's own engine launch (engine/vllm/:
serve.sh and config.yaml, as compiled), probe_serve.py (which starts it and runs vLLM's own `vllm bench serve`),
probe_node.py (its arguments, device check and results, shared with probe_triton.py), the environment checks, settings.json, probe.sbatch, probe-job.yaml (Kubernetes plans), plan.json and REPORT.md."""

from __future__ import annotations

import yaml

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, dump_json, dump_yaml_documents, render, runtime_script, shell_words, stable
from .k8s_common import literal, probe_job, secret_env, weights_env_from


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
    """What probe_triton.py reads: the node checks, the model and its batches; a Triton LLM plan's probe_triton_llm.py:
    the model, perf_analyzer's settings and the vLLM probe's concurrencies and lengths."""
    probe = plan.probe
    if probe.triton_llm is not None:
        return {
            **_node_settings(plan),
            "triton_llm": probe.triton_llm.model_dump(mode="json"),
            "serving": probe.serving.model_dump(mode="json"),
            "plan_text": probe.serving.plan_text,
        }
    return {**_node_settings(plan), "triton": probe.triton.model_dump(mode="json")}


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
    (tritonserver from serve.sh, then perf_analyzer per batch), the checks, settings.json, probe.sbatch, plan.json,
    REPORT.md and probe-job.yaml (Kubernetes plans)."""
    from ..pipeline import render_files

    probe = plan.probe
    engine = {f.path: f for f in render_files(plan, only=("triton",))}
    script = "probe_triton_llm.py" if probe.triton_llm else "probe_triton.py"
    sbatch = render(
        "probe/probe_triton.sbatch.j2",
        probe=probe,
        script=script,
        directives=[f"--{d.flag}={d.value}" for d in probe.slurm_directives],
    )
    report = render("probe/REPORT.md.j2", probe=probe, collectives="none", layouts=[], decisions=probe.decisions)
    files = [
        OutputFile("probe_triton.py", runtime_script("probe_triton.py"), 0o755),
        *(
            [OutputFile("probe_triton_llm.py", runtime_script("probe_triton_llm.py"), 0o755)]
            if probe.triton_llm
            else []
        ),
        OutputFile("probe_node.py", runtime_script("probe_node.py")),
        OutputFile("probe_environment.py", checks),
        OutputFile("probe.sbatch", sbatch, 0o755),
        OutputFile("settings.json", dump_json(triton_settings(plan))),
        OutputFile("plan.json", dump_json(stable(plan.model_dump(mode="json")))),
        OutputFile("REPORT.md", report),
        *(OutputFile(f"engine/{path}", f.text, f.mode) for path, f in engine.items()),
    ]
    if probe.kubernetes:
        carried = {
            f.path: f.text for f in files if f.path.endswith(".py") or f.path.startswith(("engine/", "settings"))
        }
        files.append(OutputFile("probe-job.yaml", dump_yaml_documents(_triton_job(plan, carried))))
    return files


def render_serving_probe(plan: ResolvedPlan, checks: str) -> list[OutputFile]:
    from ..pipeline import render_files

    probe = plan.probe
    if probe.triton is not None or probe.triton_llm is not None:
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
        OutputFile("probe_node.py", runtime_script("probe_node.py")),
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


# The Triton Job's writable copy of the probe folder (the ConfigMap volume is read-only and serve.sh fills the
# repository beside itself) and the folder the perf-analyzer init container copies its binary into.
TRITON_WORK, TRITON_TOOLS = "/tmp/probe", "/tools"


def _triton_init(plan: ResolvedPlan) -> list[dict]:
    """fill-repository (the plan's Deployment's image, packages and GPUs: the ONNX file fetched or exported by
    serve.sh --fetch-only) into the work folder, then perf-analyzer from Triton's SDK image."""
    unit, work = plan.deployment.kubernetes.serving[0], {"name": "work", "mountPath": TRITON_WORK}
    steps = [f"cp -rL /probe/. {TRITON_WORK}"]
    if unit.repository_init_packages:
        steps.append(f"python3 -m pip install --no-cache-dir {shell_words(unit.repository_init_packages)}")
    steps.append(f"bash {TRITON_WORK}/engine/triton/serve.sh --fetch-only")
    fill = {
        "name": "fill-repository",
        "image": unit.repository_init_image,
        "command": ["bash", "-c", literal("set -euo pipefail; " + "; ".join(steps))],
        "env": secret_env(plan),
        "volumeMounts": [{"name": "probe", "mountPath": "/probe", "readOnly": True}, work],
    }
    if unit.repository_init_gpus:
        fill["resources"] = {"limits": {"nvidia.com/gpu": unit.repository_init_gpus}}
    if unit.weights_source == "object-store" and (env_from := weights_env_from(plan)):
        fill["envFrom"] = env_from  # serve.sh --fetch-only copies the model file from object storage
    copy = f'cp -L "$(command -v perf_analyzer)" {TRITON_TOOLS}/perf_analyzer'
    tools = {
        "name": "perf-analyzer",
        "image": plan.probe.kubernetes.perf_analyzer_image,
        "command": ["bash", "-c", literal(copy)],
        "volumeMounts": [{"name": "tools", "mountPath": TRITON_TOOLS}],
    }
    return [fill, tools]


def _triton_job(plan: ResolvedPlan, carried: dict[str, str]) -> list[dict]:
    """A ConfigMap with the probe's files and a one-pod Job: the init containers fill the repository and bring
    perf_analyzer, then probe_triton.py runs in the plan's server image on the replica's GPUs and prints the results
    between marker lines (the pod's default container, so `kubectl logs job/<probe>` reads its log)."""
    script = "probe_triton_llm.py" if plan.probe.triton_llm else "probe_triton.py"
    command = f"cd {TRITON_WORK} && python3 {script} --out {TRITON_WORK}/probe-results.json --print-results"
    env = [{"name": "MLINFRA_PROBE_PERF_ANALYZER", "value": f"{TRITON_TOOLS}/perf_analyzer"}]
    config, job = probe_job(plan, plan.probe, command, carried, env=env)
    template = job["spec"]["template"]
    template["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "probe"}
    pod = template["spec"]
    pod["initContainers"] = _triton_init(plan)
    pod["volumes"] += [{"name": "work", "emptyDir": {}}, {"name": "tools", "emptyDir": {}}]
    pod["containers"][0]["volumeMounts"] += [
        {"name": "work", "mountPath": TRITON_WORK},
        {"name": "tools", "mountPath": TRITON_TOOLS, "readOnly": True},
    ]
    return [config, job]
