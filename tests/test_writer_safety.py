"""The writer under attack and under failure: planted symlinks, kills at every step, concurrent compiles, things in
the way, OS errors, odd manifests, CRLF. Each test names the issue-12 finding it covers."""

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from compiler import cli as cli_module
from compiler import folder_swap, plan_lock
from compiler.check import check_plans
from compiler.targets.base import OutputFile
from compiler.writer import MANIFEST, OutputConflict, RenderedPlan, write_plans
from tests.conftest import REPO

PLAN = REPO / "examples/llama3-8b-pretrain.yaml"
OLD = [("a.txt", "old a\n", 0o644), ("bin/run.sh", "#!/bin/sh\necho old\n", 0o755), ("gone/stale.txt", "s\n", 0o644)]
NEW = [("a.txt", "new a\n", 0o644), ("bin/run.sh", "#!/bin/sh\necho new\n", 0o755), ("added.txt", "n\n", 0o600)]


def plan(files, name="demo"):
    return RenderedPlan(name, tuple(OutputFile(p, t, m) for p, t, m in files))


def snapshot(folder):
    """Every entry under folder: path -> (kind, bytes or link target, mode); None when folder is missing."""
    if not os.path.lexists(folder):
        return None
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            kind = "link" if os.path.islink(path) else "dir" if os.path.isdir(path) else "file"
            body = os.readlink(path) if kind == "link" else open(path, "rb").read() if kind == "file" else b""
            found[os.path.relpath(path, folder)] = (kind, body, st.st_mode & 0o7777)
    return found


def manifest_matches(folder):
    listed = json.loads((folder / MANIFEST).read_text())["files"]
    return all(hashlib.sha256((folder / e["path"]).read_bytes()).hexdigest() == e["sha256"] for e in listed)


def with_user_files(out):
    write_plans(out, [plan(OLD)])
    (out / "demo/NOTES.md").write_text("my notes")
    (out / "demo/mine").mkdir()
    (out / "demo/mine/x.txt").write_text("x")
    (out / "demo/bin/helper.sh").write_text("mine too")


# 3: a symlink planted under a staging name is never followed


def test_a_symlink_at_the_old_staging_name_is_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("keep")
    secret.chmod(0o600)
    (tmp_path / "out/demo").mkdir(parents=True)
    (tmp_path / "out/demo/.a.txt.mlinfra-tmp").symlink_to(secret)
    write_plans(tmp_path / "out", [plan(OLD)])
    assert secret.read_text() == "keep" and secret.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "out/demo/a.txt").read_text() == "old a\n" and not (tmp_path / "out/demo/a.txt").is_symlink()


def test_a_symlink_planted_at_a_stage_name_is_removed_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("p")
    (tmp_path / "out").mkdir()
    (tmp_path / "out/.demo.mlinfra-stage-deadbeef").symlink_to(outside)
    write_plans(tmp_path / "out", [plan(OLD)])
    assert (outside / "precious").read_text() == "p" and sorted(os.listdir(outside)) == ["precious"]
    assert os.listdir(tmp_path / "out") == ["demo"]


# 5: a kill at any step leaves the plan folder wholly old or wholly new; the next compile cleans up


def _kill_at(step, out, plans):
    """In a forked child: write, dying (os._exit, like SIGKILL: no cleanup runs) at the step-th file-system change."""
    pid = os.fork()
    if pid == 0:
        count = [0]

        def counted(function):
            def call(*args, **kwargs):
                count[0] += 1
                if count[0] == step:
                    os._exit(0)
                return function(*args, **kwargs)

            return call

        for name in (
            "open",
            "write",
            "fsync",
            "fchmod",
            "chmod",
            "mkdir",
            "link",
            "symlink",
            "rename",
            "replace",
            "unlink",
            "rmdir",
        ):
            setattr(os, name, counted(getattr(os, name)))
        folder_swap.exchange = counted(folder_swap.exchange)
        try:
            write_plans(out, plans)
        except BaseException:
            os._exit(4)
        os._exit(3)  # finished before the step: there are no more steps
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert code in (0, 3), f"the write failed in the child before step {step}"
    return code


@pytest.mark.parametrize("swap", ["exchange", "two-renames"])
def test_a_kill_at_every_step_leaves_the_folder_wholly_old_or_wholly_new(tmp_path, monkeypatch, swap):
    if swap == "two-renames":
        monkeypatch.setattr(folder_swap, "exchange", lambda a, b: False)
    pristine, reference, out = tmp_path / "pristine", tmp_path / "reference", tmp_path / "out"
    with_user_files(pristine)
    shutil.copytree(pristine, reference, symlinks=True)
    write_plans(reference, [plan(NEW)])
    old, new = snapshot(pristine / "demo"), snapshot(reference / "demo")
    seen = set()
    for step in range(1, 1000):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(pristine, out, symlinks=True)
        if _kill_at(step, out, [plan(NEW)]) == 3:
            break
        for stage in folder_swap.leftover_stages(out, "demo"):
            assert os.lstat(stage).st_mode & 0o777 == 0o700  # private
        after = snapshot(out / "demo")
        if after is None and swap == "two-renames":  # killed between the renames: the next compile restores
            folder_swap.recover(out, "demo")
            after = snapshot(out / "demo")
        assert after in (old, new), f"step {step}: a mix of old and new"
        assert manifest_matches(out / "demo")
        seen.add("old" if after == old else "new")
        write_plans(out, [plan(NEW)])  # the next compile finishes the job and leaves nothing behind
        assert snapshot(out / "demo") == new and os.listdir(out) == ["demo"], f"step {step}"
    assert step > 20 and seen == {"old", "new"}


def test_a_kill_while_writing_two_plans_leaves_each_folder_wholly_old_or_wholly_new(tmp_path):
    pristine, reference, out = tmp_path / "pristine", tmp_path / "reference", tmp_path / "out"
    names = ("one", "two")
    write_plans(pristine, [plan(OLD, name) for name in names])
    shutil.copytree(pristine, reference)
    write_plans(reference, [plan(NEW, name) for name in names])
    for step in range(1, 1000):
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(pristine, out, symlinks=True)
        if _kill_at(step, out, [plan(NEW, name) for name in names]) == 3:
            break
        for name in names:
            assert snapshot(out / name) in (snapshot(pristine / name), snapshot(reference / name)), f"step {step}"
        write_plans(out, [plan(NEW, name) for name in names])
        assert all(snapshot(out / name) == snapshot(reference / name) for name in names)
        assert sorted(os.listdir(out)) == list(names)
    assert step > 40


def test_a_failed_swap_puts_every_plan_back(tmp_path, monkeypatch):
    write_plans(tmp_path, [plan(OLD, "one"), plan(OLD, "two")])
    before = snapshot(tmp_path)
    real = folder_swap.exchange

    def second_fails(a, b):
        if str(b).endswith("two"):
            raise OSError(errno.EIO, "I/O error", str(b))
        return real(a, b)

    monkeypatch.setattr(folder_swap, "exchange", second_fails)
    with pytest.raises(OSError):
        write_plans(tmp_path, [plan(NEW, "one"), plan(NEW, "two")])
    assert snapshot(tmp_path) == before


# 6: compiles of one plan at once serialise; a lock held too long fails clearly


WRITER_LOOP = """
import sys
from pathlib import Path
from compiler.targets.base import OutputFile
from compiler.writer import RenderedPlan, write_plans
tag = sys.argv[2]
files = tuple(OutputFile(f"f{i}.txt", f"{tag} {i}\\n") for i in range(30))
for _ in range(25):
    write_plans(Path(sys.argv[1]), [RenderedPlan("demo", files)])
"""


def test_two_processes_compiling_one_plan_serialise(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER_LOOP, str(tmp_path), tag], env=env, stderr=subprocess.PIPE, text=True
        )
        for tag in ("A", "B")
    ]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errors
    bodies = {(tmp_path / f"demo/f{i}.txt").read_text().split()[0] for i in range(30)}
    assert len(bodies) == 1 and manifest_matches(tmp_path / "demo")
    assert os.listdir(tmp_path) == ["demo"]


HOLD_LOCK = """
import sys, time
from pathlib import Path
from compiler.plan_lock import PlanLock
lock = PlanLock(Path(sys.argv[1]), "llama3-8b-pretrain")
lock.acquire()
print("locked", flush=True)
time.sleep(60)
"""


def test_a_lock_held_by_another_process_fails_clearly(tmp_path, monkeypatch, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        monkeypatch.setattr(plan_lock, "WAIT_SECONDS", 0.3)
        assert cli_module.main([str(PLAN), "-o", str(tmp_path)]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[output-locked]" in err and ".llama3-8b-pretrain.mlinfra-lock" in err
    assert not (tmp_path / "llama3-8b-pretrain").exists()


# 7: whatever is in the way is refused before the first write


def test_a_directory_where_a_generated_file_goes_is_refused_before_any_write(tmp_path, capsys):
    assert cli_module.main([str(PLAN), "-o", str(tmp_path)]) == 0
    report = tmp_path / "llama3-8b-pretrain/REPORT.md"
    report.unlink()
    report.mkdir()
    (report / "draft").write_text("mine")
    (tmp_path / "llama3-8b-pretrain/plan.json").write_text("edited, to be regenerated")
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert cli_module.main([str(PLAN), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {report} is a directory; a generated file goes there  [output-conflict]\n"
    assert snapshot(tmp_path) == before


def test_a_file_where_a_generated_directory_goes_is_refused_before_any_write(tmp_path):
    write_plans(tmp_path, [plan(OLD)])
    (tmp_path / "demo/blocker").write_text("a file where a directory must go")
    before = snapshot(tmp_path)
    with pytest.raises(OutputConflict, match="demo/blocker is a file mlinfra-compile did not write"):
        write_plans(tmp_path, [plan([*NEW, ("blocker/x.txt", "x\n", 0o644)])])
    assert snapshot(tmp_path) == before


def test_a_read_only_folder_is_refused_before_any_write(tmp_path, monkeypatch):
    write_plans(tmp_path, [plan(OLD)])
    before = snapshot(tmp_path)
    read_only = str(tmp_path / "demo/bin")
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: str(path).rstrip("/") != read_only and real(path, mode))
    with pytest.raises(OutputConflict, match="demo/bin is read-only"):
        write_plans(tmp_path, [plan(NEW)])
    assert snapshot(tmp_path) == before


def test_a_mount_point_inside_the_plan_folder_is_refused(tmp_path):
    write_plans(tmp_path, [plan(OLD)])
    mount = tmp_path / "demo/data"
    mount.mkdir()
    if (
        not shutil.which("mount")
        or subprocess.run(["mount", "-t", "tmpfs", "none", str(mount)], capture_output=True).returncode
    ):
        pytest.skip("cannot mount here (needs root)")
    try:
        (mount / "dataset.bin").write_text("d")
        with pytest.raises(OutputConflict, match="demo/data is on another filesystem"):
            write_plans(tmp_path, [plan(NEW)])
        assert (mount / "dataset.bin").read_text() == "d" and (tmp_path / "demo/a.txt").read_text() == "old a\n"
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# 12: the environment's errors are exit 2 with one line naming the path, never exit 3


def _compile(out, capsys):
    capsys.readouterr()
    code = cli_module.main([str(PLAN), "-o", str(out)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "case", ["out-is-a-file", "path-through-a-file", "dangling-symlink", "dangling-symlink-inside"]
)
def test_an_unusable_out_is_exit_2_naming_it(tmp_path, capsys, case):
    (tmp_path / "file").write_text("x")
    out = {
        "out-is-a-file": tmp_path / "file",
        "path-through-a-file": tmp_path / "file/sub",
        "dangling-symlink": tmp_path / "link",
        "dangling-symlink-inside": tmp_path / "out",
    }[case]
    if case == "dangling-symlink":
        out.symlink_to(tmp_path / "nowhere")
    if case == "dangling-symlink-inside":
        (out / "llama3-8b-pretrain").mkdir(parents=True)
        (out / "llama3-8b-pretrain/REPORT.md").symlink_to(tmp_path / "nowhere")
    code, err = _compile(out, capsys)
    assert (
        code == 2
        and err.count("\n") == 1
        and (err.startswith(f"{out}") and ": error: " in err or err.startswith(f"error: {out}"))
        and "Traceback" not in err
    )


def test_a_read_only_filesystem_is_exit_2_naming_the_path(tmp_path, monkeypatch, capsys):
    real = os.open

    def read_only(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path).startswith(str(tmp_path)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    code, err = _compile(tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "Read-only file system  [os-error]" in err and str(tmp_path) in err


def test_a_full_disk_is_exit_2_and_leaves_no_temporary_file(tmp_path, monkeypatch, capsys):
    assert cli_module.main([str(PLAN), "-o", str(tmp_path)]) == 0
    (tmp_path / "llama3-8b-pretrain/NOTES.md").write_text("mine")
    before = snapshot(tmp_path)
    writes, real = [0], os.write

    def fills_up(fd, data):
        writes[0] += 1
        if writes[0] > 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", fills_up)
    code, err = _compile(tmp_path, capsys)
    assert code == 2 and err.count("\n") == 1 and "No space left on device  [os-error]" in err
    assert err.startswith(f"{tmp_path}/llama3-8b-pretrain/") and "[os-error]" in err  # names the file being written
    assert snapshot(tmp_path) == before  # no temporary file, no lock file, nothing changed


# 13: odd manifests do not crash, a manifest listing itself survives, a user's file is never overwritten


def _edit_manifest(folder, *extra):
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] += [{"path": p} for p in extra]
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_manifest_entries_naming_a_directory_or_holding_nul_are_ignored(tmp_path):
    write_plans(tmp_path, [plan(OLD)])
    (tmp_path / "demo/mine").mkdir()
    (tmp_path / "demo/mine/x.txt").write_text("x")
    _edit_manifest(tmp_path / "demo", "mine", "bin", "a\0b", "../outside", 7)
    check_plans(tmp_path, [plan(NEW)])
    write_plans(tmp_path, [plan(NEW)])
    assert (tmp_path / "demo/mine/x.txt").read_text() == "x" and manifest_matches(tmp_path / "demo")
    assert check_plans(tmp_path, [plan(NEW)]) == []


def test_a_manifest_listing_itself_is_kept(tmp_path):
    write_plans(tmp_path, [plan(OLD)])
    _edit_manifest(tmp_path / "demo", MANIFEST)
    write_plans(tmp_path, [plan(NEW)])
    assert manifest_matches(tmp_path / "demo")
    assert check_plans(tmp_path, [plan(NEW)]) == []


def test_a_users_file_at_a_generated_path_is_refused_not_overwritten(tmp_path, capsys):
    report = tmp_path / "llama3-8b-pretrain/REPORT.md"
    report.parent.mkdir()
    report.write_text("my own report")
    code, err = _compile(tmp_path, capsys)
    assert code == 2 and err.startswith(f"error: {report} is a file mlinfra-compile did not write")
    assert err.endswith("[output-conflict]\n") and report.read_text() == "my own report"
    assert os.listdir(tmp_path) == ["llama3-8b-pretrain"] and os.listdir(report.parent) == ["REPORT.md"]


def test_a_foreign_file_already_holding_our_bytes_is_adopted(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo/a.txt").write_text("old a\n")
    write_plans(tmp_path, [plan(OLD)])
    assert check_plans(tmp_path, [plan(OLD)]) == []


# 14: --check compares bytes


def test_check_reports_a_crlf_converted_script_as_stale(tmp_path):
    write_plans(tmp_path, [plan(OLD)])
    script = tmp_path / "demo/bin/run.sh"
    script.write_bytes(script.read_bytes().replace(b"\n", b"\r\n"))
    diffs = check_plans(tmp_path, [plan(OLD)])
    assert len(diffs) == 1 and "demo/bin/run.sh" in diffs[0]
