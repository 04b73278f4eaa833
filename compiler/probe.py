"""`mlinfra-compile probe PLAN -o OUT`: a one-node measurement job for a training plan (out/<plan>-probe/), and
`mlinfra-compile calibrate RESULTS.json -o FILE`: its results as a site calibration file (site_calibration.py).

The probe trains the plan's model shape with random weights, data-parallel over one node's GPUs at the plan's
micro-batch, sequence length and precision (PyTorch only: probe.py). Layers are reduced so that one GPU holds the
weights, gradients and AdamW states (16 bytes per parameter, mixed-precision Adam: Rajbhandari et al. 2020 §3.1)
in half its memory; the report of the probe states the reduction. Other layouts (TP, PP, ZeRO) are not probed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from .catalog.params import count_params
from .resolved import ResolvedPlan
from .targets.base import OutputFile, dump_json, dump_yaml_documents, render, with_header
from .targets.k8s_common import gpu_node_selector, labels, tolerations
from .writer import RenderedPlan

ADAM_BYTES_PER_PARAM = 16  # fp16/bf16 weights and gradients, fp32 master, momentum and variance
PROBE_MEMORY_SHARE = 0.5  # what the probe's model states may take of one GPU; the rest for activations
WARMUP_STEPS, MEASURED_STEPS = 3, 10
TIME_LIMIT_SECONDS = 15 * 60  # the job's and the script's own limit
GEMM_SIZE, COPY_BYTES, ALLREDUCE_BYTES = 4096, 1 << 30, 256 << 20


class ProbeError(ValueError):
    """A plan the probe cannot measure (a serving plan, a CNN)."""


def probe_layers(plan: ResolvedPlan) -> int:
    arch = plan.model.architecture
    per_layer = max(1, (count_params(arch).total - count_params(arch.model_copy(update={"layers": 0})).total) // arch.layers)
    fit = math.floor(plan.hardware.gpu_memory_bytes * PROBE_MEMORY_SHARE / ADAM_BYTES_PER_PARAM / per_layer)
    return max(1, min(arch.layers, fit))


def settings(plan: ResolvedPlan) -> dict:
    if plan.training is None or plan.model is None or plan.model.architecture.kind != "decoder":
        raise ProbeError("the probe measures training plans of decoder models (serving and vision probes are not built yet)")
    arch = plan.model.architecture
    layers = probe_layers(plan)
    shape = {"hidden": arch.hidden, "heads": arch.heads, "kv_heads": arch.kv_heads, "head_dim": arch.attention_head_dim,
             "ffn_hidden": arch.ffn_hidden or arch.moe_ffn_hidden, "vocab": arch.vocab, "layers": layers}
    return {"plan": plan.name, "gpu_id": plan.hardware.gpu, "expected_device": plan.hardware.gpu_spec.k8s_product_label,
            "architecture": {**arch.model_dump(), "layers": layers}, **shape, "model_layers": arch.layers,
            "processes": plan.hardware.gpus_per_node, "micro_batch": plan.parallelism.micro_batch,
            "seq_len": plan.training.seq_len, "precision": plan.spec.precision, "warmup_steps": WARMUP_STEPS,
            "steps": MEASURED_STEPS, "time_limit_seconds": TIME_LIMIT_SECONDS, "gemm_size": GEMM_SIZE,
            "copy_bytes": COPY_BYTES, "allreduce_bytes": ALLREDUCE_BYTES}


def probe_files(plan: ResolvedPlan) -> RenderedPlan:
    s = settings(plan)
    slurm = plan.deployment.slurm if plan.deployment else None
    directives = [f"--{d.flag}={d.value}" for d in slurm.directives] if slurm else []
    minutes = math.ceil(TIME_LIMIT_SECONDS / 60)
    sbatch = render("probe/probe.sbatch.j2", job_name=f"{plan.name}-probe", processes=s["processes"], time_limit=f"00:{minutes:02d}:00",
                    directives=directives, plan_name=plan.name, layers=s["layers"], model_layers=s["model_layers"],
                    micro_batch=s["micro_batch"], seq_len=s["seq_len"], precision=s["precision"])
    script, settings_text = render("probe/probe.py.j2"), dump_json(s)
    files = [OutputFile("probe.py", script, 0o755), OutputFile("probe.sbatch", sbatch, 0o755), OutputFile("settings.json", settings_text)]
    if plan.deployment and plan.deployment.kubernetes and plan.deployment.kubernetes.training:
        files.append(OutputFile("probe-job.yaml", dump_yaml_documents(_kubernetes_job(plan, s, script, settings_text))))
    return RenderedPlan(f"{plan.name}-probe", tuple(with_header(f, plan.plan_file, plan.name) for f in files))


def _kubernetes_job(plan: ResolvedPlan, s: dict, script: str, settings_text: str) -> list[dict]:
    """A ConfigMap with probe.py and settings.json and a one-pod Job on one GPU node of the plan's type: the results
    are printed to the log (`kubectl logs job/<plan>-probe > probe-results.json`)."""
    k8s, name = plan.deployment.kubernetes, f"{plan.name}-probe"
    meta = {"name": name, "namespace": k8s.namespace, "labels": labels(plan, "probe")}
    command = ("python3 -m torch.distributed.run --standalone --nproc-per-node=\"$PROBE_PROCESSES\" /probe/probe.py "
               "--settings /probe/settings.json --out /tmp/probe-results.json >&2 && cat /tmp/probe-results.json")
    container = {
        "name": "probe", "image": k8s.training.image, "command": ["bash", "-c", command],
        "env": [{"name": "PROBE_PROCESSES", "value": str(s["processes"])}],
        "resources": {"limits": {"nvidia.com/gpu": s["processes"]}},
        "volumeMounts": [{"name": "probe", "mountPath": "/probe", "readOnly": True}, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    pod = {"restartPolicy": "Never", "nodeSelector": gpu_node_selector(plan), "tolerations": tolerations(plan),
           "containers": [container],
           "volumes": [{"name": "probe", "configMap": {"name": name}}, {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
           "spec": {"backoffLimit": 0, "activeDeadlineSeconds": s["time_limit_seconds"], "template": {"metadata": {"labels": meta["labels"]}, "spec": pod}}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"probe.py": script, "settings.json": settings_text}}
    return [config, job]


def site_calibration_text(results: dict, site: str) -> str:
    """The site calibration file for one probe's results (the point the probe measured, with its provenance)."""
    env = results.get("environment", {})
    point = {"gpu": results["gpu_id"], "architecture": results["architecture"], "gpus": results["world_size"], "tp": 1, "pp": 1,
             "zero_stage": 0, "micro_batch": results["micro_batch"], "global_batch": results["global_batch"],
             "seq_len": results["seq_len"], "recompute": "none", "precision": results["precision"],
             "step_seconds": results["step_seconds"]}
    source = (f"mlinfra-compile probe of plan {results['plan']} on {env.get('host', '?')} ({results.get('device_name', '?')}, "
              f"torch {env.get('torch', '?')}); peak allocated {results.get('peak_allocated_bytes', 0)} B, "
              f"GEMM {results.get('gemm_tflops', 0):.3g} TFLOP/s, copy {results.get('copy_bytes_per_second', 0):.3g} B/s")
    data = {"site": site, "measured_at": results["measured_at"], "source": source, "points": [point]}
    return "# Written by mlinfra-compile calibrate from probe results; name it in a plan as cluster.calibration.\n" + \
        yaml.safe_dump(data, sort_keys=False, width=1 << 30)


def load_results(path: Path) -> dict:
    from .diagnostics import PlanInputError
    from .source import read_regular_file

    try:
        data = json.loads(read_regular_file(path, str(path)).decode("utf-8"))
    except PlanInputError as exc:
        raise ProbeError(exc.diagnostics[0].render()) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProbeError(f"{path}: not probe results: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: not probe results (a JSON object is expected)")
    missing = [k for k in ("gpu_id", "architecture", "world_size", "micro_batch", "global_batch", "seq_len", "precision",
                           "step_seconds", "measured_at", "plan") if k not in data]
    if missing:
        raise ProbeError(f"{path}: not probe results (missing {', '.join(missing)})")
    return data
