"""DeepSeek-V3's multi-token-prediction module in the training sizing: counted where Megatron-LM trains it
(--mtp-num-layers, on the last pipeline stage), left out where the framework's script does not."""

from __future__ import annotations

import json

import pytest

from compiler.catalog.loader import load_models
from compiler.catalog.params import count_params, mtp_params
from compiler.sizing.train import flops
from compiler.sizing.train import memory as train_memory
from compiler.sizing.train.layout import Layout, Workload
from compiler.sizing.train.model_states import StageSlice, checkpoint_bytes, held_params
from tests.conftest import REPO, run_cli
from tests.test_megatron_versions import PLANS, compile_plan

DSV3 = load_models()["deepseek-v3"].architecture
PARAMS = count_params(DSV3)
D, V = DSV3.hidden, DSV3.vocab  # 7168, 129280
MTP = 11_610_067_968  # one MoE layer 11,507,271,680 + eh_proj 2·7168² + 3 RMSNorms 3·7168
SPLIT = (2,) + (4,) * 14 + (3,)  # the Llama 3 split of 61 layers over 16 stages
MEGATRON = Layout(tp=2, pp=16, dp=32, ep=4, stage_layers=SPLIT, zero=1, framework="megatron", sequence_parallel=True)


def workload(arch=DSV3, method="full") -> Workload:
    return Workload(arch, count_params(arch), seq_len=4096, global_batch_sequences=4096, method=method)


def test_mtp_params_are_one_moe_layer_its_projection_and_norms():
    layer = PARAMS.per_layer_attention + PARAMS.per_layer_norm + PARAMS.per_layer_mlp_total
    assert layer == 11_507_286_016
    assert mtp_params(DSV3) == layer + 2 * D * D + 3 * D == MTP
    assert mtp_params(DSV3.model_copy(update={"mtp_layers": 0})) == 0


@pytest.mark.parametrize(
    "framework, method, trained",
    [("megatron", "full", 1), ("deepspeed", "full", 0), ("fsdp", "full", 0), ("ddp", "full", 0), ("", "full", 0)],
)
def test_only_the_framework_that_launches_mtp_trains_it(framework, method, trained):
    assert Layout(framework=framework).mtp_layers(workload(method=method)) == trained


def test_one_gpu_holds_the_whole_module():
    """TP = PP = EP = 1: the module adds exactly its parameters."""
    with_mtp = held_params(DSV3, PARAMS, 1, 1, StageSlice(61, True, True, 1), 1)[0]
    without = held_params(DSV3, PARAMS, 1, 1, StageSlice(61, True, True), 1)[0]
    assert with_mtp - without == MTP
    not_last = held_params(DSV3, PARAMS, 1, 1, StageSlice(61, True, False), 1)
    assert (
        held_params(DSV3, PARAMS, 1, 1, StageSlice(61, True, False, 1), 1) == not_last
    )  # the module is the last stage's


def test_last_stage_holds_the_module_split_and_an_embedding_copy():
    """TP2 EP4 PP16: dense matrices over TP, routed experts over TP·EP, norms whole, and the word embeddings Megatron
    duplicates on the MTP stage."""
    routed = 256 * 3 * D * 2048
    dense = PARAMS.per_layer_attention + PARAMS.per_layer_mlp_total - routed + 2 * D * D
    expected = dense / 2 + routed / 8 + PARAMS.per_layer_norm + 3 * D + V * D / 2
    held, experts = held_params(DSV3, PARAMS, 2, 16, StageSlice(3, False, True, 1), 4)
    base, base_experts = held_params(DSV3, PARAMS, 2, 16, StageSlice(3, False, True), 4)
    assert held - base == pytest.approx(expected, rel=1e-12)
    assert experts - base_experts == routed / 8
    assert 2.0e9 < held - base < 2.1e9


def test_last_stage_memory_grows_by_the_module_states_activations_and_logits():
    with_mtp, without = workload(), workload(DSV3.model_copy(update={"mtp_layers": 0}))
    last = (15, 3, False, True)
    a = train_memory._stage_memory(with_mtp, MEGATRON, last)
    b = train_memory._stage_memory(without, MEGATRON, last)
    gib = 2**30
    # ~2.05B more parameters: 2 B weights + 4 B fp32 main_grad each (Megatron's), fp32 master/m/v over DP (experts
    # over DP/EP)
    assert 13.3 * gib < a.model_states - b.model_states < 13.9 * gib
    logits = 4096 * V / 2 * 8  # fp32 logits and their gradient of the MTP loss, over TP
    per_layer = train_memory._layer_activations(with_mtp, MEGATRON)[0]
    assert a.activations - b.activations == pytest.approx(per_layer + logits, rel=1e-9)
    middle = (1, 4, False, False)  # the other stages do not change
    assert train_memory._stage_memory(with_mtp, MEGATRON, middle) == train_memory._stage_memory(
        without, MEGATRON, middle
    )


def test_flops_per_token_grow_by_the_module_and_a_head_pass():
    width = DSV3.heads * (128 + 64 + 128) / 2  # MLA: mean of the q·k and v head widths
    module = PARAMS.per_layer_attention + PARAMS.per_layer_mlp_active + 2 * D * D
    added = 6 * (module + V * D) + 12 * width * 4096
    grown = flops.model_flops_per_token(DSV3, PARAMS, 4096, 1) - flops.model_flops_per_token(DSV3, PARAMS, 4096)
    assert grown == pytest.approx(added, rel=1e-12)
    assert 10.6e9 < grown < 10.8e9  # +3.8% on 281.2 GFLOPs per token
    full = flops.hardware_flops_per_token(DSV3, PARAMS, 4096, "full", 1)
    assert full - flops.hardware_flops_per_token(DSV3, PARAMS, 4096, "full") == pytest.approx(
        added + 2 * module + 4 * width * 4096, rel=1e-12
    )


def test_deepseek_v3_megatron_plan_sizes_the_module(tmp_path):
    """plan.json: the FLOPs per token and the checkpoint include the MTP parameters the deployment states."""
    done, out = compile_plan(tmp_path, (PLANS / "deepseek-v3.yaml").read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((out / "plan.json").read_text())
    target = plan["deployment"]["frameworks"]["megatron"]
    assert target["mtp_params"] == MTP and target["launched_params"] == PARAMS.total + MTP
    training = plan["training"]
    assert training["checkpoint_bytes"] == (PARAMS.total + MTP) * 14
    assert training["flops_per_token"] == pytest.approx(flops.model_flops_per_token(DSV3, PARAMS, 4096, 1), rel=1e-5)
    report = (out / "REPORT.md").read_text()
    assert "multi-token prediction (--mtp-num-layers" in report and "sized on the last pipeline stage" in report
    assert "second LM-head pass" in report


def test_checkpoint_counts_the_module_only_when_given():
    assert checkpoint_bytes(PARAMS, "adamw", "full", mtp_params=MTP) - checkpoint_bytes(PARAMS, "adamw", "full") == (
        MTP * 14
    )


def test_a_last_stage_that_runs_mtp_gets_lighter_splits_to_try():
    from compiler.sizing.train.parallel import lighter_last_splits

    llama3_split = (2,) + (4,) * 14 + (3,)  # 61 layers over 16 stages
    assert lighter_last_splits(llama3_split) == [(3,) + (4,) * 14 + (2,), (4,) + (4,) * 14 + (1,)]
    assert lighter_last_splits((4, 4, 4)) == []  # the first stage would outgrow a middle one
    assert lighter_last_splits((7, 8, 9, 7)) == []  # uneven middles: no first/last split states it


def test_deepseek_v3_on_pp16_puts_one_layer_beside_mtp_on_the_last_stage(tmp_path):
    """The search keeps the fastest split: the MTP layer and its second LM-head pass on the last stage make
    4, 14 × 4, 1 faster than Llama 3's 2, 14 × 4, 3; args.sh states it with Megatron-LM's first/last counts."""
    out = tmp_path / "out"
    result = run_cli(REPO / "tests" / "data" / "megatron" / "deepseek-v3.yaml", "-o", out)
    assert result.returncode == 0, result.stderr
    args = next(out.glob("*/megatron/args.sh")).read_text()
    assert "--decoder-first-pipeline-num-layers 4" in args and "--decoder-last-pipeline-num-layers 1" in args
