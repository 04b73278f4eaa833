"""The architecture, checked: targets are projections of the ResolvedPlan.

Every module under compiler/targets/ reads no plan spec (`.spec`), imports no other target module (a target that
needs another's output gets it from the `rendered` mapping the pipeline hands in) and imports nothing from
compiler.sizing (sizing numbers reach targets through the ResolvedPlan). The registry lists every target module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from compiler.targets import TARGETS
from compiler.targets.base import Target

REPO = Path(__file__).resolve().parent.parent
TARGETS_DIR = REPO / "compiler" / "targets"
MODULES = sorted(p for p in TARGETS_DIR.glob("*.py") if p.name != "__init__.py")
TARGET_MODULES = {t.name for t in TARGETS}


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted module) of every import, resolved against compiler.targets."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                package = ["compiler", "targets"][: 2 - (node.level - 1)] if node.level <= 2 else []
                base = ".".join(package + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]  # `from . import slurm`
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_targets_read_no_plan_spec(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    reads = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "spec"]
    assert reads == [], f"{path.name} reads the plan spec at line(s) {reads}: decide the value in resolve_deployment"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_targets_import_no_other_target_and_no_sizing(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    own = f"compiler.targets.{path.stem}"
    bad = [
        (line, name)
        for line, name in _imports(tree)
        if name.startswith("compiler.sizing")
        or name == "compiler.sizing"
        or (name.startswith("compiler.targets.") and name.split(".")[2] in TARGET_MODULES and not name.startswith(own))
    ]
    assert bad == [], f"{path.name} imports {bad}"


def test_every_target_module_is_registered_once():
    declared = {p.stem for p in MODULES if "TARGET = Target(" in p.read_text()}
    assert declared == TARGET_MODULES
    assert len(TARGETS) == len(TARGET_MODULES) and all(isinstance(t, Target) for t in TARGETS)


def test_needs_come_first():
    seen: set[str] = set()
    for target in TARGETS:
        assert set(target.needs) <= seen, f"{target.name} needs {target.needs} rendered before it"
        seen.add(target.name)


def test_the_checker_catches_what_it_should(tmp_path):
    """The AST rules themselves: a spec read, a relative target import and a sizing import are each found."""
    tree = ast.parse(
        "from . import torchrun\nfrom ..sizing.serving import X\nimport compiler.sizing.train.search\nplan.spec.cluster\n"
    )
    names = [name for _, name in _imports(tree)]
    assert (
        "compiler.targets.torchrun" in names
        and "compiler.sizing.serving" in names
        and "compiler.sizing.train.search" in names
    )
    assert any(isinstance(n, ast.Attribute) and n.attr == "spec" for n in ast.walk(tree))


def test_runtime_scripts_ship_as_python_that_a_target_writes():
    """compiler/runtime/ holds the Python the generated folders run, as real modules (parsed, linted by ruff), no
    templating: each is written by a target through runtime_script, and nothing in the compiler imports one (they
    import torch)."""
    runtime = REPO / "compiler" / "runtime"
    scripts = sorted(p.name for p in runtime.glob("*.py") if p.name != "__init__.py")
    assert len(scripts) >= 7
    targets = "".join(p.read_text(encoding="utf-8") for p in (REPO / "compiler" / "targets").glob("*.py"))
    for name in scripts:
        ast.parse((runtime / name).read_text(encoding="utf-8"))
        assert f'runtime_script("{name}")' in targets, f"{name} is written by no target"
    imports = [
        (p.name, node.module)
        for p in (REPO / "compiler").rglob("*.py")
        if "runtime" not in p.parts
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and node.module
        and "runtime." in f"{node.module}."
        and node.module.rsplit(".", 1)[-1] != "runtime"
    ]
    assert not imports, imports
