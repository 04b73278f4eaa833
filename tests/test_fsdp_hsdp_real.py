"""HSDP on the FSDP2 path: a plan with parallelism.shard_group_gpus compiles to
fsdp/fsdp_tp.{json,py} with the mesh [dp_replicate, dp_shard, tp] decided in compiler/deployment/fsdp_tp.py, and
launch/torchrun.sh runs one real optimizer step on CPU gloo ranks (tests/fsdp_hsdp_step.py): replicate 2 × shard 2 ×
TP 2 on 8 ranks, 1-D replicate 2 × shard 2 on 4 (a group of 2 on 4-GPU nodes, which Accelerate's FSDP1 cannot shard)
and PP 2 × replicate 2 × shard 2 on 8 (1F1B), each with two micro-batches, against a single-process fp32 reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import training_consistency
from compiler.diagnostics import InfeasiblePlan
from compiler.passes.wording import words
from compiler.pipeline import compile_plan as compile_in_process
from compiler.pipeline import render, resolve
from compiler.sizing.train.frameworks import framework_gap, resolve_framework, runs_on_fsdp2
from compiler.sizing.train.layout import Layout
from tests.fixtures.resolved_plans import with_framework_config
from tests.test_target_torchrun import REPO, free_port, torch_env

STEP = REPO / "tests" / "fsdp_hsdp_step.py"
GRAD_TOLERANCE = 0.05  # bf16 forward against the fp32 reference (tests/test_fsdp_tp_real.py)
PLAN = """\
name: fsdp-hsdp
workload: train
model: {{preset: {model}}}
precision: bf16
train:
  tokens: 1B
  seq_len: 4096
  global_batch: 16
  framework: fsdp
  memory_quantile: none  # the layouts are pinned to fit on their roofline, as the steps run them
  entrypoint: {{script: {script}}}
cluster:
  scheduler: slurm
  gpus: [h100-sxm-80gb]
  gpus_per_node: {per_node}
  interconnect: ib-400g
  storage: lustre
  max_gpus: {gpus}
parallelism: {{{parallelism}, zero_stage: 3, micro_batch: 2, recompute: full}}
"""
CASES = {  # name: (GPUs, GPUs per node, parallelism, mesh, the plan's model and its parameters)
    "tp2": (8, 8, "tp: 2, dp: 4, shard_group_gpus: 2", [2, 2, 2], "llama-3.1-8b", 8_030_261_248),
    "1d": (4, 4, "dp: 4, shard_group_gpus: 2", [2, 2, 1], "llama-2-7b", 6_738_415_616),
    "pp2": (8, 8, "pp: 2, dp: 4, shard_group_gpus: 2", [2, 2, 2, 1], "llama-3.1-8b", 8_030_261_248),
}
DIMS = ["dp_replicate", "dp_shard", "tp"]


def dims(case: str) -> list[str]:
    return ["pp"] * (len(CASES[case][3]) == 4) + DIMS


def write_plan(tmp_path: Path, case: str, script: str = "train.py", parallelism: str | None = None) -> Path:
    gpus, per_node, pinned, _, model, _ = CASES[case]
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        PLAN.format(
            model=model, script=json.dumps(script), per_node=per_node, gpus=gpus, parallelism=parallelism or pinned
        )
    )
    return plan


def compile_plan(tmp_path: Path, case: str) -> Path:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "compiler", str(write_plan(tmp_path, case, str(STEP))), "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out / "fsdp-hsdp"


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_hsdp_plan_compiles_to_the_replicated_mesh_and_shows_its_groups(tmp_path, case):
    out = compile_plan(tmp_path, case)
    plan = json.loads((out / "plan.json").read_text())
    par, settings = plan["parallelism"], plan["deployment"]["frameworks"]["fsdp_tp"]
    assert (par["framework"], par["dp"], par["shard_group_gpus"], par["grad_accum"]) == ("fsdp", 4, 2, 2)
    assert settings["mesh_dim_names"] == dims(case) and settings["mesh_shape"] == CASES[case][3]
    assert settings["fsdp_mesh_dims"] == settings["data_parallel_mesh_dims"] == ["dp_replicate", "dp_shard"]
    assert plan["deployment"]["frameworks"]["accelerate_config"] is None  # FSDP2, not Accelerate's FSDP1
    assert plan["deployment"]["launcher"]["kind"] == "torchrun"
    groups = next(d for d in plan["deployment"]["decisions"] if d["topic"] == "FSDP HSDP groups")
    assert groups["choice"].startswith("2 replicas × shard groups of 2 data-parallel ranks")
    assert "FSDP HSDP groups" in (out / "REPORT.md").read_text()
    # memory sized over the shard group only: AdamW's 12 bytes per parameter over PP × TP × 2, not × 4 (PP2: two
    # near-equal halves, the embedding on the first stage, the head on the last)
    tp, pp, params = CASES[case][3][-1], par["pp"], CASES[case][5]
    assert plan["memory_per_gpu_bytes"]["optimizer"] == pytest.approx(12 * params / (pp * tp * 2), rel=0.01)


def test_the_consistency_check_catches_a_mesh_without_the_replicas(tmp_path):
    plan = resolve(write_plan(tmp_path, "tp2"))
    texts = {f.path: f.text for f in render(plan).files}
    training_consistency.check(texts, plan)
    with pytest.raises(AssertionError, match="fully_shard mesh != plan"):
        training_consistency.check(texts, with_framework_config(plan, "fsdp_tp", fsdp_mesh_dims=["dp_shard"]))


def test_hsdp_framework_rule():
    hsdp_tp = Layout(tp=2, shard_group=2)
    assert framework_gap("fsdp", "full", hsdp_tp.with_changes(zero=3, offload=False)) is None
    assert (
        resolve_framework("auto", "full", hsdp_tp.with_changes(zero=3, offload=False))[0] == "fsdp"
    )  # FSDP2 × TP, not Megatron
    assert framework_gap("fsdp", "full", Layout(shard_group=16, zero=3), per_node=8) is None  # FSDP2 1-D
    # the one rule the sizing prices (fp32 reduction) and the deployment emits (fsdp_tp.json) by
    assert not runs_on_fsdp2("fsdp", 1, 1, "none", 8, 8)  # a node's group: Accelerate's FSDP1 HYBRID_SHARD
    assert runs_on_fsdp2("fsdp", 1, 1, "none", 16, 8) and runs_on_fsdp2("fsdp", 1, 1, "none", 4, 8)
    assert runs_on_fsdp2("fsdp", 2, 1, "none", None, 8) and not runs_on_fsdp2("megatron", 2, 1, "none", None, 8)
    # still missing, named precisely: Megatron has no shard group, QLoRA beyond a node has no FSDP2 path, nor offload
    assert "Megatron-LM has none" in words(framework_gap("auto", "full", hsdp_tp.with_changes(zero=1, offload=False)))
    qlora = framework_gap("fsdp", "qlora", Layout(shard_group=16, zero=3), per_node=8)
    assert qlora["layout"] == "hsdp" and "for any group of full or LoRA weights" in words(qlora)
    offload = framework_gap("fsdp", "full", hsdp_tp.with_changes(zero=3, offload=True))
    assert offload["detail"] == "offload" and "does not offload with TP/PP" in words(offload)


def test_a_shard_group_that_does_not_tile_the_data_parallel_ranks_is_refused_by_name(tmp_path):
    with pytest.raises(InfeasiblePlan) as refused:
        compile_in_process(write_plan(tmp_path, "tp2", parallelism="tp: 2, dp: 4, shard_group_gpus: 3"))
    assert "an HSDP shard group of 3 does not tile the 4 data-parallel ranks" in str(refused.value)


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_hsdp_step_matches_the_reference_with_shards_per_group(tmp_path, case):
    env = torch_env()
    out = compile_plan(tmp_path, case)
    done = subprocess.run(
        ["bash", str(out / "launch" / "torchrun.sh"), f"127.0.0.1:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [
        json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("FSDP_HSDP_STEP ")
    ]
    mesh = CASES[case][3]
    tp, world = mesh[-1], CASES[case][0]
    assert sorted(r["rank"] for r in rows) == list(range(world))
    for r in rows:
        assert r["mesh"] == mesh and r["mesh_dims"] == dims(case)
        # torchtitan's order: TP innermost, then the shard group, the replicas, PP outermost
        assert (r["pp_rank"], r["replica"], r["shard"], r["tp_rank"]) == (
            r["rank"] // (4 * tp),
            r["rank"] // (2 * tp) % 2,
            r["rank"] // tp % 2,
            r["rank"] % tp,
        )
        assert (r["data_index"], r["data_ranks"]) == (2 * r["replica"] + r["shard"], 4)
        if r["loss"] is not None:  # with PP, the last stage's
            assert abs(r["loss"] - r["reference_loss"]) < 0.02, r
        assert r["grad_rel_error"] < GRAD_TOLERANCE, r  # the reduced gradients: reduce-scatter + replica all-reduce
        # a shard per group: 1/(TP × shard group) of the weight on each rank, the same on both replicas
        assert r["probe_local_numel"] * tp * 2 == r["probe_full_numel"], r
        assert r["probe_placements"][0] == "R", r  # replicated over dp_replicate
        assert r["replicas_same_shard"] and r["replicas_same_grad_shard"] and r["shards_differ"], r
        # the replicas all-reduce once per step, as sized: after the last micro-batch (sync_replicas), or in the
        # pipeline schedule's one gradient reduction
        assert r["replica_all_reduces"][:-1] == [0] * (len(r["replica_all_reduces"]) - 1), r
        assert r["replica_all_reduces"][-1] > 0, r
    losses = {r["data_index"]: r["loss"] for r in rows if r["loss"] is not None}
    assert len(set(losses.values())) == 4  # every data-parallel rank read its own sequences


def test_hsdp_time_prices_the_groups_and_the_fp32_reduction_fsdp2_runs():
    """llama-3.1-8b on 16 H100s (8 per node), DP16 ZeRO-3 in shard groups of 8 with 8 micro-batches; ψ = 2 bytes per
    parameter, replicas 2. Per micro-batch two 16-bit all-gathers and a reduce-scatter of ψ·P inside the node's group,
    each (n−1)/n·S/B: (2·2 + r)·P·7/8/B with the reduce-scatter at r bytes (FSDP2: 4, fp32); once per step the two
    replicas all-reduce the r·P/8 shard across nodes, 2·(1/2)·S/B at one GPU's NIC rate (a replica group has one rank
    per node)."""
    from compiler.catalog.params import count_params
    from compiler.sizing.train import communication
    from tests.test_train_time import H100, LLAMA8B, _step

    params = count_params(LLAMA8B).total
    nvlink = H100.intra_node_bandwidth_bytes_per_second * communication.NVLINK_ACHIEVABLE_FRACTION
    nic = 50e9 * communication.INTER_NODE_ACHIEVABLE_FRACTION
    for reduce_bytes in (2, 4):
        step = _step(
            dp=16,
            zero_stage=3,
            zero_shard_ranks=8,
            gradient_bytes_per_replica=2 * params,
            reduce_bytes_per_gradient=reduce_bytes,
            inter_node_latency_seconds=0.0,
        )
        shard_group = 8 * (2 * 2 + reduce_bytes) * params * 7 / 8 / nvlink
        replicas = 2 * (1 / 2) * reduce_bytes * params / 8 / min(nvlink, nic)
        assert step.dp_comm == pytest.approx(shard_group + replicas, rel=1e-9)
