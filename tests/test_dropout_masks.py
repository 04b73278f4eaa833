"""Dropout masks in the activations (compiler/sizing/train/activations.py docstring): Korthikanti et al. 2022 Table 2
counts three, which a layer keeps only when the recipe's dropout is > 0; the compiled plan takes that dropout from the
recipe's family table before the recipe pass runs, and says so in its memory decision. The step time's memory-bound
kernels move the same bytes (compiler/sizing/train/time.py docstring): no mask traffic at dropout 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.catalog.params import count_params
from compiler.pipeline import resolve_text
from compiler.sizing.train.activations import LayerShape, activation_bytes_per_layer, stores_dropout_masks
from tests.fixtures.train_sizing import memory_of
from tests.test_train_memory import GPT3, LLAMA8B
from tests.test_train_time import _step

REPO = Path(__file__).resolve().parent.parent


def test_a_llama_layer_without_dropout_keeps_34_sbh_not_36():
    """Llama-3.1-8B, s 8192, b 1, flash: attention 6 + 4·(8/32) = 7, SwiGLU 2 + 3·2·14336/4096 = 23, norms 4 → 34·sbh
    = 1,140,850,688 B; the two sbh masks (attention and MLP outputs) would add 2·sbh = 67,108,864 B (36·sbh)."""
    sbh = 8192 * 4096
    without = activation_bytes_per_layer(LayerShape(LLAMA8B, 8192, 1, 1, False), "none", True, dropout_masks=False)
    assert without == 34 * sbh == 1_140_850_688
    assert (
        activation_bytes_per_layer(LayerShape(LLAMA8B, 8192, 1, 1, False), "none", True) - without
        == 2 * sbh
        == 67_108_864
    )


def test_a_gpt2_like_layer_with_dropout_keeps_table_2s_masks_and_without_only_the_softmax_output():
    """GPT-3 shape (MHA, 4h GeLU MLP), s 2048, b 1, no flash, a·s/h = 16: with dropout 0.1 (BERT's, GPT-2's) Table 2's
    s·b·h·(34 + 5·16) = 2,868,903,936 B; with dropout 0 s·b·h·(32 + 2·16) = 1,610,612,736 B: the softmax output
    2·as²b stays (the V-GEMM saves it, the identity dropout returning it), its mask as²b and dropout output 2·as²b go."""
    sbh = 2048 * 12288
    masks = activation_bytes_per_layer(
        LayerShape(GPT3, 2048, 1, 1, False), "none", False, dropout_masks=stores_dropout_masks(0.1)
    )
    none = activation_bytes_per_layer(
        LayerShape(GPT3, 2048, 1, 1, False), "none", False, dropout_masks=stores_dropout_masks(0.0)
    )
    assert masks == sbh * (34 + 5 * 16) == 2_868_903_936
    assert none == sbh * (32 + 2 * 16) == 1_610_612_736


@pytest.mark.parametrize(
    "sequence_parallel, masks, expected",
    [
        # Table 2 TP row: 10 replicated + 24/t + 5as/(ht) = 10 + 3 + 10
        (False, True, 10 + 24 / 8 + 5 * 16 / 8),
        # without dropout the replicated part is 8 (LayerNorm inputs 4, column-parallel GEMM inputs 4), scores 2as²b/t
        (False, False, 8 + 24 / 8 + 2 * 16 / 8),
        # SP divides the replicated part too: (34 + 80)/t and (32 + 32)/t
        (True, True, (34 + 80) / 8),
        (True, False, (32 + 32) / 8),
    ],
)
def test_tensor_parallel_replicates_the_masks_only_where_they_are_kept(sequence_parallel, masks, expected):
    sbh = 2048 * 12288
    got = activation_bytes_per_layer(
        LayerShape(GPT3, 2048, 1, 8, sequence_parallel), "none", False, dropout_masks=masks
    )
    assert got == pytest.approx(sbh * expected)


def test_full_recompute_stores_the_layer_input_whatever_the_dropout():
    sbh = 2048 * 12288
    for masks in (True, False):
        assert (
            activation_bytes_per_layer(LayerShape(GPT3, 2048, 1, 1, False), "full", False, dropout_masks=masks)
            == 2 * sbh
        )


def test_the_memory_model_reads_the_workloads_dropout():
    """32 layers of Llama-3.1-8B at s 4096 on one data-parallel rank: dropout 0.1 adds 32 × 2·sbh = 1 GiB."""
    params = count_params(LLAMA8B)
    kept = memory_of(LLAMA8B, params, seq_len=4096, framework="megatron", dropout=0.1)
    none = memory_of(LLAMA8B, params, seq_len=4096, framework="megatron", dropout=0.0)
    assert kept.activations - none.activations == 32 * 2 * 4096 * 4096 == 2**30


# The hand-built H100 of test_train_time: 3.35 TB/s at 0.90 achievable; Llama-3.1-8B at s 4096, b 1, 8 micro-batches.
HBM = 3.35e12 * 0.90
SBH = 4096 * 4096
AS2B = 32 * 4096 * 4096  # heads × s² × b
LOGITS = 4096 * 128256 * 4 * 4  # fp32 logits, 4 passes


def test_the_step_time_moves_no_mask_bytes_at_dropout_0():
    """Flash attention: per layer and pass 36·sbh with dropout 0.1 (the two sbh masks), 34·sbh with 0; 32 layers × 5
    passes + the logits, 8 micro-batches: 840,337,195,008 B = 0.27872 s against 797,387,522,048 B = 0.26447 s, the
    0.014245 s between them 8 × 32 × 5 × 2·sbh."""
    kept = _step(dropout=0.1).memory_bound
    none = _step(dropout=0.0).memory_bound
    assert kept == pytest.approx(8 * (32 * 5 * 36 * SBH + LOGITS) / HBM) == pytest.approx(0.278719, abs=1e-6)
    assert none == pytest.approx(8 * (32 * 5 * 34 * SBH + LOGITS) / HBM) == pytest.approx(0.264473, abs=1e-6)
    assert kept - none == pytest.approx(8 * 32 * 5 * 2 * SBH / HBM) == pytest.approx(0.014245, abs=1e-6)


def test_without_dropout_the_scores_move_the_softmax_output_only():
    """No flash, selective recompute: a layer stores 36·sbh + 5·as²b with dropout 0.1 and 34·sbh + 2·as²b with 0
    (5 passes), and the recompute writes and reads the scores' 5·as²b or 2·as²b again (2 passes): 180·sbh + 35·as²b
    against 170·sbh + 14·as²b per layer, 1.87420 s against 0.90266 s for the step's 8 micro-batches."""
    kept = _step(dropout=0.1, flash_attention=False, recompute="selective").memory_bound
    none = _step(dropout=0.0, flash_attention=False, recompute="selective").memory_bound
    assert kept == pytest.approx(8 * (32 * (180 * SBH + 35 * AS2B) + LOGITS) / HBM) == pytest.approx(1.874196, abs=1e-6)
    assert none == pytest.approx(8 * (32 * (170 * SBH + 14 * AS2B) + LOGITS) / HBM) == pytest.approx(0.902664, abs=1e-6)


def test_memory_and_step_time_read_one_dropout_decision():
    """What dropout 0.1 adds to the memory model's activations (32 layers × 2·sbh = 1 GiB) the time model moves 5 times
    per micro-batch."""
    params = count_params(LLAMA8B)
    memory = {
        p: memory_of(LLAMA8B, params, seq_len=4096, framework="megatron", dropout=p).activations for p in (0, 0.1)
    }
    step = {p: _step(dropout=p, grad_accum=1, framework="megatron").memory_bound for p in (0, 0.1)}
    assert memory[0.1] - memory[0] == 2**30
    assert (step[0.1] - step[0]) * HBM == pytest.approx(5 * 2**30)


PINNED = "parallelism: {tp: 1, pp: 1, cp: 1, dp: 8, zero_stage: 3, offload: false, micro_batch: 1, recompute: none}\n"


def _llama_plan(recipe: str = "") -> str:
    """The Llama-3.1-8B pre-training example on 10B tokens of 4096-token sequences under FSDP, without a budget, at
    one pinned layout."""
    text = (REPO / "examples" / "llama3-8b-pretrain.yaml").read_text(encoding="utf-8")
    text = text.replace("tokens: 1T", "tokens: 10B").replace("framework: auto", "framework: fsdp")
    text = text.replace("seq_len: 8192", "seq_len: 4096")
    text = text.replace("budget: {usd: 450k, alert_at: 0.8}\n", "")
    return text.replace("  entrypoint:", recipe + "  entrypoint:") + PINNED


def test_a_llama_plan_keeps_no_masks_and_names_the_family_source():
    plan = resolve_text(_llama_plan())
    memory = next(d for d in plan.decisions if d.topic == "memory")
    assert plan.recipe.dropout == 0.0
    assert "dropout 0: no dropout masks kept" in memory.choice
    assert "config.json of meta-llama/Llama-3.1-8B: attention_dropout 0.0" in memory.reason
    given = resolve_text(_llama_plan("  recipe: {dropout: 0.1}\n"))
    memory = next(d for d in given.decisions if d.topic == "memory")
    assert given.recipe.dropout == 0.1 and "dropout 0.1: its masks kept for the backward" in memory.choice
    assert "dropout 0.1 (the plan's train.recipe.dropout)" in memory.reason
    # 32 layers × 2·sbh (s 4096, h 4096, b 1) more with the plan's dropout 0.1
    extra = given.memory_per_gpu_bytes.activations - plan.memory_per_gpu_bytes.activations
    assert extra == 32 * 2 * 4096 * 4096 == 2**30
