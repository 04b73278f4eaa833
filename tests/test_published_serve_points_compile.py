"""Every serving row benchmarks/accuracy_serve_points.py states (serve_points_2.csv at its published load point),
written as a plan and compiled end to end through compile_plan: the engine's files, the
Kubernetes objects and plan.json must accept what search_serving accepts, with the stated TP and batch."""

from __future__ import annotations

import json

import pytest
import yaml

from benchmarks.accuracy_serve_points import GPT_J_6B, STATEMENTS, Skip, Statement, point_cases, rows
from compiler.pipeline import compile_plan

TABLE = rows()
SEARCHED = {(case.row, case.statement): case for case in point_cases()[0]}  # what the benchmark's search_serving chose
STATED = [
    (index, s)
    for index, stated in enumerate(STATEMENTS)
    if not isinstance(stated, Skip)
    for s in (stated if isinstance(stated, tuple) else (stated,))
]


def _plan(s: Statement, name: str) -> dict:
    """The statement as a serve plan: static batch → max_num_seqs and that many clients; closed loop → clients;
    max load → an open-loop rate (what accuracy_serve_points._request asks search_serving)."""
    closed = s.load != "max-load"
    # attention DP and speculative decoding are emitted as vLLM's --data-parallel-size / --speculative-config only
    engine = "vllm" if s.attention_dp > 1 or s.speculative_tokens else s.engine
    traffic = {"prompt_tokens": s.prompt_tokens, "output_tokens": s.output_tokens, "peak_factor": 1.0}
    traffic |= {"concurrency": s.clients} if closed else {"requests_per_second": 1.0}
    serve = {
        "engine": engine,
        "context_len": s.longest_request or s.prompt_tokens + s.output_tokens,
        "traffic": traffic,
        "kv_cache_dtype": s.kv_cache_dtype or ("fp8" if s.precision == "fp8" else "auto"),
    }
    serve["min_replicas"] = 1  # one replica, as search_serving sizes the row
    if s.load == "static-batch":
        serve["max_num_seqs"] = s.clients
    if s.attention_dp > 1:
        serve["attention_dp"] = s.attention_dp
    if s.speculative_tokens:
        serve["speculative"] = {"num_speculative_tokens": s.speculative_tokens, "acceptance_rate": s.acceptance_rate}
    model = (
        {"architecture": GPT_J_6B.model_dump(mode="json", exclude_defaults=True)}
        if s.model == "gpt-j-6b"
        else {"preset": s.model}
    )
    if s.checkpoint:  # NVIDIA's NVFP4 checkpoints (ModelOpt): vLLM reads the method from their config
        model |= {"hf_id": s.checkpoint, "quantization": "nvfp4"}
    return {
        "name": name,
        "workload": "serve",
        "model": model,
        "precision": s.precision,
        "serve": serve,
        "cluster": {
            "scheduler": "both",
            "gpu": s.gpu_id,
            "count": s.gpus,
            "interconnect": "ib-400g",
            "kubernetes": {"shared_storage_class": "lustre-csi"},
        },
        "parallelism": {"tp": s.tp},
        "optimize": "cost",
    }


@pytest.mark.parametrize(
    "index,s",
    [
        pytest.param(i, s, id=f"{n:02d} row{i:02d} {TABLE[i]['model'][:60]} {s.prompt_tokens}/{s.output_tokens}")
        for n, (i, s) in enumerate(STATED)
    ],
)
def test_stated_serve_point_compiles(index, s, tmp_path):
    plan = _plan(s, f"serve-point-{index:02d}")
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    files = {f.path: f.text for f in compile_plan(path).files}
    resolved = json.loads(files["plan.json"])
    serving = resolved["serving"]
    assert (serving["tp"], serving["engine"], serving["precision"]) == (s.tp, plan["serve"]["engine"], s.precision)
    assert (serving["attention_dp"], serving["gpus_per_replica"]) == (s.attention_dp, s.gpus)
    assert serving["kv_cache_dtype"] == plan["serve"]["kv_cache_dtype"]
    assert serving["context_len"] == plan["serve"]["context_len"]
    if s.load == "static-batch":
        assert serving["max_concurrency"] == s.clients
    if s.load != "max-load":
        assert serving["concurrency"] == s.clients
    engine = (
        yaml.safe_load(files["vllm/config.yaml"])
        if serving["engine"] == "vllm"
        # Triton's vLLM backend
        else json.loads(
            next(text for p, text in files.items() if p.startswith("triton/") and p.endswith("/1/model.json"))
        )
    )
    assert (engine["tensor_parallel_size"], engine["max_num_seqs"] * s.attention_dp) == (
        s.tp,
        serving["max_concurrency"],
    )
    if s.speculative_tokens:
        assert json.loads(engine["speculative_config"]) == {
            "method": "mtp",
            "num_speculative_tokens": s.speculative_tokens,
        }
    if s.checkpoint:
        assert engine["model"] == s.checkpoint and "quantization" not in engine
    if s.attention_dp > 1:  # vLLM's max_num_seqs is per DP rank
        assert (engine["data_parallel_size"], engine["enable_expert_parallel"]) == (s.attention_dp, True)
    assert "k8s/serving.yaml" in files
    # a plan cannot state TensorRT-LLM's 0.95 (perf overview), nor its share of free memory on engine vllm
    if s.memory_fraction == serving["gpu_memory_utilization"] and serving["engine"] == s.engine:
        assert serving["max_concurrency"] == SEARCHED[index, s].batch
