"""A recompile while a job runs: nothing the job wrote is lost. Jobs write logs and results into out/runs/<plan>/,
which no compile replaces; what a job writes inside the plan's folder anyway is carried into the new folder."""

from __future__ import annotations

import os
import threading
import time

from compiler.targets.base import OutputFile
from compiler.writer import RenderedPlan, write_plans


def _plan(version: int) -> RenderedPlan:
    return RenderedPlan(
        "p", (OutputFile("REPORT.md", f"v{version}\n"), OutputFile("slurm/train.sbatch", "#!/bin/sh\n"))
    )


def _job(folder, stop: threading.Event, written: list[str]) -> None:
    """Creates a file every 0.5 ms (by path, as a job whose paths name the plan folder does), in a folder of its own
    and beside the generated files."""
    i = 0
    while not stop.is_set():
        name = f"logs/step-{i}.txt" if i % 2 else f"step-{i}.txt"
        try:
            (folder / "logs").mkdir(exist_ok=True)
            (folder / name).write_text(str(i))
            written.append(name)
        except FileNotFoundError:  # the folder's path is between two renames for an instant: try again
            pass
        i += 1
        time.sleep(0.0005)


def test_files_a_job_writes_during_recompiles_all_survive(tmp_path):
    out = tmp_path / "out"
    write_plans(out, [_plan(0)])
    stop, written = threading.Event(), []
    job = threading.Thread(target=_job, args=(out / "p", stop, written))
    job.start()
    try:
        for version in range(1, 13):
            write_plans(out, [_plan(version)])
            time.sleep(0.005)
    finally:
        stop.set()
        job.join()
    lost = [name for name in written if not (out / "p" / name).exists()]
    assert len(written) > 100 and lost == [], f"{len(lost)} of {len(written)} lost"
    assert (out / "p" / "REPORT.md").read_text() == "v12\n"


def test_a_file_replaced_after_the_scan_keeps_the_users_newest_bytes(tmp_path):
    from compiler import folder_swap

    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        (folder / "sub").mkdir(parents=True)
    (old / "notes.txt").write_text("newest")
    (new / "notes.txt").write_text("stale link")
    (old / "REPORT.md").write_text("old generated")
    (new / "REPORT.md").write_text("new generated")
    (old / "sub" / "late.txt").write_text("late")
    (old / "late-dir").mkdir()
    (old / "late-dir" / "x").write_text("x")
    moved = folder_swap.carry_over(old, new, {"REPORT.md"})
    assert moved == 3
    assert (new / "notes.txt").read_text() == "newest" and (new / "REPORT.md").read_text() == "new generated"
    assert (new / "sub" / "late.txt").read_text() == "late" and (new / "late-dir" / "x").read_text() == "x"


def test_a_job_working_in_the_runs_folder_keeps_its_directory(tmp_path):
    out = tmp_path / "out"
    plan = RenderedPlan("p", (OutputFile("REPORT.md", "v0\n"),), runs="../runs/p")
    write_plans(out, [plan])
    runs = out / "runs" / "p"
    assert runs.is_dir()
    inode = runs.stat().st_ino
    (runs / "job.out").write_text("running")
    here = os.open(runs, os.O_RDONLY)
    try:
        for version in range(3):
            write_plans(out, [RenderedPlan("p", (OutputFile("REPORT.md", f"v{version}\n"),), runs="../runs/p")])
        assert os.stat(here).st_nlink > 0 and runs.stat().st_ino == inode  # the job's cwd: the same, live folder
    finally:
        os.close(here)
    assert (runs / "job.out").read_text() == "running"


def test_a_plan_cannot_be_named_as_the_runs_folder(tmp_path):
    import yaml

    from tests.conftest import REPO, run_cli

    plan = yaml.safe_load((REPO / "examples" / "llama3-8b-pretrain.yaml").read_text())
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump({**plan, "name": "runs"}))
    result = run_cli(tmp_path / "plan.yaml", "-o", tmp_path / "out")
    assert result.returncode == 2 and "plan.yaml:21:7: error: name: runs is reserved" in result.stderr.split("\n")[0]
    assert not (tmp_path / "out").exists()


def test_the_compiled_sbatch_works_in_the_runs_folder_the_writer_made(tmp_path):
    from tests.conftest import REPO, run_cli

    out = tmp_path / "out"
    assert run_cli(REPO / "examples" / "llama3-8b-pretrain.yaml", "-o", out).returncode == 0
    sbatch = (out / "llama3-8b-pretrain" / "slurm" / "train.sbatch").read_text()
    assert "#SBATCH --chdir=../runs/llama3-8b-pretrain\n" in sbatch
    assert (out / "llama3-8b-pretrain" / "../runs/llama3-8b-pretrain").resolve() == out / "runs" / "llama3-8b-pretrain"
    assert (out / "runs" / "llama3-8b-pretrain").is_dir() and not list((out / "runs").glob("*/*"))
