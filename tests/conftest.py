"""Shared fixtures: repo paths, the CLI runner, and single-file syrupy snapshots (one real file each)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

REPO = Path(__file__).resolve().parent.parent
# Subprocesses run the checkout's compiler/ (`python -m compiler`) from any working directory: the installed wheel's
# package is mlinfra_compile, so nothing else provides `compiler`.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@cache
def snapshot_extension(suffix: str) -> type[SingleFileSnapshotExtension]:
    """A syrupy extension writing text snapshots with the generated file's own extension."""
    return type(
        f"Snapshot_{suffix}",
        (SingleFileSnapshotExtension,),
        {"file_extension": suffix, "_write_mode": WriteMode.TEXT},
    )


@pytest.fixture
def snapshot_text(snapshot):
    def match(text: str, suffix: str = "txt"):
        return snapshot(extension_class=snapshot_extension(suffix)) == text

    return match


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "compiler", *map(str, args)],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def cli():
    return run_cli


from tests.tools.realtools import slurm_cluster  # noqa: E402,F401  (session fixture for sbatch tests)

# Tests that share one machine-wide resource run on one pytest-xdist worker (scripts/test.sh runs two, --dist
# loadgroup): the session's Slurm cluster (one per worker would both edit /etc/hosts), and the engines' servers (a
# vLLM CPU server takes several GiB; two at once beside the torch ranks crowd a 24 GiB machine). Inert without xdist.
ENGINE_WORDS = (
    "vllm_serves",
    "tritonserver",
    "probe_serve",
    "vllm_check",
    "vllm_serve_smoke",
    "validate_vllm",
    "vllm_parallel",
)


def _shared_resource(item: pytest.Item) -> str | None:
    if "slurm_cluster" in getattr(item, "fixturenames", ()):
        return "slurm"
    function = getattr(item, "function", None)
    try:
        source = inspect.getsource(function) if function else ""
    except (OSError, TypeError):
        source = ""
    return "engines" if any(word in source for word in ENGINE_WORDS) else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _shared_resource(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        # what starts a real tool's job or server is slow: `-m "not realtool and not slow"` is the minutes-long set
        if group or item.path.name.endswith("_real.py") and "tmp_path" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realtool)
            item.add_marker(pytest.mark.slow)
