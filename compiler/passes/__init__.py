"""The sizing passes, in order. Each is a pure function (ResolvedPlan, Catalog) -> ResolvedPlan."""

from __future__ import annotations

from .resolve_model import resolve_model

PASSES = (
    resolve_model,  # everything after needs the architecture and parameter counts
)
