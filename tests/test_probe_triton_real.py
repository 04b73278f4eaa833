"""The Triton serving probe for real, on CPU: the probe folder `mlinfra-compile probe` writes for the resnet50-triton
example, its probe_triton.py starting the plan's own serve.sh → nvidia-pytriton's real tritonserver 2.51.0 on the
plan's model repository, and Triton's real perf_analyzer (tritonclient 2.51.0's) at each of the plan's batches; then
calibrate → vision points → the plan compiled with the site file, each batch's calibrated prediction printed.

The CPU server has no onnxruntime backend: a python stand-in answers (realtools.ONNXRUNTIME_STAND_IN, a time that
grows with the batch), and the repository's KIND_GPU becomes KIND_CPU, the only edit. The numbers test the loop and
the round trip; they are no GPU's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO, run_cli


@pytest.mark.realtool
@pytest.mark.slow
def test_the_triton_probe_runs_perf_analyzer_against_the_plans_tritonserver_and_round_trips(tmp_path):
    from tests.tools.realtools import perf_analyzer_bin, tritonserver_on_path

    perf, perf_env = perf_analyzer_bin()
    server = tritonserver_on_path(tmp_path / "tools")
    assert run_cli("probe", REPO / "examples/resnet50-triton.yaml", "-o", tmp_path / "out").returncode == 0
    folder = tmp_path / "out/resnet50-triton-probe"
    settings = json.loads((folder / "settings.json").read_text())
    model = settings["triton"]["model"]
    config = folder / "engine/triton" / model / "config.pbtxt"
    config.write_text(config.read_text().replace("KIND_GPU", "KIND_CPU"))
    (folder / "engine/triton" / model / "1/model.onnx").write_text("stand-in")  # serve.sh fetches none then
    env = {
        **server["env"],
        **perf_env,
        "MLINFRA_PROBE_ENGINE_ARGS": server["backend_flag"],
        "MLINFRA_PROBE_PERF_ANALYZER": str(perf),
        # a shared 2-core machine: short windows, a loose stability threshold (the GPU run keeps perf_analyzer's)
        "MLINFRA_PROBE_PERF_ARGS": "--measurement-interval=400 --stability-percentage=50 --max-trials=20",
    }
    run = subprocess.run(
        [sys.executable, "probe_triton.py", "--out", str(folder / "probe-results.json"), "--allow-other-device"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    logs = "".join(p.read_text()[-1500:] for p in sorted((folder / "probe-results.d").glob("*.log")))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:] + logs
    results = json.loads((folder / "probe-results.json").read_text())
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
    assert explained.returncode == 0 and "site calibration (t4-16gb)" in explained.stdout, explained.stderr
