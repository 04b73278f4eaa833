"""The Triton serving probe for real, on CPU: the probe folder `mlinfra-compile probe` writes for the resnet50-triton
example, run as its Kubernetes Job's containers would run it, its probe_triton.py starting the plan's own serve.sh → nvidia-pytriton's real tritonserver 2.51.0 on the
plan's model repository, and Triton's real perf_analyzer (tritonclient 2.51.0's) at each of the plan's batches; then
calibrate → vision points → the plan compiled with the site file, each batch's calibrated prediction printed.

The CPU server has no onnxruntime backend: a python stand-in answers (realtools.ONNXRUNTIME_STAND_IN, a time that
grows with the batch), and the repository's KIND_GPU becomes KIND_CPU, the only edit. The numbers test the loop and
the round trip; they are no GPU's.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.conftest import REPO, run_cli


def _kubelet(word: str, paths: dict[str, str]) -> str:
    """A container's command word as its shell gets it (the kubelet reads $$ as $), the pod's paths mapped here."""
    word = word.replace("$$", "$")
    for pod, here in paths.items():
        word = word.replace(pod, here)
    return word


@pytest.mark.realtool
@pytest.mark.slow
def test_the_triton_probe_runs_perf_analyzer_against_the_plans_tritonserver_and_round_trips(tmp_path):
    """The probe Job's own containers, in order, on this machine (/probe, /tmp/probe and /tools mapped to folders):
    fill-repository's copy and serve.sh --fetch-only (its pip step left out: the stand-in model needs no export),
    perf-analyzer's copy of the binary, then the probe's command, whose whole log through the documented extraction is
    the results JSON that calibrate accepts."""
    from compiler.deployment.probe_kubernetes import EXTRACT_COMMAND
    from tests.tools.realtools import perf_analyzer_bin, tritonserver_on_path

    perf, perf_env = perf_analyzer_bin()
    server = tritonserver_on_path(tmp_path / "tools")
    assert run_cli("probe", REPO / "examples/resnet50-triton.yaml", "-o", tmp_path / "out").returncode == 0
    source, folder, tools = tmp_path / "out/resnet50-triton-probe", tmp_path / "pod", tmp_path / "pod-tools"
    settings = json.loads((source / "settings.json").read_text())
    model = settings["triton"]["model"]
    config = source / "engine/triton" / model / "config.pbtxt"
    config.write_text(config.read_text().replace("KIND_GPU", "KIND_CPU"))
    (source / "engine/triton" / model / "1/model.onnx").write_text("stand-in")  # serve.sh fetches none then
    job = list(yaml.safe_load_all((source / "probe-job.yaml").read_text()))[1]
    pod = job["spec"]["template"]["spec"]
    paths = {"/tmp/probe": str(folder), "/probe/": f"{source}/", "/tools": str(tools)}
    folder.mkdir()
    tools.mkdir()
    fill, copy = ([_kubelet(w, paths) for w in c["command"]] for c in pod["initContainers"])
    fill[2] = "; ".join(step for step in fill[2].split("; ") if "pip install" not in step)
    assert subprocess.run(fill, capture_output=True, text=True, timeout=60).returncode == 0
    copied = subprocess.run(copy, env={"PATH": f"{perf.parent}:/usr/bin:/bin"}, capture_output=True, text=True)
    assert copied.returncode == 0 and (tools / "perf_analyzer").exists(), copied.stderr
    (container,) = pod["containers"]
    env = {
        **server["env"],
        **perf_env,
        **{e["name"]: _kubelet(e["value"], paths) for e in container["env"]},
        "MLINFRA_PROBE_ENGINE_ARGS": server["backend_flag"],
        # a shared 2-core machine: short windows, a loose stability threshold (the GPU run keeps perf_analyzer's)
        "MLINFRA_PROBE_PERF_ARGS": "--measurement-interval=400 --stability-percentage=50 --max-trials=20",
    }
    shell, flag, command = (_kubelet(w, paths) for w in container["command"])
    run = subprocess.run(
        [shell, flag, command + " --allow-other-device"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, as the container log is
        text=True,
        timeout=240,
    )
    logs = "".join(p.read_text()[-1500:] for p in sorted((folder / "probe-results.d").glob("*.log")))
    assert run.returncode == 0, run.stdout[-2000:] + logs
    extraction = EXTRACT_COMMAND.split(" | ", 1)[1].rsplit(" > ", 1)[0]
    extracted = subprocess.run(["bash", "-c", extraction], input=run.stdout, capture_output=True, text=True).stdout
    results = json.loads(extracted)
    assert results == json.loads((folder / "probe-results.json").read_text())
    batches = settings["triton"]["batches"]
    assert results["engine"] == "triton" and [p["batch"] for p in results["points"]] == batches == [1, 6, 32]
    for point in results["points"]:  # the stand-in sleeps 1 ms + 0.2 ms per item; Triton's statistics see it
        assert point["server_compute_infer_ms"] >= 1 + 0.2 * point["batch"], point
        assert point["p99_latency_ms"] >= point["p50_latency_ms"] > 0 and point["throughput_items_per_second"] > 0
    site = tmp_path / "site.yaml"
    calibrated = run_cli("calibrate", folder / "probe-results.json", "-o", site, "--site", "ci")
    assert calibrated.returncode == 0, calibrated.stderr
    lines = [l for l in calibrated.stdout.splitlines() if l.startswith("batch of ")]
    assert [l.split(" (")[0] for l in lines] == [f"batch of {b}" for b in batches], calibrated.stdout
    points = yaml.safe_load(site.read_text())["vision_points"]
    assert [(p["batch"], p["engine"]) for p in points] == [(b, "triton") for b in batches]
    plan = yaml.safe_load((REPO / "examples/resnet50-triton.yaml").read_text())
    plan["cluster"]["calibration"] = str(site)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    explained = run_cli("explain", "plan.yaml", cwd=tmp_path)
    # the T4's batches are read-bound in the vision sizing: they fit no share, and the compile says so
    assert explained.returncode == 0 and "site calibration (t4-16gb, vision batches)" in explained.stdout, (
        explained.stderr
    )
