"""Diagnostics: located, coded messages about the user's input, rendered like mypy/ruff."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass(frozen=True, order=True)
class Diagnostic:
    line: int  # 1-based; 0 when the problem has no position (e.g. an empty file)
    column: int  # 1-based
    path: str  # dotted field path, e.g. "train.tokens"
    message: str
    code: str
    file: str = field(default="", compare=False)
    hint: str = field(default="", compare=False)

    def render(self, source_lines: Sequence[str] = ()) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        prefix = f"{self.path}: " if self.path else ""
        text = f"{where}: error: {prefix}{self.message}  [{self.code}]"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        if self.line and self.line <= len(source_lines):
            text += f"\n    {source_lines[self.line - 1]}\n    {' ' * (self.column - 1)}^"
        return text


class PlanInputError(Exception):
    """The plan is not valid input (YAML or schema): exit code 2."""

    def __init__(self, diagnostics: Iterable[Diagnostic], source_text: str = ""):
        self.diagnostics = sorted(diagnostics)
        self.source_lines = source_text.splitlines()
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render(self.source_lines) for d in self.diagnostics)


class InfeasiblePlan(Exception):
    """The plan is valid but cannot be met (does not fit, misses deadline or budget): exit code 1."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.6)
    if not close:
        close = sorted(c for c in choices if str(word) and c.startswith(str(word)))[:1]
    return f" (did you mean '{close[0]}'?)" if close else ""
