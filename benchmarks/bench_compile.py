"""Speed figures: one plan end to end (process start included), and --check over 100 plans.

Targets: ≤ 0.3 s per plan, ≤ 3 s for 100 plans under --check. Prints figures; asserts nothing.
Usage: python benchmarks/bench_compile.py [--repeat N] [--plans N]

The 100 plans cycle through examples/ (every other one is llama3-8b-pretrain), so many ask the same training
question, which one run searches once (pipeline.one_run, sizing/search_cache.py); the "distinct" figures give every
training plan its own deadline (one minute more per plan) so that each one is searched.

Python's start is part of every end-to-end figure, and so is compiling the package's sources when there is no
bytecode for them (PYTHONDONTWRITEBYTECODE with an editable install; pip compiles an installed wheel's bytecode
at install): the "bytecode cached" line runs with a bytecode cache for comparison. The CLI keeps compiled templates
in a per-user cache (compiler/template_cache.py); here that cache lives in the benchmark's temporary folder and is
filled by one run before the timed ones, and the "no template cache" line times first runs, each with an empty one.
The in-process phases call the pipeline directly, without the CLI's template cache or collector settings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples/llama3-8b-pretrain.yaml"
PHASES = ("import", "load+validate", "sizing", "render", "write")
# What any compile pays before our own code: Python's start, and the libraries the plan goes through (pydantic
# validates it, PyYAML parses it, jinja2 renders it).
STARTUP_LINES = (
    ("python start", "pass"),
    ("python start + import pydantic, yaml, jinja2", "import pydantic, yaml, jinja2"),
    (
        "  + one one-field pydantic model built and validated (the floor of any compile)",
        "import yaml, jinja2\nfrom pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)",
    ),
    ("python start + import compiler.cli", "import compiler.cli"),
    ("python start + import compiler.pipeline (what a compile imports)", "import compiler.pipeline"),
)


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def make_plans(directory: Path, count: int, distinct: bool = False) -> list[Path]:
    from compiler.units import parse_seconds

    base = yaml.safe_load(EXAMPLE.read_text())
    examples = sorted((REPO / "examples").glob("*.yaml"))
    plans = []
    for i in range(count):
        data = yaml.safe_load(examples[i % len(examples)].read_text()) if i % 2 else dict(base)
        data["name"] = f"plan-{i:03d}"
        if distinct and data["workload"] in ("train", "finetune") and data["train"].get("deadline"):
            data["train"] = {**data["train"], "deadline": parse_seconds(data["train"]["deadline"]) + 60 * i}
        path = directory / f"plan-{i:03d}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        plans.append(path)
    return plans


def phases(plans: list[Path], out: Path) -> dict[str, float]:
    """In-process seconds per phase over `plans` (run in a fresh process, so 'import' is the cold import)."""
    start = time.perf_counter()
    from compiler.catalog.catalog import load_catalog
    from compiler.pipeline import one_run, render, resolve
    from compiler.source import load_yaml_file
    from compiler.validate import validate_plan
    from compiler.writer import write_plans

    figures = dict.fromkeys(PHASES, 0.0)
    figures["import"] = time.perf_counter() - start
    rendered = []
    with one_run() as searches:
        for path in plans:
            start = time.perf_counter()
            validate_plan(load_yaml_file(path))
            load_catalog(None)
            middle = time.perf_counter()
            plan = resolve(path, searches=searches)  # loads and validates again: subtracted below
            sized = time.perf_counter()
            rendered.append(render(plan))
            figures["load+validate"] += middle - start
            figures["sizing"] += (sized - middle) - (middle - start)
            figures["render"] += time.perf_counter() - sized
    start = time.perf_counter()
    write_plans(out, rendered)
    figures["write"] = time.perf_counter() - start
    return figures


def print_phases(label: str, plans: list[Path], out: Path) -> None:
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from benchmarks.bench_compile import phases; "
        "print(json.dumps(phases([Path(p) for p in sys.argv[3:]], Path(sys.argv[2]))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(REPO), str(out), *map(str, plans)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(result.stdout)
    print(f"  in-process phases, {label}: " + ", ".join(f"{name} {figures[name]:.3f} s" for name in PHASES))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plans", type=int, default=100)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "compiler"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}
        timed([*cli, str(EXAMPLE), "-o", str(work / "one")], REPO, env)  # fills the template cache
        one = [timed([*cli, str(EXAMPLE), "-o", str(work / "one")], REPO, env) for _ in range(args.repeat)]
        print(
            f"one plan end to end (process start included): median {statistics.median(one):.3f} s, min {min(one):.3f} s over {args.repeat} runs"
        )
        first = [
            timed(
                [*cli, str(EXAMPLE), "-o", str(work / "one")], REPO, {**env, "XDG_CACHE_HOME": str(work / f"empty-{i}")}
            )
            for i in range(args.repeat)
        ]
        print(
            f"  the same with no template cache (a first run): median {statistics.median(first):.3f} s, min {min(first):.3f} s"
        )
        cached = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        timed([*cli, str(EXAMPLE), "-o", str(work / "one")], REPO, cached)  # writes the bytecode
        warm = [timed([*cli, str(EXAMPLE), "-o", str(work / "one")], REPO, cached) for _ in range(args.repeat)]
        print(f"  the same with bytecode cached: median {statistics.median(warm):.3f} s, min {min(warm):.3f} s")
        print_phases("one plan", [EXAMPLE], work / "one-phases")
        for distinct in (False, True):
            label = "distinct " if distinct else ""
            folder = work / ("distinct" if distinct else "cycled")
            folder.mkdir()
            plans = make_plans(folder, args.plans, distinct)
            out = folder / "out"
            write = timed([*cli, *map(str, plans), "-o", str(out)], REPO, env)
            print(
                f"{args.plans} {label}plans compiled and written: {write:.2f} s ({write / args.plans * 1000:.1f} ms per plan)"
            )
            check = [
                timed([*cli, *map(str, plans), "-o", str(out), "--check"], REPO, env)
                for _ in range(max(1, args.repeat // 2))
            ]
            print(f"--check over {args.plans} {label}plans (up to date): median {statistics.median(check):.2f} s")
            print_phases(f"{args.plans} {label}plans", plans, folder / "phases-out")
        for label, code in STARTUP_LINES:
            times = [timed([sys.executable, "-c", code], REPO) for _ in range(args.repeat)]
            print(f"{label}: median {statistics.median(times):.3f} s, min {min(times):.3f} s")


if __name__ == "__main__":
    main()
