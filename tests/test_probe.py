"""probe → results → calibrate → recompile (issue 18): the loop on CPU, through the fake Slurm cluster."""

from __future__ import annotations

import json
import os

import pytest

from compiler.pipeline import resolve
from compiler.probe import probe_files, settings
from tests.conftest import REPO, run_cli

TINY = """name: tiny-probe
workload: train
model:
  architecture: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, max_position: 512}
train: {tokens: 10M, seq_len: 64, global_batch: 8}
cluster: {gpu: h100-sxm-80gb, count: 2, gpus_per_node: 2, scheduler: slurm, slurm: {partition: gpu}%s}
"""


def test_the_probe_reduces_layers_to_fit_one_gpu_and_says_so():
    plan = resolve(REPO / "examples" / "llama3-405b-pretrain.yaml")
    s = settings(plan)
    assert 1 <= s["layers"] < s["model_layers"] == 126
    assert s["layers"] * 16 * 1.6e9 < plan.hardware.gpu_memory_bytes  # ~1.6B parameters per 405B layer, 16 B each
    sbatch = next(f.text for f in probe_files(plan).files if f.path == "probe.sbatch")
    assert f"{s['layers']} of the model's 126 layers" in sbatch and "#SBATCH --nodes=1" in sbatch and "--time=00:15:00" in sbatch


def test_a_serving_plan_has_no_probe_yet(tmp_path):
    result = run_cli("probe", REPO / "examples" / "llama3-8b-chat.yaml", "-o", tmp_path)
    assert result.returncode == 2 and "[no-probe]" in result.stderr


@pytest.mark.realtool
@pytest.mark.slow
def test_probe_calibrate_recompile_on_the_fake_slurm_cluster(tmp_path, slurm_cluster):
    from tests.test_target_torchrun import torch_env

    (tmp_path / "plan.yaml").write_text(TINY % "")
    assert run_cli("probe", tmp_path / "plan.yaml", "-o", tmp_path / "out").returncode == 0
    folder = tmp_path / "out" / "tiny-probe-probe"
    env = {**os.environ, **slurm_cluster.env, "PATH": torch_env()["PATH"] + ":/usr/sbin:/sbin"}
    state, output = _run(folder, env)
    assert state == "COMPLETED", output[-3000:]
    results = json.loads((folder / "probe-results.json").read_text())
    assert results["world_size"] == 2 and results["step_seconds"] > 0 and results["environment"]["torch"]
    calibrated = run_cli("calibrate", folder / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci")
    assert calibrated.returncode == 0, calibrated.stderr
    (tmp_path / "plan.yaml").write_text(TINY % ", calibration: site.yaml")
    explained = run_cli("explain", tmp_path / "plan.yaml")
    assert explained.returncode == 0, explained.stderr
    line = next(l for l in explained.stdout.splitlines() if "site calibration (h100-sxm-80gb)" in l)
    assert "measured at ci" in line and f"{results['step_seconds'] * 1e3:.1f} ms" in line


def _run(folder, env):
    """sbatch probe.sbatch --allow-other-device (the fake nodes are CPUs) from the probe's folder; wait for it."""
    import subprocess
    import time

    submitted = subprocess.run(["sbatch", "--parsable", "probe.sbatch", "--allow-other-device"], cwd=folder, env=env,
                               capture_output=True, text=True, timeout=60)
    if submitted.returncode:
        return "SUBMIT-FAILED", submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 240
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=env)
            return "TIMEOUT", ""
        time.sleep(0.3)
    info = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    state = next((w.split("=", 1)[1] for w in info.split() if w.startswith("JobState=")), "UNKNOWN")
    output = "".join(p.read_text(errors="replace") for p in folder.glob(f"*-{job}.out"))
    return state, output + info


@pytest.mark.realtool
def test_a_kubernetes_plan_gets_a_probe_job_the_schemas_accept(tmp_path):
    """scheduler both/kubernetes: probe-job.yaml (a ConfigMap with the script and a one-pod Job on one GPU node)."""
    import yaml

    from tests.tools.realtools import validate_k8s

    plan = resolve(REPO / "examples" / "llama3-405b-pretrain.yaml")
    files = {f.path: f.text for f in probe_files(plan).files}
    docs = list(yaml.safe_load_all(files["probe-job.yaml"]))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    config, job = docs
    assert config["data"]["settings.json"] == files["settings.json"]  # JSON carries no header: the same bytes
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == plan.hardware.gpus_per_node
    assert job["spec"]["activeDeadlineSeconds"] == 900 and job["spec"]["backoffLimit"] == 0
    path = tmp_path / "probe-job.yaml"
    path.write_text(files["probe-job.yaml"])
    assert validate_k8s([path]) == []
