"""`check` on unchanged plans: 1,000 plans checked by hash, against one plan compiled, end to end.

Each plan's manifest records the hash of its inputs (compiler/input_hash.py), mlinfra-compile's own code among them;
`check` re-hashes them and compares the files on disk with the manifest (compiler/fast_check.py) instead of sizing
the plan again. The "by compiling" line removes the recorded hashes from a copy of out/ (their absence makes no file
stale), so every plan there is compiled to be checked, as before the hashes were recorded; those plans are distinct
(each training plan its own deadline), so each is searched. Seconds are wall time and the child's CPU time (user +
system), the latter steadier on a shared machine. Prints figures; asserts nothing.
Usage: python benchmarks/bench_check.py [--plans N] [--compiled-plans N] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_compile import EXAMPLE, make_plans  # noqa: E402


def run(args: list[str], cwd: Path, expect: int = 0) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one CLI process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "compiler", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise SystemExit(f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_run(args: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    runs = [run(args, cwd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def without_recorded_inputs(out: Path) -> None:
    for manifest in out.glob("*/.mlinfra-manifest.json"):
        record = json.loads(manifest.read_text())
        record.pop("inputs", None)
        manifest.write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")


def line(label: str, figures: tuple[float, float], one: tuple[float, float] | None = None) -> str:
    text = f"{label:44s} wall {figures[0]:7.2f} s   CPU {figures[1]:7.2f} s"
    if one:
        text += f"   = {figures[0] / one[0]:.1f} × / {figures[1] / one[1]:.1f} × one compile (wall / CPU)"
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--compiled-plans", type=int, default=50, help="distinct plans for the by-compiling line")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "plans").mkdir()
        (work / "distinct").mkdir()
        make_plans(work / "plans", args.plans)
        make_plans(work / "distinct", args.compiled_plans, distinct=True)
        one = median_run([str(EXAMPLE), "-o", str(work / "one")], REPO, args.repeat)
        print(line("one plan compiled, end to end", one), flush=True)
        print(line(f"{args.plans} plans compiled (setup)", run(["compile", "plans", "-o", "out"], work)), flush=True)
        checked = median_run(["check", "plans", "-o", "out"], work, args.repeat)
        print(line(f"{args.plans} unchanged plans checked by hash", checked, one), flush=True)
        run(["compile", "distinct", "-o", "distinct-out"], work)
        shutil.copytree(work / "distinct-out", work / "bare-out")
        without_recorded_inputs(work / "bare-out")
        by_hash = median_run(["check", "distinct", "-o", "distinct-out"], work, args.repeat)
        compiled = run(["check", "distinct", "-o", "bare-out"], work)
        print(line(f"{args.compiled_plans} distinct plans checked by hash", by_hash, one))
        print(line(f"{args.compiled_plans} distinct plans checked by compiling", compiled, one))


if __name__ == "__main__":
    main()
