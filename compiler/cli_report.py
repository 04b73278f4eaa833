"""What a compile or --check found, and how it is printed: text for people, JSON for programs
(schemas/cli-output.schema.json), GitHub workflow commands for CI annotations."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field

from .diagnostics import printable

FORMATS = ("text", "json", "github")
OUTPUT_VERSION = 1


@dataclass(frozen=True)
class Problem:
    """One located message: a diagnostic about a plan, an infeasible plan, an environment error, a stale file."""

    file: str
    message: str
    code: str
    line: int = 0
    column: int = 0
    field: str = ""
    severity: str = "error"
    text: str = ""  # the text form, when it is richer than file:line:col: message (source line and caret)
    diff: str = ""  # stale files: the unified diff


@dataclass
class RunReport:
    """What one command found. `result` is what a command reports beyond plans and problems (explain's decisions,
    diff's changes, the file init wrote), `text` how the text format prints it."""

    command: str  # compile | check | explain | diff | schema | probe | calibrate | init | completion
    plans: list[dict] = field(default_factory=list)  # {file, name, status, files, out}
    problems: list[Problem] = field(default_factory=list)
    exit_code: int = 0
    summary: str = ""
    result: dict | None = None
    text: str = ""

    def fail(self, code: int) -> None:
        """Raise the exit code to `code`; invalid input (2) outranks infeasible (4)."""
        if self.exit_code != 2:
            self.exit_code = code if code == 2 else max(self.exit_code, code)


def _github_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _github_property(text: str) -> str:
    return _github_data(text).replace(":", "%3A").replace(",", "%2C")


def _github(problem: Problem) -> str:
    """`::error file=F,line=L,col=C,title=T::message` (docs.github.com, "Workflow commands for GitHub Actions")."""
    props = [f"file={_github_property(problem.file)}"]
    if problem.line:
        props += [f"line={problem.line}", f"col={problem.column}"]
    props.append(f"title={_github_property(problem.code)}")
    message = f"{problem.field}: {problem.message}" if problem.field else problem.message
    return f"::{problem.severity} {','.join(props)}::{_github_data(message)}"


def _text(problem: Problem) -> str:
    if problem.text:
        return problem.text
    where = (
        f"{problem.file}:{problem.line}:{problem.column}: "
        if problem.line
        else f"{problem.file}: "
        if problem.file
        else ""
    )
    prefix = f"{problem.field}: " if problem.field else ""
    return printable(f"{where}{problem.severity}: {prefix}{problem.message}  [{problem.code}]")


def emit(report: RunReport, fmt: str, quiet: bool) -> None:
    if fmt == "json":
        data = {
            "version": OUTPUT_VERSION,
            "command": report.command,
            "exit_code": report.exit_code,
            "plans": report.plans,
            "problems": [{k: v for k, v in asdict(p).items() if k != "text"} for p in report.problems],
        }
        if report.result is not None:
            data["result"] = report.result
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return
    if fmt == "github":
        if report.text:
            sys.stdout.write(report.text)
        for problem in report.problems:
            sys.stdout.write(_github(problem) + "\n")
        if report.summary and not quiet:
            sys.stdout.write(f"::notice::{_github_data(report.summary)}\n")
        return
    if report.text:  # the document a command exists to print (explain, diff, schema): -q hides status lines only
        sys.stdout.write(report.text)
    for problem in report.problems:
        if problem.diff:
            sys.stdout.write(printable_diff(problem.diff))
    for problem in report.problems:
        print(_text(problem), file=sys.stderr)
    if report.summary and (report.exit_code or not quiet):
        print(report.summary, file=sys.stderr if report.exit_code else sys.stdout)
    if not quiet and not report.exit_code and report.command in ("compile", "probe"):
        for plan in report.plans:
            print(f"{plan['name']}: {plan['files']} files in {plan['out']}")


def printable_diff(diff: str) -> str:
    return "\n".join(printable(line) for line in diff.split("\n"))
