"""The commands beside compile and check: init, explain, diff, schema, probe, calibrate, completion.

Each has a parser (`*_parser`, also read by `completion` and the command reference) and a runner that fills a
RunReport; `emit` prints it in the chosen format, so every command has --format and -q.
"""

from __future__ import annotations

import dataclasses
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


def resolved(
    path: Path,
    report: RunReport,
    probe: bool = False,
    shown: str | None = None,
    probe_gpus: int | None = None,
    neighbours: bool = True,
    stage_of: Path | None = None,
):
    """The resolved plan, or None after adding why to the report; `probe` decides the probe section too (on
    `probe_gpus` of one node; the chosen layout only without `neighbours`). `stage_of`: the staged plan a stage's plan
    (a private file) comes from, which names it in headers and whose folder its relative paths start from."""
    from .deployment.probe import ProbeError
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .pipeline import resolve

    name = shown or str(path)
    where = {"display_name": str(stage_of), "base_dir": stage_of.parent} if stage_of else {}
    try:
        return resolve(path, probe=probe, probe_gpus=probe_gpus, probe_neighbours=neighbours, **where)
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
        description="Write a measurement job for a plan (out/<plan>-probe/, docs/probe.md): training, the plan's own "
        "job reduced to one node (job*/: its launcher and framework configuration running probe_train.py), then the "
        "node's GEMM, HBM and collective rates (probe.py; a second node for the collectives when the plan spans "
        "nodes); vLLM serving, the plan's own engine measured by `vllm bench serve` (probe_serve.py); Triton, its "
        "repository measured by perf_analyzer; a staged service, each stage as a plan of its own "
        "(out/<plan>-<stage>-probe/). The Slurm job writes its log and probe-results.json to out/runs/<plan>-probe/.",
        epilog="example:\n  mlinfra-compile probe plans/llama3-8b-pretrain.yaml -o out/\n"
        "  (cd out/llama3-8b-pretrain-probe && sbatch probe.sbatch)\n"
        "  mlinfra-compile calibrate out/runs/llama3-8b-pretrain-probe/probe-results.json -o plans/site-calibration.yaml",
    )
    parser.add_argument("plan", type=Path)
    parser.add_argument("-o", "--out", type=Path, default=Path("out"))
    parser.add_argument(
        "--gpus",
        type=int,
        choices=range(1, 65),
        metavar="N",
        help="GPUs of the one node to probe on (default: a node's)",
    )
    parser.add_argument(
        "--chosen-only", action="store_true", help="measure the plan's layout only, not its neighbours (one point)"
    )
    return add_output_options(parser)


# what marks a folder as a probe's own: its manifest lists the entry script of a training, vLLM or Triton probe
PROBE_SCRIPTS = frozenset({"probe.py", "probe_serve.py", "probe_triton.py"})


def run_probe(argv: list[str]) -> int:
    from .plan_lock import PlanLocked
    from .probe import probe_files
    from .writer import UnsafeOutput, manifest_hashes, write_plans

    args = probe_parser().parse_args(argv)
    report = RunReport("probe")
    plan = resolved(args.plan, report, probe=True, probe_gpus=args.gpus, neighbours=not args.chosen_only)
    try:
        plans = _stage_plans(plan, args, report) if plan is not None and plan.stages else [plan]
    except OSError as exc:  # the stages' plans are written to a private temporary folder first
        _os_problem(report, exc, Path(tempfile.gettempdir()))
        return _finish(report, args)
    if None in plans:
        return _finish(report, args)
    for probed in plans:
        folder = args.out / probed.probe.name
        if folder.exists() and not PROBE_SCRIPTS & manifest_hashes(folder).keys():
            why = "exists and is not a probe folder (another plan's output, or not written by mlinfra-compile); remove it or choose another -o"
            report.problems.append(Problem(str(folder), why, "output-conflict"))
            report.fail(EXIT_INVALID)
            return _finish(report, args)
    try:
        rendered = [probe_files(probed) for probed in plans]
        write_plans(args.out, rendered)
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
            "name": r.name,
            "status": "written",
            "files": len(r.files),
            "out": str(args.out / r.name),
        }
        for r in rendered
    ]
    return _finish(report, args)


def _stage_plans(plan, args, report: RunReport) -> list:
    """A staged service's probes: each stage as a plan of its own (deployment/probe_stages.py), resolved with its
    probe; a stage whose engine no probe measures is left out with a warning (the others are probed), and None is in
    the list where a stage fails otherwise, or no stage can be probed (the report says why)."""
    from .deployment.probe import ProbeError
    from .deployment.probe_stages import stage_plan_text, with_service
    from .plan.probe import UnprobedStage

    plans, unprobed = [], []
    with tempfile.TemporaryDirectory(prefix="mlinfra-stage-") as folder:
        for stage in plan.spec.serve.stages:
            shown = f"{args.plan} (stage {stage.name})"
            try:
                text = stage_plan_text(plan, stage)
            except ProbeError as exc:
                report.problems.append(Problem(shown, str(exc), "no-probe"))
                report.fail(EXIT_INVALID)
                return [None]
            path = Path(folder) / f"{stage.name}.yaml"
            path.write_text(text, encoding="utf-8")
            own = RunReport(report.command)
            probed = resolved(path, own, True, shown, args.gpus, not args.chosen_only, stage_of=args.plan)
            if probed is None and own.problems and all(p.code == "no-probe" for p in own.problems):
                unprobed.append(UnprobedStage(stage=stage.name, reason=own.problems[0].message))
                report.problems += [dataclasses.replace(p, severity="warning") for p in own.problems]
                continue
            report.problems += own.problems
            if own.exit_code:
                report.fail(own.exit_code)
            plans.append((stage, probed))
    if not plans:
        report.problems.append(Problem(str(args.plan), "no stage of the staged service can be probed", "no-probe"))
        report.fail(EXIT_INVALID)
        return [None]
    if any(p is None for _, p in plans):
        return [None]
    probes = [p.probe for _, p in plans]
    return [p.model_copy(update={"probe": with_service(p.probe, plan, s, probes, unprobed)}) for s, p in plans]


def calibrate_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile calibrate",
        description="Turn probe results into a site calibration file (name it in a plan as cluster.calibration). A "
        "staged service's stages are probed one by one: give every stage's results to write one file for the plan.",
        epilog="examples:\n  mlinfra-compile calibrate probe-results.json -o plans/site-calibration.yaml --site cluster-a\n"
        "  mlinfra-compile calibrate out/runs/image-captioning-vision-probe/probe-results.json "
        "out/runs/image-captioning-caption-probe/probe-results.json -o plans/site-calibration.yaml",
    )
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--site", default="site", help="the site's name (letters, digits, . _ -)")
    return add_output_options(parser)


def run_calibrate(argv: list[str]) -> int:
    from .probe import ProbeError, checked_site_file, load_results, results_warnings

    args = calibrate_parser().parse_args(argv)
    report = RunReport("calibrate")
    named = ", ".join(map(str, args.results))
    try:
        loaded = []
        for path in args.results:
            named = str(path)
            loaded.append(load_results(path))
        named = ", ".join(map(str, args.results))
        text, (checked, notes) = checked_site_file(loaded, args.site)
        _write_own_file(args.out, text, CALIBRATION_MARK)
    except ProbeError as exc:
        report.problems.append(Problem(named, str(exc), "invalid-results"))
        report.fail(EXIT_INVALID)
        return _finish(report, args)
    except OSError as exc:
        _os_problem(report, exc, args.out)
        return _finish(report, args)
    for path, results in zip(args.results, loaded):
        for warning in results_warnings(results):
            report.problems.append(Problem(str(path), warning, "probe-environment", severity="warning"))
    for note in notes:
        report.problems.append(Problem(named, note, "calibration-infeasible", severity="warning"))
    report.result = {"wrote": str(args.out), "checked": _round_trip(report, named, checked)}
    report.summary = f"wrote {args.out}"
    return _finish(report, args)


def _round_trip(report: RunReport, results: str, checked: list[tuple[str, float, float]]) -> list[dict]:
    """Each probed point's calibrated prediction against its measurement: a line each in the text (names from the
    results on one printable line), a warning past the tolerance; the rows for --format json."""
    from .diagnostics import printable
    from .probe import ROUND_TRIP_TOLERANCE

    lines, rows = [], []
    for name, predicted, measured in checked:
        off = predicted / measured - 1
        lines.append(
            printable(f"{name}: measured {measured:.4g} s, calibrated prediction {predicted:.4g} s ({off:+.1%})")
        )
        rows.append({"name": name, "measured_seconds": measured, "predicted_seconds": predicted, "off": off})
        if abs(off) > ROUND_TRIP_TOLERANCE:
            why = (
                f"{name}: the calibrated prediction is {off:+.1%} off its measurement (the fitted shares should explain "
                f"every point; more than {ROUND_TRIP_TOLERANCE:.0%} off means the step model does not scale as this site does)"
            )
            report.problems.append(Problem(results, why, "calibration-residual", severity="warning"))
    report.text = "".join(line + "\n" for line in lines)
    return rows


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
