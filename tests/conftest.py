"""Shared fixtures: repo paths, the CLI runner, and single-file syrupy snapshots (one real file each)."""

from __future__ import annotations

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
