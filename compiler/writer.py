"""Writes rendered plans into out/: staged, then swapped in; never outside out/; never a foreign file.

Every file of every plan is first written to a temporary file beside its destination; only when all of
them are staged are they renamed into place (os.replace is atomic on POSIX). If staging fails, the
temporaries are removed and out/ is exactly as it was. `.mlinfra-manifest.json` in each plan directory
lists what we generated (path, sha256, mode); on regeneration only paths listed there may be removed.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .targets.base import OutputFile

MANIFEST = ".mlinfra-manifest.json"


class UnsafeOutput(Exception):
    """A generated path would escape out/ (through '..' or a symlink): exit 2, nothing written."""


@dataclass(frozen=True)
class RenderedPlan:
    name: str
    files: tuple[OutputFile, ...]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def manifest_text(plan: RenderedPlan) -> str:
    entries = [{"path": f.path, "sha256": sha256(f.text), "mode": oct(f.mode)} for f in sorted(plan.files, key=lambda f: f.path)]
    return json.dumps({"generator": "mlinfra-compile", "plan": plan.name, "files": entries}, sort_keys=True, indent=2) + "\n"


class _Destinations:
    """Where generated files go, for one write or check: refuses '..', absolute paths and symlinks leading outside
    out/. The plans' files share a few directories, so each directory is checked (and resolved) once per call."""

    def __init__(self, out_dir: Path):
        self.out_dir, self.root = out_dir, out_dir.resolve()
        self.resolved: dict[Path, Path] = {out_dir: self.root}  # checked directory -> where it resolves to

    def _directory(self, directory: Path) -> Path:
        if directory not in self.resolved:
            parent = self._directory(directory.parent)  # from out/ down, so the outermost symlink is named
            if directory.is_symlink():
                raise UnsafeOutput(f"{directory} is a symlink; refusing to write through it")
            self.resolved[directory] = parent / directory.name
        return self.resolved[directory]

    def target(self, plan_name: str, relative: str) -> Path:
        """The destination of a generated file."""
        if Path(relative).is_absolute() or Path(plan_name).is_absolute():
            raise UnsafeOutput(f"generated path {relative!r} is absolute")
        relative = f"{plan_name}/{relative}"
        parts = Path(relative).parts
        if ".." in parts or not parts:
            raise UnsafeOutput(f"generated path {relative!r} would leave {self.out_dir}")
        target = self.out_dir.joinpath(*parts)
        parent = self._directory(target.parent)
        if target.is_symlink():
            raise UnsafeOutput(f"{target} is a symlink; refusing to write through it")
        resolved = parent / target.name  # what target.resolve() gives when no part below out/ is a symlink
        if self.root != resolved and self.root not in resolved.parents:
            raise UnsafeOutput(f"{target} resolves to {resolved}, outside {self.root}")
        return target


def _old_manifest(plan_dir: Path) -> set[str]:
    try:
        data = json.loads((plan_dir / MANIFEST).read_text(encoding="utf-8"))
        return {str(e["path"]) for e in data["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _all_files(plan: RenderedPlan) -> list[OutputFile]:
    return sorted(plan.files, key=lambda f: f.path) + [OutputFile(MANIFEST, manifest_text(plan))]


def write_plans(out_dir: Path, plans: list[RenderedPlan]) -> list[Path]:
    """Stage every file, then swap all into place; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.is_symlink():
        raise UnsafeOutput(f"{out_dir} is a symlink")
    destinations = _Destinations(out_dir)
    moves: list[tuple[Path | None, Path, int]] = []
    try:
        for plan in plans:
            for f in _all_files(plan):
                target = destinations.target(plan.name, f.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                staged = target.with_name(f".{target.name}.mlinfra-tmp")
                with open(staged, "w", encoding="utf-8", newline="\n") as handle:
                    handle.write(f.text)
                    handle.flush()
                    os.fsync(handle.fileno())
                moves.append((staged, target, f.mode))
        for plan in plans:  # what we generated before and no longer generate (read before the swap)
            stale = _old_manifest(out_dir / plan.name) - {f.path for f in plan.files}
            moves.extend((None, destinations.target(plan.name, p), 0) for p in sorted(stale))
    except BaseException:
        for staged, _, _ in moves:
            if staged is not None:
                staged.unlink(missing_ok=True)
        raise
    written = []
    for staged, target, mode in moves:
        if staged is None:
            target.unlink(missing_ok=True)
            continue
        os.chmod(staged, mode)
        os.replace(staged, target)
        written.append(target)
    return written


def check_plans(out_dir: Path, plans: list[RenderedPlan]) -> list[str]:
    """Unified diffs of what a compile would change; empty when out/ is up to date. Writes nothing."""
    diffs: list[str] = []
    destinations = _Destinations(out_dir)
    for plan in plans:
        expected = {f.path: f for f in _all_files(plan)}
        stale = _old_manifest(out_dir / plan.name) - set(expected)
        for relative in sorted(expected) + sorted(stale):
            target = destinations.target(plan.name, relative)
            want = expected[relative].text if relative in expected else ""
            try:
                have = target.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                have = None
            if have == want and (relative not in expected or _mode_ok(target, expected[relative].mode)):
                continue
            label = f"{plan.name}/{relative}"
            lines = difflib.unified_diff(
                (have or "").splitlines(keepends=True), want.splitlines(keepends=True),
                fromfile=f"a/{label}" if have is not None else "/dev/null",
                tofile=f"b/{label}" if relative in expected else "/dev/null",
            )
            diffs.append("".join(lines) or f"mode of {label} differs\n")
    return diffs


def _mode_ok(path: Path, mode: int) -> bool:
    return (path.stat().st_mode & 0o777) == mode
