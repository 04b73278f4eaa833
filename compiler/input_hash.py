"""What decides a plan's output, as one hash the manifest records, so `check` can skip sizing an unchanged plan.

The output of a plan is a pure function of: the plan's bytes and the file name its headers carry, the files the
plan names (`cluster.catalog`, `cluster.calibration`), and mlinfra-compile itself (its code, templates, schemas
and packaged catalogs: the generator). The manifest records the plan as it was named on the command line, the
files it named and the hash of all of these; when a later `check` finds the same hash, the output it would
compute is the one the manifest lists, and only the files on disk need comparing with it. Nothing recorded depends
on how the plan's path is spelled or where the command runs (outputs are byte-identical across both): the plan is
recorded by its file name, the files it names as the plan names them (relative to the plan's folder).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from .resources import data_dir

_GENERATOR_SUFFIXES = (".py", ".yaml", ".yml", ".j2", ".json", ".txt", ".md", ".pbtxt", ".sh")


def _tree_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and p.suffix in _GENERATOR_SUFFIXES and "__pycache__" not in p.parts
    )


@lru_cache(maxsize=1)
def generator_sha256() -> str:
    """The hash of mlinfra-compile's code, templates, schemas and packaged catalogs, read once per process."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parent
    for root in (package, Path(str(data_dir("templates"))), Path(str(data_dir("schemas")))):
        for path in _tree_files(root):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def plan_key(shown: str) -> str:
    """How the manifest names the plan: its file name (what the generated headers carry)."""
    return Path(shown).name


def inputs_sha256(plan_path: Path, shown: str, named_files: list[str], base_dir: Path | None = None) -> str | None:
    """The hash of everything that decides the plan's output; None when a file cannot be read. `named_files` are
    as the plan names them, relative to `base_dir` (the plan's folder unless it came from standard input)."""
    digest = hashlib.sha256(generator_sha256().encode())
    digest.update(b"\0" + plan_key(shown).encode("utf-8", "surrogateescape") + b"\0")
    try:
        digest.update(plan_path.read_bytes())
        for name in named_files:
            data = ((base_dir or plan_path.parent) / name).read_bytes()
            digest.update(b"\0" + name.encode("utf-8", "surrogateescape") + b"\0" + data)
    except OSError:
        return None
    return digest.hexdigest()


def inputs_record(plan_path: Path, shown: str, spec, base_dir: Path) -> dict | None:
    """The manifest's `inputs` entry for a plan just compiled from `plan_path` (shown as `shown`); the files it
    names are read from `base_dir`."""
    named = [name for name in (spec.cluster.catalog, spec.cluster.calibration) if name]
    sha = inputs_sha256(plan_path, shown, named, base_dir)
    return None if sha is None else {"plan": plan_key(shown), "files": named, "sha256": sha}
