"""The commands beside compile and check: init, explain, diff, schema, probe, calibrate, completion.

Each has a parser (`*_parser`, also read by `completion` and the command reference) and a runner that fills a
RunReport; `emit` prints it in the chosen format, so every command has --format and -q.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .cli_base import (
    EXIT_INFEASIBLE,
    EXIT_INVALID,
    Parser,
    add_output_options,
    problems_of,
    terminal_text,
)
from .cli_report import Problem, RunReport, emit

CALIBRATION_MARK = "# Written by mlinfra-compile calibrate"


def _finish(report: RunReport, args) -> int:
    emit(report, args.format, args.quiet)
    return report.exit_code


def schema_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile schema",
        description="Print the plan JSON Schema.",
        epilog="examples:\n  mlinfra-compile schema > schemas/plan.schema.json\n  mlinfra-compile schema --resolved   # the schema of out/<plan>/plan.json",
    )
    parser.add_argument("--resolved", action="store_true", help="print the schema of out/<plan>/plan.json instead")
    return add_output_options(parser)


def run_schema(argv: list[str]) -> int:
    from .schema import plan_schema, resolved_schema

    args = schema_parser().parse_args(argv)
    schema = resolved_schema() if args.resolved else plan_schema()
    report = RunReport("schema", result={"schema": schema})
    report.text = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return _finish(report, args)


def explain_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile explain",
        description="Print the sizing and deployment decisions and their reasons.",
        epilog="example:\n  mlinfra-compile explain examples/llama3-8b-pretrain.yaml\n\n"
        "exit codes: 0 explained, 2 invalid input, 3 internal error, 4 infeasible",
    )
    parser.add_argument("plan", type=Path)
    return add_output_options(parser)


def run_explain(argv: list[str]) -> int:
    from .explain import explain

    args = explain_parser().parse_args(argv)
    report = RunReport("explain")
    plan = resolved(args.plan, report)
    if plan is not None:
        report.text = terminal_text(explain(plan))
        report.result = {"plan": plan.name, "report": explain(plan)}
    return _finish(report, args)


def resolved(path: Path, report: RunReport, probe: bool = False, shown: str | None = None):
    """The resolved plan, or None after adding why to the report; `probe` decides the probe section too."""
    from .deployment.probe import ProbeError
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .pipeline import resolve

    name = shown or str(path)
    try:
        return resolve(path, probe=probe)
    except ProbeError as exc:
        report.problems.append(Problem(name, str(exc), "no-probe"))
        report.fail(EXIT_INVALID)
    except PlanInputError as exc:
        report.problems += problems_of(exc, name)
        report.fail(EXIT_INVALID)
    except InfeasiblePlan as exc:
        report.problems.append(Problem(name, f"infeasible: {exc}", "infeasible"))
        report.fail(EXIT_INFEASIBLE)
    return None


def _os_problem(report: RunReport, exc: OSError, fallback: Path) -> None:
    """An environment error: one line naming the path, exit 2."""
    report.problems.append(Problem(str(exc.filename or fallback), str(exc.strerror or exc), "os-error"))
    report.fail(EXIT_INVALID)


def probe_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile probe",
        description="Write a measurement job for a plan: one node, and a "
        "second for the collectives when the plan spans nodes (out/<plan>-probe/: probe.py, probe_environment.py, "
        "probe.sbatch, settings.json).",
        epilog="example:\n  mlinfra-compile probe plans/llama3-8b-pretrain.yaml -o out/\n"
        "  cd out/llama3-8b-pretrain-probe && sbatch probe.sbatch\n"
        "  mlinfra-compile calibrate probe-results.json -o plans/site-calibration.yaml",
    )
    parser.add_argument("plan", type=Path)
    parser.add_argument("-o", "--out", type=Path, default=Path("out"))
    return add_output_options(parser)


def run_probe(argv: list[str]) -> int:
    from .plan_lock import PlanLocked
    from .probe import probe_files
    from .writer import UnsafeOutput, write_plans

    args = probe_parser().parse_args(argv)
    report = RunReport("probe")
    plan = resolved(args.plan, report, probe=True)
    if plan is None:
        return _finish(report, args)
    try:
        rendered = probe_files(plan)
        write_plans(args.out, [rendered])
    except (UnsafeOutput, PlanLocked) as exc:
        report.problems.append(Problem("", str(exc), exc.code))  # the message names the path
        report.fail(EXIT_INVALID)
        return _finish(report, args)
    except OSError as exc:
        _os_problem(report, exc, args.out)
        return _finish(report, args)
    report.plans = [
        {
            "file": str(args.plan),
            "name": rendered.name,
            "status": "written",
            "files": len(rendered.files),
            "out": str(args.out / rendered.name),
        }
    ]
    return _finish(report, args)


def calibrate_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile calibrate",
        description="Turn probe results into a site calibration file (name it in a plan as cluster.calibration).",
        epilog="example:\n  mlinfra-compile calibrate probe-results.json -o plans/site-calibration.yaml --site cluster-a",
    )
    parser.add_argument("results", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--site", default="site", help="the site's name (letters, digits, . _ -)")
    return add_output_options(parser)


def run_calibrate(argv: list[str]) -> int:
    from .probe import ProbeError, load_results, results_warnings, site_calibration_text

    args = calibrate_parser().parse_args(argv)
    report = RunReport("calibrate")
    try:
        results = load_results(args.results)
        _write_own_file(args.out, site_calibration_text(results, args.site), CALIBRATION_MARK)
    except ProbeError as exc:
        report.problems.append(Problem(str(args.results), str(exc), "invalid-results"))
        report.fail(EXIT_INVALID)
        return _finish(report, args)
    except OSError as exc:
        _os_problem(report, exc, args.out)
        return _finish(report, args)
    for warning in results_warnings(results):
        report.problems.append(Problem(str(args.results), warning, "probe-environment", severity="warning"))
    report.result = {"wrote": str(args.out)}
    report.summary = f"wrote {args.out}"
    return _finish(report, args)


def _write_own_file(path: Path, text: str, mark: str) -> None:
    """Atomically (a private temporary beside it, then rename); a file there that does not start with `mark` (one
    we did not write) is refused."""
    if path.exists():
        with open(path, encoding="utf-8", errors="replace") as handle:
            if not handle.readline().startswith(mark):
                raise OSError(
                    0, "exists and was not written by mlinfra-compile; remove it or choose another -o", str(path)
                )
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
