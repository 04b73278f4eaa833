"""`mlinfra-compile init`: a starter plan with a comment on every field, or one of the shipped examples."""

from __future__ import annotations

import re
from pathlib import Path

from .cli_base import EXIT_INVALID, Parser, add_output_options
from .cli_report import Problem, RunReport, emit
from .resources import data_dir

STARTER = Path(__file__).resolve().parent / "starter" / "plan.yaml"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME_LINE = re.compile(r"^name: *[^ #\n]+", re.MULTILINE)


def example_names() -> list[str]:
    """The plans in examples/ (shipped in the wheel as mlinfra_compile/examples)."""
    return sorted(p.name[: -len(".yaml")] for p in data_dir("examples").iterdir() if p.name.endswith(".yaml"))


def init_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile init",
        description="Write an annotated starter plan, or one of the shipped examples.",
        epilog="examples:\n  mlinfra-compile init plans/my-plan.yaml\n"
        "  mlinfra-compile init plans/chat.yaml --example llama3-8b-chat\n  mlinfra-compile init --list",
    )
    parser.add_argument(
        "plan", type=Path, nargs="?", default=Path("plan.yaml"), help="where to write (default: plan.yaml)"
    )
    parser.add_argument("--example", metavar="NAME", help="start from examples/NAME.yaml (--list names them)")
    parser.add_argument("--list", action="store_true", help="list the examples and exit")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    return add_output_options(parser)


def plan_text(example: str | None, plan: Path) -> str:
    """The starter (or the example), named after the file when its stem is a valid plan name."""
    source = data_dir("examples").joinpath(f"{example}.yaml") if example else STARTER
    text = source.read_text(encoding="utf-8")
    if _DNS_LABEL.match(plan.stem):
        text = _NAME_LINE.sub(f"name: {plan.stem}", text, count=1)
    return text


def run_init(argv: list[str]) -> int:
    from .diagnostics import did_you_mean

    args = init_parser().parse_args(argv)
    report = RunReport("init")
    names = example_names()
    if args.list:
        report.result = {"examples": names}
        report.text = "".join(f"{name}\n" for name in names)
    elif args.example is not None and args.example not in names:
        hint = did_you_mean(args.example, names)
        report.problems.append(
            Problem("", f"no example '{args.example}'{hint}; examples: {', '.join(names)}", "unknown-example")
        )
        report.exit_code = EXIT_INVALID
    elif args.plan.exists() and not args.force:
        report.problems.append(Problem(str(args.plan), "exists; choose another file or add --force", "file-exists"))
        report.exit_code = EXIT_INVALID
    else:
        _write(args, report)
    emit(report, args.format, args.quiet)
    return report.exit_code


def _write(args, report: RunReport) -> None:
    try:
        args.plan.parent.mkdir(parents=True, exist_ok=True)
        args.plan.write_text(plan_text(args.example, args.plan), encoding="utf-8")
    except OSError as exc:
        report.problems.append(Problem(str(exc.filename or args.plan), str(exc.strerror or exc), "os-error"))
        report.exit_code = EXIT_INVALID
        return
    report.result = {"wrote": str(args.plan)}
    report.summary = f"wrote {args.plan}; compile it: mlinfra-compile {args.plan} -o out/"
