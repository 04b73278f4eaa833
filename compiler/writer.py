"""Writes rendered plans into out/: each plan folder replaced as a whole, atomically; never outside out/; never a
foreign file.

For each plan, in name order: take the plan's lock (`plan_lock`), so a second compile of it waits; finish or undo
what a killed compile left (`folder_swap.recover`); read the old folder and check every precondition before the
first write: no directory, symlink or foreign file where a generated file or directory goes (a foreign file whose
bytes already equal ours is adopted), every old directory writable. Then, for every plan, build the complete new
folder in a private stage inside out/: the generated files, created with O_EXCL|O_NOFOLLOW, plus hard links (or
copies) of every file we did not generate, so the user's own files survive; then swap each new folder in whole
(`folder_swap`). A failure before or during the swaps undoes them all; a kill leaves each plan folder wholly old or
wholly new (where the system cannot exchange two folders in one step, a kill between its two renames leaves the old
folder moved aside, and the next compile puts it back first). No mount point may lie inside a plan folder.
`.mlinfra-manifest.json` in each plan folder lists what we generated (path, sha256, mode): only those files are ever
dropped or replaced. `--check` (compiler/check.py) compares bytes and modes, and takes no lock.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from . import folder_swap
from .plan_lock import PlanLock
from .targets.base import OutputFile

MANIFEST = ".mlinfra-manifest.json"


class UnsafeOutput(Exception):
    """A generated path would escape out/ (through '..' or a symlink): exit 2, nothing written."""

    code = "unsafe-output"


class OutputConflict(UnsafeOutput):
    """Something we did not write, or cannot replace, is where a generated file goes: exit 2, nothing written."""

    code = "output-conflict"


@dataclass(frozen=True)
class RenderedPlan:
    name: str
    files: tuple[OutputFile, ...]
    runs: str | None = (
        None  # where its jobs write, relative to its folder (`ResolvedPlan.runs_dir`): made, never swapped
    )
    inputs: dict | None = None  # what decided the files (input_hash.inputs_record), recorded in the manifest


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def manifest_text(plan: RenderedPlan) -> str:
    entries = [
        {"path": f.path, "sha256": sha256(f.text), "mode": oct(f.mode)}
        for f in sorted(plan.files, key=lambda f: f.path)
    ]
    record = {"generator": "mlinfra-compile", "plan": plan.name, "files": entries}
    if plan.inputs is not None:
        record["inputs"] = plan.inputs
    return json.dumps(record, sort_keys=True, indent=2) + "\n"


def manifest_without_inputs(data: bytes | None) -> object:
    """A manifest's content less its `inputs` record: what `check` compares (a new mlinfra-compile whose output is
    the same changes only the recorded hash, which is no reason to call out/ stale)."""
    try:
        record = json.loads(data or b"")
    except ValueError:
        return None
    if isinstance(record, dict):
        record.pop("inputs", None)
    return record


class Destinations:
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


def _plain_relative(path: object) -> bool:
    """A normalised relative POSIX path without '..' or NUL (what a manifest entry or a generated path must be)."""
    if not isinstance(path, str) or not path or "\0" in path or path.startswith("/"):
        return False
    return PurePosixPath(path).as_posix() == path and ".." not in path.split("/")


def _manifest_paths(plan_dir: Path) -> set[str] | None:
    """The valid paths the folder's manifest lists (never itself); None when it has no manifest of ours."""
    path = plan_dir / MANIFEST
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        data = json.loads(path.read_bytes())
        if data["generator"] != "mlinfra-compile":
            return None
        return {e["path"] for e in data["files"] if isinstance(e, dict) and _plain_relative(e.get("path"))} - {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def all_files(plan: RenderedPlan) -> list[OutputFile]:
    return sorted(plan.files, key=lambda f: f.path) + [OutputFile(MANIFEST, manifest_text(plan))]


def _scan(folder: Path, device: int) -> dict[str, os.stat_result]:
    """Every entry under folder (relative path -> lstat), symlinks not followed. A mount point is refused: the old
    folder is deleted after the swap, and deleting through a mount would delete what is mounted."""
    entries: dict[str, os.stat_result] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        with os.scandir(folder / relative if relative else folder) as found:
            for entry in found:
                path = f"{relative}/{entry.name}" if relative else entry.name
                entries[path] = entry.stat(follow_symlinks=False)
                if entries[path].st_dev != device:
                    raise OutputConflict(f"{folder / path} is on another filesystem (a mount point); move it out")
                if entry.is_dir(follow_symlinks=False):
                    pending.append(path)
    return entries


@dataclass(frozen=True)
class _Layout:
    """One plan's new folder: the files we generate, and the directories and foreign entries kept from the old one."""

    folder: Path
    files: list[OutputFile]
    directories: dict[str, int | None]  # relative path ("" is the folder) -> the old one's mode; None: a new one
    kept: list[str]  # the old folder's entries we did not generate (hard-linked into the new one)
    ours: frozenset[str]  # paths we generated, before or now: never carried over from the old folder


def _layout(out_dir: Path, plan: RenderedPlan) -> _Layout:
    """Reads the old folder and refuses, before anything is written, whatever the new folder cannot replace safely."""
    folder = out_dir / plan.name
    try:
        root = os.lstat(folder)
    except FileNotFoundError:
        root = None
    if root is not None and stat.S_ISLNK(root.st_mode):
        raise UnsafeOutput(f"{folder} is a symlink; refusing to write through it")
    if root is not None and not stat.S_ISDIR(root.st_mode):
        raise OutputConflict(f"{folder} is a file; the plan's folder goes there")
    old = _scan(folder, root.st_dev) if root is not None else {}
    ours = _manifest_paths(folder)
    owned = set() if ours is None else ours | {MANIFEST}
    files = all_files(plan)
    generated = {f.path: f for f in files}
    needed = {str(parent) for f in files for parent in PurePosixPath(f.path).parents if str(parent) != "."}

    def in_the_way(path: str, what: str) -> None:
        if stat.S_ISLNK(old[path].st_mode):
            raise UnsafeOutput(f"{folder / path} is a symlink; refusing to write through it")
        raise OutputConflict(f"{folder / path} is {what}; move or delete it")

    for path in sorted(generated.keys() & old.keys()):
        mode = old[path].st_mode
        if stat.S_ISDIR(mode):
            raise OutputConflict(f"{folder / path} is a directory; a generated file goes there")
        if path not in owned and not (stat.S_ISREG(mode) and _holds(folder / path, old[path], generated[path].text)):
            in_the_way(path, f"a file mlinfra-compile did not write (not in {MANIFEST}), where a generated file goes")
        if stat.S_ISLNK(mode):
            in_the_way(path, "a symlink")
    for path in sorted(needed & old.keys()):
        if not stat.S_ISDIR(old[path].st_mode) and (path not in owned or stat.S_ISLNK(old[path].st_mode)):
            in_the_way(path, "a file mlinfra-compile did not write, where a generated directory goes")
    directories = {path: st.st_mode for path, st in old.items() if stat.S_ISDIR(st.st_mode)}
    for path in ["", *sorted(directories)]:
        if root is not None and not os.access(folder / path, os.W_OK):
            raise OutputConflict(f"{folder / path} is read-only; the plan's folder cannot be replaced")
    kept_modes: dict[str, int | None] = {p: stat.S_IMODE(m) for p, m in directories.items()}
    kept_modes[""] = stat.S_IMODE(root.st_mode) if root is not None else None
    directories = dict.fromkeys(needed) | kept_modes
    kept = sorted(p for p, st in old.items() if not stat.S_ISDIR(st.st_mode) and p not in owned and p not in generated)
    return _Layout(folder, files, directories, kept, frozenset(owned | generated.keys()))


def _holds(path: Path, status: os.stat_result, text: str) -> bool:
    """Whether a file already holds exactly these bytes (then it is adopted, not refused)."""
    data = text.encode("utf-8")
    try:
        return status.st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _build(tree: Path, layout: _Layout) -> None:
    """The complete new folder at `tree`: directories, the kept entries, then the generated files. The stage is
    private, so new directories get their usual mode (0777 less the umask) at once; kept ones get theirs last."""
    for path in sorted(layout.directories):  # a parent sorts before its children
        os.mkdir(tree / path, 0o777 if layout.directories[path] is None else 0o700)
    for path in layout.kept:
        _keep(layout.folder / path, tree / path)
    for f in layout.files:
        _create(tree / f.path, f.text, f.mode, shown_as=layout.folder / f.path)
    for path in sorted(layout.directories, reverse=True):  # deepest first: a read-only mode comes last
        if layout.directories[path] is not None:
            os.chmod(tree / path, layout.directories[path])


def _keep(source: Path, copy: Path) -> None:
    try:
        os.link(source, copy, follow_symlinks=False)  # same inode: the user's file, untouched
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        shutil.copy2(source, copy, follow_symlinks=False)


def _create(path: Path, text: str, mode: int, shown_as: Path) -> None:
    data = memoryview(text.encode("utf-8"))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.filename is None or exc.filename == str(path):
            exc.filename = str(shown_as)  # name the file the user knows, not its staged copy
        raise


def _prepare(out_dir: Path, plans: list[RenderedPlan]) -> None:
    """Refuses names and paths that could leave out/, then makes out/; nothing else is written before the locks."""
    names = [plan.name for plan in plans]
    for plan in plans:
        if not _plain_relative(plan.name) or "/" in plan.name or names.count(plan.name) > 1:
            raise UnsafeOutput(f"plan name {plan.name!r} is not a plain folder name, or not unique")
        for f in plan.files:
            if not _plain_relative(f.path):
                raise UnsafeOutput(f"generated path {f.path!r} would leave {out_dir / plan.name}")
    if out_dir.is_symlink():
        raise UnsafeOutput(f"{out_dir} is a symlink")
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(out_dir))
    out_dir.mkdir(parents=True, exist_ok=True)


def write_plans(out_dir: Path, plans: list[RenderedPlan]) -> list[Path]:
    """Replaces each plan's folder with its new one (see the module docstring); returns the generated paths."""
    plans = sorted(plans, key=lambda p: p.name)  # locks always taken in one order: no deadlock
    _prepare(out_dir, plans)
    locks: list[PlanLock] = []
    try:
        for plan in plans:
            locks.append(PlanLock(out_dir, plan.name))
            locks[-1].acquire()
        for plan in plans:
            folder_swap.recover(out_dir, plan.name)
        layouts = [_layout(out_dir, plan) for plan in plans]
        for plan in plans:
            if plan.runs is not None:
                _make_runs_folder(out_dir, plan)
        _stage_and_swap(out_dir, plans, layouts)
    finally:
        for lock in reversed(locks):
            lock.release()
    return [layout.folder / f.path for layout in layouts for f in layout.files]


def _make_runs_folder(out_dir: Path, plan: RenderedPlan) -> None:
    """The folder a plan's jobs write into (out/runs/<plan>/): made when missing, never replaced nor emptied."""
    relative = os.path.normpath(f"{plan.name}/{plan.runs}")
    if not _plain_relative(relative) or relative.split("/")[0] == plan.name:
        raise UnsafeOutput(
            f"the runs folder {plan.runs!r} of {plan.name} must lie in {out_dir}, beside the plan folder"
        )
    folder = out_dir
    for part in relative.split("/"):
        folder = folder / part
        if folder.is_symlink():
            raise UnsafeOutput(f"{folder} is a symlink; refusing to write through it")
        if os.path.lexists(folder) and not folder.is_dir():
            raise OutputConflict(f"{folder} is a file; the folder jobs write into goes there")
        folder.mkdir(exist_ok=True)


def _stage_and_swap(out_dir: Path, plans: list[RenderedPlan], layouts: list[_Layout]) -> None:
    stages: list[Path] = []
    try:
        for plan, layout in zip(plans, layouts):
            stages.append(folder_swap.make_stage(out_dir, plan.name))
            _build(stages[-1] / "tree", layout)
        done: list[folder_swap.Swap] = []
        try:
            for stage, layout in zip(stages, layouts):
                swap = folder_swap.Swap(stage, layout.folder)
                swap.do()
                done.append(swap)
        except BaseException:
            for swap in reversed(done):
                swap.undo()
            raise
        for swap, layout in zip(done, layouts):  # what a running job wrote since the old folder was read
            old = folder_swap.old_folder(swap.stage, swap.how)
            if old is not None:
                folder_swap.carry_over(old, layout.folder, layout.ours)
    finally:
        for stage in stages:  # after the swaps, each holds an old folder
            folder_swap.remove(stage, ignore_errors=True)


def manifest_hashes(plan_dir: Path) -> dict[str, str]:
    """path -> sha256 as the folder's manifest recorded them when we wrote it; empty without a manifest of ours."""
    paths = _manifest_paths(plan_dir) or set()
    try:
        entries = json.loads((plan_dir / MANIFEST).read_bytes())["files"] if paths else []
        return {e["path"]: str(e.get("sha256", "")) for e in entries if isinstance(e, dict) and e.get("path") in paths}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def generated_paths(folder: Path) -> set[str] | None:
    """The paths a plan folder's manifest says we generated (not the manifest itself); None without one of ours."""
    return _manifest_paths(folder)


def is_generated_folder(folder: Path) -> bool:
    return _manifest_paths(folder) is not None


def file_bytes(path: Path) -> bytes | None:
    """A regular file's bytes, exactly (no newline translation); None for anything else or nothing."""
    try:
        return path.read_bytes() if stat.S_ISREG(os.stat(path).st_mode) else None
    except OSError:
        return None


def diff_lines(data: bytes | None) -> list[str]:
    return (data or b"").decode("utf-8", errors="replace").splitlines(keepends=True)


def mode_ok(path: Path, mode: int) -> bool:
    return (path.stat().st_mode & 0o777) == mode
