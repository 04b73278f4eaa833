"""Layouts beyond TP × PP × DP (compiler/sizing/train_layout.py and their use in memory, time, search and the
Megatron arguments): hand-checked figures, one per formula, and the published layouts the search must reach."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from compiler.catalog.loader import load_gpus, load_models
from compiler.catalog.params import count_params
from compiler.catalog.types import Architecture
from compiler.pipeline import resolve
from compiler.sizing.train import flops
from compiler.sizing.train import parallel as tl
from compiler.sizing.train.activations import LayerShape, activation_bytes_per_layer
from compiler.sizing.train.layout import MemoryOptions
from compiler.sizing.train.memory import usable_memory_bytes
from compiler.sizing.train.search import TrainPins, search_training
from tests.fixtures.train_sizing import memory_of, step_of
from tests.test_train_time import H100, _step
from tests.test_training_search import GPUS, request

LLAMA8B = Architecture(
    layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, max_position=131072
)
LLAMA70B = Architecture(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


# --- uneven pipeline stages -------------------------------------------------------------------------------------


def test_llama_3_405b_split_of_126_layers_over_16_stages():
    """Llama 3 §3.3.2: one layer fewer on the first and the last stage: 7 + 14 × 8 + 7 = 126."""
    split = tl.pipeline_split(126, 16)
    assert split == (7,) + (8,) * 14 + (7,) and sum(split) == 126
    assert tl.megatron_split(split, 1) == "first-last"  # --decoder-first/last-pipeline-num-layers 7
    assert tl.megatron_split(split, 2) == "account-embedding-loss"  # (126 + 2)/16 = 8 per stage, 4 per chunk
    assert tl.megatron_split(split, 3) is None  # 8 layers do not split into 3 chunks


def test_stated_first_and_last_stage_layers_share_the_rest_evenly():
    assert tl.pipeline_split(61, 16, first=2, last=3) == (2,) + (4,) * 14 + (3,)
    assert tl.pipeline_split(64, 16, first=6, last=2) == (6,) + (4,) * 14 + (2,)
    assert tl.pipeline_split(61, 16, first=4, last=4) is None  # 53 layers do not split over 14 middle stages
    assert tl.pipeline_split(32, 4) == (8, 8, 8, 8)
    assert tl.pipeline_split(8, 4, stages=(1, 3, 3, 1)) == (1, 3, 3, 1)
    assert tl.megatron_split((1, 3, 2, 2), 1) is None  # unequal middle stages: no Megatron argument states it


def test_largest_stage_sets_the_step_and_memory():
    """126 layers over PP16: the 8-layer middle stages set the stage-time, as 128 layers over 16 would."""
    from compiler.catalog.params import count_params as cp

    arch = LLAMA8B.model_copy(update={"layers": 126})
    params = cp(arch)
    even = LLAMA8B.model_copy(update={"layers": 128})
    args = dict(
        precision="bf16", seq_len=4096, micro_batch=1, grad_accum=16, tp=1, pp=16, dp=1, zero_stage=0, recompute="none"
    )
    uneven = step_of(arch, params, H100, split=tl.pipeline_split(126, 16), **args)
    ceil = step_of(arch, params, H100, **args)  # ⌈126/16⌉ = 8 on every stage, the last with the LM head
    layer, head = flops.layer_matmul_params(arch, params) / 126, params.lm_head
    rate = 989.4e12 * 0.80
    # the last stage (7 layers + the 525M-parameter head) outweighs a middle one (8 layers): it sets the stage-time
    assert uneven.matmul == pytest.approx(16 * 4096 * 6 * (7 * layer + head) / rate)
    assert ceil.matmul == pytest.approx(16 * 4096 * 6 * (8 * layer + head) / rate)
    mem = memory_of(arch, params, pp=16, microbatches=16, seq_len=4096, split=tl.pipeline_split(126, 16))
    assert (
        mem.activations > 0 and mem.total < memory_of(even, cp(even), pp=16, microbatches=16, seq_len=4096).total * 1.01
    )


# --- interleaved 1F1B ---------------------------------------------------------------------------------------------


def test_interleaved_bubble_is_p_minus_1_over_v_m():
    """Narayanan et al. 2021 §2.2.2: p = 4, v = 2, m = 8 → bubble 3/16 of the ideal step (3/8 without VP)."""
    assert tl.interleaved_bubble_fraction(4, 2, 8) == 3 / 16
    plain, interleaved = _step(pp=4, grad_accum=8), _step(pp=4, grad_accum=8, vp=2)
    ideal = plain.compute - plain.optimizer - plain.offload  # 8 micro-batches of the busiest stage, no TP here
    assert plain.pp_bubble == pytest.approx(3 / 8 * ideal)
    assert interleaved.pp_bubble == pytest.approx(3 / 16 * ideal)
    assert interleaved.pp_p2p == pytest.approx(2 * plain.pp_p2p)  # v sends per boundary


def test_interleaving_holds_more_microbatches_on_the_first_stage():
    """Korthikanti et al. 2022 §4.2.3: p·(1 + (p−1)/(p·v)); p = 4, v = 2: 4 × 11/8 = 5.5 stages' worth."""
    assert tl.microbatches_in_flight(4, 2, 0, 8) == 5.5 == 4 * (1 + 3 / 8)
    assert tl.microbatches_in_flight(4, 1, 0, 8) == 4
    assert tl.microbatches_in_flight(4, 1, 3, 8) == 1
    params = count_params(LLAMA8B)
    plain = memory_of(LLAMA8B, params, pp=4, microbatches=8, seq_len=4096)
    inter = memory_of(LLAMA8B, params, pp=4, microbatches=8, seq_len=4096, vp=2)
    per_layer = activation_bytes_per_layer(LayerShape(LLAMA8B, 4096, 1, 1, False), "none", True)
    assert inter.activations - plain.activations == pytest.approx(1.5 * 8 * per_layer, rel=1e-6)


def _megatron_peak_layers(pp: int, vp: int, rank: int, microbatches: int, chunk_layers: list[int]) -> int:
    """Layer-micro-batches `rank` holds at its peak, walked in the order Megatron-LM runs its chunk passes
    (megatron/core/pipeline_parallel/schedules.py: `get_schedule_table` orders forwards in groups of
    microbatch_group_size_per_vp_stage = p micro-batches (model_parallel_config.py default), chunk by chunk; the
    backward of the k-th entry runs chunk v−1−c; `get_pp_rank_microbatches` warms up (p−r−1)·2 + (v−1)·p forwards,
    then each steady step runs one forward and one backward). Each pass holds its own chunk's layers."""
    order = []
    for low in range(0, microbatches, pp):
        high = microbatches if low + pp >= microbatches else low + pp
        order += [chunk for chunk in range(vp) for _ in range(low, high)]
    passes = microbatches * vp
    warmup = min((pp - rank - 1) * 2 + (vp - 1) * pp, passes)
    held = peak = 0
    for k in range(passes):
        held += chunk_layers[order[k]]
        peak = max(peak, held)
        if k >= warmup:
            held -= chunk_layers[vp - 1 - order[k - warmup]]
    return peak


@pytest.mark.parametrize(
    "pp, vp, microbatches",
    [(4, 2, 8), (4, 2, 4), (8, 5, 64), (8, 5, 8), (16, 4, 384), (2, 20, 64), (6, 4, 12)],
)
def test_interleaved_in_flight_is_megatrons_warmup_plus_one_chunk_pass(pp, vp, microbatches):
    """With equal chunks (stage layers / v each) the rank's peak is its warmup + 1 chunk passes of one chunk's layers:
    the stage's layers × microbatches_in_flight, on every rank, against the walk of Megatron-LM's own order."""
    chunk = 3
    for rank in range(pp):
        walked = _megatron_peak_layers(pp, vp, rank, microbatches, [chunk] * vp)
        assert tl.microbatches_in_flight(pp, vp, rank, microbatches) * vp * chunk == walked


def test_published_llama3_70b_tp4_pp8_vp5_holds_94_layers_and_fits_as_run():
    """Megatron-Bridge's Llama-3 70B H100 FP8 recipe (perf_recipes/llama/h100/llama3.py
    llama3_70b_pretrain_64gpu_h100_fp8cs_config: TP4 PP8 VP5, 2 layers per virtual stage, mb 1, no recompute,
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). Rank 0 warms up 7·2 + 4·8 = 46 chunk passes and holds 47 of
    2 layers: 94 = 80·(1 + 7/40) layer-micro-batches (Korthikanti et al. 2022 §4.2.3), 9.4 stages' worth of 10 layers.
    A layer at s 8192, TP4 with SP: 35.5·s·h/4 = 595,591,168 B in 16 bits (Korthikanti Table 2, GQA and SwiGLU terms);
    under the recipe's FP8 Transformer Engine keeps its GEMMs' inputs in FP8: 35.5 − (1 + f/h = 3.5) = 31·s·h/4.
    Gradients: the recipe reduces them in bf16 (Megatron-Bridge's perf configs set grad_reduce_in_fp32 = False), and
    Megatron's distributed optimizer steps on an fp32 copy of its DP2 shard: 2 + 4/2 B per parameter, as much as an
    fp32 main_grad (measured: device run 4). So the sizing puts it at 74.1 GiB under the recipe's allocator, inside
    the H100's usable 79.6, where Megatron-Bridge ran it (80.7, 1% over, while FP8 inputs were counted in 16 bits).
    The 15% fragmentation reserve puts the default allocator's figure at 86.9: over."""
    arch = load_models()["llama-3.1-70b"].architecture
    assert tl.microbatches_in_flight(8, 5, 0, 64) == 9.4
    assert _megatron_peak_layers(8, 5, 0, 64, [2] * 5) == 94 == 80 * (1 + 7 / 40)
    layer = LayerShape(arch, 8192, 1, 4, True)
    assert activation_bytes_per_layer(layer, "none", True) == 595_591_168
    assert activation_bytes_per_layer(layer, "none", True, fp8_inputs=True) == 31 * 8192 * 8192 // 4
    shape = dict(tp=4, pp=8, vp=5, dp=2, zero_stage=1, microbatches=64, seq_len=8192, sequence_parallel=True)
    shape.update(framework="megatron", recompute="none", precision="fp8")
    usable = usable_memory_bytes(load_gpus()["h100-sxm-80gb"].memory_bytes)
    bf16 = MemoryOptions(bf16_gradients=True)
    as_run = memory_of(arch, count_params(arch), options=replace(bf16, expandable_segments=True), **shape)
    default = memory_of(arch, count_params(arch), options=bf16, **shape)
    assert as_run.activations == default.activations == 94 * 31 * 8192 * 8192 // 4
    assert as_run.total / 2**30 == pytest.approx(74.12, abs=0.01) and as_run.total < usable
    assert default.total / 2**30 == pytest.approx(86.90, abs=0.01) and default.total > usable
    fp32 = memory_of(arch, count_params(arch), options=MemoryOptions(expandable_segments=True), **shape)
    assert fp32.total == pytest.approx(as_run.total, rel=1e-9)  # DP2: 2 + 4/2 = 4 B, the fp32 main_grad's


def test_only_transformer_engines_fp8_keeps_fp8_gemm_inputs():
    """Megatron-LM's fp8 (Transformer Engine) keeps (1 + f/h)·sbh/t less a layer than its bf16; torchao's float8 under
    FSDP saves the 16-bit inputs, so an fp8 FSDP layer keeps what a bf16 one does; full recompute keeps every layer's
    input either way and saves it only on the one layer the backward re-runs."""
    arch = load_models()["llama-3.1-8b"].architecture
    shape = dict(tp=2, seq_len=4096, sequence_parallel=True, recompute="none")

    def activations(framework: str, precision: str, recompute: str = "none") -> float:
        run = dict(shape, recompute=recompute, framework=framework, precision=precision)
        return memory_of(arch, count_params(arch), **run).activations

    sbh_t = 4096 * arch.hidden / 2
    saved = activations("megatron", "bf16") - activations("megatron", "fp8")
    assert activations("fsdp", "fp8") == activations("fsdp", "bf16")
    per_layer = (1 + arch.ffn_hidden / arch.hidden) * sbh_t
    assert saved == pytest.approx(arch.layers * per_layer)
    full = activations("megatron", "bf16", "full") - activations("megatron", "fp8", "full")
    assert full == pytest.approx(per_layer)


def test_interleaving_with_a_lighter_first_and_last_chunk():
    """Llama-3.1-405B over PP16 VP4 with the embedding and loss counted as a layer each (7, 8 × 14, 7; chunks of 2,
    the first chunk of rank 0 and the last of rank 15 one layer): rank 1 (all chunks of 2) binds at 77 passes × 2 =
    154, which the sizing counts exactly; rank 0 really holds 127 (31 of its passes are on the 1-layer chunk), counted
    138.25; rank 15 really holds 98, counted 85.75 — neither binds."""
    assert _megatron_peak_layers(16, 4, 1, 384, [2, 2, 2, 2]) == 154 == tl.microbatches_in_flight(16, 4, 1, 384) * 8
    assert _megatron_peak_layers(16, 4, 0, 384, [1, 2, 2, 2]) == 127 < tl.microbatches_in_flight(16, 4, 0, 384) * 7
    assert _megatron_peak_layers(16, 4, 15, 384, [2, 2, 2, 1]) == 98 > tl.microbatches_in_flight(16, 4, 15, 384) * 7


# --- context parallelism ---------------------------------------------------------------------------------------------


def test_cp_splits_the_activations():
    """Llama-3.1-8B at s = 8192: 36·s·h = 1,207,959,552 B per layer; CP2 holds half on each GPU."""
    assert activation_bytes_per_layer(LayerShape(LLAMA8B, 8192, 1, 1, False), "none", True, cp=2) == 603_979_776


def test_cp_ring_moves_kv_chunks_three_times():
    """Llama-3-70B, s = 8192, TP4 CP2: a chunk of K and V is 4096 tokens × 2·8·128/4 × 2 B = 4 MiB; forward once,
    backward K/V and their gradients: 3 × (cp − 1) chunks = 12 MiB per layer and micro-batch."""
    assert tl.cp_ring_bytes_per_layer(LLAMA70B, 8192, 1, 4, 2, "none") == 3 * 4096 * 512 * 2 == 12_582_912
    assert tl.cp_ring_bytes_per_layer(LLAMA70B, 8192, 1, 4, 1, "none") == 0.0


def test_cp_halves_attention_and_gemm_time_per_gpu():
    one, two = _step(seq_len=8192), _step(seq_len=8192, cp=2)
    assert two.matmul == pytest.approx(one.matmul / 2)
    assert two.attention == pytest.approx(one.attention / 2)
    assert two.cp_comm == 0.0  # 12 MiB-class transfers over NVLink hide under the attention kernel


# --- expert parallelism ----------------------------------------------------------------------------------------------


def test_ep_all_to_all_volume_deepseek_v3():
    """h = 7168, top-8, 4096 tokens, EP64: 4 × 4096 · 8 · 7168 · 2 B × 63/64 = 1,849,688,064 B per MoE layer."""
    dsv3 = load_models()["deepseek-v3"].architecture
    assert tl.ep_all_to_all_bytes_per_layer(dsv3, 4096, 64, "none") == 1_849_688_064
    assert tl.ep_all_to_all_bytes_per_layer(dsv3, 4096, 1, "none") == 0.0


def test_ep_divides_the_expert_weights():
    dsv3 = load_models()["deepseek-v3"].architecture
    params = count_params(dsv3)
    routed = tl.routed_expert_params(dsv3, params)
    assert routed == pytest.approx(256 * 3 * 7168 * 2048)  # 256 experts of SwiGLU width 2048
    one = memory_of(dsv3, params, pp=16, dp=64, zero_stage=1, seq_len=4096, microbatches=64)
    split = memory_of(dsv3, params, pp=16, dp=64, zero_stage=1, seq_len=4096, microbatches=64, ep=64)
    assert split.weights < one.weights / 15  # attention, norms and embeddings stay whole


# --- the search and the outputs -------------------------------------------------------------------------------------


def test_405b_example_searches_its_way_to_an_interleaved_uneven_layout():
    """Llama 3 trained 405B at TP8 PP16 with interleaving and lighter first/last stages (§3.3.2). The free search
    (cost-optimal within the example's 8192 GPUs) picks TP8 with VP and the Llama 3 split; its fastest point is
    TP8 PP16 VP with 7/8/7 layers, the published shape."""
    plan = resolve(EXAMPLES / "llama3-405b-pretrain.yaml")
    par = plan.parallelism
    assert par.tp == 8 and par.pp in (8, 16) and par.vp > 1 and par.framework == "megatron"
    assert len(set(par.pp_stage_layers)) == 2 and par.pp_stage_layers[0] == par.pp_stage_layers[1] - 1
    fastest = min(plan.alternatives, key=lambda a: a.seconds).description
    assert " TP8 PP16 " in fastest and " VP" in fastest and "[7/8/7]" in fastest
    flags = {a.flag for a in plan.deployment.frameworks.megatron_args}
    assert "--num-layers-per-virtual-pipeline-stage" in flags and "--account-for-embedding-in-pipeline-split" in flags


def test_deepseek_v3_shaped_plan_compiles_with_ep(tmp_path):
    """DeepSeek-V3's published layout (PP16, EP64, ZeRO-1 on 2048 GPUs): infeasible before; now sized with EP."""
    plan_file = tmp_path / "dsv3.yaml"
    plan_file.write_text(
        "name: dsv3\nworkload: train\nmodel: {preset: deepseek-v3}\nprecision: fp8\n"
        "train: {tokens: 14.8T, seq_len: 4096, global_batch: 15360, framework: megatron}\n"
        "cluster: {gpu: h100-sxm-80gb, count: 2048, interconnect: ib-400g}\n"
        "parallelism: {pp: 16, ep: 64, zero_stage: 1}\n"
    )
    plan = resolve(plan_file)
    par = plan.parallelism
    assert (par.pp, par.ep, par.zero_stage) == (16, 64, 1) and sum(par.pp_stage_layers) == 61
    assert plan.training.step_ep_comm_seconds > 0
    args = {a.flag: a.value for a in plan.deployment.frameworks.megatron_args}
    assert args["--expert-model-parallel-size"] == "64"
    assert args["--decoder-first-pipeline-num-layers"] == str(par.pp_stage_layers[0])


def test_free_search_of_an_moe_model_tries_ep():
    dsv3 = load_models()["deepseek-v3"].architecture
    result = search_training(
        request(
            arch=dsv3,
            params=count_params(dsv3),
            seq_len=4096,
            global_batch_sequences=4096,
            gpu_count=1024,
            precision="fp8",
        ),
        GPUS,
    )
    assert result.chosen is not None and result.chosen.layout.ep > 1


def test_ep_on_a_dense_model_names_what_is_missing():
    result = search_training(request(pins=TrainPins(ep=8), gpu_count=64), GPUS)
    assert result.chosen is None and result.infeasible_reason.code == "ep-needs-moe"
    from compiler.passes.wording import words

    assert "expert parallelism is for MoE models" in words(result.infeasible_reason)


def test_lora_with_tp_pp_runs_on_fsdp2_and_qlora_is_refused_for_the_missing_framework_path_not_memory():
    """LoRA pinned to TP2 PP4 used to read "no configuration fits in GPU memory"; LoRA now runs as
    FSDP2 × TP × PP with TP-sharded adapters (fsdp/lora_tp.py), QLoRA's 4-bit base has no such path."""
    from compiler.passes.wording import words

    def search(method):
        return search_training(
            request(
                arch=LLAMA70B,
                params=count_params(LLAMA70B),
                seq_len=4096,
                gpu_count=8,
                global_batch_sequences=32,
                method=method,
                pins=TrainPins(tp=2, pp=4),
            ),
            GPUS,
        )

    chosen = search("lora").chosen
    assert (chosen.framework, chosen.layout.zero, chosen.layout.tp, chosen.layout.pp) == ("fsdp", 3, 2, 4)
    refused = search("qlora")
    assert refused.chosen is None
    said = words(refused.infeasible_reason)
    assert "no framework path" in said and "QLoRA" in said and "GPU memory" not in said


def test_uneven_split_megatron_cannot_state_is_not_chosen():
    from compiler.passes.wording import words

    pins = TrainPins(tp=8, pp=4, pp_stage_layers=(4, 10, 12, 6))
    result = search_training(request(gpu_count=32, framework="megatron", pins=pins), GPUS)
    assert result.chosen is None
    assert "Megatron-LM states only equal middle stages" in words(result.infeasible_reason)
    # FSDP2 × TP × PP takes any stage list (torch.distributed.pipelining stages are module lists) at ZeRO-3
    chosen = search_training(request(gpu_count=64, pins=pins), GPUS).chosen  # DP2: something to shard over
    assert (chosen.framework, chosen.layout.zero, chosen.layout.stage_layers) == ("fsdp", 3, (4, 10, 12, 6))


def test_pinned_layouts_reach_the_megatron_arguments(tmp_path):
    plan_file = tmp_path / "p.yaml"
    plan_file.write_text(
        "name: l70\nworkload: train\nmodel: {preset: llama-3.1-70b}\n"
        "train: {tokens: 1T, seq_len: 8192, global_batch: 128}\n"
        "cluster: {gpu: h100-sxm-80gb, count: 64}\n"
        "parallelism: {tp: 4, pp: 4, cp: 2, vp: 5}\n"
    )
    plan = resolve(plan_file)
    assert (plan.parallelism.cp, plan.parallelism.vp, plan.parallelism.dp) == (2, 5, 2)
    args = [(a.flag, a.value) for a in plan.deployment.frameworks.megatron_args]
    assert ("--context-parallel-size", "2") in args and ("--num-layers-per-virtual-pipeline-stage", "4") in args


def test_hsdp_shard_group_reaches_the_accelerate_config(tmp_path):
    """FSDP HYBRID_SHARD: ZeRO-3 inside each node's 8 GPUs, replicated over 4 nodes; weights sharded by 8, not 32."""
    plan_file = tmp_path / "h.yaml"
    plan_file.write_text(
        "name: hsdp\nworkload: train\nmodel: {preset: llama-3.1-8b}\n"
        "train: {tokens: 100B, seq_len: 4096, global_batch: 256, framework: fsdp}\n"
        "cluster: {gpu: h100-sxm-80gb, count: 32}\nparallelism: {tp: 1, zero_stage: 3, shard_group_gpus: 8}\n"
    )
    plan = resolve(plan_file)
    assert plan.parallelism.shard_group_gpus == 8 and plan.parallelism.framework == "fsdp"
    assert plan.deployment.frameworks.accelerate_config.fsdp_config.fsdp_reshard_after_forward == "HYBRID_SHARD"
    params = count_params(LLAMA8B)
    assert plan.memory_per_gpu_bytes.weights > 2 * params.total / 8 * 0.99


def test_fsdp_with_tensor_parallelism_runs_as_fsdp2_tp_at_zero3():
    result = search_training(request(gpu_count=16, framework="fsdp", pins=TrainPins(tp=2)), GPUS)
    chosen = result.chosen
    assert (chosen.framework, chosen.layout.tp, chosen.layout.dp, chosen.layout.zero) == ("fsdp", 2, 8, 3)


def test_fsdp_with_pipeline_parallelism_runs_as_fsdp2_tp_pp_at_zero3():
    chosen = search_training(request(gpu_count=16, framework="fsdp", pins=TrainPins(tp=2, pp=2)), GPUS).chosen
    assert (chosen.framework, chosen.layout.tp, chosen.layout.pp, chosen.layout.zero) == ("fsdp", 2, 2, 3)
    assert chosen.grad_accum >= 2  # torch's Schedule1F1B needs a micro-batch per stage


def test_fsdp_with_context_parallelism_names_the_missing_path():
    from compiler.passes.wording import words

    result = search_training(request(gpu_count=16, framework="fsdp", pins=TrainPins(tp=2, cp=2)), GPUS)
    assert result.chosen is None
    said = words(result.infeasible_reason)
    assert "framework fsdp runs context parallelism only alone" in said and "CP × TP" in said  # CP2 × TP2
    assert "Megatron-LM has CP with TP and PP" in said


def test_stage_layers_given_two_ways_are_refused():
    from pydantic import ValidationError

    from compiler.plan.spec import ParallelismSpec

    with pytest.raises(ValidationError, match="not both"):
        ParallelismSpec(pp=4, pp_stage_layers=[7, 9, 9, 7], pp_first_stage_layers=7)
    with pytest.raises(ValidationError, match="lists 3 stages, pp is 4"):
        ParallelismSpec(pp=4, pp_stage_layers=[10, 12, 10])


def test_issue_15_405b_on_16k_h100_is_no_longer_infeasible(tmp_path):
    """Free on 16,384 H100 it was infeasible (PP had to divide 126 layers and the GPU count); pinned to
    TP8 PP16 the bubble was 5.9 s of a 12.3 s step. Now the Llama 3 split and interleaving are searched."""
    plan_file = tmp_path / "l405.yaml"
    plan_file.write_text(
        "name: l405\nworkload: train\nmodel: {preset: llama-3.1-405b}\n"
        "train: {tokens: 15.6T, seq_len: 8192, global_batch_tokens: 16M, framework: megatron}\n"
        "cluster: {gpu: h100-sxm-80gb, count: 16384, max_gpus: 16384}\n"
    )
    plan = resolve(plan_file)
    par, t = plan.parallelism, plan.training
    assert (par.tp, par.pp) == (8, 16) and par.vp > 1 and par.pp_stage_layers[:2] == [7, 8]
    assert t.step_pp_bubble_seconds < 0.15 * t.step_seconds


def test_vp_without_pipeline_stages_is_refused_with_its_reason():
    from compiler.passes.wording import words

    result = search_training(request(gpu_count=8, pins=TrainPins(pp=1, vp=2)), GPUS)
    assert result.chosen is None and "it needs PP > 1" in words(result.infeasible_reason)
