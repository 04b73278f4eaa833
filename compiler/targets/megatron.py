"""Target: megatron/args.sh, the Megatron-LM arguments for the plan's parallel layout and model shape.

A bash file that defines the array MEGATRON_ARGS; source it and append "${MEGATRON_ARGS[@]}" to
pretrain_gpt.py's command line (the training entrypoint launched by launch/torchrun.sh). The arguments are decided
in compiler/deployment/megatron_args.py (emitted when TP or PP > 1, or the framework is megatron).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target
from .base import render as render_template


def applies(plan: ResolvedPlan) -> bool:
    d = plan.deployment
    return d is not None and d.frameworks is not None and d.frameworks.megatron_args is not None


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    lines = [[a.flag] if a.value is None else [a.flag, a.value] for a in plan.deployment.frameworks.megatron_args]
    text = render_template("megatron/args.sh.j2", name=plan.name, lines=lines)
    return [OutputFile(plan.deployment.files.megatron_args, text)]


TARGET = Target("megatron", applies, render)
