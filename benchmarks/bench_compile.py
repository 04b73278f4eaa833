"""Speed figures: one plan end to end (process start included), and --check over 100 plans.

Targets (issue): ≤ 0.3 s per plan, ≤ 3 s for 100 plans under --check. Prints figures; asserts nothing.
Usage: python benchmarks/bench_compile.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples/llama3-8b-pretrain.yaml"


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def make_plans(directory: Path, count: int) -> list[Path]:
    base = yaml.safe_load(EXAMPLE.read_text())
    examples = sorted((REPO / "examples").glob("*.yaml"))
    plans = []
    for i in range(count):
        data = yaml.safe_load(examples[i % len(examples)].read_text()) if i % 2 else dict(base)
        data["name"] = f"plan-{i:03d}"
        path = directory / f"plan-{i:03d}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        plans.append(path)
    return plans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plans", type=int, default=100)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "compiler"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        one = [timed([*cli, str(EXAMPLE), "-o", str(work / "one")], REPO) for _ in range(args.repeat)]
        print(f"one plan end to end (process start included): median {statistics.median(one):.3f} s, min {min(one):.3f} s over {args.repeat} runs")
        plans = make_plans(work, args.plans)
        out = work / "many"
        write = timed([*cli, *map(str, plans), "-o", str(out)], REPO)
        print(f"{args.plans} plans compiled and written: {write:.2f} s ({write / args.plans * 1000:.1f} ms per plan)")
        check = [timed([*cli, *map(str, plans), "-o", str(out), "--check"], REPO) for _ in range(max(1, args.repeat // 2))]
        print(f"--check over {args.plans} plans (up to date): median {statistics.median(check):.2f} s")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import compiler.cli"], check=True)
        print(f"python start + import compiler.cli: {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
