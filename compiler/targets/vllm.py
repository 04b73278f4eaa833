"""Target: vllm — `vllm/config.yaml` (for `vllm serve MODEL --config`) and `vllm/serve.sh` (the same settings as a
plain `vllm serve` command line, for Slurm or bare metal). A multi-stage service gets one pair per vLLM stage under
`vllm/<stage>/`.

The engine arguments are one ordered list of (key, value, reason), decided in compiler/deployment/serving/
(`plan.deployment.engines`); the YAML, the command line and the Triton vLLM backend's `model.json` (see triton.py)
are three renderings of that list.

A replica that spans nodes runs on a Ray cluster, as vLLM's distributed-serving docs describe (docs.vllm.ai
"Distributed Inference and Serving"; examples/online_serving/multi-node-serving.sh): the first node starts the Ray
head, every other node joins it, and `vllm serve` on the head, with `--distributed-executor-backend ray`, places
TP × PP workers over the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target
from .base import render as render_template
from .engine_common import EngineUnit, engine_units, unit_path, vllm_engine_config, vllm_serve_args


def applies(plan: ResolvedPlan) -> bool:
    return bool(engine_units(plan, "vllm"))


def serve_args(plan: ResolvedPlan) -> list[str]:
    """`vllm serve` arguments of a single-unit plan (tests and tools)."""
    return vllm_serve_args(plan.deployment.engines[0])


def engine_config(plan: ResolvedPlan, *, frontend: bool = True) -> dict[str, object]:
    return vllm_engine_config(plan.deployment.engines[0], frontend=frontend)


def _config_yaml(unit: EngineUnit) -> str:
    rows = [{"key": a.key, "value": a.value, "reason": a.reason} for a in unit.engine.args]
    return render_template(
        "vllm/config.yaml.j2",
        vllm_version=unit.engine.version,
        name=unit.plan.name,
        precision=unit.serving.precision,
        prequantized=unit.plan.model.quantization != "none",
        checkpoint=unit.plan.model.quantization,
        rows=rows,
    )


def _serve_sh(unit: EngineUnit) -> str:
    s = unit.serving
    return render_template(
        "vllm/serve.sh.j2",
        vllm_version=unit.engine.version,
        name=unit.plan.name,
        tp=s.tp,
        pp=s.pp,
        gpus=s.gpus_per_replica,
        nodes=s.nodes_per_replica,
        multi_node=s.nodes_per_replica > 1,
        serve_args=vllm_serve_args(unit.engine),
        ray_port=unit.engine.ray_port,
        ray_wait_seconds=unit.engine.ray_wait_seconds,
        ray_poll_seconds=unit.engine.ray_poll_seconds,
        ray_wait_polls=unit.engine.ray_wait_polls,
    )


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    files = []
    for unit in engine_units(plan, "vllm"):
        files.append(OutputFile(unit_path("vllm", unit, "config.yaml"), _config_yaml(unit)))
        files.append(OutputFile(unit_path("vllm", unit, "serve.sh"), _serve_sh(unit), 0o755))
    return files


TARGET = Target("vllm", applies, render)
