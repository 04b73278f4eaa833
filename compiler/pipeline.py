"""compile(): load → validate → passes → ResolvedPlan → targets → files. No I/O beyond reading the plan."""

from __future__ import annotations

from pathlib import Path

from . import __version__
from .catalog.catalog import load_catalog
from .consistency import check_consistency
from .catalog.loader import CatalogError
from .diagnostics import Diagnostic, PlanInputError
from .passes import PASSES
from .references import check_references
from .resolved import ResolvedPlan
from .sizing.training import shared_searches
from .source import load_yaml_file
from .targets import TARGETS
from .targets.base import OutputFile, with_header
from .unused import check_unused
from .validate import validate_plan
from .writer import RenderedPlan


def resolve(plan_path: Path, display_name: str | None = None) -> ResolvedPlan:
    """Load, validate and size one plan. `display_name` stands in for the path in messages and headers."""
    loaded = load_yaml_file(plan_path, display_name=display_name or str(plan_path))
    spec = validate_plan(loaded)
    check_unused(spec, loaded)
    extra = (plan_path.parent / spec.cluster.catalog) if spec.cluster.catalog else None
    try:
        catalog = load_catalog(extra)
    except CatalogError as exc:
        pos = loaded.position(("cluster", "catalog"))
        raise PlanInputError([Diagnostic(pos.line, pos.column, "cluster.catalog", str(exc), "invalid-catalog", file=loaded.file)], loaded.text)
    check_references(spec, catalog, loaded)
    plan = ResolvedPlan(generator=f"mlinfra-compile {__version__}", name=spec.name, workload=spec.workload, plan_file=Path(display_name or plan_path).name, spec=spec)
    for size in PASSES:
        plan = size(plan, catalog)
    return plan


def render_files(plan: ResolvedPlan, only: tuple[str, ...] | None = None) -> list[OutputFile]:
    """Every target that applies, in registry order, each given the files rendered before it (`rendered`, with their
    headers) so a target can carry another's output without importing it. `only` renders those targets and what
    they need (tests)."""
    wanted = None
    if only is not None:
        wanted = set(only)
        for target in reversed(TARGETS):
            if target.name in wanted:
                wanted.update(target.needs)
    rendered: dict[str, OutputFile] = {}
    files = []
    for target in TARGETS:
        if (wanted is None or target.name in wanted) and target.applies(plan):
            produced = [with_header(f, plan.plan_file, plan.name) for f in target.render(plan, rendered)]
            rendered.update((f.path, f) for f in produced)
            if only is None or target.name in only:
                files.extend(produced)
    return files


def render(plan: ResolvedPlan) -> RenderedPlan:
    files = render_files(plan)
    check_consistency(plan, files)
    paths = [f.path for f in files]
    if len(paths) != len(set(paths)):
        raise AssertionError(f"two targets emit the same path: {sorted(p for p in paths if paths.count(p) > 1)}")
    return RenderedPlan(plan.name, tuple(sorted(files, key=lambda f: f.path)))


def compile_plan(plan_path: Path, display_name: str | None = None) -> RenderedPlan:
    return render(resolve(plan_path, display_name))


def one_run():
    """Context for compiling several plans in one run: plans whose training search asks the same question share
    its result (sizing/training.py `shared_searches`); outputs are the same as compiling each alone."""
    return shared_searches()
