"""A long fuzz run: ≥ 10 000 mutated plans; prints the outcome counts and the number of crashes.

Usage: python benchmarks/fuzz.py [--plans 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hypothesis import HealthCheck, given, settings, seed

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzzing.mutations import mutated_plan, outcome  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts: collections.Counter = collections.Counter()
    crashes: list[str] = []
    examples = sorted((REPO / "examples").glob("*.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        @seed(args.seed)
        @settings(max_examples=args.plans, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(doc=mutated_plan(examples))
        def run(doc):
            try:
                counts[outcome(doc, Path(tmp))] += 1
            except Exception:
                counts["crash"] += 1
                crashes.append(traceback.format_exc(limit=3))

        start = time.perf_counter()
        run()
        elapsed = time.perf_counter() - start
    total = sum(counts.values())
    print(f"{total} plans in {elapsed:.1f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"crashes: {counts['crash']}")
    for text in crashes[:5]:
        print(text)


if __name__ == "__main__":
    main()
