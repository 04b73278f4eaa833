"""Targets, registered in one place. Each module has `applies(plan) -> bool` and `render(plan) -> list[OutputFile]`."""

from __future__ import annotations

from types import ModuleType

from . import plan_json

TARGETS: tuple[ModuleType, ...] = (
    plan_json,
)
