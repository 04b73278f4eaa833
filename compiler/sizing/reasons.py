"""Why a search refused, warned or chose something — as data. Sizing formats no English: a `Reason` is a code
naming what happened and the figures behind it; compiler/passes/wording.py is the one place that turns a code and
its facts into a sentence (and a test checks that every code used here has its wording there)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reason:
    code: str
    facts: tuple[tuple[str, Any], ...] = ()

    def __getitem__(self, name: str) -> Any:
        return dict(self.facts)[name]


def because(code: str, **facts: Any) -> Reason:
    """`because("no-price", pricing="spot")`: facts are numbers in base units (bytes, seconds, USD), ids, flags,
    nested reasons or rejections; the order they are given in does not matter."""
    return Reason(code, tuple(sorted(facts.items())))
