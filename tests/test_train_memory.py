"""Training memory per GPU (compiler/sizing/train_memory.py): hand-checked figures, titled per behaviour."""

from __future__ import annotations

import pytest

from compiler.catalog.params import count_params
from compiler.catalog.types import Architecture
from compiler.sizing.train import activations as ta
from compiler.sizing.train import memory as tm
from compiler.sizing.train import model_states as ms
from compiler.sizing.train.activations import LayerShape, activation_bytes_per_layer
from compiler.sizing.train.layout import MemoryOptions
from compiler.sizing.train.model_states import model_state_bytes_zero_paper
from tests.fixtures.train_sizing import memory_of

GB = 1e9
GIB = 2**30
# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d 12288, 96 heads, MHA, 4d MLP, LayerNorm.
GPT3 = Architecture(
    layers=96,
    hidden=12288,
    heads=96,
    kv_heads=96,
    ffn_hidden=4 * 12288,
    vocab=50257,
    max_position=2048,
    gated_mlp=False,
    norm="layernorm",
    attention_bias=True,
    mlp_bias=True,
    learned_positions=True,
    tied_embeddings=True,
)
# Llama-3.1-8B (config.json): 32 layers, d 4096, 32 heads, 8 KV heads, SwiGLU 14336, vocab 128256, untied.
LLAMA8B = Architecture(
    layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, max_position=131072
)


@pytest.mark.parametrize("stage,expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_fig1_7_5b_on_64_ranks(stage, expected_gb):
    """ZeRO paper Fig. 1: Ψ = 7.5B, N_d = 64, K = 12: 120 GB → 31.4 → 16.6 → 1.9 GB per device."""
    assert model_state_bytes_zero_paper(7.5e9, stage, 64) / GB == pytest.approx(expected_gb, abs=0.05)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_memory_per_gpu_model_states_follow_the_zero_paper(stage):
    params = count_params(LLAMA8B)
    mem = memory_of(LLAMA8B, params, dp=64, zero_stage=stage, seq_len=8192)
    # + at ZeRO-3 the layer FSDP computes with and the one it prefetches, gathered in 16-bit (not in the paper)
    gathered = (
        ms.FSDP_GATHERED_LAYERS * (params.per_layer_attention + params.per_layer_mlp_total) * 2 if stage == 3 else 0
    )
    assert mem.model_states == pytest.approx(model_state_bytes_zero_paper(params.total, stage, 64) + gathered, rel=1e-9)


def test_korthikanti_no_parallelism_gpt3():
    """Table 2: s·b·h·(34 + 5·a·s/h); GPT-3 at s 2048, b 1: 25,165,824 × (34 + 80) = 2,868,903,936 B per layer."""
    got = activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 1, False), "none", flash_attention=False)
    assert got == 2048 * 12288 * (34 + 5 * 96 * 2048 / 12288) == 2_868_903_936


def test_korthikanti_tensor_parallel_gpt3():
    """Table 2, TP t = 8: s·b·h·(10 + 24/t + 5·a·s/(h·t))."""
    got = activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 8, False), "none", flash_attention=False)
    assert got == pytest.approx(2048 * 12288 * (10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8)))


def test_korthikanti_sequence_parallel_and_selective_recompute_gpt3():
    """Table 2: TP + SP s·b·h/t·(34 + 5as/h); + selective recompute 34·s·b·h/t; full recompute 2·s·b·h."""
    sbh = 2048 * 12288
    assert activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 8, True), "none", False) == pytest.approx(
        sbh / 8 * (34 + 80)
    )
    assert activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 8, True), "selective", False) == pytest.approx(
        34 * sbh / 8
    )
    assert activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 1, False), "full", False) == 2 * sbh


def test_flash_attention_drops_the_scores_term():
    assert activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 1, False), "none", True) == 34 * 2048 * 12288


def test_llama_3_1_8b_seq_8192_gqa_gated():
    """GQA g = 8/32: attention 7 + 4g = 8; SwiGLU: 3 + 3·2·14336/4096 = 24; norms 4 → 36·s·b·h = 1.125 GiB/layer."""
    per_layer = activation_bytes_per_layer(LayerShape(LLAMA8B, 8192, 1, 1, False), "none", True)
    assert per_layer == 36 * 8192 * 4096 == 1_207_959_552
    mem = memory_of(LLAMA8B, count_params(LLAMA8B), dp=8, zero_stage=3, seq_len=8192, framework="megatron")
    logits = 8192 * 128256 * 4 * 2  # Megatron's fused loss: fp32 logits and their gradient
    assert mem.activations == 32 * per_layer + logits


def test_moe_activations_count_the_routed_experts():
    """Mixtral-like: top-2 of 8 experts of width 14336: the MLP term counts 2 expert widths + fp32 router logits."""
    moe = Architecture(
        layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32000, experts=8, experts_per_token=2
    )
    s, h = 4096, 4096
    expected = (8 + 3 + 3 * 2 * 2 * 14336 / h + 4) * s * h + s * 8 * 4
    assert activation_bytes_per_layer(LayerShape(moe, s, 1, 1, False), "none", True) == pytest.approx(expected)


def test_pipeline_first_stage_holds_min_pp_microbatches():
    params = count_params(LLAMA8B)
    per_layer = activation_bytes_per_layer(LayerShape(LLAMA8B, 4096, 1, 1, False), "none", True)
    first = memory_of(LLAMA8B, params, pp=4, microbatches=16, seq_len=4096, framework="megatron")
    few = memory_of(LLAMA8B, params, pp=4, microbatches=2, seq_len=4096, framework="megatron")
    # first stage: 4 micro-batches × 8 layers; the last stage holds one plus the logits (smaller here)
    assert first.activations == 4 * 8 * per_layer
    assert few.activations == 2 * 8 * per_layer


def test_stage_params_put_embedding_first_and_head_last():
    params = count_params(LLAMA8B)
    first, last = ms.stage_params(LLAMA8B, params, tp=2, pp=4)
    per_layer = (params.per_layer_attention + params.per_layer_mlp_total) / 2 + params.per_layer_norm
    assert first == pytest.approx(8 * per_layer + 128256 * 4096 / 2)
    assert last == pytest.approx(8 * per_layer + 128256 * 4096 / 2 + 4096)


def test_runtime_overheads_are_reported_as_other():
    mem = memory_of(LLAMA8B, count_params(LLAMA8B), tp=2, dp=4, zero_stage=1, seq_len=4096)
    allocated = mem.weights + mem.gradients + mem.optimizer + mem.activations
    expected = tm.CUDA_CONTEXT_BYTES + 2 * tm.NCCL_BYTES_PER_COMMUNICATOR + allocated * 0.15 / 0.85
    assert mem.other == pytest.approx(expected, abs=2)
    assert mem.total == pytest.approx(allocated + mem.other, abs=2)


def test_optimizers_bytes_per_param():
    assert ms.optimizer_bytes_per_param(LLAMA8B, "adamw", "bf16") == 12
    assert ms.optimizer_bytes_per_param(LLAMA8B, "adamw-8bit", "bf16") == 6
    assert ms.optimizer_bytes_per_param(LLAMA8B, "sgd", "bf16") == 8
    assert ms.optimizer_bytes_per_param(LLAMA8B, "adamw", "fp32") == 8  # fp32 weights are the master
    assert ms.optimizer_bytes_per_param(LLAMA8B, "adafactor", "bf16") == pytest.approx(4 + 4 * (1 / 4096 + 1 / 14336))


def test_cpu_offload_moves_optimizer_and_gradient_partition():
    params = count_params(LLAMA8B)
    base = memory_of(LLAMA8B, params, dp=8, zero_stage=2, seq_len=4096)
    off = memory_of(LLAMA8B, params, dp=8, zero_stage=2, offload_optimizer=True, seq_len=4096)
    assert off.optimizer == off.gradients == 0
    assert off.cpu_offload_bytes == pytest.approx(base.optimizer + base.gradients, abs=2)
    both = memory_of(LLAMA8B, params, dp=8, zero_stage=3, offload_optimizer=True, offload_params=True, seq_len=4096)
    # only the gathered layer and the prefetched one stay on the GPU (FSDP CPUOffload computes on the GPU)
    assert both.model_states == ms.FSDP_GATHERED_LAYERS * (params.per_layer_attention + params.per_layer_mlp_total) * 2
    assert both.cpu_offload_bytes == pytest.approx(16 * params.total / 8, rel=1e-9)


def test_lora_parameter_count_llama_7b_rank_8_q_v():
    """PEFT's printout for Llama-7B, r = 8 on q_proj and v_proj: 4,194,304 trainable parameters."""
    llama7b = Architecture(layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000)
    assert ms.lora_trainable_params(llama7b, 8, ("q", "v")) == 4_194_304


def test_qlora_nf4_with_double_quantisation_is_4_127_bits():
    """Dettmers et al. 2023 §3: 8/64 + 32/(64·256) = 0.127 bits of constants per parameter."""
    assert ms.NF4_BITS_PER_PARAM == pytest.approx(4.127, abs=5e-4)


def test_qlora_base_weights_are_nf4_except_embeddings():
    params = count_params(LLAMA8B)
    mem = memory_of(
        LLAMA8B, params, method="qlora", lora_rank=16, lora_targets=("q", "v"), seq_len=2048, recompute="full"
    )
    linear = 32 * (params.per_layer_attention + params.per_layer_mlp_total)
    adapters = ms.lora_trainable_params(LLAMA8B, 16, ("q", "v"))
    expected = linear * ms.NF4_BITS_PER_PARAM / 8 + (params.total - linear) * 2 + adapters * 2
    assert mem.weights == pytest.approx(expected, abs=2)
    assert mem.optimizer == pytest.approx(adapters * 12, abs=2)  # fp32 master + m + v of the adapters only
    lora = memory_of(LLAMA8B, params, method="lora", lora_rank=16, lora_targets=("q", "v"), seq_len=2048)
    assert lora.weights > 2.5 * mem.weights  # 16-bit base against 4.127-bit


def test_checkpoint_bytes_bloom_176b():
    """BLOOM-176B: 14 B/param → 2.46e12 B (≈ 2.24 TiB) against the reported 2.3 TB full checkpoint."""
    from compiler.catalog.params import ParamCounts

    bloom = ParamCounts(
        total=176_000_000_000,
        active=0,
        embedding=0,
        per_layer_attention=0,
        per_layer_mlp_total=0,
        per_layer_mlp_active=0,
        per_layer_norm=0,
        largest_layer=0,
    )
    assert ms.checkpoint_bytes(bloom, "adamw", "full") == 176e9 * 14


def test_usable_memory_is_what_nvidia_smi_shows():
    assert tm.usable_memory_bytes(80 * GIB) == 81559 * 2**20


# Choices where frameworks differ (train_memory docstring): each moves the term it names, by the bytes it names.
TORCHTUNE = MemoryOptions(master_weights="none", loss="chunked")


def test_pure_bf16_drops_the_master_copy_and_keeps_16_bit_adam_states():
    """torchtune's default (no master copy, torch.optim states zeros_like(param)): 2 + 2 + 4 bytes per parameter."""
    params = count_params(LLAMA8B)
    mem = memory_of(LLAMA8B, params, seq_len=2048, options=MemoryOptions(master_weights="none"))
    assert mem.optimizer == pytest.approx(4 * params.total, abs=2)
    assert ms.optimizer_bytes_per_param(LLAMA8B, "adamw", "bf16", "fp32") == 12
    assert ms.optimizer_bytes_per_param(LLAMA8B, "adamw-8bit", "bf16", "none") == 2


@pytest.mark.parametrize(
    "loss,framework,eager,bytes_per_logit",
    [
        ("standard", "megatron", False, 8),
        ("standard", "deepspeed", False, 8),
        ("standard", "deepspeed", True, 12),
        ("standard", "fsdp", False, 12),
        ("standard", "ddp", False, 12),
        ("standard", "", False, 12),
        ("chunked", "", False, 3),
        ("chunked", "deepspeed", True, 3),
        ("fused", "", False, 0),
        ("flash-attn", "fsdp", False, 4),
    ],
)
def test_loss_keeps_its_logits(loss, framework, eager, bytes_per_logit):
    """standard: Megatron's fused loss keeps fp32 logits + gradient; PyTorch's eager F.cross_entropy(logits.float())
    (torchtitan, Hugging Face) holds log_softmax's fp32 output, the gradient nll_loss hands it and the one it returns;
    chunked: 16-bit logits + one of 8 chunks upcast (torchtune); fused: none. `eager`: the script's own loss is
    eager (the Hugging Face Trainer's, also under DeepSpeed)."""
    params = count_params(LLAMA8B)
    mem = memory_of(
        LLAMA8B,
        params,
        seq_len=2048,
        micro_batch=2,
        framework=framework,
        options=MemoryOptions(loss=loss, eager_loss=eager),
    )
    none = memory_of(
        LLAMA8B, params, seq_len=2048, micro_batch=2, framework=framework, options=MemoryOptions(loss="fused")
    )
    assert mem.activations - none.activations == pytest.approx(2048 * 2 * 128256 * bytes_per_logit, abs=2)


def test_auto_loss_is_chunked_for_adapters_standard_for_full():
    assert tm.loss_for("auto", "lora") == tm.loss_for("auto", "qlora") == "chunked"
    assert tm.loss_for("auto", "full") == "standard" and tm.loss_for("fused", "lora") == "fused"


def test_gradients_and_activations_apart_in_an_unaccumulated_single_replica_step():
    """zero_grad(set_to_none=True): no gradients during the forward, so the peak is the larger of the two."""
    params = count_params(LLAMA8B)
    one = memory_of(LLAMA8B, params, seq_len=2048, recompute="full", options=TORCHTUNE)
    assert one.allocated == pytest.approx(one.weights + one.optimizer + max(one.gradients, one.activations), abs=4)
    accumulated = memory_of(LLAMA8B, params, seq_len=2048, recompute="full", microbatches=4, options=TORCHTUNE)
    assert accumulated.allocated == pytest.approx(
        accumulated.weights + accumulated.optimizer + accumulated.gradients + accumulated.activations, abs=4
    )


def test_optimizer_in_backward_keeps_one_tensors_gradient():
    params = count_params(LLAMA8B)
    mem = memory_of(LLAMA8B, params, seq_len=2048, options=MemoryOptions(optimizer_in_backward=True))
    assert mem.gradients == 128256 * 4096 * 2  # the embedding (or LM head), the largest tensor


def test_paged_8bit_states_are_host_backed():
    params = count_params(LLAMA8B)
    mem = memory_of(LLAMA8B, params, optimizer="adamw-8bit-paged", seq_len=2048, options=TORCHTUNE)
    assert mem.optimizer == 0 and mem.cpu_offload_bytes == pytest.approx(2 * params.total, abs=2)


def test_activation_offload_keeps_only_the_recomputed_layer():
    params = count_params(LLAMA8B)
    on = memory_of(
        LLAMA8B, params, seq_len=2048, recompute="full", options=MemoryOptions(loss="fused", activation_offload=True)
    )
    layer = activation_bytes_per_layer(LayerShape(LLAMA8B, 2048, 1, 1, False), "none", True)
    assert on.activations == pytest.approx(layer, abs=2)


def test_fsdp_without_resharding_holds_the_weights_whole():
    params = count_params(LLAMA8B)
    kept = memory_of(
        LLAMA8B,
        params,
        dp=8,
        zero_stage=3,
        seq_len=2048,
        framework="fsdp",
        options=MemoryOptions(reshard_after_forward=False),
    )
    assert kept.weights == pytest.approx(2 * params.total, abs=2)


def test_lora_base_is_sharded_under_fsdp_and_replicated_under_zero_1():
    """FSDP (ZeRO-3) shards the frozen base as torchtune wraps it; ZeRO-1/2 shard only trainable states."""
    params = count_params(LLAMA8B)
    args = dict(method="lora", lora_rank=16, lora_targets=("q", "v"), dp=8, seq_len=2048, framework="fsdp")
    sharded = memory_of(LLAMA8B, params, zero_stage=3, **args)
    replicated = memory_of(LLAMA8B, params, zero_stage=1, **args)
    assert replicated.weights > 3 * sharded.weights


def test_allocator_reserve_without_and_with_expandable_segments():
    """GMLake's 15% average fragmentation without expandable segments; reserved = allocated with them."""
    params = count_params(LLAMA8B)
    default = memory_of(LLAMA8B, params, seq_len=2048)
    assert default.reserved == pytest.approx(default.allocated / 0.85, abs=2)
    expandable = memory_of(LLAMA8B, params, seq_len=2048, options=MemoryOptions(expandable_segments=True))
    assert expandable.reserved == expandable.allocated
    assert default.total - default.reserved == expandable.total - expandable.reserved  # CUDA context + NCCL


def test_llama_3_1_8b_lora_on_a_24_gb_gpu_fits_without_sharding():
    """torchtune's recipe (bs 2, packed 2048, AC) measured 16.2 GiB on one RTX 4090; the plan's defaults
    for LoRA (chunked loss, fp32 master of the adapters) keep it on one GPU, not ZeRO-3 with CPU offload."""
    params = count_params(LLAMA8B)
    mem = memory_of(
        LLAMA8B,
        params,
        method="lora",
        lora_rank=8,
        lora_targets=("q", "v", "o", "gate", "up", "down"),
        seq_len=2048,
        micro_batch=2,
        recompute="full",
        options=MemoryOptions(loss=tm.loss_for("auto", "lora")),
    )
    assert mem.total <= tm.usable_memory_bytes(24 * GIB)
    assert mem.allocated / GIB == pytest.approx(16.2, rel=0.15)


def test_ddp_buckets_copy_the_gradients():
    """DDP with gradient_as_bucket_view=False (the default) holds its all-reduce buckets beside the gradients."""
    params = count_params(LLAMA8B)
    one = memory_of(LLAMA8B, params, seq_len=2048, framework="ddp")
    four = memory_of(LLAMA8B, params, dp=4, seq_len=2048, framework="ddp")
    assert four.gradients == 2 * one.gradients


def test_pure_bf16_checkpoint_saves_16_bit_states():
    params = count_params(LLAMA8B)
    assert ms.checkpoint_bytes(params, "adamw", "full", master_weights="none") == params.total * (2 + 4)
    assert ms.checkpoint_bytes(params, "adamw", "full") == params.total * 14


def test_op_sac_keeps_what_torchtitans_policy_saves():
    """torchtitan's op-level SAC on a Llama-3.1-8B block (s 8192, b 2): mm 1, 3, 5, 7 saved = q (4096), v (1024),
    gate (14336), down (4096); SDPA output (4096) + fp32 logsumexp (32 heads); block input (4096):
    2·s·b·(4096·4 + 1024 + 14336) + 4·b·32·s = 1_042_284_544 bytes (0.97 GiB, against Megatron's selective 2.25)."""
    assert ta.op_sac_saved(LLAMA8B) == (["q", "v", "gate", "down"], ["k", "o", "up"])
    s, b = 8192, 2
    assert tm.op_sac_bytes_per_layer(LLAMA8B, s, b, 1, False) == 2 * s * b * (4096 * 4 + 1024 + 14336) + 4 * b * 32 * s
    assert tm.op_sac_bytes_per_layer(LLAMA8B, s, b, 1, False) == 1_042_284_544
    # the recomputed matrices: k 4096×1024, o 4096×4096, up 4096×14336
    assert ta.op_sac_recomputed_params_per_layer(LLAMA8B) == 4096 * 1024 + 4096 * 4096 + 4096 * 14336


def test_selective_is_op_sac_under_fsdp_and_megatrons_elsewhere():
    params = count_params(LLAMA8B)
    kw = dict(dp=8, zero_stage=3, seq_len=8192, micro_batch=2, recompute="selective")
    fsdp = memory_of(LLAMA8B, params, framework="fsdp", **kw)
    megatron = memory_of(LLAMA8B, params, framework="megatron", **kw)
    saved = tm.op_sac_bytes_per_layer(LLAMA8B, 8192, 2, 1, False)
    full_layer = activation_bytes_per_layer(LayerShape(LLAMA8B, 8192, 2, 1, False), "none", True)
    logits = 8192 * 2 * 128256 * 12
    # every block's saved outputs, one block recomputed in the backward (its full activations less what it kept)
    assert fsdp.activations == pytest.approx(32 * saved + (full_layer - saved) + logits, abs=2)
    assert megatron.activations > fsdp.activations + 30 * 2**30  # 34·sbh-class per layer against 0.97 GiB
    assert (
        tm.recompute_kind("selective", "fsdp") == tm.OP_SAC
        and tm.recompute_kind("selective", "megatron") == "selective"
    )


def test_op_sac_rowwise_outputs_stay_full_width_under_tp():
    """Under TP without SP the saved down-projection output is the TP-partial sum of full width; SP adds the two
    reduce-scatter outputs torchtitan's list saves and splits the block input."""
    s, b, t = 4096, 1, 2
    no_sp = tm.op_sac_bytes_per_layer(LLAMA8B, s, b, t, False)
    assert no_sp == 2 * s * b * (4096 + (4096 + 1024 + 14336 + 4096) / t + 4096) + 4 * b * 32 * s / t
    sp = tm.op_sac_bytes_per_layer(LLAMA8B, s, b, t, True)
    assert sp == no_sp - 2 * s * b * 4096 / t + 2 * 2 * s * b * 4096 / t


def test_fsdp2_pipeline_stages_hold_their_weights_whole_and_fp32_gradients_between_microbatches():
    """Under torch.distributed.pipelining every FSDP2 backward runs without gradient sync or reshard
    (train_memory.pipeline_without_sync): the worst (last) stage holds its 16-bit weights whole and their fp32
    unsharded gradients; measured on gloo ranks by tests/test_fsdp_pp_memory_real.py. Megatron-LM's PP is not this."""
    params = count_params(LLAMA8B)
    args = dict(tp=1, pp=4, dp=8, zero_stage=3, microbatches=8, seq_len=4096)
    fsdp, megatron = (
        memory_of(LLAMA8B, params, framework="fsdp", **args),
        memory_of(LLAMA8B, params, framework="megatron", **args),
    )
    held = ms.held_params(LLAMA8B, params, 1, 4, ms.StageSlice(8, first=True, last=False))[
        0
    ]  # most micro-batches in flight
    assert fsdp.gathered == pytest.approx(2 * held, rel=1e-9)
    assert fsdp.accumulating == fsdp.gradients == pytest.approx(4 * held, rel=1e-9)
    # Megatron's bf16 gradients are an fp32 main_grad (model_states.gradient_bytes_per_param), sharded here
    assert megatron.gradients == pytest.approx(4 * held / 8, rel=1e-9) and not megatron.accumulating
    # 8B over 4 stages, 2.3B on the first: 4.5 GB whole and 9.1 GB of fp32 gradients, less two layers and a shard
    assert (fsdp.allocated - megatron.allocated) / GB == pytest.approx(
        (2 * held - megatron.gathered + 4 * held - 4 * held / 8) / GB, rel=1e-6
    )
    assert (fsdp.allocated - megatron.allocated) / GB == pytest.approx(11.6, abs=0.1)
    assert not tm.pipeline_without_sync("fsdp", 1, 3, 8, LLAMA8B)  # without PP gradients reduce every backward
    assert not tm.pipeline_without_sync("fsdp", 4, 3, 1, LLAMA8B)  # nothing sharded
