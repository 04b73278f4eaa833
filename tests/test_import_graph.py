"""The modules of compiler/ import each other without a cycle: every `import` and `from … import` in
compiler/**/*.py (at any depth, inside functions and TYPE_CHECKING blocks too) is an edge, and the graph is acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "compiler"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The compiler modules `name` imports. `from pkg import sub` is an edge to pkg.sub when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                found.add(f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, …, a], or None (depth-first search, colours white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_of_compiler_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_relative_and_lazy_imports():
    graph = import_graph()
    assert "compiler.sizing.serve.types" in graph["compiler.sizing.serve.vision"]  # from .serve_types import …
    assert "compiler.passes.size_serving" in graph["compiler.passes"]  # from .size_serving import …
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_typed_artifacts_reach_back_into_no_decision_package():
    """compiler/plan/ holds types only: its modules import each other, the catalog's types and units, nothing that
    decides (passes, sizing, deployment, targets); the catalog is read for its ids."""
    graph = import_graph()
    allowed = {"compiler", "compiler.units", "compiler.catalog", "compiler.catalog.types", "compiler.catalog.catalog"}
    plan_modules = {name for name in graph if name.startswith("compiler.plan")}
    assert {"compiler.plan.spec", "compiler.plan.resolved", "compiler.plan.deployment", "compiler.plan.probe"} <= (
        plan_modules
    )
    reached = {name: graph[name] - plan_modules - allowed for name in sorted(plan_modules)}
    assert reached == {name: set() for name in sorted(plan_modules)}
