"""Attention data parallelism for MoE serving (serve.attention_dp; compiler/sizing/serve_attention_dp.py): the weights
and KV a GPU holds, the experts' all-gather and reduce-scatter, what vLLM's own config builds from the emitted
arguments, and the plans it is refused for (located, exit 2)."""

from __future__ import annotations

import json

import pytest
import yaml

from compiler.catalog.loader import load_models
from compiler.catalog.params import count_params
from compiler.diagnostics import PlanInputError
from compiler.sizing.serve.attention_dp import expert_exchange_seconds
from compiler.sizing.serve.memory import routed_expert_params_total, weights_bytes_per_gpu
from tests.fixtures.compiled import compiled_files
from tests.test_target_vllm import hf_config
from tests.tools import realtools

QWEN3 = load_models()["qwen3-235b-a22b"].architecture
PLAN = {
    "name": "qwen3-dp",
    "workload": "serve",
    "model": {"preset": "qwen3-235b-a22b"},
    "precision": "fp8",
    "serve": {
        "engine": "vllm",
        "context_len": 4096,
        "kv_cache_dtype": "fp8",
        "attention_dp": 8,
        "traffic": {"requests_per_second": 5, "prompt_tokens": 2048, "output_tokens": 1024},
    },
    "cluster": {"gpu": "h100-sxm-80gb", "count": 8},
    "parallelism": {"tp": 1},
}


def test_routed_experts_split_over_the_ranks_the_rest_whole_per_rank():
    counts = count_params(QWEN3)
    routed = 94 * 128 * 3 * 4096 * 1536
    assert routed_expert_params_total(QWEN3) == routed == 227_096_395_776
    embedding = 2 * 151936 * 4096  # input table and untied head stay 16-bit (2 B)
    rest = counts.total - counts.embedding - routed  # attention, norms, routers: fp8 (1 B), whole on each rank
    assert weights_bytes_per_gpu(counts, QWEN3, "fp8", 1, 1, dp=8) == int(rest + routed / 8 + embedding * 2)
    assert weights_bytes_per_gpu(counts, QWEN3, "fp8", 8, 1) == int((rest + routed + embedding * 2) / 8)


def test_the_experts_all_gather_and_reduce_scatter_per_moe_layer():
    """94 MoE layers × (all-gather + reduce-scatter) of S = 8 ranks × 16 tokens × 4096 × 2 B, each lat + S/B·7/8."""
    link, latency = 300e9, 10e-6
    size = 8 * 16 * 4096 * 2
    assert expert_exchange_seconds(QWEN3, 8, 16, 94, link, latency) == pytest.approx(
        94 * 2 * (latency + size / link * 7 / 8)
    )
    assert expert_exchange_seconds(QWEN3, 1, 16, 94, link, latency) == 0.0
    assert (
        expert_exchange_seconds(
            QWEN3.model_copy(update={"experts": 1, "experts_per_token": 1}), 8, 16, 94, link, latency
        )
        == 0.0
    )


def test_a_dp_replica_is_sized_and_emitted_per_rank(tmp_path):
    files = compiled_files(tmp_path, PLAN)
    resolved = json.loads(files["plan.json"])
    serving, memory = resolved["serving"], resolved["memory_per_gpu_bytes"]
    assert (serving["attention_dp"], serving["tp"], serving["gpus_per_replica"]) == (8, 1, 8)
    assert memory["weights"] == weights_bytes_per_gpu(count_params(QWEN3), QWEN3, "fp8", 1, 1, dp=8)
    config = yaml.safe_load(files["vllm/config.yaml"])
    assert (config["data_parallel_size"], config["enable_expert_parallel"], config["tensor_parallel_size"]) == (
        8,
        True,
        1,
    )
    assert config["max_num_seqs"] * 8 == serving["max_concurrency"]  # vLLM schedules each rank on its own
    assert "--data-parallel-size=8" in files["vllm/serve.sh"] and "--enable-expert-parallel" in files["vllm/serve.sh"]
    assert "attention data parallelism" in files["REPORT.md"] and any(
        d["topic"] == "attention data parallelism" for d in resolved["decisions"]
    )


def test_vllm_builds_the_dp_layout_from_the_emitted_config(tmp_path):
    files = compiled_files(tmp_path, PLAN)
    (tmp_path / "config.yaml").write_text(files["vllm/config.yaml"])
    serving = json.loads(files["plan.json"])["serving"]
    layout = realtools.vllm_parallel_config(
        ["serve", "--config", str(tmp_path / "config.yaml")], hf_config("Qwen/Qwen3-235B-A22B")
    )
    assert layout == {
        "data_parallel_size": 8,
        "enable_expert_parallel": True,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "max_num_seqs": serving["max_concurrency"] // 8,
        "speculative_method": None,
        "num_speculative_tokens": None,
        "quantization": "fp8",
    }


@pytest.mark.parametrize(
    "change,words",
    [
        ({"model": {"preset": "llama-3.1-70b"}}, "has none"),
        ({"serve": {**PLAN["serve"], "engine": "triton"}}, "use engine vllm"),
        ({"parallelism": {"tp": 1, "pp": 2}}, "without pipeline stages"),
    ],
    ids=["dense-model", "engine-triton", "with-pp"],
)
def test_attention_dp_is_refused_where_it_cannot_run(tmp_path, change, words):
    with pytest.raises(PlanInputError) as raised:
        compiled_files(tmp_path, {**PLAN, **change})
    (diag,) = raised.value.diagnostics
    assert (diag.code, diag.path) == ("attention-dp-unsupported", "serve.attention_dp") and diag.line > 1
    assert words in diag.message
