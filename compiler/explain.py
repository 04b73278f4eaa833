"""`mlinfra-compile explain`: the report's reasoning, for the terminal."""

from __future__ import annotations

import re

from .plan.resolved import ResolvedPlan
from .targets import report


def explain(plan: ResolvedPlan) -> str:
    text = next(f.text for f in report.render(plan) if f.path == "REPORT.md")
    text = re.sub(r"^!\[[^\]]*\]\([^)]*\)\n\n?", "", text, flags=re.M)  # images mean nothing in a terminal
    return text
