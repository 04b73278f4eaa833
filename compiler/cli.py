"""The command line: the only place that prints or exits.

Exit codes: 0 done (up to date under `check`, no change under `diff --exit-code`); 1 stale under `check`, changed
under `diff --exit-code`; 2 invalid input, or an environment error such as an out/ that cannot be written (one
located line); 3 an internal error (a bug: the only case that shows a traceback); 4 a valid plan that is infeasible
(does not fit, misses its deadline or budget).
"""

from __future__ import annotations

import gc
import os
import shlex
import sys
import tempfile
import traceback
from pathlib import Path

from .cli_base import (
    EXIT_INFEASIBLE,
    EXIT_INTERNAL,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_STALE,
    SUBCOMMANDS,
    compile_parser,
    problems_of,
    terminal_text,
)


def _print_error(message: str) -> None:
    print(message, file=sys.stderr)


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


def _read_stdin_plan() -> Path:
    """A plan from standard input, written to a private file in the temporary folder (the working folder may be
    read-only; a catalog it names is still found relative to the working folder); the caller removes it."""
    from .source import MAX_PLAN_BYTES

    data = sys.stdin.buffer.read(MAX_PLAN_BYTES + 1)
    handle, name = tempfile.mkstemp(prefix=".mlinfra-stdin-", suffix=".yaml")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return Path(name)


def _frozen_imports() -> None:
    """Import what a run needs with the collector off, then freeze it: what the imports build (modules, pydantic's
    validators) lives as long as the process, so no collection needs to look at it again."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from . import check, pipeline, writer  # noqa: F401
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def run_compile(argv: list[str], verb: str = "") -> int:
    args = compile_parser(verb).parse_args(argv)  # before the imports: --help, --version and usage errors need none
    _frozen_imports()
    from .cli_report import Problem, RunReport, emit
    from .targets.base import environment
    from .template_cache import attach_template_cache, user_cache_dir

    attach_template_cache(environment(), user_cache_dir())
    report = RunReport("check" if args.check else "compile")
    plan_files, whole_folder = _plan_files(args.plans)
    for folder in (
        a for a in args.plans if str(a) != "-" and a.is_dir() and not any(p.parent == a for p in plan_files)
    ):
        report.problems.append(Problem(str(folder), "no plan files (*.yaml, *.yml) in this folder", "no-plans"))
        report.fail(EXIT_INVALID)
    rendered, sources, unchanged = _compile_all(args, plan_files, report)
    _refuse_duplicate_names([*zip(sources, (r.name for r in rendered)), *((u.file, u.name) for u in unchanged)], report)
    if not report.exit_code:  # nothing is written when any plan fails
        _write_or_check(args, rendered, sources, unchanged, whole_folder, report)
    emit(report, args.format, args.quiet)
    return report.exit_code


def _compile_all(args, plan_files: list[Path], report):
    """Each plan compiled (rendered, as shown), or under `check`, when its inputs are unchanged, checked by hash."""
    from .cli_report import Problem
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .fast_check import recorded_inputs, unchanged
    from .pipeline import compile_plan, one_run

    index = recorded_inputs(args.out) if args.check else {}
    rendered, sources, same = [], [], []
    with one_run() as searches:
        for path in plan_files:
            shown = args.stdin_name if str(path) == "-" else str(path)
            try:
                stdin_copy = _read_stdin_plan() if str(path) == "-" else None
            except OSError as exc:
                report.problems.append(
                    Problem(shown, f"cannot keep the plan read from standard input: {exc}", "os-error")
                )
                report.fail(EXIT_INVALID)
                continue
            try:
                found = None if stdin_copy else unchanged(path, shown, args.out, index)
                if found is not None:
                    same.append(found)
                    continue
                rendered.append(
                    compile_plan(
                        stdin_copy or path,
                        display_name=shown if stdin_copy else None,
                        searches=searches,
                        base_dir=Path(".") if stdin_copy else None,  # relative to the working folder
                    )
                )
                sources.append(shown)
            except PlanInputError as exc:
                report.problems += problems_of(exc, shown)
                report.fail(EXIT_INVALID)
            except InfeasiblePlan as exc:
                report.problems.append(Problem(shown, f"infeasible: {exc}", "infeasible"))
                report.fail(EXIT_INFEASIBLE)
            finally:
                if stdin_copy:
                    stdin_copy.unlink(missing_ok=True)
    return rendered, sources, same


def _refuse_duplicate_names(named: list[tuple[str, str]], report) -> None:
    """(plan file, plan name) pairs: two plans of one run may not share a name (they would share a folder)."""
    from .cli_report import Problem

    names = [name for _, name in named]
    for name in sorted({n for n in names if names.count(n) > 1}):
        files = [src for src, n in named if n == name]
        report.problems.append(
            Problem(
                files[-1],
                f"two plans are named '{name}' ({', '.join(files)}); plan names must be unique in one run",
                "duplicate-plan-name",
                field="name",
            )
        )
        report.fail(EXIT_INVALID)


def fix_command(args, whole_folder: bool, orphans: bool) -> str:
    """The one command that brings out/ up to date (removing orphan folders when there are any)."""
    plan_args = " ".join(shlex.quote(str(a)) for a in args.plans)
    prune = " --prune" if orphans and whole_folder else ""
    return f"mlinfra-compile {plan_args} -o {shlex.quote(str(args.out))}{prune}"


def _write_or_check(args, rendered, sources, unchanged, whole_folder: bool, report) -> None:
    from .check import describe, orphan_folders, prune_orphans, stale_files
    from .cli_report import Problem
    from .plan_lock import PlanLocked
    from .writer import UnsafeOutput, write_plans

    owned = [r.name for r in rendered] + [u.name for u in unchanged]
    try:
        if args.check:
            orphans = orphan_folders(args.out, owned) if whole_folder else []
            stale = stale_files(args.out, rendered) + orphans
            fix = fix_command(args, whole_folder, bool(orphans))
            for item in stale:
                report.problems.append(
                    Problem(
                        str(args.out / item.path), describe(item, args.out, fix), f"stale-{item.reason}", diff=item.diff
                    )
                )
            if stale:
                report.exit_code = EXIT_STALE
                report.summary = f"{len(stale)} generated file(s) are stale; run: {fix}"
        else:
            write_plans(args.out, rendered)
            if args.prune and whole_folder:
                report.summary = prune_orphans(args.out, owned)
    except (UnsafeOutput, PlanLocked) as exc:
        report.problems.append(Problem("", str(exc), exc.code))  # the message names the path
        report.fail(EXIT_INVALID)
    except OSError as exc:  # the environment, not the plan: a full disk, a read-only folder, a file in the way
        report.problems.append(Problem(str(exc.filename or args.out), str(exc.strerror or exc), "os-error"))
        report.fail(EXIT_INVALID)
    if not report.exit_code:
        status = "checked" if args.check else "written"
        report.plans = [
            {"file": src, "name": r.name, "status": status, "files": len(r.files), "out": str(args.out / r.name)}
            for src, r in zip(sources, rendered)
        ] + [
            {"file": u.file, "name": u.name, "status": "checked", "files": u.files, "out": str(args.out / u.name)}
            for u in unchanged
        ]
        if args.check:
            count = len(report.plans)
            report.summary = f"{count} plan{'s' if count != 1 else ''} up to date in {args.out}"


def _looks_like_a_command(word: str) -> bool:
    """A bare word that is no file and no YAML name, close to a command name: a mistyped command (`explian`),
    not a plan path to report as unreadable."""
    import difflib

    if word.startswith("-") or word.endswith((".yaml", ".yml")) or "/" in word or Path(word).exists():
        return False
    return bool(difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6))


def _handlers() -> dict:
    from . import cli_commands, completion, diffing, init_plan

    return {
        "init": init_plan.run_init,
        "compile": lambda argv: run_compile(argv, "compile"),
        "check": lambda argv: run_compile(argv, "check"),
        "explain": cli_commands.run_explain,
        "diff": diffing.run_diff,
        "schema": cli_commands.run_schema,
        "probe": cli_commands.run_probe,
        "calibrate": cli_commands.run_calibrate,
        "completion": completion.run_completion,
    }


def main(argv: list[str] | None = None) -> int:
    argv_given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    # A run allocates many objects and frees nearly all of them by reference counting, so the cycle collector's
    # default pace (a collection every 700 net allocations) is mostly wasted work; with the imports frozen (above)
    # it took 45-50 ms of a one-plan run and 0.25 s of --check over 100 plans, now under 1 ms in both, for about 5 MB
    # more memory over the 100. mypy's build() sets the same threshold.
    thresholds = gc.get_threshold()
    gc.set_threshold(200_000, 30, 30)
    _utf8_streams()
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return _handlers()[argv[0]](argv[1:])
        if argv and _looks_like_a_command(argv[0]):
            from .diagnostics import did_you_mean

            _print_error(
                f"mlinfra-compile: error: unknown command '{terminal_text(argv[0])}'{did_you_mean(argv[0], SUBCOMMANDS)}; "
                f"commands: {', '.join(SUBCOMMANDS)}, or plan files to compile  [unknown-command]"
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
