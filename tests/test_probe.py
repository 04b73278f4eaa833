"""probe → results → calibrate → recompile: the loop on CPU, through the fake Slurm cluster."""

from __future__ import annotations

import json
import os

import pytest

from compiler.catalog.residuals import load_residuals
from compiler.deployment.probe import MAX_LAYOUTS, MEMORY_FAMILY, _memory, _reduced
from compiler.pipeline import resolve
from compiler.probe import probe_files
from compiler.sizing.train_memory import usable_memory_bytes
from tests.conftest import REPO, run_cli

TINY = """name: tiny-probe
workload: train
model:
  architecture: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, max_position: 512}
train: {tokens: 10M, seq_len: 64, global_batch: 8}
cluster: {gpu: h100-sxm-80gb, count: 2, gpus_per_node: 2, scheduler: slurm, slurm: {partition: gpu}%s}
"""


def test_the_probe_reduces_layers_to_fit_one_gpu_and_says_so():
    plan = resolve(REPO / "examples" / "llama3-405b-pretrain.yaml", probe=True)
    probe = plan.probe
    assert 1 <= probe.layers < probe.model_layers == 126 == probe.architecture.layers + (126 - probe.layers)
    chosen = probe.layouts[0]
    assert chosen.tp == plan.parallelism.tp == 8  # the plan's TP fits one 8-GPU node: measured with tensor parallelism
    assert (
        probe.layers * 8 * 1.6e9 / chosen.tp < plan.hardware.gpu_memory_bytes
    )  # ~1.6B parameters per 405B layer, 8 B each in pure bf16
    margin, usable = load_residuals()[MEMORY_FAMILY].p90, usable_memory_bytes(plan.hardware.gpu_memory_bytes)
    reason = next(d.reason for d in probe.decisions if d.topic == "probe shape")
    if chosen.predicted_reserved_bytes * margin > usable:  # 405B: the embedding, LM head and 8k-token logits alone
        assert probe.layers == 1 and "one layer, the least the probe builds" in reason and len(probe.layouts) == 1
    one_more = _memory(
        _reduced(plan.model.architecture, probe.layers + 1),
        "bf16",
        8,
        probe.seq_len,
        chosen.micro_batch,
        chosen.recompute,
        chosen.zero_stage,
        chosen.tp,
    )
    assert one_more.reserved * margin > usable  # not reduced further than it must
    files = {f.path: f.text for f in probe_files(plan).files}
    sbatch = files["probe.sbatch"]
    assert f"{probe.layers} of the model's 126 layers" in sbatch and "--time=00:15:00" in sbatch
    # 512 nodes: the layouts on one node, the collectives again across two
    assert probe.nodes == 2 and "#SBATCH --nodes=2" in sbatch and "--phase inter-node" in sbatch
    assert (
        "- **probe shape**: " in files["REPORT.md"]
        and json.loads(files["plan.json"])["probe"]["layers"] == probe.layers
    )


def test_the_probe_layouts_are_the_chosen_one_and_neighbours_that_fit():
    plan = resolve(REPO / "examples" / "llama3-8b-pretrain.yaml", probe=True)
    layouts, par = plan.probe.layouts, plan.parallelism
    assert (
        layouts[0].name == "chosen"
        and layouts[0].micro_batch == par.micro_batch
        and layouts[0].zero_stage == min(1, par.zero_stage)
    )
    assert 2 <= len(layouts) <= MAX_LAYOUTS and len(
        {(l.micro_batch, l.recompute, l.zero_stage) for l in layouts}
    ) == len(layouts)
    usable = plan.hardware.gpu_memory_bytes
    assert all(0 < l.predicted_allocated_bytes < l.predicted_reserved_bytes < usable for l in layouts)
    settings = json.loads(next(f.text for f in probe_files(plan).files if f.path == "settings.json"))
    assert [l["name"] for l in settings["layouts"]] == [l.name for l in layouts] and "decisions" not in settings


def test_an_ordinary_compile_has_no_probe_section():
    plan = resolve(REPO / "examples" / "llama3-8b-pretrain.yaml")
    assert plan.probe is None and "probe" not in plan.model_dump(mode="json")


def test_a_triton_plan_gets_no_probe_job_and_says_why():
    plan = resolve(REPO / "examples" / "llama3-8b-triton.yaml", probe=True)
    assert plan.probe.kubernetes is None and "probe-job.yaml" not in {f.path for f in probe_files(plan).files}
    assert "no PyTorch" in next(d.reason for d in plan.probe.decisions if d.topic == "probe on Kubernetes")


def test_a_vision_or_multi_stage_plan_has_no_probe(tmp_path):
    for example in ("resnet50-triton.yaml", "image-captioning.yaml"):
        result = run_cli("probe", REPO / "examples" / example, "-o", tmp_path)
        assert result.returncode == 2 and "[no-probe]" in result.stderr, result.stderr


def test_a_serving_probe_measures_batches_from_one_to_the_plans_concurrency():
    plan = resolve(REPO / "examples" / "llama3-8b-chat.yaml", probe=True)
    probe, sv = plan.probe, plan.serving
    assert probe.kind == "serving" and probe.processes == 1 and probe.layouts == []
    top = probe.serving.batches[-1]
    assert probe.serving.batches[0] == 1 and top == sv.max_concurrency and len(probe.serving.batches) == 3
    assert probe.serving.prompt_tokens == plan.spec.serve.traffic.prompt_tokens
    tokens = probe.serving.prompt_tokens + probe.serving.decode_steps
    held = probe.serving.weights_bytes + top * tokens * probe.serving.kv_bytes_per_token
    assert held <= sv.gpu_memory_utilization * plan.hardware.gpu_memory_bytes  # the plan's own memory share
    sbatch = next(f.text for f in probe_files(plan).files if f.path == "probe.sbatch")
    assert "--nproc-per-node=1 probe.py" in sbatch


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
    settings = json.loads((folder / "settings.json").read_text())
    assert [l["name"] for l in results["layouts"]] == [l["name"] for l in settings["layouts"]] and len(
        results["layouts"]
    ) >= 3
    assert all(l["step_seconds"] > 0 and l["global_batch"] == 2 * l["micro_batch"] for l in results["layouts"])
    calibrated = run_cli("calibrate", folder / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci")
    assert calibrated.returncode == 0, calibrated.stderr
    (tmp_path / "plan.yaml").write_text(TINY % ", calibration: site.yaml")
    explained = run_cli("explain", tmp_path / "plan.yaml")
    assert explained.returncode == 0, explained.stderr
    line = next(l for l in explained.stdout.splitlines() if "site calibration (h100-sxm-80gb)" in l)
    assert "measured at ci" in line and f"{len(results['layouts'])} training step(s)" in line
    assert all(f"{l['step_seconds'] * 1e3:.1f} ms" in line for l in results["layouts"])
    # memory: measured ÷ predicted peak per layout → the site's factor, which the recompiled memory fit uses
    import yaml

    memory = yaml.safe_load((tmp_path / "site.yaml").read_text())["memory"]
    ratios = [l["peak_reserved_bytes"] / l["predicted_reserved_bytes"] for l in results["layouts"]]
    assert [p["layout"] for p in memory["points"]] == [l["name"] for l in results["layouts"]] and memory[
        "device"
    ] == "cpu"
    assert memory["factor"] == pytest.approx(max(ratios), rel=1e-3)
    plan = resolve(tmp_path / "plan.yaml")
    assert any(d.topic == "site calibration (memory)" and "a test of the loop" in d.reason for d in plan.decisions)
    if memory["factor"] > 1:
        usable = plan.memory_per_gpu_bytes.usable
        assert usable == pytest.approx(usable_memory_bytes(plan.hardware.gpu_memory_bytes) / memory["factor"], rel=1e-3)
        assert "cluster.calibration" in next(d.reason for d in plan.decisions if d.topic == "parallelism")


def _run(folder, env):
    """sbatch probe.sbatch --allow-other-device (the fake nodes are CPUs) from the probe's folder; wait for it."""
    import subprocess
    import time

    submitted = subprocess.run(
        ["sbatch", "--parsable", "probe.sbatch", "--allow-other-device"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
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
@pytest.mark.parametrize("example", ["llama3-405b-pretrain.yaml", "llama3-8b-chat.yaml"])
def test_a_kubernetes_plan_gets_a_probe_job_the_schemas_accept(tmp_path, example):
    """scheduler both/kubernetes: probe-job.yaml (a ConfigMap with the script and a one-pod Job on one GPU node); a
    serving plan's Job runs in its vLLM image."""
    import yaml

    from tests.tools.realtools import validate_k8s

    plan = resolve(REPO / "examples" / example, probe=True)
    files = {f.path: f.text for f in probe_files(plan).files}
    docs = list(yaml.safe_load_all(files["probe-job.yaml"]))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    config, job = docs
    assert config["data"]["settings.json"] == files["settings.json"]  # JSON carries no header: the same bytes
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == plan.probe.processes
    assert container["image"] == (
        plan.deployment.kubernetes.training.image if plan.training else plan.deployment.kubernetes.serving[0].image
    )
    assert job["spec"]["activeDeadlineSeconds"] == 900 and job["spec"]["backoffLimit"] == 0
    path = tmp_path / "probe-job.yaml"
    path.write_text(files["probe-job.yaml"])
    assert validate_k8s([path]) == []


SERVE = """name: tiny-serve
workload: serve
model:
  architecture: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, max_position: 512}
serve: {context_len: 256, max_num_seqs: 8, traffic: {requests_per_second: 2, prompt_tokens: 32, output_tokens: 8}}
cluster: {gpu: h100-sxm-80gb, scheduler: slurm%s}
"""


@pytest.mark.realtool
@pytest.mark.slow
def test_serving_probe_calibrate_recompile_on_the_fake_slurm_cluster(tmp_path, slurm_cluster):
    """Prefill and decode steps measured on CPU → serving_points → the matmul and HBM shares refitted, the report
    showing each step predicted before and after."""
    from tests.test_target_torchrun import torch_env

    (tmp_path / "plan.yaml").write_text(SERVE % "")
    before = resolve(tmp_path / "plan.yaml")
    assert run_cli("probe", tmp_path / "plan.yaml", "-o", tmp_path / "out").returncode == 0
    folder = tmp_path / "out" / "tiny-serve-probe"
    env = {**os.environ, **slurm_cluster.env, "PATH": torch_env()["PATH"] + ":/usr/sbin:/sbin"}
    state, output = _run(folder, env)
    assert state == "COMPLETED", output[-3000:]
    results = json.loads((folder / "probe-results.json").read_text())
    settings = json.loads((folder / "settings.json").read_text())
    assert results["kind"] == "serving" and results["environment"]["torch"]
    assert [(p["phase"], p["batch"]) for p in results["points"]] == [
        (phase, b) for b in settings["serving"]["batches"] for phase in ("prefill", "decode")
    ]
    assert all(p["step_seconds"] > 0 for p in results["points"])
    assert (
        run_cli("calibrate", folder / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci").returncode
        == 0
    )
    (tmp_path / "plan.yaml").write_text(SERVE % ", calibration: site.yaml")
    after = resolve(tmp_path / "plan.yaml")
    hbm = next(d for d in after.decisions if d.topic == "site calibration (h100-sxm-80gb, HBM)")
    decodes = [p for p in results["points"] if p["phase"] == "decode"]
    assert (
        f"{len(decodes)} decode step(s)" in hbm.reason and "predicted" in hbm.reason and "measured at ci" in hbm.reason
    )
    # a CPU is far slower than an H100: the refitted shares make every serving step slower
    assert (
        after.hardware.gpu_spec.achievable_memory_bandwidth_fraction
        < before.hardware.gpu_spec.achievable_memory_bandwidth_fraction
    )
    assert after.serving.tpot_batch1_seconds > before.serving.tpot_batch1_seconds


CACHED_DECODE = """
import json, importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("probe", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
s = json.load(open(sys.argv[2]))
torch.manual_seed(0)
model = m.Model(s).eval()
tokens = torch.randint(0, s["vocab"], (3, 10))
with torch.no_grad():
    full = model(tokens)[:, -1]
    prefill = [{} for _ in model.blocks]
    model(tokens[:, :9], prefill)
    cache = []
    for layer in prefill:
        room = {"n": 9}
        for name in ("k", "v"):
            room[name] = layer[name].new_zeros(3, layer[name].shape[1], 12, layer[name].shape[3])
            room[name][:, :, :9] = layer[name]
        cache.append(room)
    step = model(tokens[:, 9:10], cache)[:, -1]
print((full - step).abs().max().item())
"""


@pytest.mark.realtool
def test_the_serving_probes_cached_decode_gives_the_full_forwards_logits(tmp_path):
    """The decode step the probe times (K and V written in place into preallocated buffers, grouped-query attention
    over them) computes what a forward over the whole sequence does."""
    import subprocess

    from tests.tools.realtools import tool_python

    (tmp_path / "plan.yaml").write_text(SERVE % "")
    files = {f.path: f.text for f in probe_files(resolve(tmp_path / "plan.yaml", probe=True)).files}
    for name in ("probe.py", "probe_environment.py", "settings.json"):
        (tmp_path / name).write_text(files[name])
    (tmp_path / "check.py").write_text(CACHED_DECODE)
    run = subprocess.run(
        [str(tool_python("torch")), "check.py", "probe.py", "settings.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.strip()) < 1e-4


def test_a_tp_plan_is_probed_at_its_tp_and_half_of_it(tmp_path):
    """TP 2 on a 2-GPU node: the chosen layout at TP 2 (DTensor, dp 1, ZeRO-0) and the runner-up TP 1 (plain DDP), each
    predicted with its own TP; the plan's TP 8 on a 4-GPU node is capped to 4, stated."""
    (tmp_path / "plan.yaml").write_text(TINY_TP % "")
    plan = resolve(tmp_path / "plan.yaml", probe=True)
    layouts = plan.probe.layouts
    assert [(l.name, l.tp, l.zero_stage) for l in layouts[:2]] == [("chosen", 2, 0), ("TP 1", 1, 0)]
    assert all(l.tp == 2 for l in layouts[2:]) and len(layouts) <= MAX_LAYOUTS
    # TP halves the matrices, the embedding and the LM head each rank holds: less memory than TP 1 at the same batch
    assert layouts[0].predicted_reserved_bytes < layouts[1].predicted_reserved_bytes
    assert next(d.choice for d in plan.probe.decisions if d.topic == "probe tensor parallelism") == "TP 2 × DP 1"
    settings = json.loads(next(f.text for f in probe_files(plan).files if f.path == "settings.json"))
    assert [l["tp"] for l in settings["layouts"]] == [l.tp for l in layouts]
    wide = TINY_TP.replace("count: 2, gpus_per_node: 2", "count: 8, gpus_per_node: 4").replace(
        "heads: 4, kv_heads: 2", "heads: 8, kv_heads: 8"
    )
    (tmp_path / "plan.yaml").write_text(wide.replace("tp: 2", "tp: 8") % "")
    plan = resolve(tmp_path / "plan.yaml", probe=True)
    assert plan.parallelism.tp == 8 and plan.probe.layouts[0].tp == 4
    assert "capped to 4" in next(d.reason for d in plan.probe.decisions if d.topic == "probe tensor parallelism")


TINY_TP = TINY.replace("slurm: {partition: gpu}%s}", "slurm: {partition: gpu}%s}\nparallelism: {tp: 2}")


@pytest.mark.realtool
@pytest.mark.slow
def test_a_tp_probe_measures_tensor_parallel_steps_and_calibrate_cites_them(tmp_path, slurm_cluster):
    """TP 2 on the fake Slurm cluster's 2 CPU ranks: the chosen layout runs DTensor tensor parallelism and its row says
    tp 2 with a measured step and peak; calibrate keeps its TP and the recompiled plan cites its step."""
    import yaml

    from tests.test_target_torchrun import torch_env

    (tmp_path / "plan.yaml").write_text(TINY_TP % "")
    assert run_cli("probe", tmp_path / "plan.yaml", "-o", tmp_path / "out").returncode == 0
    folder = tmp_path / "out" / "tiny-probe-probe"
    env = {**os.environ, **slurm_cluster.env, "PATH": torch_env()["PATH"] + ":/usr/sbin:/sbin"}
    state, output = _run(folder, env)
    assert state == "COMPLETED", output[-3000:]
    results = json.loads((folder / "probe-results.json").read_text())
    tp_rows = [l for l in results["layouts"] if l["tp"] == 2]
    assert results["layouts"][0]["name"] == "chosen" and results["layouts"][0]["tp"] == 2 and len(tp_rows) >= 2
    assert any(l["tp"] == 1 and l["dp"] == 2 and l["global_batch"] == 2 * l["micro_batch"] for l in results["layouts"])
    for row in tp_rows:  # dp 1: one sequence per micro-batch per step
        assert row["dp"] == 1 and row["global_batch"] == row["micro_batch"] and row["step_seconds"] > 0
        assert row["peak_reserved_bytes"] > 0 and row["peak_allocated_bytes"] > 0
    # the first TP layout's peak is its own, not DTensor's first-call allocations (~60 MB, paid by a warm-up)
    assert results["layouts"][0]["peak_reserved_bytes"] < 20 * results["layouts"][0]["predicted_reserved_bytes"]
    assert (
        run_cli("calibrate", folder / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci").returncode
        == 0
    )
    points = yaml.safe_load((tmp_path / "site.yaml").read_text())["points"]
    assert [(p["tp"], p["gpus"], p["global_batch"]) for p in points] == [
        (l["tp"], 2, l["global_batch"]) for l in results["layouts"]
    ]
    (tmp_path / "plan.yaml").write_text(TINY_TP % ", calibration: site.yaml")
    explained = run_cli("explain", tmp_path / "plan.yaml")
    assert explained.returncode == 0, explained.stderr
    line = next(l for l in explained.stdout.splitlines() if "site calibration (h100-sxm-80gb)" in l)
    assert f"{results['layouts'][0]['step_seconds'] * 1e3:.1f} ms" in line and "layouts chosen, TP 1" in line
