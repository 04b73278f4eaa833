"""The command line: the only place that prints or exits.

Exit codes: 0 compiled (or up to date under --check); 1 stale under --check; 2 invalid input, or an environment
error such as an out/ that cannot be written (one located line); 3 an internal error (a bug: the only case that
shows a traceback); 4 a valid plan that is infeasible (does not fit, misses its deadline or budget).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import sys
import tempfile
import traceback
from pathlib import Path

from . import __version__
from .cli_report import FORMATS

EXIT_OK, EXIT_STALE, EXIT_INVALID, EXIT_INTERNAL, EXIT_INFEASIBLE = 0, 1, 2, 3, 4
SUBCOMMANDS = ("schema", "explain", "diff", "probe", "calibrate")
EXIT_CODES_HELP = """exit codes:
  0  compiled, or up to date under --check
  1  stale under --check (the diff and the command that fixes it are printed)
  2  invalid input or environment (every error located: file:line:col: error: field: message  [code])
  3  internal error (a bug in mlinfra-compile; the only case with a traceback)
  4  a valid plan that is infeasible (does not fit, misses its deadline or budget)"""
COMPILE_EXAMPLES = """examples:
  mlinfra-compile examples/llama3-8b-pretrain.yaml -o out/
  mlinfra-compile plans/ -o out/ --check              # a whole folder: also reports orphan out/ folders
  cat plan.yaml | mlinfra-compile - --stdin-name plan.yaml -o out/
  mlinfra-compile plans/*.yaml -o out/ --check --format github   # CI annotations

other commands: schema, explain, diff, probe, calibrate (mlinfra-compile COMMAND --help)"""


class _Parser(argparse.ArgumentParser):
    """No abbreviations (`--ch` is not `--check`), and examples kept as written in --help."""

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def _compile_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mlinfra-compile",
        description="Compile ML infrastructure plans into Slurm, torchrun, DeepSpeed, vLLM, Triton and Kubernetes configs.",
        epilog=f"{COMPILE_EXAMPLES}\n\n{EXIT_CODES_HELP}",
    )
    parser.add_argument("plans", nargs="+", type=Path, help="plan YAML files, folders of them, or - for standard input")
    parser.add_argument("-o", "--out", type=Path, default=Path("out"), help="output directory (default: out/)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when out/ is stale")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), json (schemas/cli-output.schema.json) or github (workflow annotations)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    parser.add_argument(
        "--stdin-name",
        default="stdin.yaml",
        metavar="NAME",
        help="the file name a plan read from - stands for (headers, messages)",
    )
    parser.add_argument("--version", action="version", version=f"mlinfra-compile {__version__}")
    return parser


def _print_error(message: str) -> None:
    print(message, file=sys.stderr)


def terminal_text(text: str) -> str:
    """Text for a terminal: line by line, anything that could restyle it (escape sequences, bidi overrides) shown
    escaped. Plans and catalogs refuse such characters already; this keeps the promise if one gets through."""
    from .diagnostics import printable

    return "\n".join(printable(line) for line in text.split("\n"))


def _utf8_streams() -> None:
    """Output is UTF-8 whatever the locale (generated files are UTF-8, so are their diffs): under LANG=C or a
    Latin-1 locale, '→' or a non-ASCII plan string must not crash `explain`, `diff` or `--check`."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")


def _plan_files(arguments: list[Path]) -> tuple[list[Path], bool]:
    """The plan files named, a folder standing for its *.yaml and *.yml; True when a folder was given (then the
    plans are the whole set, and a plan folder in out/ that none of them owns is an orphan)."""
    files, whole = [], False
    for argument in arguments:
        if str(argument) != "-" and argument.is_dir():
            files += sorted(p for p in argument.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
            whole = True
        else:
            files.append(argument)
    return files, whole


def _read_stdin_plan(cwd: Path) -> Path:
    """A plan from standard input, written to a private file in the working directory (a catalog it names is
    found relative to it, as for a plan file there); the caller removes it."""
    from .source import MAX_PLAN_BYTES

    data = sys.stdin.buffer.read(MAX_PLAN_BYTES + 1)
    handle, name = tempfile.mkstemp(prefix=".mlinfra-stdin-", suffix=".yaml", dir=cwd)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return Path(name)


def _problems_of(exc, path: str):
    from .cli_report import Problem

    return [
        Problem(d.file or path, d.message, d.code, d.line, d.column, d.path, text=d.render(exc.source_lines))
        for d in exc.diagnostics
    ]


def run_compile(argv: list[str]) -> int:
    args = _compile_parser().parse_args(argv)  # before the imports: --help, --version and usage errors need none
    collecting = gc.isenabled()
    gc.disable()  # what the imports build (modules, pydantic's validators) lives as long as the process ...
    try:
        from . import check, writer  # noqa: F401  (imported with the collector off, used below)
        from .cli_report import Problem, RunReport, emit
        from .diagnostics import InfeasiblePlan, PlanInputError
        from .pipeline import compile_plan, one_run
    finally:
        gc.freeze()  # ... so no collection, during the run or at exit, needs to look at it again
        if collecting:
            gc.enable()

    from .targets.base import environment
    from .template_cache import attach_template_cache, user_cache_dir

    attach_template_cache(environment(), user_cache_dir())

    report = RunReport("check" if args.check else "compile")
    plan_files, whole_folder = _plan_files(args.plans)
    for folder in (
        a for a in args.plans if str(a) != "-" and a.is_dir() and not any(p.parent == a for p in plan_files)
    ):
        report.problems.append(Problem(str(folder), "no plan files (*.yaml, *.yml) in this folder", "no-plans"))
        report.exit_code = EXIT_INVALID
    rendered, sources = [], []
    with one_run() as searches:
        for path in plan_files:
            stdin_copy = _read_stdin_plan(Path.cwd()) if str(path) == "-" else None
            shown = args.stdin_name if stdin_copy else str(path)
            try:
                rendered.append(
                    compile_plan(stdin_copy or path, display_name=shown if stdin_copy else None, searches=searches)
                )
                sources.append(shown)
            except PlanInputError as exc:
                report.problems += _problems_of(exc, shown)
                report.exit_code = max(report.exit_code, EXIT_INVALID)
            except InfeasiblePlan as exc:
                report.problems.append(Problem(shown, f"infeasible: {exc}", "infeasible"))
                report.exit_code = (
                    max(report.exit_code, EXIT_INFEASIBLE) if report.exit_code != EXIT_INVALID else EXIT_INVALID
                )
            finally:
                if stdin_copy:
                    stdin_copy.unlink(missing_ok=True)
    names = [r.name for r in rendered]
    for name in sorted({n for n in names if names.count(n) > 1}):
        files = [src for src, r in zip(sources, rendered) if r.name == name]
        report.problems.append(
            Problem(
                files[-1],
                f"two plans are named '{name}' ({', '.join(files)}); plan names must be unique in one run",
                "duplicate-plan-name",
                field="name",
            )
        )
        report.exit_code = EXIT_INVALID
    if not report.exit_code:  # nothing is written when any plan fails
        _write_or_check(args, rendered, sources, whole_folder, report)
    emit(report, args.format, args.quiet)
    return report.exit_code


def _write_or_check(args, rendered, sources, whole_folder: bool, report) -> None:
    from .check import describe, orphan_folders, stale_files
    from .cli_report import Problem
    from .plan_lock import PlanLocked
    from .writer import UnsafeOutput, write_plans

    plan_args = [shlex.quote(str(a)) for a in args.plans]
    try:
        if args.check:
            stale = stale_files(args.out, rendered) + (orphan_folders(args.out, rendered) if whole_folder else [])
            for item in stale:
                report.problems.append(
                    Problem(
                        str(args.out / item.path),
                        describe(item, args.out, plan_args),
                        f"stale-{item.reason}",
                        diff=item.diff,
                    )
                )
            if stale:
                report.exit_code = EXIT_STALE
                report.summary = f"{len(stale)} generated file(s) are stale; run: mlinfra-compile {' '.join(plan_args)} -o {shlex.quote(str(args.out))}"
        else:
            write_plans(args.out, rendered)
    except (UnsafeOutput, PlanLocked) as exc:
        report.problems.append(Problem("", str(exc), exc.code))  # the message names the path
        report.exit_code = EXIT_INVALID
    except OSError as exc:  # the environment, not the plan: a full disk, a read-only folder, a file in the way
        report.problems.append(Problem(str(exc.filename or args.out), str(exc.strerror or exc), "os-error"))
        report.exit_code = EXIT_INVALID
    if not report.exit_code:
        status = "checked" if args.check else "written"
        report.plans = [
            {"file": src, "name": r.name, "status": status, "files": len(r.files), "out": str(args.out / r.name)}
            for src, r in zip(sources, rendered)
        ]


def run_schema(argv: list[str]) -> int:
    from .schema import plan_schema, resolved_schema

    parser = _Parser(
        prog="mlinfra-compile schema",
        description="Print the plan JSON Schema.",
        epilog="examples:\n  mlinfra-compile schema > schemas/plan.schema.json\n  mlinfra-compile schema --resolved   # the schema of out/<plan>/plan.json",
    )
    parser.add_argument("--resolved", action="store_true", help="print the schema of out/<plan>/plan.json instead")
    args = parser.parse_args(argv)
    schema = resolved_schema() if args.resolved else plan_schema()
    sys.stdout.write(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    return EXIT_OK


def run_explain(argv: list[str]) -> int:
    from .explain import explain

    parser = _Parser(
        prog="mlinfra-compile explain",
        description="Print the sizing and deployment decisions and their reasons.",
        epilog=f"example:\n  mlinfra-compile explain examples/llama3-8b-pretrain.yaml\n\n{EXIT_CODES_HELP}",
    )
    parser.add_argument("plan", type=Path)
    args = parser.parse_args(argv)
    plan, status = _resolved(args.plan)
    if plan is not None:
        sys.stdout.write(terminal_text(explain(plan)))
    return status


def _resolved(path: Path, probe: bool = False, probe_gpus: int | None = None, neighbours: bool = True):
    """(the resolved plan, EXIT_OK), or (None, the exit code) after printing why; `probe` decides the probe section."""
    from .deployment.probe import ProbeError
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .pipeline import resolve

    try:
        return resolve(path, probe=probe, probe_gpus=probe_gpus, probe_neighbours=neighbours), EXIT_OK
    except ProbeError as exc:
        _print_error(terminal_text(f"{path}: error: {exc}  [no-probe]"))
        return None, EXIT_INVALID
    except PlanInputError as exc:
        _print_error(exc.render())
        return None, EXIT_INVALID
    except InfeasiblePlan as exc:
        _print_error(terminal_text(f"{path}: error: infeasible: {exc}  [infeasible]"))
        return None, EXIT_INFEASIBLE


def _os_error(exc: OSError, fallback: Path) -> int:
    """An environment error: one line naming the path, exit 2."""
    _print_error(terminal_text(f"{exc.filename or fallback}: error: {exc.strerror or exc}  [os-error]"))
    return EXIT_INVALID


def run_probe(argv: list[str]) -> int:
    from .plan_lock import PlanLocked
    from .probe import probe_files
    from .writer import UnsafeOutput, manifest_hashes, write_plans

    parser = _Parser(
        prog="mlinfra-compile probe",
        description="Write a measurement job for a plan (out/<plan>-probe/, docs/probe.md): training, the plan's own "
        "job reduced to one node (job*/: its launcher and framework configuration running probe_train.py), then the "
        "node's GEMM, HBM and collective rates (probe.py; a second node for the collectives when the plan spans "
        "nodes); vLLM serving, the plan's own engine measured by `vllm bench serve` (probe_serve.py).",
        epilog="example:\n  mlinfra-compile probe plans/llama3-8b-pretrain.yaml -o out/\n"
        "  cd out/llama3-8b-pretrain-probe && sbatch probe.sbatch\n"
        "  mlinfra-compile calibrate probe-results.json -o plans/site-calibration.yaml",
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
    args = parser.parse_args(argv)
    plan, status = _resolved(args.plan, probe=True, probe_gpus=args.gpus, neighbours=not args.chosen_only)
    if plan is None:
        return status
    folder = args.out / plan.probe.name
    if folder.exists() and "probe.py" not in manifest_hashes(folder):
        _print_error(
            terminal_text(
                f"{folder}: error: exists and is not a probe folder (another plan's output, or not written by "
                "mlinfra-compile); remove it or choose another -o  [output-conflict]"
            )
        )
        return EXIT_INVALID
    try:
        rendered = probe_files(plan)
        write_plans(args.out, [rendered])
    except (UnsafeOutput, PlanLocked) as exc:
        _print_error(terminal_text(f"error: {exc}  [{exc.code}]"))
        return EXIT_INVALID
    except OSError as exc:
        return _os_error(exc, args.out)
    print(f"{rendered.name}: {len(rendered.files)} files in {args.out / rendered.name}")
    return EXIT_OK


CALIBRATION_MARK = "# Written by mlinfra-compile calibrate"


def run_calibrate(argv: list[str]) -> int:
    from .probe import ROUND_TRIP_TOLERANCE, ProbeError, checked_site_file, load_results, results_warnings

    parser = _Parser(
        prog="mlinfra-compile calibrate",
        description="Turn probe results into a site calibration file (name it in a plan as cluster.calibration).",
        epilog="example:\n  mlinfra-compile calibrate probe-results.json -o plans/site-calibration.yaml --site cluster-a",
    )
    parser.add_argument("results", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--site", default="site", help="the site's name (letters, digits, . _ -)")
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results)
        text, (checked, notes) = checked_site_file(results, args.site)
        _write_own_file(args.out, text)
    except ProbeError as exc:
        _print_error(one_line(f"{args.results}: error: {exc}  [invalid-results]"))
        return EXIT_INVALID
    except OSError as exc:
        return _os_error(exc, args.out)
    for warning in results_warnings(results):
        _print_error(one_line(f"{args.results}: warning: {warning}  [probe-environment]"))
    for note in notes:
        _print_error(one_line(f"{args.results}: warning: {note}  [calibration-infeasible]"))
    for name, predicted, measured in checked:
        off = predicted / measured - 1
        line = f"{name}: measured {measured:.4g} s, calibrated prediction {predicted:.4g} s ({off:+.1%})"
        print(one_line(line))
        if abs(off) > ROUND_TRIP_TOLERANCE:
            _print_error(
                one_line(
                    f"{args.results}: warning: {name}: the calibrated prediction is {off:+.1%} off its "
                    f"measurement (one share fits every point; more than {ROUND_TRIP_TOLERANCE:.0%} means the step "
                    "model does not scale as this site does)  [calibration-residual]"
                )
            )
    print(f"wrote {args.out}")
    return EXIT_OK


def one_line(text: str) -> str:
    """Text from probe results on one terminal line: line breaks and control characters escaped, so no line of it
    can start a CI workflow command (`::set-output`, `::add-mask::`)."""
    from .diagnostics import printable

    return printable(text)  # every control character, line breaks included, shown escaped


def _write_own_file(path: Path, text: str) -> None:
    """Atomically (a private temporary beside it, then rename); a file there that we did not write is refused."""
    if path.exists():
        with open(path, encoding="utf-8", errors="replace") as handle:
            if not handle.readline().startswith(CALIBRATION_MARK):
                raise OSError(
                    0,
                    "exists and was not written by mlinfra-compile calibrate; remove it or choose another -o",
                    str(path),
                )
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def run_diff(argv: list[str]) -> int:
    from .diffing import run_diff as diff_main

    return diff_main(argv)


def _looks_like_a_command(word: str) -> bool:
    """A bare word that is no file and no YAML name, close to a command name: a mistyped command (`explian`),
    not a plan path to report as unreadable."""
    import difflib

    if word.startswith("-") or word.endswith((".yaml", ".yml")) or "/" in word or Path(word).exists():
        return False
    return bool(difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6))


def main(argv: list[str] | None = None) -> int:
    argv_given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    handlers = {
        "schema": run_schema,
        "explain": run_explain,
        "diff": run_diff,
        "probe": run_probe,
        "calibrate": run_calibrate,
    }
    # A run allocates many objects and frees nearly all of them by reference counting, so the cycle collector's
    # default pace (a collection every 700 net allocations) is mostly wasted work; with the imports frozen (above)
    # it took 45-50 ms of a one-plan run and 0.25 s of --check over 100 plans, now under 1 ms in both, for about 5 MB
    # more memory over the 100. mypy's build() sets the same threshold.
    thresholds = gc.get_threshold()
    gc.set_threshold(200_000, 30, 30)
    _utf8_streams()
    try:
        if argv and argv[0] in handlers:
            return handlers[argv[0]](argv[1:])
        if argv and _looks_like_a_command(argv[0]):
            from .diagnostics import did_you_mean

            _print_error(
                f"mlinfra-compile: error: unknown command '{terminal_text(argv[0])}'{did_you_mean(argv[0], handlers)}; "
                f"commands: {', '.join(handlers)}, or plan files to compile  [unknown-command]"
            )
            return EXIT_INVALID
        return run_compile(argv)
    except SystemExit as exc:  # argparse: usage errors are invalid input
        return EXIT_INVALID if exc.code not in (0, None) else EXIT_OK
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `mlinfra-compile diff ... | head`: the reader left; not an error of ours (128 + SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not raise again
        return 141
    except Exception:
        _print_error("internal error (a bug in mlinfra-compile; please report it with this trace):")
        traceback.print_exc()
        return EXIT_INTERNAL
    finally:
        gc.set_threshold(*thresholds)
        if argv_given:  # called in-process (tests, scripts): leave the collector as it was; a program just exits
            gc.unfreeze()
