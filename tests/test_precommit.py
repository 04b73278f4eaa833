"""The pre-commit hook, run for real with `pre-commit try-repo` against a temporary git repo."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.tools.realtools import require_tool

pytestmark = [pytest.mark.realtool, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def pre_commit_home(tmp_path_factory):
    """One PRE_COMMIT_HOME for the module: `try-repo` of a clean checkout builds the hook's environment once (a pip
    install of this repository, ~20 s) and the other tests reuse it, as a developer's own cache does."""
    home, before = tmp_path_factory.mktemp("pc-home"), os.environ.get("PRE_COMMIT_HOME")
    os.environ["PRE_COMMIT_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("PRE_COMMIT_HOME")
    else:
        os.environ["PRE_COMMIT_HOME"] = before


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
    env = dict(os.environ)
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
    env = dict(os.environ)
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


def _readme_hook_config() -> str:
    """The `.pre-commit-config.yaml` README shows, word for word."""
    section = (REPO / "README.md").read_text().split("## In pre-commit and CI", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def _shim_path(tmp_path) -> str:
    """A PATH whose mlinfra-compile is this checkout's (the README's hook has `language: system`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "mlinfra-compile"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m compiler "$@"\n')
    shim.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def _run_readme_hook(infra, tmp_path, path_env):
    pre_commit = shutil.which("pre-commit")
    require_tool(
        "pre-commit", pre_commit is not None, "pre-commit is not installed (scripts/install-test-deps.sh installs it)"
    )
    env = {**os.environ, "PATH": path_env}
    return subprocess.run([pre_commit, "run"], cwd=infra, env=env, capture_output=True, text=True, timeout=600)


def _two_plans_committed(tmp_path):
    infra, plan = _infra_with_a_compiled_plan(tmp_path)
    (infra / "plans/chat.yaml").write_text((REPO / "examples/llama3-8b-chat.yaml").read_text())
    (infra / ".pre-commit-config.yaml").write_text(_readme_hook_config())
    subprocess.run([sys.executable, "-m", "compiler", "plans", "-o", "out"], cwd=infra, check=True, capture_output=True)
    git("add", ".", cwd=infra)
    git("commit", "-qm", "two plans", cwd=infra)
    return infra, plan


def test_readme_hook_fails_a_commit_that_only_deletes_a_plan_and_its_fix_removes_the_orphan(tmp_path):
    infra, plan = _two_plans_committed(tmp_path)
    path_env = _shim_path(tmp_path)
    git("rm", "-q", str(plan.relative_to(infra)), cwd=infra)  # staged: one deletion, nothing else
    failed = _run_readme_hook(infra, tmp_path, path_env)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1 and "stale-orphan" in output, output
    fix = re.search(r"run: (mlinfra-compile plans -o out --prune)$", output, re.M)
    assert fix, output
    subprocess.run(fix.group(1), shell=True, cwd=infra, check=True, env={**os.environ, "PATH": path_env})
    assert not (infra / "out/llama3-8b-pretrain").exists() and (infra / "out/llama3-8b-chat").is_dir()
    git("add", "-A", cwd=infra)
    passed = _run_readme_hook(infra, tmp_path, path_env)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_readme_hook_reports_a_renamed_plan_in_a_few_lines(tmp_path):
    infra, plan = _two_plans_committed(tmp_path)
    plan.write_text(plan.read_text().replace("name: llama3-8b-pretrain", "name: llama3-8b-renamed"))
    git("add", "-A", cwd=infra)
    result = _run_readme_hook(infra, tmp_path, _shim_path(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "stale-orphan" in output and "stale-missing" in output, output
    assert len(output.splitlines()) <= 12, output  # was over a thousand lines: every new file's whole text


def test_exported_hook_runs_when_only_a_deletion_is_staged(tmp_path):
    infra, plan = _two_plans_committed(tmp_path)
    (infra / ".pre-commit-config.yaml").unlink()
    git("rm", "-q", str(plan.relative_to(infra)), cwd=infra)
    result = _hook(infra, tmp_path)  # try-repo with no file selection: the staged files, here only a deletion
    assert result.returncode == 1 and "stale-orphan" in result.stdout + result.stderr, result.stdout + result.stderr
