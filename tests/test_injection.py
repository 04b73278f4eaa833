"""Hostile strings in every free-text field of a plan reach shell, YAML, JSON and pbtxt only escaped.

Every shell script is parsed by bash and, with its commands stubbed out, executed: no injected command
may run. Every YAML/JSON file parses and carries the hostile strings back verbatim as values.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from tests.conftest import run_cli

MARK = "/tmp/mlinfra-pwned"
HOSTILE = f"a'b\"c $(touch {MARK}) `touch {MARK}` ; touch {MARK} # {{x: y}} &amp; \\\\ *"

TRAIN_PLAN = {
    "name": "hostile-train",
    "workload": "finetune",
    "model": {"preset": "llama-3.1-8b", "weights": f"s3://b/{HOSTILE}"},
    "train": {
        "dataset_tokens": "10M",
        "epochs": 1,
        "seq_len": 2048,
        "global_batch": 16,
        "method": "lora",
        "deadline": "2d",
        "data": HOSTILE,
        "checkpoint": {"dir": f"/ckpt/{HOSTILE}"},
        "entrypoint": {"script": f"train {HOSTILE}.py", "args": [HOSTILE, "--x", HOSTILE], "env": {"HOSTILE": HOSTILE}},
    },
    "cluster": {
        "scheduler": "both",
        "gpu": "h100-sxm-80gb",
        "count": 8,
        "gpus_per_node": 8,
        "slurm": {
            "partition": HOSTILE,
            "account": HOSTILE,
            "container_image": HOSTILE,
            "container_mounts": [HOSTILE],
            "extra_directives": [f"--comment={HOSTILE}"],
        },
        "kubernetes": {"namespace": "ml", "shared_storage_class": "lustre-csi", "image": HOSTILE},
    },
}
SERVE_PLAN = {
    "name": "hostile-serve",
    "workload": "serve",
    "model": {"preset": "llama-3.1-8b", "weights": f"s3://b/{HOSTILE}", "hf_id": f"org/{HOSTILE}"},
    "serve": {"engine": "vllm", "context_len": 4096, "traffic": {"requests_per_second": 2}},
    "cluster": {
        "scheduler": "both",
        "gpus": ["h100-sxm-80gb"],
        "kubernetes": {"namespace": "ml", "shared_storage_class": "lustre-csi", "image": HOSTILE},
    },
}


def strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings_in(k)
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


@pytest.mark.parametrize("plan", [TRAIN_PLAN, SERVE_PLAN], ids=["train", "serve"])
def test_hostile_strings_stay_inert(plan, tmp_path):
    if os.path.exists(MARK):
        os.unlink(MARK)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan))
    result = run_cli(plan_file, "-o", tmp_path / "out")
    if result.returncode == 2:  # refused with a located error is an acceptable answer for a field
        assert "error:" in result.stderr and "Traceback" not in result.stderr
        pytest.skip(f"refused: {result.stderr.splitlines()[0]}")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out" / plan["name"]
    scripts = [p for p in out.rglob("*") if p.suffix in (".sh", ".sbatch")]
    values = []
    for path in out.rglob("*"):
        if path.suffix in (".yaml", ".yml"):
            values += strings_in(list(yaml.safe_load_all(path.read_text())))
        elif path.suffix == ".json":
            values += strings_in(json.loads(path.read_text()))
    assert any(HOSTILE in v for v in values), "the hostile string did not round-trip through YAML/JSON verbatim"
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
        # Run it with every external command stubbed: quoting mistakes would execute `touch`.
        stub = tmp_path / "bin"
        stub.mkdir(exist_ok=True)
        for name in (
            "torchrun",
            "srun",
            "scontrol",
            "python",
            "python3",
            "vllm",
            "text-generation-launcher",
            "tritonserver",
            "deepspeed",
            "accelerate",
            "nvidia-smi",
            "hostname",
            "ray",
            "sleep",
            "head",
        ):
            (stub / name).write_text("#!/bin/sh\necho stub\n")
            (stub / name).chmod(0o755)
        env = {
            "PATH": f"{stub}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "SLURM_JOB_NODELIST": "n1",
            "SLURM_NNODES": "1",
            "SLURM_JOB_ID": "1",
            "SLURM_PROCID": "0",
            "SLURM_NODEID": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
        }
        real_touch = "/usr/bin/touch"
        assert os.path.exists(real_touch)
        subprocess.run(["bash", str(script)], cwd=out, env=env, capture_output=True, timeout=60)
    assert not os.path.exists(MARK), "an injected command ran"
