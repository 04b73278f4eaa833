"""What the FSDP2 real-step tests share (test_fsdp_tp_real, test_fsdp_pp_real, test_fsdp_sac_real, test_lora_tp_real):
the plans' cluster section, compiling a plan text, running its launcher on gloo ranks and reading their step lines, and
the consistency check refusing tampered FSDP2 settings (fsdp/fsdp_tp.json as decided)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_target_torchrun import REPO, free_port


def llama8b_train(name: str, global_batch: int = 64, framework: str = "fsdp") -> str:
    """The head of a Llama-3.1-8B bf16 training plan (literal text for a str.format template: its braces doubled);
    framework="{framework}" leaves it to the template."""
    return (
        f"name: {name}\nworkload: train\nmodel: {{{{preset: llama-3.1-8b}}}}\nprecision: bf16\ntrain:\n"
        f"  tokens: 1B\n  seq_len: 4096\n  global_batch: {global_batch}\n  framework: {framework}\n"
    )


# 4 (or `gpus`) H100s on one node: the plans' cluster section, literal text inside their str.format templates
CLUSTER = """\
cluster:
  scheduler: slurm
  gpus: [h100-sxm-80gb]
  gpus_per_node: {gpus}
  interconnect: ib-400g
  storage: lustre
  max_gpus: {gpus}
"""


def cluster(gpus: int | str = 4) -> str:
    """The cluster section; gpus="{gpus}" leaves the count to the plan template's own format()."""
    return CLUSTER.format(gpus=gpus)


def run_compile(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "plan.yaml").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "compiler", str(tmp_path / "plan.yaml"), "-o", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def compiled(tmp_path: Path, text: str, name: str) -> Path:
    """out/<name> of a plan text that compiles."""
    done = run_compile(tmp_path, text)
    assert done.returncode == 0, done.stderr
    return tmp_path / "out" / name


def step_rows(out: Path, env: dict, tag: str, timeout: int = 300) -> list[dict]:
    """launch/torchrun.sh on this host; the JSON of every rank's `TAG {...}` line."""
    done = subprocess.run(
        ["bash", str(out / "launch" / "torchrun.sh"), f"127.0.0.1:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith(f"{tag} ")]


def assert_consistency_refuses(tmp_path: Path, text: str, change: dict, match: str) -> None:
    """The plan's files pass the consistency check, and fail it with the FSDP2 settings (fsdp/fsdp_tp.json as decided)
    updated by `change`."""
    from compiler import training_consistency
    from compiler.pipeline import render, resolve
    from tests.fixtures.resolved_plans import with_framework_config

    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(text)
    plan = resolve(plan_file)
    texts = {f.path: f.text for f in render(plan).files}
    training_consistency.check(texts, plan)
    with pytest.raises(AssertionError, match=match):
        training_consistency.check(texts, with_framework_config(plan, "fsdp_tp", **change))
