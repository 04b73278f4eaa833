"""The training search tries HSDP: ZeRO-3 FSDP layouts whose DP spans nodes also run with shard groups of one
node's data-parallel ranks, and of 2, 4 or 8 nodes where memory needs them (train_layout.hsdp_groups,
training._search_hsdp); the group reaches plan.json and the FSDP files."""

from __future__ import annotations

import json

import pytest

from compiler.catalog.params import count_params
from compiler.pipeline import render, resolve
from compiler.sizing.train.candidate import search_context
from compiler.sizing.train.choice import Collector
from compiler.sizing.train.communication import BACKWARD_SHARE_OF_COMPUTE, INTER_NODE_ACHIEVABLE_FRACTION
from compiler.sizing.train.layout import Layout
from compiler.sizing.train.parallel import hsdp_groups
from compiler.sizing.train.search import _search_hsdp, evaluate_layout, search_training
from tests.test_training_search import FABRICS, GPUS, H100, LLAMA8B, LLAMA70B, TrainPins, request

EFA = FABRICS.interconnects["efa-400g"]  # AWS p4d: 6.25 GB/s per GPU, 15 µs
FULL_SHARD = Layout(stage_layers=(32,), zero=3, framework="fsdp")


def test_groups_are_a_nodes_data_parallel_ranks_then_a_few_multiples_that_tile_dp():
    assert hsdp_groups(128, 1, 1, 8) == [8, 16, 32, 64]
    assert hsdp_groups(64, 2, 1, 8) == [4, 8, 16, 32]  # TP2: a node holds 4 data-parallel ranks
    assert hsdp_groups(24, 1, 1, 8) == [8]  # 16 and 32 do not tile 24 ranks
    assert hsdp_groups(8, 1, 1, 8) == []  # DP inside one node: nothing to replicate across
    assert hsdp_groups(128, 1, 2, 8) == []  # the FSDP2 script has no HSDP group with CP
    assert hsdp_groups(4096, 1, 1, 8) == [8, 16, 32, 64]  # never more than four sizes
    assert hsdp_groups(8, 8, 1, 8) == [2, 4]  # TP8: a node holds one rank, a group of 1 would shard nothing


def test_hsdp_wins_on_slow_nics_where_a_nodes_group_holds_the_states():
    """Llama-3.1-8B on 128 H100s (16 nodes) over 6.25 GB/s NICs, 512 sequences of 8192: mb1, 4 micro-batches per step.
    Fully sharded, each micro-batch's two 16-bit all-gathers and reduce-scatter (1.5 × 2P bytes) cross the nodes at
    8 GPUs × 6.25 GB/s × 0.86 and outlast the micro-batch's compute; with HSDP8 (16 B/param / 8 = 16 GB of states per
    GPU, fits 80 GB) they stay on NVLink and only the 2P/8 gradient shard crosses, once per step, ring over 16 replicas
    (one per node) at one NIC, exposed beyond the last backward (2/3 of a micro-batch)."""
    req = request(gpu_count=128, interconnect=EFA, framework="fsdp")
    chosen = search_training(req, GPUS).chosen
    assert (chosen.framework, chosen.layout.zero, chosen.layout.dp, chosen.layout.shard_group, chosen.grad_accum) == (
        "fsdp",
        3,
        128,
        8,
        4,
    )
    assert chosen.description.endswith(" HSDP8")
    full = evaluate_layout(
        req, H100, FULL_SHARD.with_changes(micro_batch=chosen.layout.micro_batch, recompute=chosen.layout.recompute)
    )
    per_microbatch = (full.step.compute - full.step.optimizer) / 4
    gradient_bytes = 2 * count_params(LLAMA8B).total
    nic, latency = 6.25e9 * INTER_NODE_ACHIEVABLE_FRACTION, 15e-6
    crossing = 1.5 * gradient_bytes * 2 * 127 / 128 / (8 * nic) + 2 * 127 * latency  # ≈ 1.11 s per micro-batch
    assert full.step.dp_comm_exposed == pytest.approx(4 * (crossing - per_microbatch), rel=1e-6)
    replicas = 2 * 15 / 16 * gradient_bytes / 8 / nic + 2 * 15 * latency  # ≈ 0.70 s per step
    assert chosen.step.dp_comm_exposed == pytest.approx(replicas - BACKWARD_SHARE_OF_COMPUTE * per_microbatch, rel=1e-6)
    assert full.step.dp_comm_exposed == pytest.approx(1.46, abs=0.01) and chosen.step.dp_comm_exposed == pytest.approx(
        0.20, abs=0.01
    )
    # the rest of the step is the same but for the optimizer over 8× more states per GPU
    assert chosen.step.total == pytest.approx(
        full.step.total
        - full.step.dp_comm_exposed
        + chosen.step.dp_comm_exposed
        + chosen.step.optimizer
        - full.step.optimizer,
        rel=1e-9,
    )
    assert chosen.step.total < 0.75 * full.step.total
    # on 400 Gb/s per GPU the fully sharded collectives hide under compute: no group
    assert search_training(request(gpu_count=128, framework="fsdp"), GPUS).chosen.layout.shard_group is None


def test_a_group_pinned_to_all_data_parallel_ranks_is_full_sharding_and_stops_the_group_search():
    req = request(
        gpu_count=128, interconnect=EFA, framework="fsdp", pins=TrainPins(zero_stage=3, micro_batch=1, shard_group=128)
    )
    chosen = search_training(req, GPUS).chosen
    assert (chosen.layout.dp, chosen.layout.shard_group) == (128, None) and "HSDP" not in chosen.description
    assert chosen.step.dp_comm_exposed == pytest.approx(1.46, abs=0.01)  # the fully sharded figure above
    pinned = search_training(
        request(gpu_count=128, interconnect=EFA, framework="fsdp", pins=TrainPins(shard_group=16)), GPUS
    )
    assert pinned.chosen.layout.shard_group == 16  # any other pinned group is kept as pinned


def test_hsdp_is_not_chosen_where_no_group_holds_the_states():
    """Llama-2-70B-shaped (80 layers, 69B parameters) on 32 H100s over the same slow NICs: the groups tried are one and two nodes
    (8, 16 < DP 32), whose AdamW states alone (16 B/param / group: 128 and 64 GiB) leave no room within 79.6 GiB usable
    for the activations; fully sharded over 32 (32 GiB of states) fits, and is chosen."""
    req = request(arch=LLAMA70B, params=count_params(LLAMA70B), gpu_count=32, interconnect=EFA, framework="fsdp")
    result = search_training(req, GPUS)
    chosen = result.chosen
    assert (chosen.layout.dp, chosen.layout.zero, chosen.layout.shard_group) == (32, 3, None)
    assert not any(" HSDP" in c.description for c in result.pareto)
    for group in (8, 16):
        stated = Layout(stage_layers=(80,), shard_group=group, zero=3, recompute="full", framework="fsdp")
        hybrid = evaluate_layout(req, H100, stated)
        assert hybrid.memory.total > chosen.usable_memory_bytes


def test_a_larger_group_is_tried_only_where_a_nodes_group_needs_more_recompute():
    """At mb1 the fully sharded 8B layout fits without recompute (59 GiB); a node's group needs 76 GiB. With room for it,
    HSDP8 without recompute is the only variant; with 72 GiB usable it needs full recompute, so 2 nodes' worth is tried
    and fits without (67 GiB), and no larger group after it."""
    ctx = search_context(request(gpu_count=128, interconnect=EFA, framework="fsdp"))

    def variants(usable_gib: float) -> list[str]:
        out = Collector()
        fully_sharded = FULL_SHARD.with_changes(dp=128)  # mb1: 4 micro-batches of the 512 sequences
        _search_hsdp(ctx, out, H100, fully_sharded, ["none", "full"], int(usable_gib * 2**30))
        return [f"{f.layout.recompute} HSDP{f.layout.shard_group}" for f in out.feasible]

    assert variants(79.6) == ["none HSDP8"]
    assert variants(72.4) == ["full HSDP8", "none HSDP16"]
    assert variants(30.0) == ["full HSDP16", "full HSDP32", "full HSDP64"]  # 37 GiB for HSDP8 even with full recompute


PLAN = """\
name: hsdp-search
workload: train
model: {{preset: llama-3.1-8b}}
precision: bf16
train: {{tokens: 100B, seq_len: 8192, global_batch: 512, framework: fsdp, memory_quantile: none, entrypoint: {{script: train.py}}}}
cluster: {{scheduler: slurm, gpus: [h100-sxm-80gb], count: 128, gpus_per_node: 8, interconnect: efa-400g, storage: lustre}}
{parallelism}
"""


@pytest.mark.parametrize(
    ("parallelism", "group", "mesh"), [("", 8, None), ("parallelism: {tp: 2, micro_batch: 2}", 4, [16, 4, 2])]
)
def test_the_searched_group_reaches_the_fsdp_files(tmp_path, parallelism, group, mesh):
    """Unpinned, on slow NICs, memory gated on the roofline (the P50 margin leaves a node's group no room): a node's group of 8 runs as Accelerate's FSDP1 HYBRID_SHARD; with TP2 a node holds 4
    data-parallel ranks, and FSDP2's mesh [dp_replicate, dp_shard, tp] is 16 replicas × 4 × 2. With TP2 the
    micro-batch is pinned to 2: left free, micro-batch 8 with full recompute, fully sharded, costs 0.2% less (since
    the step time stopped counting dropout masks Llama does not store) and wins, with no group to check."""
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(PLAN.format(parallelism=parallelism))
    plan = resolve(plan_file)
    assert (plan.parallelism.framework, plan.parallelism.zero_stage, plan.parallelism.shard_group_gpus) == (
        "fsdp",
        3,
        group,
    )
    texts = {f.path: f.text for f in render(plan).files}
    assert f'shard_group_gpus": {group}' in texts["plan.json"]
    if mesh is None:
        assert "fsdp_sharding_strategy: HYBRID_SHARD" in texts["fsdp/accelerate_config.yaml"]
        assert "fsdp/fsdp_tp.json" not in texts
    else:
        settings = json.loads(texts["fsdp/fsdp_tp.json"])
        assert settings["mesh_dim_names"] == ["dp_replicate", "dp_shard", "tp"] and settings["mesh_shape"] == mesh
        assert settings["fsdp_mesh_dims"] == ["dp_replicate", "dp_shard"]
    assert f"shard-group={group} " in texts["REPORT.md"] and f" HSDP{group} |" in texts["REPORT.md"]
