"""Layouts beyond TP × PP × DP: context parallelism (CP), expert parallelism (EP), interleaved (virtual) pipeline
stages (VP), uneven pipeline stages, and sharded data parallelism over a group smaller than DP (HSDP). Pure
functions of the shape; train_memory and train_time call them, the search enumerates them.

* Uneven PP (Llama 3 paper, Dubey et al. 2024, §3.3.2: "we reduce one Transformer layer each from the first and
  the last stages", which hold the embedding and the output head): `pipeline_split` gives the layers of each stage.
  Megatron-LM states it as --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers (the middle
  stages share the rest evenly: megatron/core/transformer/transformer_config.py) or, with interleaving, as
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split (the embedding and the loss each
  count as one layer of the split). The largest stage sets the step (every stage waits for it in the steady
  1F1B state) and each stage's memory is its own layers × the micro-batches it holds.
* VP, interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", §2.2.2): each rank runs v model chunks of 1/v of its layers; the bubble shrinks from
  (p−1)/m to (p−1)/(v·m) of the ideal step, and the point-to-point traffic grows v-fold. Memory: rank r warms up
  (p−r−1)·2 + (v−1)·p chunk passes before its first backward (Megatron-LM schedules.py, get_pp_rank_microbatches,
  called by forward_backward_pipelining_with_interleaving; the p is microbatch_group_size_per_vp_stage, whose default
  is p in model_parallel_config.py), then runs one forward before each backward: it holds warmup + 1 chunk passes,
  each of one chunk's L/(p·v) layers, so ((p−r−1)·2 + (v−1)·p + 1)/v stages' worth of micro-batches: the first rank
  p·(1 + (p−1)/(p·v)) (Korthikanti et al. 2022 §4.2.3), against p without interleaving. Chunks are taken as equal;
  under the embedding-and-loss split the first chunk of the first rank and the last of the last are one layer
  lighter, which over-counts the first rank and under-counts the last, while the second rank (equal chunks, two
  passes fewer than the first) is exact (tests/test_train_layout.py walks Megatron-LM's order).
* CP (Megatron-LM context parallelism docs, docs/source/api-guide/context_parallel.rst: ring attention with
  load-balanced causal chunks): every activation is split by cp along the sequence, so are the GEMM and attention
  FLOPs of a micro-batch (each rank's s/cp queries meet all s keys); the KV chunks travel the ring: in the
  forward each rank sends cp−1 chunks of K and V, in the backward K and V again and their gradients (3·(cp−1)
  chunk transfers per layer; a full-recompute forward adds one more pass), overlapped with the attention of the
  chunk in flight. Over NVLink the transfer hides; across nodes it runs at the NIC rate, which is why CP groups
  are kept inside a node when they can be (Megatron CP docs: "CP communication ... intra-node NVLink").
  The gradients of CP ranks are reduced together with DP (Megatron's data-parallel-with-CP group), and the
  distributed optimizer shards over dp·cp ranks.
* CP by all-gather (Llama 3 paper, Dubey et al. 2024, §3.3.2 "Context parallelism"; what fsdp/fsdp_tp.py runs on
  the FSDP2 path): the sequence is cut into 2·cp chunks and rank i keeps chunks i and 2·cp−1−i (load balance under
  the causal mask); each layer all-gathers K and V over the CP ranks and computes attention for its local queries.
  The all-gather is not overlapped with compute: the paper accepts it because with GQA K and V are small next to Q
  and the attention of long sequences. Per layer a rank sends (cp−1) of its s/cp-token K/V chunks in the forward
  gather; the backward reduces the gathered K/V's gradient with an all-reduce (gloo has no reduce-scatter), 2·(cp−1)
  chunks, and takes its own slice; recomputing the layer (full or op-level SAC) gathers again: 3·(cp−1) chunks,
  4 with recompute. Memory: params, gradients and optimizer states are sharded over dp·cp (FSDP over the flattened
  dp_shard × cp mesh, torchtitan's dp_shard_cp); activations split by cp; one layer's gathered K/V (s tokens, 16-bit)
  is live at a time, plus its saved copy per layer unless recomputed (`cp_allgather_kv_bytes`).
* EP (DeepSeek-V3 technical report, §3.2, and Megatron-Core MoE docs, megatron/core/transformer/moe/README.md):
  the routed experts are split over ep ranks carved from the data-parallel ranks (ep divides dp·cp); each GPU holds
  E/ep experts and their optimizer states, sharded by the distributed optimizer over the dp·cp/ep expert-data-
  parallel ranks. Every MoE layer dispatches each token's hidden state to its top-k experts and combines the
  results: an all-to-all of tokens·k·h 16-bit values, of which (ep−1)/ep leave the GPU, forward (dispatch +
  combine) and again in the backward: 4 all-to-alls per MoE layer per micro-batch (6 with full recompute).
  FP8 dispatch (DeepSeek-V3 report §3.3.3, "Low-Precision Communication"): the activations before the MoE
  up-projections are dispatched in FP8 and so are the activation gradients before the down-projections (the
  backward of the combine), each 128-value tile with a 32-bit scale (§3.3.2, 1×128 tiles); the combine and the
  dispatch's backward stay BF16: 2 of the 4 all-to-alls at 1 + 4/128 bytes per value.
* EP all-to-all overlap (DeepSeek-V3 report §3.2.1, DualPipe: each forward chunk of one micro-batch runs beside a
  backward chunk of another, so "both all-to-all and PP communication can be fully hidden"; Megatron-Core's
  --overlap-moe-expert-parallel-comm does the same in the 1F1B phase, transformer_config.py:
  "Overlap EP A2A communications with independent computations of different micro-batches in 1f1b phase"). A
  micro-batch whose all-to-alls C run beside another's compute P costs max(C, P + s·C) instead of P + C: while the
  all-to-alls run, their kernels hold a share s of the SMs (§3.2.2: 20 of the H800's 132), so the compute progresses
  at 1 − s; never slower than without overlap. The warm-up and cool-down
  micro-batches of each stage have no partner: min(m, p) of the m micro-batches with PP (one with PP1) stay
  exposed. Megatron-Core asks for it: EP > 1, VP when PP > 1, no full recompute (transformer_config.py checks).
* HSDP / FSDP × TP (PyTorch FSDP HYBRID_SHARD; torchtitan docs/fsdp.md and the 2D/3D composition in
  torchtitan/parallelisms): ZeRO-3 shards over a shard group of `shard` ranks and replicates over dp/shard groups;
  the per-micro-batch gathers and reduce-scatters run inside the shard group, the replicas all-reduce the
  gradient shard once per step.
"""

from __future__ import annotations

from ...catalog.params import ParamCounts
from ...catalog.types import Architecture

# CP only where each rank keeps at least this many tokens of a sequence: NeMo's Llama 3 8B/70B layouts run CP2 at
# 8192 tokens (4096 per rank; NeMo 24.07 performance summary) and its long-context tables keep 4096-32768 per rank.
CP_MIN_TOKENS_PER_RANK = 4096
CP_MAX = 64
# Expert parallel degrees tried for an MoE model: powers of two up to the expert count (DeepSeek-V3 trains EP64).
EP_MAX = 256
# Interleaving degrees tried when PP > 1 (NeMo's layouts use 2-20 chunks per rank; each chunk needs ≥ 1 layer).
VP_CHOICES = (1, 2, 4)
ACTIVATION_BYTES = 2
# FP8 dispatch: one byte per value and one 32-bit scale per 1×128 tile (DeepSeek-V3 report §3.3.2-3.3.3)
FP8_DISPATCH_BYTES = 1 + 4 / 128
# SMs the all-to-all kernels take while they overlap compute: 20 of the H800's 132 (DeepSeek-V3 report §3.2.2)
EP_OVERLAP_SM_SHARE = 20 / 132
# HSDP shard groups the search tries, in nodes' worth of data-parallel ranks (`hsdp_groups`)
HSDP_GROUP_NODES = (1, 2, 4, 8)


def pipeline_split(
    layers: int, pp: int, first: int | None = None, last: int | None = None, stages: tuple[int, ...] | None = None
) -> tuple[int, ...] | None:
    """Layers on each of the pp stages, or None when there is no such split.

    Given: a per-stage list (its sum must be the layer count), or first/last stage counts with the middle stages
    sharing the rest evenly (Megatron's rule). Not given: an even split when pp divides the layers; otherwise the
    Llama 3 split — middle stages take ⌈L/p⌉ and the first and last share what is left (126 over 16: 7, 14 × 8, 7)."""
    if pp < 1 or layers < 1 or pp > layers:
        return None
    if stages is not None:
        return tuple(stages) if len(stages) == pp and sum(stages) == layers and min(stages) >= 1 else None
    if pp == 1:
        return None if (first or last) and (first or layers) + (last or 0) != layers else (layers,)
    if first is None and last is None:
        if layers % pp == 0:
            return (layers // pp,) * pp
        middle = -(-layers // pp)
        rest = layers - (pp - 2) * middle
        if pp == 2:
            return (layers // 2, layers - layers // 2)
        if rest < 2:
            return None
        head, tail = rest // 2, rest - rest // 2
        return (head,) + (middle,) * (pp - 2) + (tail,)
    if pp == 2:
        first = first if first is not None else layers - last
        last = last if last is not None else layers - first
        return (first, last) if first >= 1 and last >= 1 and first + last == layers else None
    if first is not None and last is not None:
        left, middles = layers - first - last, pp - 2
        lo, hi = first, last
    elif first is not None:
        left, middles, lo, hi = layers - first, pp - 1, first, None
    else:
        left, middles, lo, hi = layers - last, pp - 1, None, last
    if left < middles or left % middles or (lo is not None and lo < 1) or (hi is not None and hi < 1):
        return None
    middle = left // middles
    return ((lo,) if lo is not None else ()) + (middle,) * middles + ((hi,) if hi is not None else ())


def lighter_last_splits(split: tuple[int, ...]) -> list[tuple[int, ...]]:
    """A split with layers moved from its last stage to its first, one at a time, while the first stays no heavier
    than a middle stage (61 over 16: 2, 14 × 4, 3 → 3, 14 × 4, 2 and 4, 14 × 4, 1): for a last stage that also runs
    the multi-token-prediction modules and their second LM-head pass (Megatron-LM builds them there; layout.py).
    Each is a first/last split Megatron-LM states (--decoder-first/last-pipeline-num-layers)."""
    if len(split) < 3 or len(set(split[1:-1])) != 1:
        return []
    head, middle, tail = split[0], split[1], split[-1]
    return [(head + tail - k, *split[1:-1], k) for k in range(tail - 1, 0, -1) if head + tail - k <= middle]


def is_even(split: tuple[int, ...]) -> bool:
    return len(set(split)) == 1


def megatron_split(split: tuple[int, ...], vp: int) -> str | None:
    """How Megatron-LM states a split with vp chunks per rank ("even", "first-last", "account-embedding-loss"),
    or None when it cannot (transformer_config.py: with VP every stage's count must divide by vp; the middle
    stages must be equal; only first and last may differ)."""
    if len(split) == 1 or is_even(split):
        return "even" if split[0] % vp == 0 else None
    middle = split[1:-1]
    if middle and len(set(middle)) != 1:
        return None
    if vp == 1:
        return "first-last"
    if all(n % vp == 0 for n in split):
        return "first-last"
    # the embedding and the loss counted as one layer each: (L + 2)/p per stage, first and last one fewer
    if middle and split[0] == split[-1] == middle[0] - 1 and middle[0] % vp == 0:
        return "account-embedding-loss"
    return None


def microbatches_in_flight(pp: int, vp: int, rank: int, microbatches: int) -> float:
    """Stages' worth of micro-batch activations rank `rank` holds at its peak (module docstring): p − r under 1F1B;
    under interleaving its warmup + 1 chunk passes of L/(p·v) layers each, ((p−r−1)·2 + (v−1)·p + 1)/v stages' worth;
    never more than the step's micro-batches."""
    if pp <= 1:
        return 1.0
    if vp <= 1:
        return float(min(pp - rank, microbatches))
    chunks = (pp - rank - 1) * 2 + (vp - 1) * pp + 1
    return min(chunks, microbatches * vp) / vp


def interleaved_bubble_fraction(pp: int, vp: int, microbatches: int) -> float:
    """Narayanan et al. 2021 §2.2.2: the bubble over the ideal step, (p − 1)/(v·m)."""
    return (pp - 1) / (max(1, vp) * max(1, microbatches))


def routed_expert_params(arch: Architecture, params: ParamCounts) -> float:
    """Routed experts' parameters in one MoE layer: E · per-expert MLP (params.py: total = E·x + d·E + S·x)."""
    if not arch.is_moe:
        return 0.0
    per_expert = (params.per_layer_mlp_total - arch.hidden * arch.experts) / (arch.experts + arch.shared_experts)
    return arch.experts * per_expert


def moe_layer_share(arch: Architecture) -> float:
    """The share of layers with routed experts (DeepSeek's leading dense layers and Llama 4's interleaved ones have none)."""
    if not arch.is_moe or not arch.layers:
        return 0.0
    return arch.moe_layer_count / arch.layers


def kv_pair_width(arch: Architecture) -> float:
    """Width of one token's K and V together: 2·kv_heads·head_dim (GQA/MHA); MLA exchanges the decompressed K and V
    (heads × (q·k + v head dims))."""
    if arch.uses_mla:
        return arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim)
    return 2 * arch.kv_heads * arch.attention_head_dim


def cp_ring_bytes_per_layer(
    arch: Architecture, seq_len: int, micro_batch: int, tp: int, cp: int, recompute: str
) -> float:
    """Bytes one rank sends around the CP ring per layer and micro-batch (module docstring): 3·(cp−1) chunks of
    K and V of s/cp tokens (4 with full recompute), 16-bit, heads split over TP."""
    if cp <= 1:
        return 0.0
    chunk = seq_len / cp * micro_batch * kv_pair_width(arch) / tp * ACTIVATION_BYTES
    passes = 3 + (1 if recompute == "full" else 0)
    return passes * (cp - 1) * chunk


def cp_by_allgather(framework: str) -> bool:
    """Whether the framework runs CP by all-gathering K/V (module docstring): the FSDP2 script, fsdp/fsdp_tp.py;
    Megatron-LM runs ring attention (`cp_ring_bytes_per_layer`)."""
    return framework == "fsdp"


def cp_allgather_bytes_per_layer(
    arch: Architecture, seq_len: int, micro_batch: int, tp: int, cp: int, recompute: str
) -> float:
    """Bytes one rank sends per layer and micro-batch for all-gather CP (module docstring, Llama 3 §3.3.2): the
    forward K/V gather, (cp−1) chunks of s/cp tokens; the backward all-reduce of the gathered K/V gradient, 2·(cp−1)
    chunks (ring all-reduce); a recomputed layer gathers again. 16-bit, K/V heads split over TP."""
    if cp <= 1:
        return 0.0
    chunk = seq_len / cp * micro_batch * kv_pair_width(arch) / tp * ACTIVATION_BYTES
    passes = 3 + (1 if recompute in ("full", "op") else 0)
    return passes * (cp - 1) * chunk


def cp_allgather_kv_bytes(arch: Architecture, seq_len: int, micro_batch: int, tp: int) -> float:
    """One layer's gathered K and V for all-gather CP: 2 · s · kv_heads · head_dim · 2 bytes per sequence (heads split
    over TP) — the whole sequence's keys and values, which the local queries attend to."""
    return seq_len * micro_batch * kv_pair_width(arch) / tp * ACTIVATION_BYTES


def ep_all_to_all_bytes_per_layer(
    arch: Architecture, tokens: float, ep: int, recompute: str, dispatch: str = "bf16"
) -> float:
    """Bytes one GPU sends in one MoE layer's all-to-alls per micro-batch (module docstring): 4 (6 with full
    recompute) × tokens · top-k · h × (ep − 1)/ep values, 2 bytes each; with FP8 dispatch the forward dispatch (also
    when recomputed) and the combine's backward at FP8_DISPATCH_BYTES. `tokens` are this GPU's tokens (s·b/cp)."""
    if ep <= 1 or not arch.is_moe:
        return 0.0
    low = FP8_DISPATCH_BYTES if dispatch == "fp8" else ACTIVATION_BYTES
    dispatches = 2 + (1 if recompute == "full" else 0)  # forward dispatch (again when recomputed), combine backward
    combines = 2 + (1 if recompute == "full" else 0)  # forward combine (again when recomputed), dispatch backward
    per_value = dispatches * low + combines * ACTIVATION_BYTES
    return per_value * tokens * arch.experts_per_token * arch.hidden * (ep - 1) / ep


def ep_overlap_allowed(ep: int, pp: int, vp: int, recompute: str) -> bool:
    """Megatron-Core's conditions for --overlap-moe-expert-parallel-comm (transformer_config.py): EP > 1, VP when
    PP > 1, no full recompute."""
    return ep > 1 and (pp == 1 or vp > 1) and recompute != "full"


def ep_exposed_seconds(comm: float, compute: float, microbatches: int, pp: int, overlap: bool) -> float:
    """All-to-all seconds a micro-batch adds to its stage, averaged over the step's m micro-batches (module
    docstring): C without overlap; with it, C for the min(m, p) (PP1: one) micro-batches without a partner and
    max(C − P, s·C) for the rest, s = EP_OVERLAP_SM_SHARE."""
    if not overlap or comm <= 0 or microbatches <= 0:
        return comm
    alone = min(microbatches, pp if pp > 1 else 1)
    paired = max(comm - compute, EP_OVERLAP_SM_SHARE * comm)
    return (alone * comm + (microbatches - alone) * paired) / microbatches


def cp_choices(seq_len: int, pinned: int | None) -> list[int]:
    """CP degrees tried: the pin, or powers of two keeping ≥ CP_MIN_TOKENS_PER_RANK tokens per rank (and the
    even split into 2·cp chunks Megatron's load balancing needs: seq_len % (2·cp) == 0)."""
    if pinned:
        return [pinned]
    out, cp = [1], 2
    while cp <= CP_MAX and seq_len // cp >= CP_MIN_TOKENS_PER_RANK and seq_len % (2 * cp) == 0:
        out.append(cp)
        cp *= 2
    return out


def ep_choices(arch: Architecture, pinned: int | None) -> list[int]:
    """EP degrees tried for an MoE model: the pin, or powers of two dividing the expert count; 1 for dense models."""
    if pinned:
        return [pinned]
    if not arch.is_moe:
        return [1]
    out, ep = [1], 2
    while ep <= min(arch.experts, EP_MAX):
        if arch.experts % ep == 0:
            out.append(ep)
        ep *= 2
    return out


def hsdp_groups(dp: int, tp: int, cp: int, per_node: int) -> list[int]:
    """HSDP shard groups the search tries for a ZeRO-3 FSDP layout whose DP spans nodes: one node's data-parallel
    ranks (per_node/tp; TP innermost, then dp_shard, in both FSDP meshes), then 2, 4 and 8 nodes' worth, each smaller
    than DP, tiling it and sharding over at least 2 ranks (a group of 1, where TP fills the node, shards nothing). PyTorch's ShardingStrategy.HYBRID_SHARD (torch/distributed/fsdp/api.py: "Apply FULL_SHARD
    within a node, and replicate parameters across nodes ... expensive all-gathers and reduce-scatters are only done
    within a node") and Zhao et al. 2023 ("PyTorch FSDP", §3.2.2): the per-micro-batch gathers and reduce-scatter stay
    in the fast domain, one all-reduce of the gradient shard crosses the replicas per step, at the cost of states
    sharded over the group only. Larger groups hold less memory per GPU at more cross-node traffic per micro-batch,
    which is why the search tries them only where memory needs them (training._search_hsdp). None with CP (the FSDP2
    script has no HSDP group with CP, training.fsdp2_runs)."""
    if cp > 1:
        return []
    node_ranks = max(1, per_node // tp)
    return [node_ranks * n for n in HSDP_GROUP_NODES if 2 <= node_ranks * n < dp and dp % (node_ranks * n) == 0]
