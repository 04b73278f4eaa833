"""A long run of the catalog and site-file fuzzers (tests/fuzzing/catalogs.py, site_files.py): random in-range user
GPU catalogs and cluster.calibration files, each compiled in-process with a small plan. Prints the outcome counts and
every crash (an exception the CLI would report as exit 3) with the case number that reproduces it.

Usage: python benchmarks/fuzz_inputs.py [--catalogs 2000] [--sites 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzzing import catalogs, site_files  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--catalogs", type=int, default=2000)
    parser.add_argument("--sites", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    crashed = False
    with tempfile.TemporaryDirectory(prefix="mlinfra-fuzz-inputs-") as tmp:
        for name, module, count in (("catalog", catalogs, args.catalogs), ("site file", site_files, args.sites)):
            counts: collections.Counter = collections.Counter()
            start = time.perf_counter()
            for i in range(count):
                outcome = module.compile_case(args.seed, i, Path(tmp) / name.replace(" ", "-"))
                counts[outcome if outcome in ("compiled", "refused") else "crash"] += 1
                if outcome not in ("compiled", "refused"):
                    crashed = True
                    print(f"{name} {args.seed}:{i}: {outcome[:200]}")
            seconds = time.perf_counter() - start
            print(f"{name}s: {dict(counts)} in {seconds:.1f} s ({count / max(seconds, 1e-9):.1f}/s)")
    return 1 if crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
