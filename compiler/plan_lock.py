"""One compile at a time per plan folder: an flock on `out/.<plan>.mlinfra-lock`, held while the plan is written.

A second compile of the same plan waits up to `WAIT_SECONDS`, then fails with `PlanLocked`. The lock file is
removed on release (while still locked); a waiter that then locks the removed file sees that the path now names
another file (or none) and starts over, so two holders never coexist.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

WAIT_SECONDS = 60.0


class PlanLocked(Exception):
    """Another process holds the plan's lock for longer than WAIT_SECONDS."""

    code = "output-locked"


def lock_path(out_dir: Path, plan_name: str) -> Path:
    return out_dir / f".{plan_name}.mlinfra-lock"


class PlanLock:
    def __init__(self, out_dir: Path, plan_name: str):
        self.path, self.plan_name, self.fd = lock_path(out_dir, plan_name), plan_name, -1

    def acquire(self) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                while not _try_lock(fd):
                    if time.monotonic() > deadline:
                        raise PlanLocked(
                            f"{self.path}: another mlinfra-compile has been writing plan "
                            f"'{self.plan_name}' for {WAIT_SECONDS:g} s; try again when it is done"
                        )
                    time.sleep(0.05)
                if _same_file(fd, self.path):
                    self.fd = fd
                    return
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # released and removed before we got it: lock the file now at that path

    def release(self) -> None:
        if self.fd >= 0:
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            finally:
                os.close(self.fd)
                self.fd = -1


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)
