"""Target: deepspeed/ds_config.json, the DeepSpeed config decided in compiler/deployment/frameworks.py, dumped with
sorted keys. With TP/PP the data-parallel size comes from the model-parallel unit (mpu) the script passes to
deepspeed.initialize; without one DeepSpeed takes the whole world, so plain runs need TP = PP = 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json


def applies(plan: ResolvedPlan) -> bool:
    d = plan.deployment
    return d is not None and d.frameworks is not None and d.frameworks.deepspeed_config is not None


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    config = plan.deployment.frameworks.deepspeed_config
    return [OutputFile(plan.deployment.files.ds_config, dump_json(config.as_written()))]


TARGET = Target("deepspeed", applies, render)
