"""FSDP2 × PP memory and collectives, measured: torch.distributed.pipelining runs every micro-batch's backward without
gradient sync and leaves the stage unsharded (train_memory.pipeline_without_sync), so between micro-batches a rank
holds its stages' whole 16-bit weights and their unsharded fp32 gradients, and reduce-scatters once per step
(train_time.pipeline_gathers_per_step). The emitted fsdp/fsdp_tp.py runs one step on CPU gloo ranks
(tests/fsdp_pp_memory_step.py) for the plans of tests/test_fsdp_pp_real.py; the sizing's terms for the same tiny
model must match what the ranks held and called."""

from __future__ import annotations

import json

import pytest

from compiler.catalog.params import count_params
from compiler.catalog.types import Architecture
from compiler.sizing.train.activations import WEIGHT_BYTES
from compiler.sizing.train.communication import pipeline_gathers_per_step
from compiler.sizing.train.layout import MemoryOptions
from compiler.sizing.train.model_states import FSDP2_REDUCE_BYTES, StageSlice, held_params
from tests.fixtures.train_sizing import memory_of
from tests.fsdp_real import compiled, step_rows
from tests.test_fsdp_pp_real import INTERLEAVED, PLAN, UNEVEN
from tests.test_target_torchrun import REPO, torch_env

STEP = REPO / "tests" / "fsdp_pp_memory_step.py"
# tests/fsdp_tp_step.py's TinyLlama (VOCAB, HIDDEN, HEADS, KV_HEADS, FFN), at the plan's layer count
TINY = dict(hidden=64, heads=4, kv_heads=2, ffn_hidden=128, vocab=128, max_position=16)
# FSDP2 pads dim 0 to the shard count (none of the tiny model's dims needs it); under TP the first stage's embedding
# gradient accumulates at twice its TP shard (measured: 1,220,608 against 1,204,224 bytes, +1.3%)
MEMORY_TOLERANCE = 0.03


def unsharded_bytes(arch: Architecture, tp: int, pp: int, layers: int, first: bool, last: bool) -> tuple[float, float]:
    held = held_params(arch, count_params(arch), tp, pp, StageSlice(layers, first, last))[0]
    return held * WEIGHT_BYTES["bf16"], held * FSDP2_REDUCE_BYTES


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize(
    "case, reshard",
    [(UNEVEN, True), (INTERLEAVED, True), (UNEVEN, False)],
    ids=["pp2-dp2-uneven-1f1b", "pp2-dp2-tp2-interleaved", "pp2-dp2-uneven-1f1b-no-reshard"],
)
def test_a_pipelined_fsdp2_step_holds_what_the_sizing_counts(tmp_path, case, reshard):
    text = PLAN.format(script=json.dumps(str(STEP)), **case)
    if not reshard:  # train.reshard_after_forward: false, fully_shard(reshard_after_forward=False)
        text = text.replace("  framework: fsdp\n", "  framework: fsdp\n  reshard_after_forward: false\n")
    out = compiled(tmp_path, text, "fsdp-pp")
    settings = json.loads((out / "fsdp" / "fsdp_tp.json").read_text())
    rows = step_rows(out, torch_env(), "FSDP_PP_MEMORY")
    arch = Architecture(layers=sum(settings["pp_stage_layers"]), **TINY)
    pp, m, stage_layers = settings["pp"], settings["pipeline_microbatches"], settings["stage_layers"]
    assert len(rows) == case["gpus"] and settings["reshard_after_forward"] == reshard
    for r in rows:
        layers = sum(stage_layers[s] for s in r["stages"])
        first, last = 0 in r["stages"], r["num_stages"] - 1 in r["stages"]
        weights, gradients = unsharded_bytes(arch, r["tp"], pp, layers, first, last)
        # after a backward the rank's stages are gathered whole in bf16 and their gradients accumulate in fp32
        assert r["peak_weight_bytes"] == pytest.approx(weights, rel=MEMORY_TOLERANCE), r
        assert r["peak_gradient_bytes"] == pytest.approx(gradients, rel=MEMORY_TOLERANCE), r
        assert r["after_step"] == [0, 0], r  # the step's reduce-scatter resharded and freed them
        assert r["backwards"] == m * len(r["stages"])
        # one reduce-scatter per parameter group per step, not per micro-batch
        assert r["reduce_scatters"] == r["param_groups"], r
        # m + 1 all-gathers per group (train_time.pipeline_gathers_per_step), 1F1B and interleaved alike, against 2m
        assert r["all_gathers"] == pipeline_gathers_per_step(m, reshard) * r["param_groups"], r
    # the sizing's worst stage counts the largest of them
    mem = memory_of(
        arch,
        count_params(arch),
        precision="bf16",
        tp=rows[0]["tp"],
        pp=pp,
        dp=2,
        zero_stage=3,
        seq_len=16,
        micro_batch=1,
        microbatches=m,
        framework="fsdp",
        vp=len(rows[0]["stages"]),
        split=tuple(settings["pp_stage_layers"]),
        options=MemoryOptions(reshard_after_forward=reshard),
    )
    measured = max(r["peak_weight_bytes"] + r["peak_gradient_bytes"] for r in rows)
    whole = mem.gathered if reshard else mem.weights  # without resharding the weights are counted whole already
    assert whole + mem.accumulating == pytest.approx(measured, rel=MEMORY_TOLERANCE)
    assert mem.accumulating == pytest.approx(max(r["peak_gradient_bytes"] for r in rows), rel=MEMORY_TOLERANCE)
