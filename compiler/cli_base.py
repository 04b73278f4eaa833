"""What every command shares: exit codes, the parser class, --format and -q, the compile/check parser, and how
problems are named and shown. Imported by cli.py and by each command's module, so none imports another."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import __version__
from .cli_report import FORMATS

EXIT_OK, EXIT_STALE, EXIT_INVALID, EXIT_INTERNAL, EXIT_INFEASIBLE = 0, 1, 2, 3, 4
SUBCOMMANDS = ("init", "compile", "check", "explain", "diff", "schema", "probe", "calibrate", "completion")
EXIT_CODES_HELP = """exit codes:
  0  compiled, or up to date under check
  1  stale under check (the diff and the command that fixes it are printed)
  2  invalid input or environment (every error located: file:line:col: error: field: message  [code])
  3  internal error (a bug in mlinfra-compile; the only case with a traceback)
  4  a valid plan that is infeasible (does not fit, misses its deadline or budget)"""
COMPILE_EXAMPLES = """examples:
  mlinfra-compile examples/llama3-8b-pretrain.yaml -o out/
  mlinfra-compile compile plans/ -o out/ --prune      # a whole folder; --prune removes orphan out/ folders
  mlinfra-compile check plans/ -o out/                # the same as: mlinfra-compile plans/ -o out/ --check
  cat plan.yaml | mlinfra-compile - --stdin-name plan.yaml -o out/
  mlinfra-compile check plans/ -o out/ --format github   # CI annotations

commands: init, compile, check, explain, diff, schema, probe, calibrate, completion (mlinfra-compile COMMAND --help)"""


class Parser(argparse.ArgumentParser):
    """No abbreviations (`--ch` is not `--check`), and examples kept as written in --help."""

    def __init__(self, **kwargs):
        super().__init__(allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)


def add_output_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--format and -q, the same on every command."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), json (schemas/cli-output.schema.json) or github (workflow annotations)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only problems and what was asked for")
    return parser


def compile_parser(verb: str = "") -> argparse.ArgumentParser:
    """The parser of `compile` (also the bare form, `mlinfra-compile PLAN ...`) and of `check`."""
    check = verb == "check"
    parser = Parser(
        prog=f"mlinfra-compile {verb}".strip(),
        description="Check that out/ holds what the plans compile to; write nothing."
        if check
        else "Compile ML infrastructure plans into Slurm, torchrun, DeepSpeed, vLLM, Triton and Kubernetes configs.",
        epilog=f"{COMPILE_EXAMPLES}\n\n{EXIT_CODES_HELP}",
    )
    parser.add_argument("plans", nargs="+", type=Path, help="plan YAML files, folders of them, or - for standard input")
    parser.add_argument("-o", "--out", type=Path, default=Path("out"), help="output directory (default: out/)")
    if check:
        parser.set_defaults(check=True, prune=False)
    else:
        parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when out/ is stale")
        parser.add_argument(
            "--prune",
            action="store_true",
            help="given a plans folder, also remove the out/ folders no plan owns (only folders mlinfra-compile wrote)",
        )
    add_output_options(parser)
    parser.add_argument(
        "--stdin-name",
        default="stdin.yaml",
        metavar="NAME",
        help="the file name a plan read from - stands for (headers, messages)",
    )
    parser.add_argument("--version", action="version", version=f"mlinfra-compile {__version__}")
    return parser


def terminal_text(text: str) -> str:
    """Text for a terminal: line by line, anything that could restyle it (escape sequences, bidi overrides) shown
    escaped. Plans and catalogs refuse such characters already; this keeps the promise if one gets through."""
    from .diagnostics import printable

    return "\n".join(printable(line) for line in text.split("\n"))


def problems_of(exc, path: str):
    """A PlanInputError's diagnostics as problems, each named by the file it is in."""
    from .cli_report import Problem

    return [
        Problem(d.file or path, d.message, d.code, d.line, d.column, d.path, text=d.render(exc.source_lines))
        for d in exc.diagnostics
    ]
