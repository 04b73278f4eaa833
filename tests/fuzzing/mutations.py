"""Hypothesis strategies that mutate example plans: types, units, missing/extra keys, huge and negative
numbers, NaN/inf, unicode, deep nesting. Shared by tests/test_fuzz.py and benchmarks/fuzz.py."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from compiler.diagnostics import InfeasiblePlan, PlanInputError
from compiler.pipeline import resolve

WEIRD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.just(math.nan), st.just(-math.inf),
    st.text(max_size=40), st.sampled_from(["7B", "80GiB", "30d", "$400k", "-1", "1e999", "0", "½", "∞", "$(reboot)", "'; rm -rf /", "a\nb", "on", "~"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, prefix + (i,))
    return found


def _parent(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated_plan(draw, examples: list[Path]) -> Any:
    doc = copy.deepcopy(yaml.safe_load(draw(st.sampled_from(examples)).read_text()))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths or not isinstance(doc, dict):
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "delete", "extra", "nest", "duplicate-type"]))
        if action == "replace":
            parent[path[-1]] = draw(WEIRD_VALUES)
        elif action == "delete" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif action == "extra" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(WEIRD_VALUES)
        elif action == "nest":
            value: Any = draw(WEIRD_VALUES)
            for _ in range(draw(st.integers(1, 80))):
                value = {"x": value}
            parent[path[-1]] = value
        else:
            parent[path[-1]] = [parent[path[-1]]]
    return doc


def outcome(doc: Any, directory: Path) -> str:
    """'compiled', 'invalid' (exit 2), 'infeasible' (exit 1), or raises: a crash is a bug."""
    plan = directory / "fuzz-plan.yaml"
    try:
        plan.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    except (ValueError, yaml.YAMLError):
        return "unrepresentable"
    try:
        resolve(plan)
    except PlanInputError as exc:
        assert exc.diagnostics and all(d.code and d.message for d in exc.diagnostics)
        return "invalid"
    except InfeasiblePlan:
        return "infeasible"
    return "compiled"
