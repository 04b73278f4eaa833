"""The writer: staged and swapped, never deletes a foreign file, never writes outside out/."""

import json
import os

import pytest

from compiler.check import check_plans
from compiler.targets.base import OutputFile
from compiler.writer import MANIFEST, RenderedPlan, UnsafeOutput, write_plans


def plan(*files, name="demo"):
    return RenderedPlan(name, tuple(OutputFile(p, t, m) for p, t, m in files))


def test_writes_files_modes_and_manifest(tmp_path):
    write_plans(tmp_path, [plan(("a.txt", "A\n", 0o644), ("bin/run.sh", "#!/bin/sh\n", 0o755))])
    assert (tmp_path / "demo/a.txt").read_text() == "A\n"
    assert os.stat(tmp_path / "demo/bin/run.sh").st_mode & 0o777 == 0o755
    manifest = json.loads((tmp_path / "demo" / MANIFEST).read_text())
    assert [e["path"] for e in manifest["files"]] == ["a.txt", "bin/run.sh"]


def test_regeneration_removes_only_what_we_generated(tmp_path):
    write_plans(tmp_path, [plan(("old.txt", "x\n", 0o644), ("keep.txt", "k\n", 0o644))])
    (tmp_path / "demo/notes-by-user.txt").write_text("mine")
    write_plans(tmp_path, [plan(("keep.txt", "k2\n", 0o644))])
    assert not (tmp_path / "demo/old.txt").exists()
    assert (tmp_path / "demo/notes-by-user.txt").read_text() == "mine"
    assert (tmp_path / "demo/keep.txt").read_text() == "k2\n"


def test_a_failure_while_staging_leaves_out_exactly_as_it_was(tmp_path, monkeypatch):
    write_plans(tmp_path, [plan(("a.txt", "v1\n", 0o644))])
    before = sorted((p.relative_to(tmp_path), p.is_file() and p.read_bytes()) for p in tmp_path.rglob("*"))

    def fails(fd, data):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "write", fails)
    with pytest.raises(OSError):
        write_plans(tmp_path, [plan(("a.txt", "v2\n", 0o644), ("b/x.txt", "x\n", 0o644))])
    assert sorted((p.relative_to(tmp_path), p.is_file() and p.read_bytes()) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "a/../../x"])
def test_paths_cannot_escape_out(tmp_path, bad):
    with pytest.raises(UnsafeOutput):
        write_plans(tmp_path / "out", [plan((bad, "x", 0o644))])
    assert not (tmp_path / "escape.txt").exists()


def test_symlink_in_out_pointing_outside_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    (out / "demo").mkdir(parents=True)
    (out / "demo" / "slurm").symlink_to(outside)
    with pytest.raises(UnsafeOutput):
        write_plans(out, [plan(("slurm/train.sbatch", "x", 0o644))])
    assert list(outside.iterdir()) == []


def test_check_reports_stale_and_fresh(tmp_path):
    rendered = [plan(("a.txt", "v1\n", 0o644))]
    assert check_plans(tmp_path, rendered)  # nothing written yet: stale
    write_plans(tmp_path, rendered)
    assert check_plans(tmp_path, rendered) == []
    diffs = "".join(check_plans(tmp_path, [plan(("a.txt", "v2\n", 0o644))]))
    assert "-v1" in diffs and "+v2" in diffs
    assert (tmp_path / "demo/a.txt").read_text() == "v1\n"  # --check writes nothing
