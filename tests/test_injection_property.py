"""Property: a hostile string in the plan's file name, a user-catalog string or any plan string field either is
refused with a located error, or leaves every generated file with the structure it has for a benign string —
the same lines (any Unicode line break, U+2028 and U+0085 included, would add one), the same YAML/JSON shape,
a script bash still parses. Running the scripts under stubs is tests/test_injection.py's job."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.diagnostics import PlanInputError
from compiler.pipeline import compile_plan
from tests.test_injection import SERVE_PLAN, TRAIN_PLAN
from tests.test_security import _user_gpu

# What breaks lines, comments, quotes and documents in the syntaxes we emit, plus ordinary text.
HOSTILE_PIECES = [
    "\n",
    "\r",
    "\u2028",
    "\u2029",
    "\x85",
    "\x0b",
    "\x1c",
    "\x1b[2J",
    "\u202e",
    "'",
    '"',
    "`",
    "$(",
    ")",
    ";",
    "#",
    "--",
    "-->",
    "--->",
    "<!--",
    "*/",
    "\\",
    "{",
    "}",
    "{{",
    "}}",
    ": ",
    "- ",
    "---",
    "...",
    "&",
    "|",
    "%",
    "\t",
    " ",
    "a",
    "é",
    "\U0001f600",
    "kind: ClusterRoleBinding",
    "touch /tmp/mlinfra-pwned",
]
hostile = st.lists(st.sampled_from(HOSTILE_PIECES), min_size=1, max_size=6).map("".join)
SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _shape(value):
    if isinstance(value, dict):
        return {k if not isinstance(k, str) or k.isidentifier() else "key": _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def _mount_or_warning_removed(path: str, text: str) -> str:
    """A job path the container cannot mount (',' or ':' in it) is a warning instead of a pyxis mount by design
    (mounted, or the compile warns naming the path): the mount list and the warnings are left out."""
    if path == "plan.json":
        data = json.loads(text)
        assert all(w.startswith(("train.", "model.")) for w in data["warnings"] if "pyxis mount" in w)
        data["warnings"] = [w for w in data["warnings"] if "pyxis mount" not in w]
        if data.get("deployment", {}).get("slurm"):
            data["deployment"]["slurm"]["container_mounts"] = []
        return json.dumps(data, indent=2)
    if path == "REPORT.md":
        lines = [line for line in text.splitlines() if "pyxis mount" not in line and line != "## Warnings"]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip("\n")  # an emptied section leaves no blank run
    return text


def _structure(path: str, text: str):
    """What must not change when a string's content does."""
    text = _mount_or_warning_removed(path, text)
    suffix = Path(path).suffix
    if suffix in (".yaml", ".yml"):
        return len(text.splitlines()), _shape(list(yaml.safe_load_all(text)))
    if suffix == ".json":
        return len(text.splitlines()), _shape(json.loads(text))
    if suffix in (".sh", ".sbatch"):
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    return len(text.splitlines())


def _structures(plan_file: Path, display_name: str | None = None) -> dict | None:
    try:
        rendered = compile_plan(plan_file, display_name)
    except PlanInputError as exc:
        first = exc.render().splitlines()[0]
        assert ": error: " in first and "[" in first
        return None
    return {f.path: _structure(f.path, f.text) for f in rendered.files}


def _write(tmp_path: Path, plan: dict) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


@pytest.fixture(scope="module")
def baselines(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("baseline")
    return {
        "train": _structures(_write(tmp, _with_text(TRAIN_PLAN, "x"))),
        "serve": _structures(_write(tmp, _with_text(SERVE_PLAN, "x"))),
    }


def _with_text(value, text: str):
    """The plan with every free-text value (the injection suite's hostile string) replaced by `text`."""
    from tests.test_injection import HOSTILE

    if isinstance(value, str):
        return value.replace(HOSTILE, text)
    if isinstance(value, dict):
        return {k: _with_text(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_text(v, text) for v in value]
    return value


@SETTINGS
@given(name=hostile)
def test_a_hostile_file_name_changes_no_structure(baselines, tmp_path, name):
    plan = _write(tmp_path, _with_text(TRAIN_PLAN, "x"))
    got = _structures(plan, display_name=name.replace("/", "_") + ".yaml")
    assert got is None or got == baselines["train"]


@SETTINGS
@given(text=hostile, which=st.sampled_from(["train", "serve"]))
def test_hostile_plan_strings_change_no_structure(baselines, tmp_path, text, which):
    plan = _with_text(TRAIN_PLAN if which == "train" else SERVE_PLAN, text)
    got = _structures(_write(tmp_path, plan))
    assert got is None or got == baselines[which]


@SETTINGS
@given(text=hostile, field=st.sampled_from(["name", "source"]))
def test_hostile_catalog_strings_change_no_structure(tmp_path, text, field):
    (tmp_path / "gpus.yaml").write_text(yaml.safe_dump({"entries": [_user_gpu()]}))
    plan = {
        **_with_text(TRAIN_PLAN, "x"),
        "cluster": {**TRAIN_PLAN["cluster"], "gpu": "my-gpu", "catalog": "gpus.yaml"},
    }
    plan["cluster"] = _with_text(plan["cluster"], "x")
    baseline = _structures(_write(tmp_path, plan))
    (tmp_path / "gpus.yaml").write_text(yaml.safe_dump({"entries": [_user_gpu(**{field: text})]}))
    got = _structures(_write(tmp_path, plan))
    assert baseline is not None and (got is None or got == baseline)
