"""FSDP2 × CP end to end: a plan pinned to CP at ZeRO-3 compiles to fsdp/fsdp_tp.{json,py} with the mesh
[dp_shard, cp, tp] and the Llama 3 paper's all-gather CP (§3.3.2: 2·CP chunks, rank i keeps i and 2·CP−1−i), and
launch/torchrun.sh runs one real optimizer step of transformers' LlamaForCausalLM on CPU gloo ranks
(tests/fsdp_cp_step.py) whose loss and reduced gradients match a single process on the whole sequences. The sizing's
all-gather volume and gathered K/V are checked by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.catalog.loader import load_gpus, load_models
from compiler.catalog.params import count_params
from compiler.deployment.fsdp_tp import cp_rank_chunks
from compiler.pipeline import resolve
from compiler.sizing.train.communication import NVLINK_ACHIEVABLE_FRACTION
from compiler.sizing.train.frameworks import fsdp_tp_runs, resolve_framework
from compiler.sizing.train.layout import Layout
from compiler.sizing.train.parallel import cp_allgather_bytes_per_layer, cp_allgather_kv_bytes
from tests.fixtures.train_sizing import memory_of, step_of
from tests.test_target_torchrun import REPO, free_port, torch_env
from tests.tools import realtools

STEP = REPO / "tests" / "fsdp_cp_step.py"
PLAN = """\
name: fsdp-cp
workload: train
model: {{params: 1B}}
precision: {precision}
train:
  tokens: 1B
  seq_len: 16384
  global_batch: 64
  framework: fsdp
  entrypoint: {{script: {script}}}
cluster:
  scheduler: slurm
  gpus: [h100-sxm-80gb]
  gpus_per_node: 4
  interconnect: ib-400g
  storage: lustre
  max_gpus: {gpus}
parallelism: {{cp: {cp}, dp: {dp}, tp: 1, pp: 1, zero_stage: 3, recompute: {recompute}}}
"""


def compile_plan(tmp_path: Path, cp: int, dp: int, recompute: str = "none", precision: str = "bf16") -> Path:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        PLAN.format(precision=precision, script=json.dumps(str(STEP)), gpus=cp * dp, cp=cp, dp=dp, recompute=recompute)
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "compiler", str(plan), "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out / "fsdp-cp"


def test_chunks_are_llama3_load_balanced():
    assert cp_rank_chunks(2) == [[0, 3], [1, 2]]
    assert cp_rank_chunks(4) == [[0, 7], [1, 6], [2, 5], [3, 4]]
    for cp in (2, 4, 8):  # every chunk once; chunk c's queries see c+1 chunks of keys: 2·cp+1 on every rank
        pairs = cp_rank_chunks(cp)
        assert sorted(c for pair in pairs for c in pair) == list(range(2 * cp))
        assert {sum(c + 1 for c in pair) for pair in pairs} == {2 * cp + 1}


def test_fsdp_runs_cp_alone_at_zero3():
    assert fsdp_tp_runs("full", Layout(cp=2, zero=3))
    assert not fsdp_tp_runs("full", Layout(cp=2, zero=1))  # ZeRO-1: Megatron's
    assert not fsdp_tp_runs("full", Layout(tp=2, cp=2, zero=3))  # CP × TP: not built
    assert not fsdp_tp_runs("full", Layout(cp=2, pp=2, stage_layers=(16, 16), zero=3))  # CP × PP: not built
    assert not fsdp_tp_runs("lora", Layout(cp=2, zero=3))
    assert resolve_framework("auto", "full", Layout(cp=2, zero=3))[0] == "fsdp"


def test_allgather_volume_and_gathered_kv_by_hand():
    """Llama-3.1-8B (8 K/V heads of 128), 256K tokens on CP8 (torchtitan's row): a rank's K/V chunk is 32768 tokens ×
    2·8·128 values × 2 bytes = 128 MiB; the forward gather sends 7 of them, the backward all-reduce 14, a recompute 7
    more; the gathered K/V of one layer are 262144 × 2048 × 2 bytes = 1 GiB."""
    arch = resolve_model_arch("llama-3.1-8b")
    chunk = 32768 * 2048 * 2
    assert chunk == 128 * 2**20
    assert cp_allgather_bytes_per_layer(arch, 262144, 1, 1, 8, "none") == 21 * chunk == 2_818_572_288
    assert cp_allgather_bytes_per_layer(arch, 262144, 1, 1, 8, "full") == 28 * chunk == 3_758_096_384
    assert cp_allgather_bytes_per_layer(arch, 262144, 1, 2, 8, "op") == 14 * chunk  # TP2 halves the heads
    assert cp_allgather_bytes_per_layer(arch, 262144, 1, 1, 1, "full") == 0
    assert cp_allgather_kv_bytes(arch, 262144, 1, 1) == 2**30


def test_the_sizing_counts_the_gathered_kv_and_the_exposed_allgather():
    """FSDP (all-gather CP) against DDP's accounting of the same activations (Megatron's ring: local K/V only): with
    full recompute the recomputed layer holds the whole sequence's K/V (7/8 GiB beyond its chunk) and one layer's
    gathered K/V or its gradient (1 GiB) is live; the all-gather is exposed whole: 32 layers × 3.5 GiB at NVLink's
    achievable rate."""
    arch = resolve_model_arch("llama-3.1-8b")
    params = count_params(arch)
    common = dict(
        precision="bf16", tp=1, pp=1, dp=1, zero_stage=3, seq_len=262144, micro_batch=1, recompute="full", cp=8
    )
    fsdp = memory_of(arch, params, framework="fsdp", **common)
    ddp = memory_of(arch, params, framework="ddp", **common)
    assert fsdp.activations - ddp.activations == pytest.approx(2**30 * (1 + 7 / 8), abs=2)
    gpu = load_gpus()["h100-sxm-80gb"]
    timing = dict(
        precision="bf16",
        seq_len=262144,
        micro_batch=1,
        grad_accum=1,
        tp=1,
        pp=1,
        dp=1,
        zero_stage=3,
        recompute="full",
        cp=8,
        gpus_per_node=8,
    )
    gathered = step_of(arch, params, gpu, cp_allgather=True, **timing)
    nvlink = gpu.intra_node_bandwidth_bytes_per_second * NVLINK_ACHIEVABLE_FRACTION
    assert gathered.cp_comm == pytest.approx(32 * 3_758_096_384 / nvlink, rel=1e-12)
    assert gathered.total - step_of(arch, params, gpu, **timing).total >= gathered.cp_comm * 0.999  # ring hid


def resolve_model_arch(preset: str):
    return load_models()[preset].architecture


def test_cp_compiles_to_the_fsdp2_files(tmp_path):
    out = compile_plan(tmp_path, cp=2, dp=2, recompute="full")
    plan = json.loads((out / "plan.json").read_text())
    par, settings = plan["parallelism"], plan["deployment"]["frameworks"]["fsdp_tp"]
    assert (par["framework"], par["cp"], par["dp"], par["tp"], par["zero_stage"]) == ("fsdp", 2, 2, 1, 3)
    assert settings["mesh_dim_names"] == ["dp_shard", "cp", "tp"] and settings["mesh_shape"] == [2, 2, 1]
    assert (
        settings["fsdp_mesh_dims"] == ["dp_shard_cp"]
        and settings["flatten_mesh_dims"] == {"dp_shard_cp": ["dp_shard", "cp"]}
        and settings["world_size"] == 4
    )
    assert settings["cp_rank_chunks"] == [[0, 3], [1, 2]] and settings["context_parallel"] == "allgather-kv"
    assert json.loads((out / "fsdp" / "fsdp_tp.json").read_text()) == settings
    assert (
        plan["deployment"]["launcher"]["kind"] == "torchrun" and not (out / "fsdp" / "accelerate_config.yaml").exists()
    )
    decision = next(d for d in plan["deployment"]["decisions"] if d["topic"] == "FSDP × CP attention")
    assert "4 chunks of 4096 (rank 0: 0+3, rank 1: 1+2)" in decision["choice"]
    assert "FSDP × CP attention" in (out / "REPORT.md").read_text()


@pytest.mark.parametrize("framework", ["fsdp", "megatron"])
def test_a_pinned_cp_whose_sequence_does_not_cut_into_2cp_chunks_is_refused(tmp_path, framework):
    plan = tmp_path / "plan.yaml"
    text = PLAN.format(precision="bf16", script="train.py", gpus=2, cp=2, dp=1, recompute="full")
    zero = "zero_stage: 3" if framework == "fsdp" else "zero_stage: 1"
    plan.write_text(
        text.replace("seq_len: 16384", "seq_len: 16382")
        .replace("framework: fsdp", f"framework: {framework}")
        .replace("zero_stage: 3", zero)
    )
    done = subprocess.run(
        [sys.executable, "-m", "compiler", str(plan), "-o", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr  # refused where it was pinned (training_request.refuse_uneven_cp)
    assert "train.seq_len 16382 is not a multiple of 4" in done.stderr and "[cp-sequence-split]" in done.stderr


def test_the_consistency_check_catches_a_cp_mesh_that_is_not_the_plans(tmp_path):
    from compiler import training_consistency
    from compiler.pipeline import render
    from tests.fixtures.resolved_plans import with_framework_config

    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(PLAN.format(precision="bf16", script="train.py", gpus=4, cp=2, dp=2, recompute="full"))
    plan = resolve(plan_file)
    texts = {f.path: f.text for f in render(plan).files}
    training_consistency.check(texts, plan)
    with pytest.raises(AssertionError, match="mesh != plan"):
        training_consistency.check(texts, with_framework_config(plan, "fsdp_tp", mesh_shape=[4, 1, 1]))


HAND_CHECK = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("fsdp_tp", sys.argv[1])
fsdp_tp = importlib.util.module_from_spec(spec); spec.loader.exec_module(fsdp_tp)
import torch

class Rank:
    def __init__(self, rank): self.rank = rank
    def get_local_rank(self): return self.rank

settings = {"cp": 2, "cp_rank_chunks": [[0, 3], [1, 2]]}
ids = torch.arange(8).unsqueeze(0)
rows = {}
for rank in (0, 1):
    inputs, labels, positions = fsdp_tp.context_shard(settings, {"cp": Rank(rank)}, ids, ids + 100)
    seen = fsdp_tp._sibling("fsdp_cp.py", "mlinfra_fsdp_cp").context_visibility(settings["cp_rank_chunks"], rank, 2)
    seen = seen.int().tolist()
    rows[rank] = {"inputs": inputs.tolist(), "labels": labels.tolist(), "positions": positions.tolist(), "seen": seen}
print(json.dumps(rows))
"""


def test_the_chunks_and_the_mask_by_hand(tmp_path):
    """8 tokens on CP2, chunks of 2: rank 0 keeps positions 0,1 and 6,7, rank 1 positions 2..5; a query sees exactly
    the keys at or before its global position."""
    out = compile_plan(tmp_path, cp=2, dp=1)
    done = subprocess.run(
        [str(realtools.tool_python("torch")), "-c", HAND_CHECK, str(out / "fsdp" / "fsdp_tp.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert rows["0"]["inputs"] == [[0, 1, 6, 7]] and rows["0"]["labels"] == [[100, 101, 106, 107]]
    assert rows["0"]["positions"] == [[0, 1, 6, 7]] and rows["1"]["positions"] == [[2, 3, 4, 5]]
    assert rows["0"]["seen"] == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1, 1, 1],
    ]
    assert rows["1"]["seen"] == [
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0],
    ]


def transformers_available() -> bool:
    python = realtools.tool_python("torch")
    return subprocess.run([str(python), "-c", "import transformers"], capture_output=True).returncode == 0


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize(
    "cp, dp, recompute, precision", [(2, 1, "none", "fp32"), (2, 2, "selective", "bf16"), (4, 1, "full", "bf16")]
)
def test_one_step_with_context_parallelism_matches_one_process(tmp_path, cp, dp, recompute, precision):
    """fp32: the sharded step is the single-process step up to summation order; bf16 (the plans' precision) within the
    TP tests' tolerance. selective: torchtitan's op-level SAC re-runs the K/V all-gather in the backward."""
    env = torch_env()
    realtools.require_tool(
        "transformers", transformers_available(), "transformers not in the torch venv; run scripts/install-test-deps.sh"
    )
    out = compile_plan(tmp_path, cp=cp, dp=dp, recompute=recompute, precision=precision)
    done = subprocess.run(
        ["bash", str(out / "launch" / "torchrun.sh"), f"127.0.0.1:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("FSDP_CP_STEP ")]
    assert sorted(r["rank"] for r in rows) == list(range(cp * dp))
    loss_tolerance, grad_tolerance = (1e-5, 1e-4) if precision == "fp32" else (0.02, 0.05)
    size = 16 // (2 * cp)  # the step's 16-token sequences in 2·cp chunks
    for r in rows:
        assert r["mesh"] == [dp, cp, 1] and r["mesh_dims"] == ["dp_shard", "cp", "tp"]
        assert (r["dp_rank"], r["cp_rank"]) == divmod(r["rank"], cp)  # CP inside dp_shard, as torchtitan
        assert r["fsdp_ranks"] == dp * cp and r["placement"] == ["S(0)"]  # ZeRO-3 over dp_shard × cp
        first, last = r["cp_rank"], 2 * cp - 1 - r["cp_rank"]
        assert r["positions"] == [*range(first * size, (first + 1) * size), *range(last * size, (last + 1) * size)]
        assert r["attention"] == "mlinfra_cp_allgather"
        assert r["checkpointed"] == (0 if recompute == "none" else 2)
        assert abs(r["loss"] - r["reference_loss"]) < loss_tolerance, r
        assert r["grad_rel_error"] < grad_tolerance, r  # a wrong mask, chunk or K/V gradient is off by far more
    for shard in range(dp):
        group = [r for r in rows if r["dp_rank"] == shard]
        assert len({r["loss"] for r in group}) == 1  # the CP ranks' mean is one loss
        assert len({r["local_loss"] for r in group}) == cp  # each over its own tokens
