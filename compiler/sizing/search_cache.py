"""Results of searches shared by the plans of one run: one `SearchCache` per run, owned by the pipeline.

A search is a pure function of its question (the request with the catalog entries it names), so plans that
ask the same question in one run can share one result, and outputs stay those of compiling each plan alone.
The key is the question's repr, not its hash: 1 == 1.0 == True would let questions that render differently
share a result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")


class SearchCache:
    def __init__(self) -> None:
        self._results: dict[str, object] = {}

    def get_or_search(self, question: object, search: Callable[[], R]) -> R:
        key = repr(question)
        if key not in self._results:
            self._results[key] = search()
        return self._results[key]  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._results)
