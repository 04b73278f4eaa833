"""The pre-commit hook, run for real with `pre-commit try-repo` against a temporary git repo."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.tools.realtools import require_tool

pytestmark = [pytest.mark.realtool, pytest.mark.slow]


def git(*args, cwd):
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )


def test_hook_passes_on_fresh_out_and_fails_on_stale(tmp_path):
    pre_commit = shutil.which("pre-commit")
    require_tool(
        "pre-commit", pre_commit is not None, "pre-commit is not installed (scripts/install-test-deps.sh installs it)"
    )
    infra = tmp_path / "infra"
    (infra / "plans").mkdir(parents=True)
    plan = infra / "plans/llama3-8b-pretrain.yaml"
    plan.write_text((REPO / "examples/llama3-8b-pretrain.yaml").read_text())
    subprocess.run(
        [sys.executable, "-m", "compiler", str(plan), "-o", str(infra / "out")], check=True, capture_output=True
    )
    git("init", "-q", cwd=infra)
    git("add", ".", cwd=infra)
    git("commit", "-qm", "plans", cwd=infra)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home")}
    cmd = [pre_commit, "try-repo", str(REPO), "mlinfra-compile", "--files", "plans/llama3-8b-pretrain.yaml"]
    fresh = subprocess.run(cmd, cwd=infra, env=env, capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    plan.write_text(plan.read_text().replace("deadline: 30d", "deadline: 20d"))
    stale = subprocess.run(cmd, cwd=infra, env=env, capture_output=True, text=True, timeout=600)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "stale" in stale.stdout + stale.stderr


def _infra_with_a_compiled_plan(tmp_path):
    infra = tmp_path / "infra"
    (infra / "plans").mkdir(parents=True)
    plan = infra / "plans/llama3-8b-pretrain.yaml"
    plan.write_text((REPO / "examples/llama3-8b-pretrain.yaml").read_text())
    subprocess.run(
        [sys.executable, "-m", "compiler", str(infra / "plans"), "-o", str(infra / "out")],
        check=True,
        capture_output=True,
    )
    git("init", "-q", cwd=infra)
    git("add", ".", cwd=infra)
    git("commit", "-qm", "plans", cwd=infra)
    return infra, plan


def _hook(infra, tmp_path, *selection):
    pre_commit = shutil.which("pre-commit")
    require_tool(
        "pre-commit", pre_commit is not None, "pre-commit is not installed (scripts/install-test-deps.sh installs it)"
    )
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home")}
    return subprocess.run(
        [pre_commit, "try-repo", str(REPO), "mlinfra-compile", *selection],
        cwd=infra,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_all_files_feeds_no_generated_yaml_to_the_compiler(tmp_path):
    infra, _ = _infra_with_a_compiled_plan(tmp_path)
    result = _hook(infra, tmp_path, "--all-files")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_commit_that_only_edits_a_generated_file_fails(tmp_path):
    infra, _ = _infra_with_a_compiled_plan(tmp_path)
    sbatch = infra / "out/llama3-8b-pretrain/slurm/train.sbatch"
    sbatch.write_text(sbatch.read_text().replace("--time=", "--time=9"))
    git("add", ".", cwd=infra)
    result = _hook(infra, tmp_path, "--files", "out/llama3-8b-pretrain/slurm/train.sbatch")
    assert result.returncode == 1 and "stale-edited-by-hand" in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )


def test_deleting_a_plan_reports_its_orphan_folder(tmp_path):
    infra, plan = _infra_with_a_compiled_plan(tmp_path)
    (infra / "plans/other.yaml").write_text((REPO / "examples/llama3-8b-chat.yaml").read_text())
    subprocess.run(
        [sys.executable, "-m", "compiler", str(infra / "plans"), "-o", str(infra / "out")],
        check=True,
        capture_output=True,
    )
    plan.unlink()
    result = _hook(infra, tmp_path, "--files", "plans/other.yaml")
    assert (
        result.returncode == 1
        and "stale-orphan" in result.stdout + result.stderr
        and "rm -r" in result.stdout + result.stderr
    )
