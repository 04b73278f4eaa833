"""Target: out/<plan>/plan.json, the resolved plan (sorted keys, stable floats, schema_version)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..resolved import ResolvedPlan
from .base import OutputFile, Target, dump_json

SIGNIFICANT_DIGITS = 6  # enough for any sizing figure; hides last-bit float noise between platforms


def stable(value: Any) -> Any:
    """Floats rounded to SIGNIFICANT_DIGITS, recursively, so output bytes do not depend on float noise."""
    if isinstance(value, float):
        if not math.isfinite(value) or value == 0:
            return value
        digits = SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value)))
        rounded = round(value, digits)
        return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stable(v) for v in value]
    return value


def applies(plan: ResolvedPlan) -> bool:
    return True


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    path = plan.deployment.files.plan_json if plan.deployment else "plan.json"
    return [OutputFile(path, dump_json(stable(plan.model_dump(mode="json"))))]


TARGET = Target("plan_json", applies, render)
