"""FP4 (NVFP4) serving on GPUs whose catalog entry has an FP4 peak (B200): the bytes a weight takes, the tensor cores
it runs on, the checkpoint it needs and what vLLM reads from it (located refusals otherwise)."""

from __future__ import annotations

import json

import pytest
import yaml

from compiler.catalog.loader import load_gpus, load_models
from compiler.catalog.params import count_params
from compiler.diagnostics import PlanInputError
from compiler.sizing.serve.memory import weight_bytes_per_param, weights_bytes_total
from compiler.sizing.serve.replica import compute_dtype
from tests.fixtures.compiled import compiled_files
from tests.test_target_vllm import hf_config
from tests.tools import realtools

GPUS = load_gpus()
LLAMA_70B = load_models()["llama-3.1-70b"].architecture
PLAN = {
    "name": "l70-fp4",
    "workload": "serve",
    "model": {"preset": "llama-3.1-70b", "hf_id": "nvidia/Llama-3.3-70B-Instruct-FP4", "quantization": "nvfp4"},
    "precision": "fp4",
    "serve": {
        "engine": "vllm",
        "context_len": 4096,
        "kv_cache_dtype": "fp8",
        "traffic": {"requests_per_second": 2, "prompt_tokens": 1024, "output_tokens": 512},
    },
    "cluster": {"gpu": "b200-sxm-180gb", "count": 1},
}


def test_an_nvfp4_weight_is_half_a_byte_and_its_block_scale():
    assert weight_bytes_per_param("fp4", 8192) == 0.5 + 1 / 16  # E2M1 values, one E4M3 scale per 16
    counts = count_params(LLAMA_70B)
    body, embedding = counts.total - counts.embedding, counts.embedding
    assert weights_bytes_total(counts, LLAMA_70B, "fp4") == int(
        body * 0.5625 + embedding * 2
    )  # 16-bit embedding and head


def test_fp4_runs_on_fp4_tensor_cores_only():
    b200, h100 = GPUS["b200-sxm-180gb"], GPUS["h100-sxm-80gb"]
    assert b200.dense_tflops["fp4"] == 2 * b200.dense_tflops["fp8"] == 9000  # HGX B200 datasheet: 18 PF sparse
    assert compute_dtype("fp4", b200) == "fp4" and compute_dtype("fp4", h100) is None


def test_an_nvfp4_plan_loads_the_checkpoint_and_vllm_reads_its_method(tmp_path):
    files = compiled_files(tmp_path, PLAN)
    resolved = json.loads(files["plan.json"])
    assert (resolved["serving"]["precision"], resolved["hardware"]["gpu"]) == ("fp4", "b200-sxm-180gb")
    assert resolved["serving"]["weights_bytes"] == weights_bytes_total(count_params(LLAMA_70B), LLAMA_70B, "fp4")
    config = yaml.safe_load(files["vllm/config.yaml"])
    assert config["model"] == "nvidia/Llama-3.3-70B-Instruct-FP4" and "quantization" not in config
    (tmp_path / "config.yaml").write_text(files["vllm/config.yaml"])
    layout = realtools.vllm_parallel_config(
        ["serve", "--config", str(tmp_path / "config.yaml")], hf_config("nvidia/Llama-3.3-70B-Instruct-FP4")
    )
    assert layout["quantization"] == "modelopt_fp4"


def test_fp4_on_a_gpu_without_fp4_tensor_cores_is_infeasible_and_says_why(tmp_path):
    from compiler.diagnostics import InfeasiblePlan

    with pytest.raises(
        InfeasiblePlan, match="no allowed GPU runs precision fp4: .*has no fp4 tensor cores; smallest fit: 1 × b200"
    ):
        compiled_files(tmp_path, {**PLAN, "cluster": {"gpu": "h100-sxm-80gb", "count": 1}})


@pytest.mark.parametrize(
    "change,path,words",
    [
        ({"model": {"preset": "llama-3.1-70b"}}, "precision", "NVFP4 (ModelOpt or compressed-tensors)"),
        ({"serve": {**PLAN["serve"], "engine": "tgi"}}, "precision", "TGI 3.3 has no NVFP4"),
    ],
    ids=["16-bit-checkpoint", "engine-tgi"],
)
def test_fp4_is_refused_where_it_cannot_load(tmp_path, change, path, words):
    with pytest.raises(PlanInputError) as raised:
        compiled_files(tmp_path, {**PLAN, **change})
    (diag,) = raised.value.diagnostics
    assert (diag.code, diag.path) == ("checkpoint-mismatch", path) and words in diag.message


def test_fp4_is_for_serving(tmp_path):
    plan = {
        "name": "t",
        "workload": "train",
        "model": {"preset": "llama-3.1-8b"},
        "precision": "fp4",
        "train": {"tokens": "1B"},
    }
    with pytest.raises(PlanInputError, match="is for serving"):
        compiled_files(tmp_path, plan)
