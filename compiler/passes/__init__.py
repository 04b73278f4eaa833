"""The sizing passes, in order. Each is a pure function (ResolvedPlan, Catalog) -> ResolvedPlan."""

from __future__ import annotations

from .resolve_model import resolve_model
from .size_serving import size_serving

PASSES = (
    resolve_model,  # everything after needs the architecture and parameter counts
    size_serving,   # serve: GPU type, TP/PP, precision, batch, replicas (no-op for training)
)
