"""Target: fsdp/fsdp_tp.json (the FSDP2 × TP mesh, TP plan and sharding options decided in
compiler/deployment/fsdp_tp.py, dumped with sorted keys) and fsdp/fsdp_tp.py, the torch-native code that applies
them (DeviceMesh, parallelize_module, fully_shard). The training script imports fsdp_tp.py ($MLINFRA_FSDP_TP_SCRIPT,
exported by launch/torchrun.sh); the Python file is the same for every plan, the JSON carries the plan's numbers.
With LoRA, fsdp/lora_tp.py beside it: the TP-sharded adapters (compiler/deployment/lora_tp.py); with CP, fsdp/fsdp_cp.py:
the context-parallel chunks and all-gather attention.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json, runtime_script


def applies(plan: ResolvedPlan) -> bool:
    d = plan.deployment
    return d is not None and d.frameworks is not None and d.frameworks.fsdp_tp is not None


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    files, settings = plan.deployment.files, plan.deployment.frameworks.fsdp_tp
    out = [
        OutputFile(files.fsdp_tp_config, dump_json(settings.as_written())),
        OutputFile(files.fsdp_tp_script, runtime_script("fsdp_tp.py")),
    ]
    if settings.lora is not None:  # fsdp_tp.py loads it from beside itself
        out.append(OutputFile(files.lora_tp_script, runtime_script("lora_tp.py")))
    if settings.cp:  # likewise
        out.append(OutputFile(files.fsdp_cp_script, runtime_script("fsdp_cp.py")))
    return out


TARGET = Target("fsdp_tp", applies, render)
