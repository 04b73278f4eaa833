"""Passes read only their explicit inputs: the plan and the PassContext the pipeline builds (catalog, fabrics and
storage included, and the run's search cache). No pass or sizing module loads a catalog or keeps module state."""

from __future__ import annotations

import ast
import inspect

from compiler.catalog.catalog import load_catalog
from compiler.passes import PASSES
from compiler.passes.context import PassContext
from tests.conftest import REPO

MODULES = sorted((REPO / "compiler/passes").glob("*.py")) + sorted((REPO / "compiler/sizing").glob("*.py"))


def test_every_pass_takes_the_plan_and_the_context():
    for size in PASSES:
        assert list(inspect.signature(size).parameters) == ["plan", "ctx"], size.__name__


def test_the_catalog_carries_the_fabrics_and_storage():
    catalog = load_catalog(None)
    assert "ib-400g" in catalog.interconnects and "lustre" in catalog.storage
    assert PassContext(catalog).searches is not PassContext(catalog).searches  # a compile alone shares nothing


def test_passes_and_sizing_load_no_catalog_and_hold_no_module_state():
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            assert not isinstance(node, ast.Global), f"{path.name}:{node.lineno}: module-global state"
            if isinstance(node, ast.ImportFrom):
                loaders = [a.name for a in node.names if a.name.startswith("load_")]
                assert not loaders, (
                    f"{path.name}:{node.lineno}: imports {loaders}; take the catalog from the PassContext"
                )
