"""The serving search for any model: LLMs (serve_llm_search.py) or non-generative models and edge devices (vision.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .llm_search import search_llm
from .types import VISION_KINDS, ServeRequest, ServeSearchResult
from .vision import search_vision

if TYPE_CHECKING:
    from ...catalog.types import GpuSpec


def search_serving(req: ServeRequest, gpus: dict[str, GpuSpec]) -> ServeSearchResult:
    """Pure: reads only its arguments."""
    if req.arch.kind in VISION_KINDS:
        return search_vision(req, gpus)
    return search_llm(req, gpus)
