"""A long fuzz run: ≥ 10 000 mutated example plans compiled in-process; prints the outcome counts, plans/s
and the distinct crash signatures. A crash is exit 3, an exception escaping main(), or a diagnostic
without a location; each distinct one is saved with its reproducing plan under --crashes.

Plan i uses `random.Random(f"{seed}:{i}")`, so `--only i` reproduces one plan exactly.
Usage: python benchmarks/fuzz.py [--plans 10000] [--seed 0] [--crashes DIR] [--only I]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzzing.mutations import CATALOG_NAME, mutated_outcome  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--crashes",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mlinfra-fuzz-crashes",
        help="where each distinct crash's plan, stderr and reproducing command are saved",
    )
    parser.add_argument("--only", type=int, default=None, help="run only plan number I (to reproduce it)")
    parser.add_argument("--progress", type=int, default=500, help="print a line every N plans")
    args = parser.parse_args()
    examples = sorted((REPO / "examples").glob("*.yaml"))
    counts: collections.Counter = collections.Counter()
    invalid_codes: collections.Counter = collections.Counter()
    by_example: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    crashes: dict[str, dict] = {}
    slowest: list[tuple[float, int, str]] = []
    scratch = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else None
    indices = [args.only] if args.only is not None else range(args.plans)
    with tempfile.TemporaryDirectory(prefix="mlinfra-fuzz-", dir=scratch) as tmp:
        workdir = Path(tmp)
        start = time.perf_counter()
        for n, i in enumerate(indices, 1):
            rng = random.Random(f"{args.seed}:{i}")
            example = examples[rng.randrange(len(examples))]
            began = time.perf_counter()
            try:
                mutation, text, outcome = mutated_outcome(example, rng, workdir / "plan")
            except Exception as exc:  # a bug in the fuzzer itself, not in the compiler: counted apart
                counts["fuzzer-error"] += 1
                print(f"fuzzer error on plan {i}: {exc!r}", file=sys.stderr)
                continue
            counts[outcome.kind] += 1
            slowest = sorted(slowest + [(time.perf_counter() - began, i, outcome.kind)], reverse=True)[:5]
            by_example[example.stem][outcome.kind] += 1
            if outcome.kind == "invalid":
                invalid_codes.update(outcome.signature.split(","))
            if outcome.kind == "crash":
                record = crashes.setdefault(outcome.signature, {"count": 0, "plans": []})
                record["count"] += 1
                record["plans"].append(i)
                if record["count"] == 1:
                    save_crash(args.crashes, outcome, i, args.seed, example, mutation, text)
            if args.only is not None:
                print("\n".join(mutation.notes))
                print(text)
                print(outcome.kind, outcome.code, outcome.signature)
                print(outcome.stderr)
            if n % 200 == 0:
                shutil.rmtree(workdir / "plan" / "out", ignore_errors=True)
            if args.progress and n % args.progress == 0:
                rate = n / (time.perf_counter() - start)
                print(
                    f"[{n}] {rate:.1f} plans/s " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True
                )
        elapsed = time.perf_counter() - start
    total = sum(counts.values())
    print(f"\n{total} plans in {elapsed:.1f} s ({total / elapsed:.1f} plans/s), seed {args.seed}")
    for kind in ("compiled", "infeasible", "invalid", "unrepresentable", "fuzzer-error", "crash"):
        print(f"  {kind:16} {counts[kind]:6d}  {100 * counts[kind] / max(total, 1):5.1f}%")
    print(
        f"  reached sizing (compiled + infeasible): {100 * (counts['compiled'] + counts['infeasible']) / max(total, 1):.1f}%"
    )
    print(
        "per example (compiled/infeasible/invalid/crash): "
        + "; ".join(
            f"{name} {c['compiled']}/{c['infeasible']}/{c['invalid']}/{c['crash']}"
            for name, c in sorted(by_example.items())
        )
    )
    print("slowest plans: " + ", ".join(f"#{i} {t:.2f} s ({kind})" for t, i, kind in slowest))
    print("most common diagnostic codes: " + ", ".join(f"{code} {n}" for code, n in invalid_codes.most_common(15)))
    print(f"crashes: {counts['crash']} ({len(crashes)} distinct)")
    for signature, record in sorted(crashes.items(), key=lambda kv: -kv[1]["count"]):
        print(
            f"  {record['count']:5d}  {signature}  (plans {record['plans'][:5]}; saved in {args.crashes / slug(signature)})"
        )
    return 1 if counts["crash"] else 0


def slug(signature: str) -> str:
    return hashlib.sha256(signature.encode()).hexdigest()[:12]


def save_crash(root: Path, outcome, index: int, seed: int, example: Path, mutation, text: str | None) -> None:
    folder = root / slug(outcome.signature)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.yaml").write_text(text or "", encoding="utf-8")
    if CATALOG_NAME in mutation.files:
        (folder / CATALOG_NAME).write_bytes(mutation.files[CATALOG_NAME])
    (folder / "stderr.txt").write_text(outcome.stderr, encoding="utf-8")
    info = {
        "signature": outcome.signature,
        "exit": outcome.code,
        "example": example.name,
        "seed": seed,
        "plan": index,
        "mutations": mutation.notes,
        "reproduce": f"python benchmarks/fuzz.py --seed {seed} --only {index}",
    }
    (folder / "crash.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
