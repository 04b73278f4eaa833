"""The command line: the only place that prints or exits.

Exit codes: 0 compiled (or up to date under --check); 1 stale under --check, or a valid plan that is
infeasible; 2 invalid input, or an out/ that cannot be written (one line naming the path); 3 an internal
error (a bug: the only case that shows a traceback).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import traceback
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_STALE_OR_INFEASIBLE, EXIT_INVALID, EXIT_INTERNAL = 0, 1, 2, 3
SUBCOMMANDS = ("schema", "explain", "diff")


def _compile_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlinfra-compile",
        description="Compile ML infrastructure plans into Slurm, torchrun, DeepSpeed, vLLM, Triton and Kubernetes configs.",
        epilog="Other commands: 'mlinfra-compile schema' prints the plan JSON Schema; "
        "'mlinfra-compile explain PLAN' prints the reasoning; 'mlinfra-compile diff OLD NEW' compares two plans.",
    )
    parser.add_argument("plans", nargs="+", type=Path, help="plan YAML files")
    parser.add_argument("-o", "--out", type=Path, default=Path("out"), help="output directory (default: out/)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when out/ is stale")
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


def run_compile(argv: list[str]) -> int:
    args = _compile_parser().parse_args(argv)  # before the imports: --help, --version and usage errors need none
    collecting = gc.isenabled()
    gc.disable()  # what the imports build (modules, pydantic's validators) lives as long as the process ...
    try:
        from .diagnostics import InfeasiblePlan, PlanInputError
        from .pipeline import compile_plan, one_run
        from .plan_lock import PlanLocked
        from .writer import UnsafeOutput, check_plans, write_plans
    finally:
        gc.freeze()  # ... so no collection, during the run or at exit, needs to look at it again
        if collecting:
            gc.enable()

    from .targets.base import environment
    from .template_cache import attach_template_cache, user_cache_dir

    attach_template_cache(environment(), user_cache_dir())

    rendered, status = [], EXIT_OK
    with one_run() as searches:
        for path in args.plans:
            try:
                rendered.append(compile_plan(path, searches=searches))
            except PlanInputError as exc:
                _print_error(exc.render())
                status = max(status, EXIT_INVALID)
            except InfeasiblePlan as exc:
                _print_error(f"{path}: infeasible: {exc}")
                status = max(status, EXIT_STALE_OR_INFEASIBLE)
    names = [r.name for r in rendered]
    for name in sorted({n for n in names if names.count(n) > 1}):
        _print_error(f"error: two plans are named '{name}'; plan names must be unique in one run  [duplicate-plan-name]")
        status = EXIT_INVALID
    if status:
        return status  # nothing is written when any plan fails
    try:
        if args.check:
            diffs = check_plans(args.out, rendered)
            sys.stdout.write("".join(diffs))
            if diffs:
                _print_error(f"{len(diffs)} generated file(s) are stale; run: mlinfra-compile {' '.join(map(str, args.plans))} -o {args.out}")
                return EXIT_STALE_OR_INFEASIBLE
            return EXIT_OK
        written = write_plans(args.out, rendered)
    except (UnsafeOutput, PlanLocked) as exc:
        _print_error(f"error: {exc}  [{exc.code}]")
        return EXIT_INVALID
    except OSError as exc:  # the environment, not the plan: a full disk, a read-only folder, a file in the way
        _print_error(f"error: {exc.filename or args.out}: {exc.strerror or exc}  [os-error]")
        return EXIT_INVALID
    for plan in rendered:
        print(f"{plan.name}: {len(plan.files)} files in {args.out / plan.name}")
    return EXIT_OK if written is not None else EXIT_INTERNAL


def run_schema(argv: list[str]) -> int:
    from .schema import plan_schema, resolved_schema

    parser = argparse.ArgumentParser(prog="mlinfra-compile schema", description="Print the plan JSON Schema.")
    parser.add_argument("--resolved", action="store_true", help="print the schema of out/<plan>/plan.json instead")
    args = parser.parse_args(argv)
    schema = resolved_schema() if args.resolved else plan_schema()
    sys.stdout.write(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    return EXIT_OK


def run_explain(argv: list[str]) -> int:
    from .diagnostics import InfeasiblePlan, PlanInputError
    from .explain import explain
    from .pipeline import resolve

    parser = argparse.ArgumentParser(prog="mlinfra-compile explain", description="Print the sizing and deployment decisions and their reasons.")
    parser.add_argument("plan", type=Path)
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(terminal_text(explain(resolve(args.plan))))
    except PlanInputError as exc:
        _print_error(exc.render())
        return EXIT_INVALID
    except InfeasiblePlan as exc:
        _print_error(f"{args.plan}: infeasible: {exc}")
        return EXIT_STALE_OR_INFEASIBLE
    return EXIT_OK


def run_diff(argv: list[str]) -> int:
    from .diffing import run_diff as diff_main

    return diff_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv_given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    handlers = {"schema": run_schema, "explain": run_explain, "diff": run_diff}
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
        return run_compile(argv)
    except SystemExit as exc:  # argparse: usage errors are invalid input
        return EXIT_INVALID if exc.code not in (0, None) else EXIT_OK
    except KeyboardInterrupt:
        return 130
    except Exception:
        _print_error("internal error (a bug in mlinfra-compile; please report it with this trace):")
        traceback.print_exc()
        return EXIT_INTERNAL
    finally:
        gc.set_threshold(*thresholds)
        if argv_given:  # called in-process (tests, scripts): leave the collector as it was; a program just exits
            gc.unfreeze()
