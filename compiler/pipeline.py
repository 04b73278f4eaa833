"""compile(): load → validate → passes → ResolvedPlan → targets → files. No I/O beyond reading the plan."""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import __version__
from .catalog.catalog import load_catalog
from .catalog.loader import CatalogError
from .consistency import check_consistency
from .diagnostics import Diagnostic, FieldRefused, PlanInputError
from .input_hash import inputs_record
from .passes import PASSES
from .passes.context import PassContext
from .plan.resolved import ResolvedPlan
from .references import check_references
from .serve_checks import check_serving
from .site_calibration import calibrate
from .site_calibration_file import CalibrationError, load_site_calibration
from .sizing.search_cache import SearchCache
from .source import load_yaml_file, refuse_at
from .targets import TARGETS
from .targets.base import OutputFile, with_header
from .unused import check_unused
from .validate import validate_plan
from .writer import RenderedPlan


def _check_file_name(name: str) -> None:
    """The file name reaches every generated header and the 'Regenerate:' command: a name with a line break or
    another unprintable character is refused (headers escape it as well)."""
    if not all(c.isprintable() for c in Path(name).name):
        message = "the plan's file name holds a line break or another unprintable character; rename the file"
        raise PlanInputError([Diagnostic(0, 0, "", message, "unsafe-file-name", file=name)])


def resolve(
    plan_path: Path,
    display_name: str | None = None,
    searches: SearchCache | None = None,
    probe: bool = False,
    base_dir: Path | None = None,
    probe_gpus: int | None = None,
    probe_neighbours: bool = True,
) -> ResolvedPlan:
    """Load, validate and size one plan. `display_name` stands in for the path in messages and headers; `searches`
    is the run's shared search results (one_run), a fresh cache when the plan is compiled alone; `probe` also decides
    the probe section (`mlinfra-compile probe`); `base_dir` is where the plan's catalog and calibration paths start
    (default: the plan's folder; a plan read from standard input or git is kept in a temporary file elsewhere)."""
    _check_file_name(display_name or str(plan_path))
    loaded = load_yaml_file(plan_path, display_name=display_name or str(plan_path))
    spec = validate_plan(loaded)
    check_unused(spec, loaded)
    base_dir = plan_path.parent if base_dir is None else base_dir
    extra = (base_dir / spec.cluster.catalog) if spec.cluster.catalog else None
    try:
        catalog = load_catalog(extra)
    except CatalogError as exc:
        if exc.file and exc.line:  # at its place in the catalog file (its text is never quoted: it may be any file)
            raise PlanInputError([Diagnostic(exc.line, exc.column, "", str(exc), "invalid-catalog", file=exc.file)])
        pos = loaded.position(("cluster", "catalog"))  # no place in it (a folder, an unreadable file): the plan's field
        message = f"{exc.file}: {exc}" if exc.file else str(exc)
        raise PlanInputError(
            [Diagnostic(pos.line, pos.column, "cluster.catalog", message, "invalid-catalog", file=loaded.file)],
            loaded.text,
        )
    check_references(spec, catalog, loaded)
    check_serving(spec, catalog, loaded)
    catalog, site_decisions = _site_calibrated(catalog, base_dir, spec, loaded)
    plan = ResolvedPlan(
        generator=f"mlinfra-compile {__version__}",
        name=spec.name,
        workload=spec.workload,
        plan_file=Path(display_name or plan_path).name,
        spec=spec,
        decisions=site_decisions,
    )
    ctx = PassContext(
        catalog=catalog,
        searches=SearchCache() if searches is None else searches,
        probe=probe,
        probe_gpus=probe_gpus,
        probe_neighbours=probe_neighbours,
        resolve_text=resolve_text,
    )
    try:
        for size in PASSES:
            plan = size(plan, ctx)
    except FieldRefused as exc:  # a given field the decided plan cannot use: located at that field
        refuse_at([(exc.loc, exc.message, exc.code)], loaded)
    _check_finite(plan, loaded)
    return plan


def resolve_in(folder: Path, text: str) -> ResolvedPlan:
    """A plan's YAML text (a probe's reduced plan) written into `folder` as probe-plan.yaml (its relative files, a
    site calibration, beside it) and resolved."""
    path = folder / "probe-plan.yaml"
    path.write_text(text, encoding="utf-8")
    return resolve(path, display_name="probe-plan.yaml")


def resolve_text(text: str) -> ResolvedPlan:
    """A plan's YAML text through the ordinary pipeline (from a private file: the pipeline reads plans from files)."""
    with tempfile.TemporaryDirectory(prefix="mlinfra-probe-") as folder:
        return resolve_in(Path(folder), text)


def _site_calibrated(catalog, base_dir: Path, spec, loaded):
    """The catalog fitted to the plan's site calibration file, with the decisions that say so (none without one)."""
    if not spec.cluster.calibration:
        return catalog, []
    try:
        return calibrate(catalog, load_site_calibration(base_dir / spec.cluster.calibration))
    except CalibrationError as exc:
        pos = loaded.position(("cluster", "calibration"))
        raise PlanInputError(
            [
                Diagnostic(
                    pos.line, pos.column, "cluster.calibration", str(exc), "invalid-calibration", file=loaded.file
                )
            ],
            loaded.text,
        )


def _non_finite(value, path: str = ""):
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{path}.{i}")


def _check_finite(plan: ResolvedPlan, loaded) -> None:
    """No nan or inf reaches an output (JSON cannot hold them, a script would run with them): the plan's figures
    are bounded so this should not happen; when it does, the plan is refused naming the figure."""
    bad = next(_non_finite(plan.model_dump(exclude={"spec"})), None)
    if bad is not None:
        message = f"the sizing of this plan gives a non-finite {bad}; its figures are outside what can be sized"
        raise PlanInputError([Diagnostic(0, 0, "", message, "non-finite", file=loaded.file)])


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
    return RenderedPlan(plan.name, tuple(sorted(files, key=lambda f: f.path)), plan.runs_dir)


def compile_plan(
    plan_path: Path, display_name: str | None = None, searches: SearchCache | None = None, base_dir: Path | None = None
) -> RenderedPlan:
    """The plan's files, with the record of what decided them (the manifest keeps it for `check`)."""
    plan = resolve(plan_path, display_name, searches, base_dir=base_dir)
    inputs = inputs_record(plan_path, display_name or str(plan_path), plan.spec, base_dir or plan_path.parent)
    return dataclasses.replace(render(plan), inputs=inputs)


@contextmanager
def one_run() -> Iterator[SearchCache]:
    """The search results several plans of one run share: `with one_run() as searches: compile_plan(p, searches=searches)`.
    Plans whose training search asks the same question share its result (sizing/search_cache.py); outputs are the
    same as compiling each alone. The cache lives as long as the block and is no one else's."""
    yield SearchCache()
