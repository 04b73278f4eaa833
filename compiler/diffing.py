"""`mlinfra-compile diff OLD NEW` (or `diff PLAN --against REV`): what a plan change does to the decisions,
then the changed generated files as a unified diff. Exits 0 unless the input is invalid; with --exit-code, 1 when
a decision or a file changes (git diff's convention)."""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .diagnostics import InfeasiblePlan, PlanInputError, printable
from .pipeline import one_run, render, resolve
from .plan.resolved import ResolvedPlan
from .sizing.search_cache import SearchCache
from .units import format_seconds, format_usd

# (label, getter, formatter, relative change shown as a percentage)
FIELDS: tuple[tuple[str, Any, Any, bool], ...] = (
    ("GPU type", lambda p: p.hardware and p.hardware.gpu, str, False),
    ("GPU count", lambda p: p.hardware and p.hardware.gpus, str, False),
    ("nodes", lambda p: p.hardware and p.hardware.nodes, str, False),
    ("TP", lambda p: p.parallelism.tp, str, False),
    ("PP", lambda p: p.parallelism.pp, str, False),
    ("DP", lambda p: p.parallelism.dp, str, False),
    ("ZeRO stage", lambda p: p.parallelism.zero_stage, str, False),
    ("micro-batch", lambda p: p.parallelism.micro_batch, str, False),
    ("framework", lambda p: p.parallelism.framework, str, False),
    ("step time", lambda p: p.training and p.training.step_seconds, format_seconds, True),
    ("wall time", lambda p: p.training and p.training.wall_seconds, format_seconds, True),
    ("MFU", lambda p: p.training and round(p.training.mfu, 4), lambda v: f"{100 * v:.1f}%", False),
    ("cost", lambda p: p.cost.usd_total or None, format_usd, True),
    ("cost per month", lambda p: p.cost.usd_per_month or None, format_usd, True),
    ("replicas", lambda p: p.serving and p.serving.replicas, str, False),
    ("TTFT", lambda p: p.serving and p.serving.ttft_seconds, format_seconds, True),
    ("TPOT", lambda p: p.serving and p.serving.tpot_seconds, format_seconds, True),
    ("memory per GPU", lambda p: p.memory_per_gpu_bytes.total or None, lambda v: f"{v / 2**30:.1f} GiB", True),
)


RANGED = {
    "step time": "training.step_seconds",
    "wall time": "training.wall_seconds",
    "cost": "cost.usd_total",
    "cost per month": "cost.usd_per_month",
    "TTFT": "serving.ttft_seconds",
    "TPOT": "serving.tpot_seconds",
    "memory per GPU": "memory_per_gpu_bytes.total",
}


def _spread(plan: ResolvedPlan, label: str, fmt) -> str:
    """The new figure's P10-P90, when it carries a range."""
    found = next((r for r in plan.ranges if r.quantity == RANGED.get(label)), None)
    return f" [P10–P90 {fmt(found.p10)}–{fmt(found.p90)}]" if found else ""


def decision_changes(old: ResolvedPlan, new: ResolvedPlan) -> list[dict]:
    changes = []
    for label, get, fmt, relative in FIELDS:
        a, b = get(old), get(new)
        if a == b:
            continue
        change = {
            "what": label,
            "old": a,
            "new": b,
            "text": f"{label} {fmt(a) if a is not None else '-'} → {fmt(b) if b is not None else '-'}",
        }
        if relative and a and b:
            change["relative"] = (b - a) / a
            sign = "+" if b >= a else "−"
            change["text"] += f" ({sign}{abs(change['relative']) * 100:.0f}%)"
            if label.startswith("cost"):
                change["text"] += f", {sign}{format_usd(abs(b - a))}"
        if b is not None:
            change["text"] += _spread(new, label, fmt)
        changes.append(change)
    return changes + deployment_changes(old, new)


def deployment_changes(old: ResolvedPlan, new: ResolvedPlan) -> list[dict]:
    """Deployment decisions (plan.deployment.decisions) whose choice changed, appeared or went away, by topic."""
    a = {d.topic: d.choice for d in (old.deployment.decisions if old.deployment else [])}
    b = {d.topic: d.choice for d in (new.deployment.decisions if new.deployment else [])}
    changes = []
    for topic in [*a, *(t for t in b if t not in a)]:
        if a.get(topic) != b.get(topic):
            changes.append(
                {
                    "what": topic,
                    "old": a.get(topic),
                    "new": b.get(topic),
                    "text": f"{topic} {a.get(topic) or '-'} → {b.get(topic) or '-'}",
                }
            )
    return changes


def file_diffs(old: ResolvedPlan, new: ResolvedPlan) -> str:
    """The generated files' unified diff. The old plan is rendered under the new one's file name, so headers that
    differ only by the file name (OLD vs NEW, or the revision's copy) are no change."""
    old = old.model_copy(update={"plan_file": new.plan_file})
    a = {f.path: f.text for f in render(old).files}
    b = {f.path: f.text for f in render(new).files}
    chunks = []
    for path in sorted(set(a) | set(b)):
        if a.get(path) != b.get(path):
            chunks.append(
                "".join(
                    difflib.unified_diff(
                        a.get(path, "").splitlines(keepends=True),
                        b.get(path, "").splitlines(keepends=True),
                        fromfile=f"a/{path}" if path in a else "/dev/null",
                        tofile=f"b/{path}" if path in b else "/dev/null",
                    )
                )
            )
    return "".join(chunks)


class GitError(Exception):
    """git could not give the plan at the revision: exit 2 with one line."""


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"cannot run git: {getattr(exc, 'strerror', None) or exc}") from None
    if done.returncode:
        raise GitError((done.stderr.strip().splitlines() or [f"git {args[0]} failed"])[-1])
    return done.stdout


def _commit(revision: str, cwd: Path) -> str:
    """The commit a revision names. `--end-of-options` keeps a revision such as '--output=FILE' from being read
    as an option; the result is a full hash, so nothing the user typed reaches `git show`."""
    if not revision.strip():
        raise GitError("--against: the revision is empty")
    try:
        sha = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}"], cwd).strip()
    except GitError as exc:
        raise GitError(f"--against: {revision!r} is not a commit here ({exc})") from None
    if len(sha) not in (40, 64) or not all(c in "0123456789abcdef" for c in sha):
        raise GitError(f"--against: {revision!r} is not a commit here")
    return sha


def _plan_at_revision(path: Path, revision: str, searches: SearchCache) -> ResolvedPlan:
    cwd = path.parent
    sha = _commit(revision, cwd)
    relative = _git(["ls-files", "--full-name", "--error-unmatch", "--", path.name], cwd).strip()
    text = _git(["show", f"{sha}:{relative}"], cwd)
    with tempfile.NamedTemporaryFile("w", prefix=".mlinfra-diff-", suffix=".yaml", delete=False) as handle:
        handle.write(text)  # in the temporary folder: the plan's own may be read-only
    try:
        shown = f"{sha[:12]}:{path.name}"
        return resolve(Path(handle.name), display_name=shown, searches=searches, base_dir=path.parent)
    finally:
        Path(handle.name).unlink()


def diff_parser() -> argparse.ArgumentParser:
    from .cli_base import Parser, add_output_options

    parser = Parser(
        prog="mlinfra-compile diff",
        description="What a plan change does to the decisions and generated files.",
        epilog="examples:\n  mlinfra-compile diff plans/a.yaml plans/a-new.yaml\n"
        "  mlinfra-compile diff plans/a.yaml --against HEAD~1 --exit-code\n\n"
        "exit codes: 0 compared (with --exit-code: no change), 1 with --exit-code: a decision or a file changed,\n"
        "  2 invalid input, 3 internal error, 4 infeasible",
    )
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path, nargs="?")
    parser.add_argument("--against", metavar="REV", help="compare PLAN with its version at a git revision")
    parser.add_argument(
        "--exit-code", action="store_true", help="exit 1 when a decision or a file changes (git diff --exit-code)"
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the older spelling of --format json
    return add_output_options(parser)


def _both(args, report) -> tuple[ResolvedPlan, ResolvedPlan] | None:
    """(old, new), each resolved under its own file name, so an error is named by the file it is in."""
    from .cli_base import EXIT_INFEASIBLE, EXIT_INVALID, problems_of
    from .cli_report import Problem

    with one_run() as searches:  # a change that leaves the training question alone searches it once
        plans = []
        for which in ("old", "new"):
            path = args.old if which == "new" and args.against is not None else getattr(args, which)
            try:
                if which == "old" and args.against is not None:
                    plans.append(_plan_at_revision(args.old, args.against, searches))
                else:
                    plans.append(resolve(path, searches=searches))
            except PlanInputError as exc:
                report.problems += problems_of(exc, str(path))
                report.fail(EXIT_INVALID)
            except InfeasiblePlan as exc:
                report.problems.append(Problem(str(path), f"infeasible: {exc}", "infeasible"))
                report.fail(EXIT_INFEASIBLE)
            except GitError as exc:
                report.problems.append(Problem(str(path), str(exc), "git-revision"))
                report.fail(EXIT_INVALID)
            except OSError as exc:  # the environment: a full or read-only temporary folder
                report.problems.append(Problem(str(path), str(exc), "os-error"))
                report.fail(EXIT_INVALID)
    return (plans[0], plans[1]) if len(plans) == 2 else None


def run_diff(argv: list[str]) -> int:
    from .cli_report import RunReport, emit

    parser = diff_parser()
    args = parser.parse_args(argv)
    if (args.new is None) == (args.against is None):
        parser.error("give OLD NEW, or PLAN --against REV")
    if args.json:
        args.format = "json"
    report = RunReport("diff")
    pair = _both(args, report)
    if pair is not None:
        changes, files = decision_changes(*pair), file_diffs(*pair)
        report.result = {"decisions": changes, "files_diff": files}
        lines = [f"  {printable(c['text'])}" for c in changes] or ["  no change to the decisions"]
        report.text = "\n".join(lines) + "\n"
        if files:
            report.text += "\n" + "\n".join(printable(line) for line in files.split("\n"))
        if args.exit_code and (changes or files):
            report.exit_code = 1
    if report.result is not None:  # json: keep the values JSON can hold (numbers, strings), as before
        report.result = json.loads(json.dumps(report.result, default=str))
    emit(report, args.format, args.quiet)
    return report.exit_code
