"""Target: fsdp/accelerate_config.yaml, an Accelerate (>= 1.x) config for PyTorch FSDP, decided in
compiler/deployment/frameworks.py.

Use it with `accelerate launch --config_file fsdp/accelerate_config.yaml`, or read it from a script started
by launch/torchrun.sh ($MLINFRA_ACCELERATE_CONFIG). Accelerate refuses unknown top-level keys
(ClusterConfig.from_yaml_file).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_yaml_documents


def applies(plan: ResolvedPlan) -> bool:
    d = plan.deployment
    return d is not None and d.frameworks is not None and d.frameworks.accelerate_config is not None


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    config = plan.deployment.frameworks.accelerate_config
    return [OutputFile(plan.deployment.files.accelerate_config, dump_yaml_documents([config.as_written()]))]


TARGET = Target("fsdp", applies, render)
