"""Search speed: candidates evaluated and seconds for the training and serving searches of each example.

Target: a typical plan's search under 1 s on the 2-core dev machine. Prints; asserts nothing.
Usage: python benchmarks/bench_search.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compiler.pipeline import resolve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'plan':28s} {'workload':9s} {'evaluated':>9s} {'seconds':>8s} {'per second':>11s}")
    for example in sorted((REPO / "examples").glob("*.yaml")):
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            plan = resolve(example)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        rate = plan.search_evaluated / seconds if seconds else 0
        print(f"{plan.name:28s} {plan.workload:9s} {plan.search_evaluated:9d} {seconds:8.3f} {rate:11.0f}")


if __name__ == "__main__":
    main()
