"""`mlinfra-compile completion bash|zsh`: a completion script built from the commands' own parsers, so it names
every command and option there is (zsh runs the bash function through bashcompinit)."""

from __future__ import annotations

import argparse

from .cli_base import SUBCOMMANDS, Parser, add_output_options
from .cli_report import FORMATS, RunReport, emit

SHELLS = ("bash", "zsh")


def completion_parser() -> Parser:
    parser = Parser(
        prog="mlinfra-compile completion",
        description="Print a shell completion script.",
        epilog='examples:\n  eval "$(mlinfra-compile completion bash)"   # in ~/.bashrc\n'
        '  eval "$(mlinfra-compile completion zsh)"    # in ~/.zshrc',
    )
    parser.add_argument("shell", choices=SHELLS)
    return add_output_options(parser)


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser; "" is the bare form (compile)."""
    from .cli_base import compile_parser
    from .cli_commands import calibrate_parser, explain_parser, probe_parser, schema_parser
    from .diffing import diff_parser
    from .init_plan import init_parser

    return {
        "": compile_parser(),
        "init": init_parser(),
        "compile": compile_parser("compile"),
        "check": compile_parser("check"),
        "explain": explain_parser(),
        "diff": diff_parser(),
        "schema": schema_parser(),
        "probe": probe_parser(),
        "calibrate": calibrate_parser(),
        "completion": completion_parser(),
    }


def _options(parser: argparse.ArgumentParser) -> str:
    return " ".join(
        sorted(
            o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings if o.startswith("--")
        )
    )


def bash_script() -> str:
    parsers = command_parsers()
    cases = "".join(f"    {name}) opts='{_options(parser)}' ;;\n" for name, parser in parsers.items() if name)
    return f"""# mlinfra-compile completion (bash): eval "$(mlinfra-compile completion bash)"
_mlinfra_compile() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} opts
  case "$prev" in
    --format) COMPREPLY=($(compgen -W '{" ".join(FORMATS)}' -- "$cur")); return ;;
    completion) COMPREPLY=($(compgen -W '{" ".join(SHELLS)}' -- "$cur")); return ;;
  esac
  case "${{COMP_WORDS[1]}}" in
{cases}    *) opts='{_options(parsers[""])}' ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W '{" ".join(SUBCOMMANDS)}' -- "$cur") $(compgen -f -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _mlinfra_compile mlinfra-compile
"""


def run_completion(argv: list[str]) -> int:
    args = completion_parser().parse_args(argv)
    script = bash_script()
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script.replace("(bash)", "(zsh)").replace(
            "completion bash", "completion zsh"
        )
    report = RunReport("completion", result={"shell": args.shell, "script": script}, text=script)
    emit(report, args.format, args.quiet)
    return report.exit_code
