"""Each real-tool helper in tests/tools/realtools.py, shown to pass a good input AND reject a bad one.

If one of these fails, the target tests that rely on the helper prove nothing. Expected messages are the
tools' own words, measured in shared/validators/README.md.
"""

from __future__ import annotations

import json
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.tools import realtools

pytestmark = [pytest.mark.realtool]


# --- require_tool: skip on a laptop, fail under CI -----------------------------------------------------


def test_require_tool_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not on this laptop"):
        realtools.require_tool("frobnicator", False, "not on this laptop")


def test_require_tool_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="frobnicator missing under CI=true: gone"):
        realtools.require_tool("frobnicator", False, "gone")
    realtools.require_tool("frobnicator", True, "present: no exception")


# --- shellcheck -------------------------------------------------------------------------------------------


def test_shellcheck_flags_an_unquoted_variable(tmp_path):
    bad, good = tmp_path / "bad.sh", tmp_path / "good.sh"
    bad.write_text("#!/bin/bash\ndir=$1\nrm -rf $dir/cache\n")
    good.write_text('#!/bin/bash\ndir=$1\nrm -rf "$dir/cache"\n')
    shellcheck = realtools.shellcheck_bin()
    flagged = subprocess.run([shellcheck, bad], capture_output=True, text=True)
    assert flagged.returncode == 1 and "SC2086" in flagged.stdout
    assert subprocess.run([shellcheck, good], capture_output=True, text=True).returncode == 0


# --- Slurm: sbatch --test-only and a real job on the fake 8-GPU nodes ------------------------------------


def sbatch_script(folder: Path, name: str, directives: list[str], body: str = "srun true") -> Path:
    path = folder / f"{name}.sbatch"
    path.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body + "\n")
    return path


def test_sbatch_test_only_accepts_a_full_node_and_rejects_99_gpus(tmp_path, slurm_cluster):
    good = sbatch_script(tmp_path, "good", ["--nodes=2", "--ntasks-per-node=8", "--gres=gpu:8", "--cpus-per-task=12"])
    accepted = slurm_cluster.sbatch(good, "--test-only")
    assert accepted.returncode == 0 and "to start at" in accepted.stderr, accepted.stderr
    bad = sbatch_script(tmp_path, "bad", ["--nodes=1", "--gres=gpu:99"])
    rejected = slurm_cluster.sbatch(bad, "--test-only")
    assert rejected.returncode != 0
    assert "Requested node configuration is not available" in rejected.stderr


def test_slurm_run_job_reports_completed_and_failed(tmp_path, slurm_cluster):
    ok = sbatch_script(
        tmp_path,
        "ok",
        ["--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--output=%x-%j.out"],
        "srun bash -c 'echo \"node=$SLURMD_NODENAME gpus=$SLURM_GPUS_ON_NODE\"' | sort",
    )
    state, output = slurm_cluster.run_job(ok, timeout=120)
    assert state == "COMPLETED", output
    assert output.splitlines() == ["node=n1 gpus=8", "node=n2 gpus=8"]
    failing = sbatch_script(tmp_path, "failing", ["--nodes=1", "--output=%x-%j.out"], "echo about to fail; exit 3")
    state, output = slurm_cluster.run_job(failing, timeout=120)
    assert state == "FAILED" and "about to fail" in output


# --- torchrun (CPU, gloo) ------------------------------------------------------------------------------------

ALL_REDUCE = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
if os.environ.get("CRASH_RANK") == str(dist.get_rank()):
    raise SystemExit(7)
sys.stdout.write(f"rank={dist.get_rank()} sum={x.item():.0f}\\n")
dist.barrier()
dist.destroy_process_group()
"""


def test_torchrun_two_processes_all_reduce_and_a_crashing_rank_fails(tmp_path):
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    args = ["--nnodes=1", "--nproc_per_node=2", "--master_port=29761", script]
    good = realtools.torchrun(args, timeout=120)
    assert good.returncode == 0, good.stderr[-3000:]
    assert sorted(line for line in good.stdout.splitlines() if line.startswith("rank=")) == [
        "rank=0 sum=3",
        "rank=1 sum=3",
    ]
    crashed = realtools.torchrun(args, timeout=120, env={"CRASH_RANK": "1"})
    assert crashed.returncode not in (0, 124, 137), crashed.stderr[-3000:]


# --- DeepSpeed's config parser -------------------------------------------------------------------------------

DS_CONFIG = {
    "train_batch_size": 256,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 4,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
}


def test_deepspeed_accepts_a_consistent_config_and_rejects_broken_ones(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(DS_CONFIG))
    ok, message = realtools.validate_ds_config(path, world_size=16)  # 4 × 4 × 16 = 256
    assert ok, message
    assert "zero_stage=3" in message
    ok, message = realtools.validate_ds_config(path, world_size=8)
    assert not ok and "256 != 4 * 4 * 8" in message
    typo = {k: v for k, v in DS_CONFIG.items() if k != "zero_optimization"} | {"zero_optimisation": {"stage": 3}}
    path.write_text(json.dumps(typo))
    ok, message = realtools.validate_ds_config(path, world_size=16)
    assert not ok and "zero_optimisation" in message


# --- Kubernetes schemas (built-in strict + vendored CRDs) --------------------------------------------------

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  replicas: 2
  selector: {matchLabels: {app: vllm}}
  template:
    metadata: {labels: {app: vllm}}
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.11.1
          ports: [{containerPort: 8000}]
          resources: {limits: {nvidia.com/gpu: 8}}
"""
PYTORCHJOB = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: train}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - {name: pytorch, image: "nvcr.io/nvidia/pytorch:24.05-py3", command: [torchrun, train.py]}
"""


def test_k8s_accepts_good_manifests_and_reports_every_error(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(DEPLOYMENT + "---\n" + PYTORCHJOB)
    assert realtools.validate_k8s([good]) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        DEPLOYMENT.replace("replicas: 2", "replica: 2").replace("containerPort: 8000", "containerPort: '8000'")
        + "---\n"
        + PYTORCHJOB.replace("replicas: 1", "replicas: '1'")
        + "---\napiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {}\n"
    )
    errors = "\n".join(realtools.validate_k8s([bad]))
    assert "'replica' was unexpected" in errors
    assert "containerPort: '8000' is not of type 'integer'" in errors
    assert "Master.replicas: '1' is not of type 'integer'" in errors  # from the vendored PyTorchJob CRD
    assert "no schema" in errors  # a removed apiVersion is an error, not a warning


# --- vLLM's own argument parser and config classes ----------------------------------------------------------

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
}


def test_vllm_accepts_good_args_for_a_planted_hub_id():
    ok, message = realtools.validate_vllm(
        ["serve", "acme/tiny-llama", "-tp", "2", "--max-model-len", "2048"], hf_config={"acme/tiny-llama": TINY_LLAMA}
    )
    assert ok, message
    assert "tp=2" in message and "max_model_len=2048" in message


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--tensor-parallel-size", "two"], "invalid int value: 'two'"),  # argparse
        (["--tensor-parallel-size", "3"], "must be divisible by tensor parallel size (3)"),  # ModelConfig
    ],
)
def test_vllm_rejects_bad_args(args, expected):
    ok, message = realtools.validate_vllm(
        ["serve", "acme/tiny-llama", *args], hf_config={"acme/tiny-llama": TINY_LLAMA}
    )
    assert not ok
    assert expected in message


# --- Triton: the ModelConfig protobuf and a real tritonserver ----------------------------------------------

PY_ADD_CONFIG = """name: "py_add"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
"""
PY_ADD_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32))]))
        return out
"""


def test_triton_pbtxt_parses_and_a_misspelled_field_is_rejected(tmp_path):
    good = tmp_path / "py_add" / "config.pbtxt"
    good.parent.mkdir()
    good.write_text(PY_ADD_CONFIG)
    ok, message = realtools.parse_triton_pbtxt(good)
    assert ok, message
    bad = tmp_path / "bad" / "config.pbtxt"
    bad.parent.mkdir()
    bad.write_text(PY_ADD_CONFIG.replace("max_batch_size", "max_batch_sizes"))
    ok, message = realtools.parse_triton_pbtxt(bad)
    assert not ok
    assert 'has no field named "max_batch_sizes"' in message


def model_repository(root: Path, config: str) -> Path:
    (root / "py_add" / "1").mkdir(parents=True)
    (root / "py_add" / "config.pbtxt").write_text(config)
    (root / "py_add" / "1" / "model.py").write_text(PY_ADD_MODEL)
    return root


def test_tritonserver_loads_a_good_model_and_rejects_a_bad_batching_config(tmp_path):
    ok, log = realtools.tritonserver_loads(model_repository(tmp_path / "good", PY_ADD_CONFIG))
    assert ok, log
    assert "READY" in log and "py_add" in log
    # preferred batch size above max_batch_size: parses as protobuf, only the server says no
    bad_config = PY_ADD_CONFIG.replace("max_queue_delay_microseconds: 100", "preferred_batch_size: [ 16 ]")
    ok, log = realtools.tritonserver_loads(model_repository(tmp_path / "bad", bad_config))
    assert not ok
    assert "preferred size must be <= max batch size" in log


# --- headless chromium: SVG -> PNG -------------------------------------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, channels and unfiltered RGB(A) rows of an 8-bit non-interlaced PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytes(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, up_left = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        prev = bytes(line)
        rows.append(prev)
    return width, height, channels, rows


def test_chromium_renders_what_the_svg_draws(tmp_path):
    svg = tmp_path / "half.svg"
    svg.write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200">'
        '<rect width="200" height="200" fill="#ff0000"/><rect x="200" width="200" height="200" fill="#0000ff"/>'
        "</svg>"
    )
    png = tmp_path / "half.png"
    realtools.render_svg_png(svg, png, width=400, height=200)
    width, height, channels, rows = png_pixels(png.read_bytes())
    assert (width, height) == (400, 200)
    rgb = lambda x, y: tuple(rows[y][x * channels : x * channels + 3])  # noqa: E731
    assert rgb(100, 190) == (255, 0, 0)  # bottom rows too: chromium crops windows under 150 px tall
    assert rgb(300, 10) == (0, 0, 255)
    with pytest.raises(ValueError, match="crop"):
        realtools.render_svg_png(svg, png, width=400, height=100)


# --- pre-commit --------------------------------------------------------------------------------------------


def test_pre_commit_is_the_pinned_release():
    result = subprocess.run([realtools.pre_commit_bin(), "--version"], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["pre-commit", "4.7.0"]
