"""Diagnostics: located, coded messages about the user's input, rendered like mypy/ruff."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


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
        where = printable(f"{self.file}:{self.line}:{self.column}" if self.line else self.file)
        prefix = f"{self.path}: " if self.path else ""
        text = f"{where}: error: {printable(prefix + self.message)}  [{self.code}]"
        if self.hint:
            text += f"\n    hint: {printable(self.hint)}"
        if self.line and self.line <= len(source_lines):
            line, column = _window(source_lines[self.line - 1], self.column)
            text += f"\n    {printable(line)}\n    {' ' * len(printable(line[: column - 1]))}^"
        return text


QUOTE_WIDTH = 100  # characters of a long source line quoted around the column


def _window(line: str, column: int) -> tuple[str, int]:
    """At most QUOTE_WIDTH characters of `line` around `column` (a 1 MB one-line document is not echoed)."""
    if len(line) <= QUOTE_WIDTH:
        return line, column
    start = max(0, min(column - 1 - QUOTE_WIDTH // 2, len(line) - QUOTE_WIDTH))
    return line[start : start + QUOTE_WIDTH], column - start


# Line breaks, terminal escapes and bidi overrides from a plan's keys or values would break a diagnostic over
# lines or restyle the terminal; they are shown escaped, as repr() shows them.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    return _UNPRINTABLE.sub(lambda m: repr(m[0])[1:-1], text)


class PlanInputError(Exception):
    """The plan is not valid input (YAML or schema): exit code 2."""

    def __init__(self, diagnostics: Iterable[Diagnostic], source_text: str = ""):
        self.diagnostics = sorted(diagnostics)
        self.source_lines = source_text.splitlines()
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render(self.source_lines) for d in self.diagnostics)


class FieldRefused(Exception):
    """A pass refuses a field the plan gave, because of what the passes decided (e.g. a launch kind that cannot start
    the sized framework). The pipeline turns it into a located PlanInputError at `loc` (exit code 2)."""

    def __init__(self, loc: tuple, message: str, code: str):
        self.loc, self.message, self.code = loc, message, code
        super().__init__(f"{'.'.join(map(str, loc))}: {message}")


class InfeasiblePlan(Exception):
    """The plan is valid but cannot be met (does not fit, misses deadline or budget): exit code 1."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.6)
    if not close:
        close = sorted(c for c in choices if str(word) and c.startswith(str(word)))[:1]
    return f" (did you mean '{close[0]}'?)" if close else ""
