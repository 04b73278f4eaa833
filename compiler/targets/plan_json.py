"""Target: out/<plan>/plan.json, the resolved plan (sorted keys, stable floats, schema_version)."""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json, stable


def applies(plan: ResolvedPlan) -> bool:
    return True


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    path = plan.deployment.files.plan_json if plan.deployment else "plan.json"
    return [OutputFile(path, dump_json(stable(plan.model_dump(mode="json"))))]


TARGET = Target("plan_json", applies, render)
