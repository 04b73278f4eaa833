"""Targets, registered in one place: each module declares one `TARGET = Target(name, applies, render, needs)` record
(targets/base.py) and builds its files from the ResolvedPlan alone (paths in `plan.deployment.files`).

Order matters only for `needs`: a target that carries another's rendered files comes after it. Non-target helpers
in this package (base, k8s_common, engine_common, serving_rules, charts) are shared by several targets.
"""

from __future__ import annotations

from . import (
    deepspeed,
    fsdp,
    fsdp_tp,
    k8s_serving,
    k8s_training,
    kustomize,
    megatron,
    monitoring,
    plan_json,
    report,
    slurm,
    tgi,
    torchrun,
    triton,
    vllm,
)
from .base import Target

TARGETS: tuple[Target, ...] = (
    plan_json.TARGET,  # always: the resolved plan itself
    report.TARGET,  # always: REPORT.md and its charts
    torchrun.TARGET,  # train/finetune: the launcher every scheduler runs
    slurm.TARGET,  # train/finetune with scheduler slurm|both
    deepspeed.TARGET,  # framework deepspeed
    fsdp.TARGET,  # framework fsdp without TP
    fsdp_tp.TARGET,  # framework fsdp with TP (FSDP2 × TP)
    megatron.TARGET,  # tp or pp > 1
    k8s_training.TARGET,  # train/finetune with scheduler kubernetes|both; carries the launcher and the files it reads
    vllm.TARGET,  # serve with engine vllm
    triton.TARGET,  # serve with engine triton
    tgi.TARGET,  # serve with engine tgi
    k8s_serving.TARGET,  # serve with scheduler kubernetes|both
    monitoring.TARGET,  # alert rules for both kinds of workload
    kustomize.TARGET,  # scheduler kubernetes|both: kustomization.yaml over the Kubernetes object files above
)


def by_name(name: str) -> Target:
    return next(t for t in TARGETS if t.name == name)
