"""Putting a complete new plan folder in place of the old one in one step, and cleaning up after a cut-short swap.

The new folder is built as `<stage>/tree`, where `<stage>` is `out/.<plan>.mlinfra-stage-<8 hex>` (mode 0700, made
under the plan's lock, on the same filesystem as `out/<plan>`). On Linux, renameat2(RENAME_EXCHANGE) swaps
`out/<plan>` and `<stage>/tree` atomically: a kill before it leaves the old folder, after it the new one (the old
one then lies in `<stage>/tree` until the stage is removed). Where the exchange is unsupported (another OS, some
network filesystems) two renames are used: `out/<plan>` -> `<stage>/old`, then `<stage>/tree` -> `out/<plan>`; a
kill between them leaves no `out/<plan>`, and `recover`, which the next compile of that plan runs first, renames
`<stage>/old` back.

Entries that appear in the old folder after the writer read it (a job still writing there) are moved into the new
folder after the swap (`carry_over`), before the old folder is removed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import shutil
import stat
import sys
from pathlib import Path

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def _load_renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc before 2.28, musl without it
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


_renameat2 = _load_renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing directories atomically; False (and nothing done) where the system cannot."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(b))


def make_stage(out_dir: Path, plan_name: str) -> Path:
    stage = out_dir / f".{plan_name}.mlinfra-stage-{secrets.token_hex(4)}"
    os.mkdir(stage, 0o700)
    return stage


def leftover_stages(out_dir: Path, plan_name: str) -> list[Path]:
    pattern = re.compile(re.escape(f".{plan_name}.mlinfra-stage-") + "[0-9a-f]{8}")
    with os.scandir(out_dir) as entries:
        return sorted(Path(e.path) for e in entries if pattern.fullmatch(e.name))


def recover(out_dir: Path, plan_name: str) -> None:
    """Finish what a killed compile of this plan left: restore a folder moved aside, remove its stages (lock held)."""
    folder = out_dir / plan_name
    for stage in leftover_stages(out_dir, plan_name):
        if os.path.lexists(stage / "old") and not os.path.lexists(folder):
            os.rename(stage / "old", folder)
        remove(stage)


def remove(path: Path, ignore_errors: bool = False) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=ignore_errors)
    else:
        path.unlink(missing_ok=True)  # something planted under a stage's name: never followed


class Swap:
    """Puts `<stage>/tree` at `folder`; `undo()` puts the old folder back (until the stage is removed)."""

    def __init__(self, stage: Path, folder: Path):
        self.stage, self.folder, self.how = stage, folder, ""

    def do(self) -> None:
        tree, old = self.stage / "tree", self.stage / "old"
        if not os.path.lexists(self.folder):
            os.rename(tree, self.folder)
            self.how = "created"
        elif exchange(tree, self.folder):
            self.how = "exchanged"
        else:
            os.rename(self.folder, old)
            try:
                os.rename(tree, self.folder)
            except BaseException:
                os.rename(old, self.folder)
                raise
            self.how = "renamed"

    def undo(self) -> None:
        tree, old = self.stage / "tree", self.stage / "old"
        if self.how == "exchanged":
            exchange(tree, self.folder)
        elif self.how in ("created", "renamed"):
            os.rename(self.folder, tree)
            if self.how == "renamed":
                os.rename(old, self.folder)


def old_folder(stage: Path, how: str) -> Path | None:
    """Where a done swap left the old folder: `<stage>/tree` after an exchange, `<stage>/old` after two renames."""
    return {"exchanged": stage / "tree", "renamed": stage / "old"}.get(how)


def carry_over(old: Path, new: Path, ours: set[str], passes: int = 3) -> int:
    """Moves into `new` what the old folder holds and the new one lacks or holds as another file (an entry created or
    replaced after the writer read the old folder); `ours` (generated paths, old and new) stay behind. Repeats until a
    pass moves nothing, at most `passes` times; returns how many entries moved."""
    moved_total = 0
    for _ in range(passes):
        moved = _carry_directory(old, new, "", ours)
        moved_total += moved
        if not moved:
            break
    return moved_total


def _carry_directory(old: Path, new: Path, relative: str, ours: set[str]) -> int:
    moved = 0
    try:
        entries = list(os.scandir(old / relative if relative else old))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        path = f"{relative}/{entry.name}" if relative else entry.name
        if path in ours:
            continue
        try:
            there = os.lstat(new / path)
        except FileNotFoundError:
            there = None
        if entry.is_dir(follow_symlinks=False):
            if there is None:
                os.rename(entry.path, new / path)
                moved += 1
            elif stat.S_ISDIR(there.st_mode):
                moved += _carry_directory(old, new, path, ours)
        elif there is None or (not stat.S_ISDIR(there.st_mode) and there.st_ino != entry.inode()):
            os.replace(entry.path, new / path)  # created, or replaced by the user, after the old folder was read
            moved += 1
    return moved
