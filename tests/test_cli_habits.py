"""One habit across commands: init, the compile/check verbs, --format json on every command (one schema), diff's
exit code and file names, check's up-to-date line and its hash path for unchanged plans, shell completion."""

import json
import subprocess

import pytest

from compiler import cli as cli_module
from compiler import pipeline
from tests.conftest import REPO, run_cli

PLAN = REPO / "examples/llama3-8b-pretrain.yaml"
SCHEMA = json.loads((REPO / "schemas/cli-output.schema.json").read_text())


def _json(result, code=0):
    import jsonschema

    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert result.returncode == code == data["exit_code"], result.stderr
    return data


def test_init_writes_a_starter_that_compiles_and_never_overwrites(tmp_path):
    plan = tmp_path / "plans" / "my-first.yaml"
    assert run_cli("init", plan).returncode == 0
    assert "name: my-first " in plan.read_text() and "# names the out/ folder" in plan.read_text().splitlines()[1]
    compiled = run_cli("compile", plan, "-o", tmp_path / "out")
    assert compiled.returncode == 0 and (tmp_path / "out/my-first/slurm/train.sbatch").is_file(), compiled.stderr
    again = run_cli("init", plan)
    assert again.returncode == 2 and "[file-exists]" in again.stderr
    assert run_cli("init", plan, "--force", "--example", "llama3-8b-chat").returncode == 0
    assert "workload: serve" in plan.read_text()


def test_init_lists_the_shipped_examples_and_suggests_a_name():
    listed = _json(run_cli("init", "--list", "--format", "json"))
    assert listed["result"]["examples"] == sorted(p.stem for p in (REPO / "examples").glob("*.yaml"))
    wrong = run_cli("init", "x.yaml", "--example", "llama3-8b-chatt")
    assert wrong.returncode == 2 and "did you mean 'llama3-8b-chat'" in wrong.stderr


@pytest.mark.parametrize(
    "args, code",
    [
        (["explain", str(PLAN)], 0),
        (["schema"], 0),
        (["completion", "zsh"], 0),
        (["diff", str(PLAN), str(PLAN)], 0),
        (["explain", "missing.yaml"], 2),
    ],
    ids=["explain", "schema", "completion", "diff", "explain-missing"],
)
def test_every_command_speaks_the_one_json_schema(args, code):
    data = _json(run_cli(*args, "--format", "json"), code)
    assert data["command"] == args[0] and (data["problems"] if code else data["result"])


def test_diff_exit_code_follows_git(tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(PLAN.read_text().replace("deadline: 30d", "deadline: 10d"))
    assert run_cli("diff", PLAN, new, "--exit-code").returncode == 1
    assert run_cli("diff", PLAN, new).returncode == 0
    assert run_cli("diff", PLAN, PLAN, "--exit-code").returncode == 0


def test_diff_names_the_file_an_error_is_in(tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(PLAN.read_text().replace("  tokens: 1T", "  tokens: lots"))
    result = run_cli("diff", PLAN, new)
    assert result.returncode == 2 and result.stderr.startswith(f"{new}:"), result.stderr
    assert str(PLAN) not in result.stderr


def test_diff_against_a_revision_ignores_a_header_only_difference(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.read_text())
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=tmp_path, check=True, env={**env, "PATH": "/usr/bin:/bin"})
    data = _json(run_cli("diff", plan, "--against", "HEAD", "--exit-code", "--format", "json"))
    assert data["result"] == {"decisions": [], "files_diff": ""}


def test_explain_help_gives_its_own_exit_codes():
    help_text = run_cli("explain", "--help").stdout
    assert "stale" not in help_text and "4 infeasible" in help_text


def test_check_verb_says_up_to_date_in_one_line(tmp_path):
    assert run_cli("compile", PLAN, "-o", tmp_path).returncode == 0
    fresh = run_cli("check", PLAN, "-o", tmp_path)
    assert fresh.returncode == 0 and fresh.stdout == f"1 plan up to date in {tmp_path}\n" and fresh.stderr == ""
    assert run_cli("check", PLAN, "-o", tmp_path, "-q").stdout == ""


def _compiled_folder(tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "a.yaml").write_text(PLAN.read_text())
    assert cli_module.main([str(plans), "-o", str(tmp_path / "out"), "-q"]) == 0
    return plans


def test_check_sizes_no_unchanged_plan_but_catches_a_hand_edit(tmp_path, monkeypatch, capsys):
    plans = _compiled_folder(tmp_path)
    calls = []
    real = pipeline.compile_plan
    monkeypatch.setattr(pipeline, "compile_plan", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert cli_module.main(["check", str(plans), "-o", str(tmp_path / "out")]) == 0
    assert calls == []  # checked by hash
    sbatch = tmp_path / "out/llama3-8b-pretrain/slurm/train.sbatch"
    sbatch.write_text(sbatch.read_text() + "# mine\n")
    capsys.readouterr()
    assert cli_module.main(["check", str(plans), "-o", str(tmp_path / "out")]) == 1
    assert len(calls) == 1 and "[stale-edited-by-hand]" in capsys.readouterr().err


def test_check_compiles_a_plan_whose_named_catalog_changed(tmp_path, capsys):
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "gpus.yaml").write_text("entries:\n  - id: h100-sxm-80gb\n    price_usd_per_gpu_hour: {on-demand: 6.88}\n")
    text = PLAN.read_text().replace("  pricing: on-demand\n", "  pricing: on-demand\n  catalog: gpus.yaml\n")
    (plans / "a.yaml").write_text(text)
    out = tmp_path / "out"
    assert cli_module.main([str(plans / "a.yaml"), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    assert json.loads((out / "llama3-8b-pretrain/.mlinfra-manifest.json").read_text())["inputs"]["files"] == [
        "gpus.yaml"
    ]
    (plans / "gpus.yaml").write_text((plans / "gpus.yaml").read_text().replace("6.88", "3.00"))
    assert cli_module.main(["check", str(plans / "a.yaml"), "-o", str(out)]) == 1
    assert "[stale-plan-changed]" in capsys.readouterr().err


def test_bash_completion_offers_commands_and_options():
    script = run_cli("completion", "bash").stdout
    probe = (
        f"{script}\nCOMP_WORDS=(mlinfra-compile ch); COMP_CWORD=1; _mlinfra_compile; echo ${{COMPREPLY[@]}}\n"
        "COMP_WORDS=(mlinfra-compile diff --ex); COMP_CWORD=2; _mlinfra_compile; echo ${COMPREPLY[@]}\n"
    )
    lines = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "check" in lines[0].split() and lines[1].split() == ["--exit-code"]
