"""`check` on unchanged plans: 1,000 distinct plans checked by hash against one plan compiled, end to end.

Each plan's manifest records the hash of its inputs (compiler/input_hash.py); `check` re-hashes them and compares
the files on disk with the manifest (compiler/fast_check.py) instead of sizing the plan again. The "full" line
removes the recorded hashes from a copy of out/ (their absence makes no file stale) so that every plan is compiled
to be checked, as before the hashes were recorded. Prints figures; asserts nothing.
Usage: python benchmarks/bench_check.py [--plans N] [--full-plans N] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
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

CLI = [sys.executable, "-m", "compiler"]


def seconds(args: list[str], cwd: Path, expect: int = 0) -> float:
    start = time.perf_counter()
    done = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, env={"PYTHONPATH": str(REPO)})
    elapsed = time.perf_counter() - start
    if done.returncode != expect:
        raise SystemExit(f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def without_recorded_inputs(out: Path, copy: Path) -> None:
    shutil.copytree(out, copy)
    for manifest in copy.glob("*/.mlinfra-manifest.json"):
        record = json.loads(manifest.read_text())
        record.pop("inputs", None)
        manifest.write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--full-plans", type=int, default=100, help="plans for the compile-to-check line")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plans = work / "plans"
        plans.mkdir()
        make_plans(plans, args.plans, distinct=True)
        one = [seconds([str(EXAMPLE), "-o", str(work / "one")], REPO) for _ in range(args.repeat)]
        first = seconds(["compile", "plans", "-o", "out"], work)
        checks = [seconds(["check", "plans", "-o", "out"], work) for _ in range(args.repeat)]
        print(f"one plan compiled, end to end:            {statistics.median(one):7.2f} s (median of {args.repeat})")
        print(f"{args.plans} distinct plans compiled (setup):   {first:7.2f} s")
        print(
            f"{args.plans} unchanged plans checked by hash:    {statistics.median(checks):7.2f} s "
            f"(median of {args.repeat}) = {statistics.median(checks) / statistics.median(one):.1f} × one compile"
        )
        subset = work / "subset"
        subset.mkdir()
        for path in sorted(plans.iterdir())[: args.full_plans]:
            shutil.copy(path, subset / path.name)
        without_recorded_inputs(work / "out", work / "out-full")
        full = seconds(["check", "subset", "-o", "out-full"], work, expect=1)  # the other plans' folders are orphans
        print(f"{args.full_plans} plans checked by compiling them:     {full:7.2f} s (no recorded hashes)")


if __name__ == "__main__":
    main()
