"""Targets, registered in one place. Each module has `applies(plan) -> bool` and `render(plan) -> list[OutputFile]`."""

from __future__ import annotations

from types import ModuleType

from . import (
    deepspeed, fsdp, k8s_serving, k8s_training, megatron, monitoring, plan_json, report, slurm, tgi, torchrun, triton, vllm,
)

TARGETS: tuple[ModuleType, ...] = (
    plan_json,      # always: the resolved plan itself
    report,         # always: REPORT.md and its charts
    torchrun,       # train/finetune: the launcher every scheduler runs
    slurm,          # train/finetune with scheduler slurm|both (and serving launchers)
    deepspeed,      # framework deepspeed
    fsdp,           # framework fsdp
    megatron,       # tp or pp > 1
    k8s_training,   # train/finetune with scheduler kubernetes|both
    vllm,           # serve with engine vllm (also the backend of triton's vllm model)
    triton,         # serve with engine triton
    tgi,            # serve with engine tgi
    k8s_serving,    # serve with scheduler kubernetes|both
    monitoring,     # alert rules for both kinds of workload
)
