"""`mlinfra-compile diff`: decision changes first, then the generated-file diff; --json; --against a git rev."""

import json
import re
import subprocess

from tests.conftest import REPO, run_cli

PLAN = REPO / "examples/llama3-8b-pretrain.yaml"


def test_diff_reports_what_a_change_does_to_the_decisions(tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(PLAN.read_text().replace("deadline: 30d", "deadline: 10d"))
    result = run_cli("diff", PLAN, new)
    assert result.returncode == 0, result.stderr
    assert re.search(r"GPU count (\d+) → (\d+)", result.stdout) and "wall time" in result.stdout
    assert "--- a/plan.json" in result.stdout


def test_diff_json_is_machine_readable(tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(PLAN.read_text().replace("deadline: 30d", "deadline: 10d"))
    data = json.loads(run_cli("diff", PLAN, new, "--format", "json").stdout)
    changed = {c["what"]: c for c in data["result"]["decisions"]}
    assert changed["GPU count"]["new"] > changed["GPU count"]["old"]  # a tighter deadline needs more GPUs


def test_diff_against_a_git_revision(tmp_path):
    repo = tmp_path / "infra"
    repo.mkdir()
    plan = repo / "plan.yaml"
    plan.write_text(PLAN.read_text())
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    plan.write_text(PLAN.read_text().replace("deadline: 30d", "deadline: 10d"))
    result = run_cli("diff", plan, "--against", "HEAD")
    assert result.returncode == 0, result.stderr
    assert re.search(r"GPU count \d+ → \d+", result.stdout)
    assert list(repo.glob(".mlinfra-diff-*")) == []  # the temporary copy is gone


def test_no_change_says_so():
    result = run_cli("diff", PLAN, PLAN)
    assert result.returncode == 0 and "no change to the decisions" in result.stdout
