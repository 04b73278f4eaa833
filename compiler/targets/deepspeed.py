"""Target: deepspeed (not yet implemented)."""

from __future__ import annotations

from ..resolved import ResolvedPlan
from .base import OutputFile


def applies(plan: ResolvedPlan) -> bool:
    return False


def render(plan: ResolvedPlan) -> list[OutputFile]:
    return []
