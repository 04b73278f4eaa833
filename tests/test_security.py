"""Injection findings: the plan's file name, user-catalog ids and strings, and git revisions reach
generated files and commands only escaped or validated; a hostile one is refused with exit 2 and one line."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from compiler.targets.base import OutputFile, with_header
from tests.conftest import REPO, run_cli

PLAN = REPO / "examples" / "llama3-8b-pretrain.yaml"
SMALL = {
    "name": "small",
    "workload": "finetune",
    "model": {"preset": "llama-3.1-8b"},
    "train": {"dataset_tokens": "10M", "epochs": 1, "seq_len": 2048, "global_batch": 16, "method": "lora"},
    "cluster": {"gpu": "my-gpu", "count": 8, "catalog": "gpus.yaml"},
}


def _user_gpu(**changes) -> dict:
    """A valid user catalog entry (an H100 under another id), with `changes` applied."""
    h100 = yaml.safe_load((REPO / "compiler" / "catalog" / "gpus.yaml").read_text())
    entry = next(e for e in h100["entries"] if e["id"] == "h100-sxm-80gb")
    return {**entry, "id": "my-gpu", **changes}


def _compile_with_catalog(tmp_path, entry: dict):
    (tmp_path / "gpus.yaml").write_text(yaml.safe_dump({"entries": [entry]}))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump({**SMALL, "cluster": {**SMALL["cluster"], "gpu": entry["id"]}}))
    return run_cli(tmp_path / "plan.yaml", "-o", tmp_path / "out")


def _located_error(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    first = result.stderr.splitlines()[0]  # a diagnostic may quote its source line below, with a caret
    assert "Traceback" not in result.stderr and ": error: " in first, result.stderr
    return first


def test_a_user_catalog_gpu_like_the_packaged_one_compiles(tmp_path):
    """The control for the refusals below: the same catalog with a plain id works."""
    result = _compile_with_catalog(tmp_path, _user_gpu())
    assert result.returncode == 0, result.stderr
    assert "my-gpu" in (tmp_path / "out" / "small" / "slurm" / "train.sbatch").read_text()


@pytest.mark.parametrize("name", ["plan\ntouch pwned\n.yaml", "plan\u2028x.yaml", "plan\x1b[31m.yaml", "plan\rx.yaml"])
def test_a_file_name_with_a_line_break_is_refused(tmp_path, name):
    (tmp_path / name).write_text(PLAN.read_text())
    error = _located_error(run_cli(tmp_path / name, "-o", tmp_path / "out"))
    assert "[unsafe-file-name]" in error and "\x1b" not in error
    assert not (tmp_path / "out").exists()


def test_a_header_escapes_what_the_file_name_cannot_hold():
    """Defence in depth: even a name that got past the loader cannot end the header comment."""
    for path in ("slurm/train.sbatch", "k8s/job.yaml", "REPORT.md"):
        text = with_header(OutputFile(path, "body\n"), "x\nkind: ClusterRoleBinding\n--->", "p").text
        header, body = text.split("body\n")
        assert body == "" and "kind: ClusterRoleBinding" in header
        if path.endswith(".md"):
            assert header.count("\n") == 1 and header.count("-->") == 1 and header.rstrip().endswith(" -->")
        else:
            assert all(line.startswith("# ") for line in header.splitlines())


def test_dashes_in_a_file_name_cannot_close_the_report_comment(tmp_path):
    name = "a--->b.yaml"
    (tmp_path / name).write_text(PLAN.read_text())
    assert run_cli(tmp_path / name, "-o", tmp_path / "out").returncode == 0
    first = (tmp_path / "out" / "llama3-8b-pretrain" / "REPORT.md").read_text().splitlines()[0]
    assert first.startswith("<!-- ") and first.endswith(" -->") and first.count("--") == 1 + 1  # '<!--' and '-->'


def test_a_file_name_with_spaces_regenerates_as_one_shell_word(tmp_path):
    (tmp_path / "my plan.yaml").write_text(PLAN.read_text())
    assert run_cli(tmp_path / "my plan.yaml", "-o", tmp_path / "out").returncode == 0
    sbatch = (tmp_path / "out" / "llama3-8b-pretrain" / "slurm" / "train.sbatch").read_text()
    assert "# Regenerate: mlinfra-compile 'my plan.yaml' -o <out>\n" in sbatch


@pytest.mark.parametrize(
    "field,value",
    [
        ("id", "h100\ntouch /tmp/pwned"),
        ("id", "H100 SXM"),
        ("id", "../x"),
        ("name", "H100\ntouch /tmp/pwned"),
        ("source", "see \x1b]0;title\x07"),
        ("k8s_product_label", "NVIDIA H100\n- x"),
        ("slurm_gres_type", "h100,gpu:8"),
        ("as_of", "today"),
    ],
)
def test_a_user_catalog_string_that_could_break_a_line_is_refused(tmp_path, field, value):
    error = _located_error(_compile_with_catalog(tmp_path, _user_gpu(**{field: value})))
    assert error.startswith(f"{tmp_path / 'gpus.yaml'}:") and "[invalid-catalog]" in error  # named by its file
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "field,value",
    [
        ("memory_bandwidth_bytes_per_second", 5e-324),
        ("intra_node_bandwidth_bytes_per_second", 1e-300),
        ("price_usd_per_gpu_hour", {"on-demand": 1e308}),
        ("dense_tflops", {"bf16": 5e-324}),
        ("memory_bytes", 1),
        ("tdp_watts", 1e300),
        ("achievable_matmul_fraction", 1e-300),
    ],
)
def test_extreme_catalog_figures_are_refused(tmp_path, field, value):
    entry = _user_gpu()
    entry[field] = {**entry[field], **value} if isinstance(value, dict) else value
    error = _located_error(_compile_with_catalog(tmp_path, entry))
    assert "out of range" in error and field in error


def _git_repo(tmp_path):
    repo = tmp_path / "infra"
    repo.mkdir()
    (repo / "plan.yaml").write_text(PLAN.read_text())
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    return repo


@pytest.mark.parametrize("revision", ["--output={victim}", "", "   ", "no-such-branch", "HEAD:plan.yaml", "-h"])
def test_a_revision_that_is_not_a_commit_is_refused(tmp_path, revision):
    repo = _git_repo(tmp_path)
    victim = tmp_path / "victim"
    error = _located_error(run_cli("diff", repo / "plan.yaml", f"--against={revision.format(victim=victim)}"))
    assert "[git-revision]" in error
    assert not victim.exists()


def test_diff_against_outside_a_repository_is_exit_2(tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN.read_text())
    error = _located_error(run_cli("diff", tmp_path / "plan.yaml", "--against", "HEAD"))
    assert "[git-revision]" in error


def _plan_with(tmp_path, changes: dict, base: dict | None = None):
    plan = yaml.safe_load(PLAN.read_text()) if base is None else base
    for dotted, value in changes.items():
        node = plan
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    return run_cli(tmp_path / "plan.yaml", "-o", tmp_path / "out")


@pytest.mark.parametrize(
    "field,value", [("train.mtbf_gpu_hours", 5e-324), ("train.epochs", 5e-324), ("train.bytes_per_token", 5e-324)]
)
def test_a_denormal_plan_figure_is_refused_where_it_is_written(tmp_path, field, value):
    changes = {
        field: value,
        **({"train.dataset_tokens": "1T", "train.tokens": None} if field == "train.epochs" else {}),
    }
    plan = yaml.safe_load(PLAN.read_text())
    if field == "train.epochs":
        del plan["train"]["tokens"]
        changes.pop("train.tokens")
    error = _located_error(_plan_with(tmp_path, changes, plan))
    assert field in error and ":0:0:" not in error


def test_no_generated_json_may_hold_nan_or_infinity():
    from compiler.targets.base import dump_json

    with pytest.raises(ValueError):
        dump_json({"x": float("inf")})


@pytest.mark.parametrize("source", ["/dev/zero", "/dev/null", "fifo", "directory"])
def test_a_plan_that_is_not_a_regular_file_is_refused_unread(tmp_path, source):
    import os

    path = {"fifo": tmp_path / "fifo", "directory": tmp_path}.get(source, source)
    if source == "fifo":
        os.mkfifo(path)  # reading it would block forever
    error = _located_error(run_cli(path, "-o", tmp_path / "out"))
    assert "[file-not-regular]" in error or "[file-unreadable]" in error or "[no-plans]" in error  # a folder: its plans


def test_a_catalog_that_is_not_yaml_is_never_quoted(tmp_path):
    (tmp_path / "secrets.env").write_text("HF_TOKEN: hf_abcdef\n: oops hf_abcdef\n")
    result = _plan_with(tmp_path, {"cluster.catalog": "secrets.env"})
    assert "[invalid-catalog]" in _located_error(result) and "hf_abcdef" not in result.stderr


@pytest.mark.parametrize("catalog,why", [("/dev/zero", "not a regular file"), (".", "cannot read file")])
def test_a_catalog_that_is_a_device_or_a_folder_is_refused_at_the_plans_field(tmp_path, catalog, why):
    """Nothing in it to point at: the error points at the plan's cluster.catalog (file:line:col) and names the path."""
    error = _located_error(_plan_with(tmp_path, {"cluster.catalog": catalog}))
    assert why in error and "cluster.catalog" in error and "[invalid-catalog]" in error
    assert re.match(r"[^:]+:[1-9][0-9]*:[1-9][0-9]*: error: ", error), error


def test_a_deeply_nested_catalog_is_refused(tmp_path):
    (tmp_path / "deep.yaml").write_text("entries: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nesting deeper" in _located_error(_plan_with(tmp_path, {"cluster.catalog": "deep.yaml"}))


def test_half_a_million_tiny_nodes_are_refused_from_the_stream(tmp_path):
    """Counted while parsing, so refused before PyYAML builds 500k nodes (10 s, 395 MB before)."""
    import sys

    (tmp_path / "plan.yaml").write_text("a: [" + ",".join(["0"] * 500_000) + "]\n")
    # VmHWM is this process's own peak: ru_maxrss keeps the forking parent's (a pytest worker's) across exec
    probe = (
        "import re, sys; from compiler.cli import main; code = main(sys.argv[1:]); "
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
        "print('maxrss_kib', hwm, file=sys.stderr); sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "[yaml-too-large]" in _located_error(result)
    assert len(result.stderr) < 1000  # the one-line document is quoted around the column, not whole
    assert int(result.stderr.split("maxrss_kib ")[1]) < 200_000  # KiB: nothing near 395 MB was built


def test_two_stages_of_one_name_are_refused(tmp_path):
    plan = yaml.safe_load((REPO / "examples" / "image-captioning.yaml").read_text())
    plan["serve"]["stages"][1]["name"] = plan["serve"]["stages"][0]["name"]
    error = _located_error(_plan_with(tmp_path, {}, plan))
    assert "[duplicate-stage-name]" in error and "serve.stages" in error


@pytest.mark.parametrize("name", ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "db_password"])
def test_a_credential_in_plain_env_is_refused(tmp_path, name):
    error = _located_error(_plan_with(tmp_path, {"train.entrypoint.env": {name: "hf_abcdef", "NCCL_DEBUG": "INFO"}}))
    assert "[secret-in-plain-env]" in error and "train.entrypoint.env" in error and "secret_name" in error


def test_ordinary_env_is_kept(tmp_path):
    assert _plan_with(tmp_path, {"train.entrypoint.env": {"NCCL_DEBUG": "INFO", "MONKEY_PATCH": "1"}}).returncode == 0


@pytest.mark.parametrize("command", [["explain", PLAN], ["diff", PLAN, PLAN]])
def test_output_survives_a_latin1_locale(tmp_path, command):
    import os

    env = {
        **os.environ,
        "LANG": "en_US.ISO-8859-1",
        "LC_ALL": "en_US.ISO-8859-1",
        "PYTHONIOENCODING": "latin-1",
        "PYTHONUTF8": "0",
    }
    result = run_cli(*command, env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr


def test_a_stale_check_survives_a_latin1_locale(tmp_path):
    import os

    assert run_cli(PLAN, "-o", tmp_path / "out").returncode == 0
    sbatch = tmp_path / "out" / "llama3-8b-pretrain" / "slurm" / "train.sbatch"
    sbatch.write_text(sbatch.read_text() + "# é → edited\n")
    env = {**os.environ, "PYTHONIOENCODING": "latin-1", "PYTHONUTF8": "0"}
    result = run_cli(PLAN, "-o", tmp_path / "out", "--check", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr


def test_explain_escapes_terminal_control_sequences():
    from compiler.cli import terminal_text

    assert (
        terminal_text("GPU \x1b[2J\x1b]0;owned\x07 \u202eevil\nnext")
        == "GPU \\x1b[2J\\x1b]0;owned\\x07 \\u202eevil\nnext"
    )


@pytest.mark.parametrize(
    "text,column", [("train:\n  seq_len: " + "9" * 5000 + "\n", 12), ("train:\n  deadline: 2024-02-30\n", 13)]
)
def test_a_value_python_cannot_hold_is_located_at_the_value(tmp_path, text, column):
    (tmp_path / "plan.yaml").write_text("name: x\nworkload: train\n" + text)
    error = _located_error(run_cli(tmp_path / "plan.yaml", "-o", tmp_path / "out"))
    assert f"plan.yaml:4:{column}:" in error and "[yaml-value]" in error
