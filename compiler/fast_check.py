"""`check` without sizing: a plan whose inputs hash (input_hash.py) equals the one its manifest recorded compiles to
the files that manifest lists, so only the files on disk are compared with the manifest's hashes and modes. Any
difference (a hand edit, a missing file, another mode) sends the plan through a full compile, whose diff says what
changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .input_hash import inputs_sha256, plan_key
from .writer import MANIFEST, Destinations, UnsafeOutput, file_bytes, is_generated_folder


@dataclass(frozen=True)
class Unchanged:
    """A plan checked by hash: its file as shown, its out/ folder and the number of files there."""

    file: str
    name: str
    files: int


def recorded_inputs(out_dir: Path) -> dict[str, tuple[str, dict]]:
    """plan file name -> (plan folder, its manifest), for every plan folder in out/ whose manifest records its inputs."""
    index: dict[str, tuple[str, dict]] = {}
    ambiguous: set[str] = set()
    try:
        folders = [p for p in out_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return index
    for folder in folders:
        try:
            manifest = json.loads((folder / MANIFEST).read_bytes())
            key = manifest["inputs"]["plan"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(key, str) and manifest.get("plan") == folder.name and is_generated_folder(folder):
            if key in index:  # two plans of one file name (in two folders): each is checked by compiling it
                ambiguous.add(key)
            index[key] = (folder.name, manifest)
    return {key: entry for key, entry in index.items() if key not in ambiguous}


def _holds_recorded_bytes(out_dir: Path, folder: str, manifest: dict) -> bool:
    """Every file the manifest lists has the recorded sha256 and mode, and the manifest is as written."""
    destinations = Destinations(out_dir)
    try:
        text = json.dumps(manifest, sort_keys=True, indent=2) + "\n"
        if file_bytes(destinations.target(folder, MANIFEST)) != text.encode("utf-8"):
            return False
        for entry in manifest["files"]:
            target = destinations.target(folder, entry["path"])
            data = file_bytes(target)
            if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
                return False
            if oct(target.stat().st_mode & 0o777) != entry["mode"]:
                return False
    except (UnsafeOutput, OSError, KeyError, TypeError):
        return False
    return True


def unchanged(plan_path: Path, shown: str, out_dir: Path, index: dict[str, tuple[str, dict]]) -> Unchanged | None:
    """The plan as checked by hash, or None when it must be compiled to be checked."""
    entry = index.get(plan_key(shown))
    if entry is None:
        return None
    folder, manifest = entry
    inputs = manifest["inputs"]
    named = inputs.get("files") if isinstance(inputs, dict) else None
    if not isinstance(named, list) or not all(isinstance(n, str) for n in named):
        return None
    if inputs_sha256(plan_path, shown, named) != inputs.get("sha256"):
        return None
    if not _holds_recorded_bytes(out_dir, folder, manifest):
        return None
    return Unchanged(shown, folder, len(manifest["files"]))
