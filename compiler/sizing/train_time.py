"""Training step time from the hardware, and wall time with failures and checkpoints.

FLOPs (the MFU numerator, PaLM, Chowdhery et al. 2022, App. B): 6·N + 12·L·H·Q·T per token, N the
parameters that take part in matmuls (active ones for MoE; the input embedding is a lookup, the LM head a
GEMM even when tied), H·Q = heads × head dim, T the sequence length. Recompute adds hardware FLOPs only
(HFU): full recompute repeats each layer's forward (2·N_layers + 4·L·H·Q·T; the LM head is not recomputed,
Narayanan et al. 2021 eq. (3) counts 96·B·s·l·h² = 4 × 24), selective the attention core (4·L·H·Q·T,
Korthikanti et al. 2022 §5); torchtitan's op-level SAC (the FSDP path's "selective", train_memory.OP_SAC) re-runs
the matrices it did not save (2 FLOPs per parameter per token: k, o and up in a SwiGLU block) and the block's
memory-bound kernels, not the attention kernel, whose output it saved; its TP all-reduces are not saved either.

A CNN with a layer table is timed kernel by kernel instead (cnn_train.py: its convolutions' forward, data- and
weight-gradient kernels as `matmul`, batch norm / activation / add kernels as `memory`); the weight, optimizer and DP
terms below apply to it as to a transformer.

Time of one micro-batch on the slowest pipeline stage (the last: ⌈L/p⌉ layers + the LM head and loss):
* GEMMs: their FLOPs at `gpu.achievable_matmul_fraction` × the dense peak of the compute dtype (measured
  large-GEMM rate, catalog); fp8 GEMMs at no more than FP8_GEMM_MATMUL_FRACTION (DeepGEMM's measured share).
* Attention core: with flash attention, the kernel's FLOPs — forward 4·s²·d per head, backward 2.5× that
  (five GEMMs against two, Dao 2023 §3), half of it under a causal mask — at the kernel's measured share of
  peak (ATTENTION_KERNEL_FRACTION; the older Triton kernel TRITON_FLASH_SLOWDOWN times slower); without it,
  the full s×s score GEMMs at the GEMM rate, and the softmax and dropout over the scores as memory traffic
  (next item).
* Memory-bound kernels (norms, activations, dropout, residual adds, rotary, softmax without flash): every
  activation byte Korthikanti et al. count is written by one kernel and read by the next in the forward
  (2 passes), and in the backward it is read once while its gradient is written and read (3 passes):
  5 passes at the achievable HBM rate; recompute repeats the forward passes of what it recomputes. The
  fp32 logits are written, read by the loss, and their gradient written and read (4 passes).
* TP (Shoeybi et al. 2019 §3): 2 all-reduces of s·b·h 16-bit activations per layer in the forward and 2 in
  the backward (+2 when full recompute re-runs the forward; sequence parallelism replaces each by an
  all-gather + reduce-scatter of the same volume), ring 2(t−1)/t × bytes at NVLink's achievable rate, on
  the critical path.
* PP (Narayanan et al. 2021 §2.2): a 1F1B step is (m + p − 1) stage-times, the bubble (p−1)/(m+p−1); with v
  interleaved chunks per rank the bubble is (p−1)/v stage-times (§2.2.2), and the point-to-point sends of each
  micro-batch's s·b·h/(t·cp) 16-bit activations (forward) and their gradients (backward) happen v times per stage
  boundary, at the NIC rate (stages sit on different nodes), on the critical path. The slowest stage sets the
  stage-time (uneven splits: train_layout.pipeline_split).
* CP and EP (train_layout docstring): a micro-batch's tokens on a GPU are s·b/cp; the CP ring's KV transfers hide
  under the attention kernel and only the excess is exposed; the FSDP2 script's K/V all-gather (Llama 3 §3.3.2) is
  exposed whole; EP's all-to-alls are exposed, unless overlapped with
  another micro-batch's compute (DualPipe / Megatron-Core's EP A2A overlap: train_layout.ep_exposed_seconds), and
  FP8 dispatch halves two of the four (train_layout.ep_all_to_all_bytes_per_layer).
* DP: the gradient all-reduce 2(d−1)/d × 16-bit gradient bytes over the slowest link the ring crosses;
  PyTorch DDP / Megatron bucket it under the backward of the last micro-batch (Li et al. 2020, VLDB, §3.2.3),
  so only what exceeds that backward is exposed. ZeRO-3/FSDP all-gathers the weights in the forward and
  backward and reduce-scatters the gradients on every micro-batch, 1.5× the all-reduce volume (ZeRO paper
  §7.2.2: 3Ψ against 2Ψ), prefetched under that micro-batch's compute. The FSDP2 script (fsdp/fsdp_tp.py) reduces
  in fp32 (MixedPrecisionPolicy reduce_dtype, torchtitan's mixed_precision_reduce default): its reduce-scatter moves
  4-byte gradients, (2·2Ψ + 4Ψ)/2 = 2× the 16-bit all-reduce volume (`reduce_bytes_per_gradient`). HSDP (PyTorch
  FSDP HYBRID_SHARD; Zhao et al. 2023, "PyTorch FSDP", §3.2.2): the gathers and reduce-scatters run in the shard
  group of `zero_shard_ranks`, and the replicas all-reduce their gradient shard (1/shard of it, in the reduce dtype)
  once per step: FSDP2's set_requires_all_reduce on the last micro-batch (fsdp_tp.sync_replicas), the pipeline
  schedule's single gradient reduction with PP.
* Weights: every micro-batch reads the 16-bit GEMM weights it holds twice (an MoE layer: the E/ep experts on the
  GPU, each of which receives tokens at training batch sizes, not only the top-k) (forward, data gradient; three times with
  full recompute) and writes and accumulates each trainable weight's 16-bit gradient (3 accesses), at the
  HBM rate: why a larger micro-batch is faster per token. ZeRO-3/FSDP also writes every gathered weight into
  HBM twice per micro-batch (the forward's and the backward's all-gather; a recompute reuses the backward's).
* Optimizer: reads and writes the states a GPU holds once per step at the HBM rate; CPU offload moves
  gradients down and weights up over PCIe and runs Adam at the host's memory bandwidth (ZeRO-Offload, Ren
  et al. 2021 §4).
Goodput (Young 1974, Daly 2006): per-GPU MTBF from Llama 3 (Dubey et al. 2024, §3.3.4: 419 unexpected
interruptions in 54 days on 16,384 H100s); a job on n GPUs fails every MTBF/n, checkpoints every
τ = √(2·δ·M), δ the checkpoint write time, and loses δ/τ + (τ/2 + restart)/M of its time.
Whole run (`whole_run`): the steady steps plus, per useful second, the failures and checkpoint writes above, the
stragglers a synchronous step waits for (the slowest of n GPUs, STRAGGLER_SIGMA) and the evaluation pauses of the
framework's defaults (EVALUATION_SHARE); wall time = steady time ÷ goodput, goodput = 1 / (1 + their sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog.params import ParamCounts
from ..catalog.types import Architecture, GpuSpec
from .cnn_layers import table_for
from .cnn_train import training_batch_time, transposes
from .train_layout import (
    cp_allgather_bytes_per_layer,
    cp_ring_bytes_per_layer,
    ep_all_to_all_bytes_per_layer,
    ep_exposed_seconds,
    interleaved_bubble_fraction,
    moe_layer_share,
    routed_expert_params,
)
from .train_memory import (
    OP_SAC,
    activation_bytes_per_layer,
    cnn_activation_bytes,
    cnn_element_bytes,
    op_sac_bytes_per_layer,
    op_sac_recomputed_params_per_layer,
)

COMPUTE_DTYPE = {"fp32": "tf32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
# Flash attention's attention kernels run in 16-bit even in fp8 recipes (Transformer Engine's default).
ATTENTION_DTYPE = {"fp32": "tf32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}
# FlashAttention-2's share of the dense 16-bit peak, forward + backward (Dao 2023, "FlashAttention-2", abstract:
# 50-73% of the theoretical maximum on A100; the lower end, 0.50, is its backward-dominated fwd+bwd figure).
# On parts with fp8 tensor cores (Hopper and later) FA2 reaches 35% (Shah et al. 2024, "FlashAttention-3",
# abstract: "FlashAttention-2 achieving only 35% utilization on H100"), as it uses none of the asynchronous
# paths those parts add.
ATTENTION_KERNEL_FRACTION_AMPERE = 0.50
ATTENTION_KERNEL_FRACTION_HOPPER = 0.35
# The Triton FlashAttention of 2022 (flash_attn_triton.py; MPT's `attn_impl: triton`, llm-foundry's MPT configs
# until 2024) is 1.3-2.5x slower than FlashAttention-2 (Dao 2023 §4.1); taken at the range's geometric middle.
TRITON_FLASH_SLOWDOWN = math.sqrt(1.3 * 2.5)
ATTENTION_KERNELS = ("flash2", "triton-flash")
FLASH_BACKWARD_TO_FORWARD = 2.5  # Dao 2023 §3.1: the backward runs 5 GEMMs to the forward's 2
CAUSAL_SHARE = 0.5  # a causal kernel skips the masked half of the score matrix
FORWARD_PASSES = 2  # an activation written by one kernel and read by the next
BACKWARD_PASSES = 3  # the saved activation read, its gradient written and read
LOGIT_PASSES = 4  # fp32 logits written, read by the loss, gradient written, read by the head's backward
# NVLink achieves ~83% of its specification (H100: 749 of 900 GB/s bidirectional p2p, NVIDIA/nccl#1264;
# formulas.md §8).
NVLINK_ACHIEVABLE_FRACTION = 749 / 900
# Inter-node collectives reach ~86% of the NICs' rate: nccl-tests all_reduce bus bandwidth between 8×A100 nodes
# with 4× HDR 200 Gb/s (100 GB/s per node): 84.8 (nccl-tests #119), 86 (NVIDIA/nccl#1048), 91 GB/s (nccl-tests #100);
# the middle one.
INTER_NODE_ACHIEVABLE_FRACTION = 0.86
# FP8 GEMMs reach less of the peak than the large bf16 GEMMs behind
# `achievable_matmul_fraction`. Measured: deepseek-ai/DeepGEMM README.md @7a70b43, "Normal GEMMs for dense
# models", H800 SXM5 (an H100 SXM's 132 SMs, 3.35 TB/s HBM3 and 1979 dense fp8 TFLOP/s), the fastest kernels of
# that study (1.0-2.7x a tuned CUTLASS 3.6). Decode shapes (M = 64 and 128, 12 rows) stream the weights at a
# median 2298.5 GB/s; prefill shapes (M = 4096, 6 rows) run at a median 1041.5 TFLOP/s. Applied to every part
# with fp8 tensor cores (Ada's too: the nearest measurement).
FP8_GEMM_BANDWIDTH_FRACTION = 2298.5e9 / 3.35e12  # 0.686
FP8_GEMM_MATMUL_FRACTION = 1041.5e12 / 1979e12  # 0.526
# Weights and gradients cross HBM on every micro-batch (the roofline's operands, Williams et al. 2009): each
# GEMM weight is read by the forward and by the backward's data-gradient GEMM (and by a full-recompute forward
# again); each trainable weight's 16-bit gradient is written, then read and written into the accumulation buffer.
WEIGHT_READS_PER_MICROBATCH = 2
GRADIENT_ACCESSES_PER_MICROBATCH = 3
ZERO3_GATHERS_PER_MICROBATCH = 2  # ZeRO paper §5.3 / FSDP: parameters gathered for the forward, again for the backward


def pipeline_gathers_per_step(microbatches: int, reshard_after_forward: bool = True) -> int:
    """All-gathers of one FSDP2 pipeline stage per step (torch 2.13 pipelining, train_memory.pipeline_without_sync):
    a backward leaves the stage gathered, so a forward that follows a backward gathers nothing (and reshards after
    it), a backward that follows a backward neither; under 1F1B the warm-up forwards and the first steady forward
    gather, and every steady backward: m + 1, against 2m with a gradient sync per micro-batch. Without
    reshard_after_forward nothing reshards before the step's reduce: one. Counted on gloo ranks (1F1B and interleaved)
    by tests/test_fsdp_pp_memory_real.py."""
    return microbatches + 1 if reshard_after_forward else 1


BACKWARD_SHARE_OF_COMPUTE = 2 / 3  # the backward is 4N of the 6N FLOPs per token
ZERO3_VOLUME_FACTOR = 1.5  # ZeRO paper §7.2.2: stage 3 moves 3Ψ against DP's 2Ψ
GRADIENT_BYTES = 2  # 16-bit gradients reduced across DP (formulas.md §8)
WEIGHT_BYTES_16 = 2  # the 16-bit working copy the GEMMs read (fp8 recipes cast it per GEMM)
# CPU offload (ZeRO-Offload, Ren et al. 2021 §4): fp32 gradients go down and 16-bit weights come back over
# PCIe each step, and the CPU runs Adam over the offloaded states. PCIe 4.0 x16 is 32 GB/s per direction,
# ~25 GB/s achieved (NVIDIA bandwidthTest, pinned memory); one CPU socket streams ~100 GB/s of DDR
# (8 channels DDR4-3200 = 204.8 GB/s peak, ~50% in STREAM) shared by the 4 GPUs attached to it.
PCIE_BYTES_PER_SECOND = 25e9
CPU_ADAM_BYTES_PER_SECOND_PER_GPU = 100e9 / 4
OFFLOAD_BYTES_PER_PARAM_OVER_PCIE = 4 + 2
MTBF_GPU_HOURS = 54 * 24 * 16384 / 419  # Llama 3 paper §3.3.4: 50,677 GPU-hours between interruptions per GPU
# Restart after a failure: Llama 3 (§3.3.4) reports automated recovery handling most interruptions; relaunch,
# NCCL init and checkpoint load take minutes at scale — 10 minutes, the launch allowance used elsewhere. No source
# gives the figure: it is checked against Llama 3's "higher than 90% effective training time" on 16K GPUs
# (tests/test_accuracy_whole_runs.py), and the whole-run range carries what it leaves open.
RESTART_SECONDS = 600
# Stragglers: a synchronous step waits for its slowest GPU. Sinha et al. 2022 ("Not All GPUs Are Created Equal",
# SC22, arXiv 2208.11035 abstract): 8% average performance variation between GPUs of one SKU within a cluster, over
# clusters of up to 27,648 GPUs (Summit), outliers 1.5x the median. Read as a normal spread whose range over the
# cluster's N GPUs is 2σ·√(2 ln N) (the expected extreme of N normal draws), σ = 0.08 / (2·√(2 ln 27648)) = 0.89%;
# the slowest of a job's n GPUs then runs σ·√(2 ln n) behind the median GPU the step model prices.
STRAGGLER_VARIATION, STRAGGLER_CLUSTER_GPUS = 0.08, 27648
STRAGGLER_SIGMA = STRAGGLER_VARIATION / (2 * math.sqrt(2 * math.log(STRAGGLER_CLUSTER_GPUS)))
# Evaluation pauses under Megatron-LM's defaults, which megatron/args.sh leaves in place (megatron/training/
# arguments.py _add_validation_args: --eval-iters 100 every --eval-interval 1000 steps): 100 forward-only passes
# over a global batch per 1000 steps, a forward being 2N of a step's 6N FLOPs. Other frameworks evaluate as the
# script says (Hugging Face Trainer's default eval_strategy is "no"): none counted.
MEGATRON_EVAL_ITERS, MEGATRON_EVAL_INTERVAL = 100, 1000
EVALUATION_SHARE = {"megatron": MEGATRON_EVAL_ITERS / MEGATRON_EVAL_INTERVAL * 2 / 6}


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on the slowest GPU; compute = matmul + attention + memory + weights + optimizer
    + offload."""

    compute: float
    tp_comm: float
    pp_bubble: float
    dp_comm_exposed: float
    total: float
    matmul: float = 0.0
    attention: float = 0.0
    memory_bound: float = 0.0
    optimizer: float = 0.0
    offload: float = 0.0
    dp_comm: float = 0.0
    weights: float = 0.0  # weights read and gradients accumulated, every micro-batch
    cp_comm: float = 0.0  # CP's K/V exchange not hidden under attention (the ring's excess; the all-gather whole)
    ep_comm: float = 0.0  # EP all-to-alls (dispatch and combine) on the critical path (what overlap leaves exposed)
    pp_p2p: float = 0.0  # pipeline point-to-point sends, v per boundary with interleaving


def compute_dtype(precision: str, gpu: GpuSpec) -> str:
    """The GEMM dtype of a precision; fp32 on a part without TF32 (Volta) runs in plain fp32."""
    dtype = COMPUTE_DTYPE[precision]
    return "fp32" if dtype == "tf32" and "tf32" not in gpu.dense_tflops else dtype


def matmul_flops_per_second(gpu: GpuSpec, dtype: str) -> float:
    """A GEMM's achievable rate: the catalog's large-GEMM share of the dense peak, fp8 at no more than DeepGEMM's."""
    fraction = gpu.achievable_matmul_fraction
    if dtype == "fp8":
        fraction = min(fraction, FP8_GEMM_MATMUL_FRACTION)
    return gpu.peak_flops_per_second(dtype) * fraction


def matmul_params(arch: Architecture, params: ParamCounts) -> float:
    """Active parameters used in GEMMs: all but the input embedding lookup; a tied LM head still is a GEMM."""
    if arch.kind == "cnn" or not arch.layers:
        return float(params.active)
    input_lookup = params.embedding - params.lm_head
    tied_head = arch.vocab * arch.hidden if arch.tied_embeddings and arch.kind == "decoder" else 0
    return float(params.active - input_lookup + tied_head)


def _layer_matmul_params(arch: Architecture, params: ParamCounts) -> float:
    """Active GEMM parameters of all transformer layers (the LM head and embeddings excluded)."""
    head = params.lm_head or (arch.vocab * arch.hidden if arch.tied_embeddings and arch.kind == "decoder" else 0)
    return max(0.0, matmul_params(arch, params) - head)


def attention_width(arch: Architecture) -> float:
    """H·Q of PaLM's 12·L·H·Q·T: heads × head dim (MLA: the mean of the q·k and v head widths)."""
    if arch.uses_mla:
        return arch.heads * (arch.qk_nope_head_dim + arch.qk_rope_head_dim + arch.v_head_dim) / 2
    return arch.heads * arch.attention_head_dim if arch.heads else 0.0


def model_flops_per_token(arch: Architecture, params: ParamCounts, seq_len: int) -> float:
    """PaLM App. B: 6·N + 12·L·H·Q·T (CNNs: 3 × the forward FLOPs per sample given in the catalog)."""
    if arch.kind == "cnn" or not arch.layers:
        return 3 * arch.gflops_per_sample * 1e9 if arch.gflops_per_sample else 6.0 * params.active
    return 6 * matmul_params(arch, params) + 12 * arch.layers * attention_width(arch) * seq_len


def hardware_flops_per_token(arch: Architecture, params: ParamCounts, seq_len: int, recompute: str) -> float:
    """Model FLOPs plus what recompute repeats (HFU numerator)."""
    attention_forward = 4 * arch.layers * attention_width(arch) * seq_len
    extra = {
        "none": 0.0,
        "selective": attention_forward,
        "full": 2 * _layer_matmul_params(arch, params) + attention_forward,
        OP_SAC: 2 * arch.layers * op_sac_recomputed_params_per_layer(arch) if arch.layers else 0.0,
    }[recompute]
    return model_flops_per_token(arch, params, seq_len) + extra


def attention_kernel_fraction(gpu: GpuSpec, kernel: str = "flash2") -> float:
    """The flash-attention kernel's share of the 16-bit peak, forward + backward."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention kernel {kernel!r}: one of {ATTENTION_KERNELS}")
    fraction = ATTENTION_KERNEL_FRACTION_HOPPER if "fp8" in gpu.dense_tflops else ATTENTION_KERNEL_FRACTION_AMPERE
    return fraction / TRITON_FLASH_SLOWDOWN if kernel == "triton-flash" else fraction


def dp_ranks_per_node(tp: int, dp: int, gpus_per_node: int) -> int:
    """A DP group's ranks on one node: TP innermost in the rank order, so every tp-th GPU of the node."""
    return max(1, min(dp, gpus_per_node // max(1, tp)))


def dp_collective_bandwidth(
    gpu: GpuSpec,
    tp: int,
    dp: int,
    gpus_per_node: int,
    nic_bytes_per_second: float,
    nvlink_fraction: float = NVLINK_ACHIEVABLE_FRACTION,
    nic_fraction: float = INTER_NODE_ACHIEVABLE_FRACTION,
) -> tuple[float, bool]:
    """(bandwidth B of t = S/B · 2(n−1)/n, whether the group spans nodes) for a data-parallel collective.

    Ranks are ordered TP innermost, then DP (Megatron's order; FSDP/DeepSpeed have no TP), so a DP group takes
    every tp-th GPU: within one node while tp·dp ≤ gpus per node, else gpus_per_node/tp of its ranks on each node.
    Across nodes NCCL runs a ring per NIC and each node's ranks share the inter-node hops, so a GPU's collective
    moves at its NIC rate times its node's ranks in the group (nccl-tests #100, #119 and NVIDIA/nccl#1048: 8×A100
    nodes with 4 HDR NICs reach 85-91 GB/s bus bandwidth of the node's 100 GB/s), at INTER_NODE_ACHIEVABLE_FRACTION
    and never above NVLink, which carries the intra-node hops. A site calibration file's measured shares replace
    the two fractions (site_calibration.py)."""
    nvlink = gpu.intra_node_bandwidth_bytes_per_second * nvlink_fraction
    ranks_per_node = dp_ranks_per_node(tp, dp, gpus_per_node)
    if dp <= ranks_per_node:
        return nvlink, False
    return min(nvlink, nic_bytes_per_second * ranks_per_node * nic_fraction), True


def ring_allreduce_seconds(size_bytes: float, ranks: int, bandwidth: float, latency: float = 0.0) -> float:
    """nccl-tests PERFORMANCE.md: t = S/B · 2(n−1)/n, plus 2(n−1) latency hops."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * size_bytes / bandwidth + 2 * (ranks - 1) * latency


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def step_time(
    arch: Architecture,
    params: ParamCounts,
    gpu: GpuSpec,
    *,
    precision: str,
    seq_len: int,
    micro_batch: int,
    grad_accum: int,
    tp: int,
    pp: int,
    dp: int,
    zero_stage: int,
    recompute: str,
    flash_attention: bool = True,
    attention_kernel: str = "flash2",
    sequence_parallel: bool = False,
    state_bytes_on_gpu: float = 0.0,
    offloaded_bytes: float = 0.0,
    trainable_params_per_gpu: float | None = None,
    gradient_bytes_per_replica: float | None = None,
    trainable_params_per_replica: float | None = None,
    inter_node_bytes_per_second: float = 50e9,
    inter_node_latency_seconds: float = 5e-6,
    gpus_per_node: int = 8,
    cp: int = 1,
    ep: int = 1,
    vp: int = 1,
    split: tuple[int, ...] | None = None,
    zero_shard_ranks: int | None = None,
    ep_overlap: bool = False,
    ep_dispatch: str = "bf16",
    reduce_bytes_per_gradient: float = GRADIENT_BYTES,
    nvlink_fraction: float = NVLINK_ACHIEVABLE_FRACTION,
    nic_fraction: float = INTER_NODE_ACHIEVABLE_FRACTION,
    cp_allgather: bool = False,
    reduce_once_per_step: bool = False,
    reshard_after_forward: bool = True,
) -> StepTime:
    """One optimizer step: grad_accum micro-batches of micro_batch sequences through a TP×CP×PP×DP layout (EP
    inside DP; `split` the layers per stage, default ⌈L/p⌉; ZeRO-3 over `zero_shard_ranks` when smaller than DP).
    `nvlink_fraction`, `nic_fraction`: the achieved shares of the intra-node link and the NICs (a site's measured ones);
    `cp_allgather`: CP by all-gathering K/V (the FSDP2 script; train_layout docstring), not overlapped with compute;
    `reduce_once_per_step`: FSDP2 stages under torch.distributed.pipelining (train_memory.pipeline_without_sync),
    whose all-gathers depend on `reshard_after_forward` (pipeline_gathers_per_step)."""
    dtype = compute_dtype(precision, gpu)
    rate = matmul_flops_per_second(gpu, dtype)
    attention_dtype = ATTENTION_DTYPE[precision]
    hbm = gpu.memory_bandwidth_bytes_per_second * gpu.achievable_memory_bandwidth_fraction
    tokens = seq_len * micro_batch / cp
    nvlink = gpu.intra_node_bandwidth_bytes_per_second * nvlink_fraction
    nic = inter_node_bytes_per_second * nic_fraction
    repeat = 1 if recompute == "full" else 0  # the forward again
    if arch.kind == "cnn" or not arch.layers:  # no transformer structure: FLOPs at the GEMM rate
        matmul = model_flops_per_token(arch, params, seq_len) * tokens / tp / rate
        local_params = params.active / tp
        repeat = 0
        attention = 0.0
        table = table_for(arch)
        if table:  # kernel by kernel (cnn_train): convolutions as matmul, batch norm / activation / add as memory
            cnn = training_batch_time(
                table, micro_batch, rate, hbm, cnn_element_bytes(precision), transposes(precision, dtype)
            )
            matmul, memory = cnn.convolution_seconds / tp, cnn.elementwise_seconds / tp
        else:  # the catalog's activations per sample, streamed as a transformer layer's (5 passes)
            memory = (FORWARD_PASSES + BACKWARD_PASSES) * cnn_activation_bytes(arch, precision, micro_batch) / tp / hbm
        stages = [(0, False)]
    else:
        split = split or (_ceil_div(arch.layers, pp),) * pp
        # the busiest stage without the head, and the last stage with it: the slower sets the stage-time
        stages = [(max(split[:-1]), False), (split[-1], True)] if pp > 1 else [(split[0], True)]
    trainable_given = trainable_params_per_replica
    step_gathers = pipeline_gathers_per_step(grad_accum, reshard_after_forward)
    gathers = (
        (step_gathers / grad_accum if reduce_once_per_step else ZERO3_GATHERS_PER_MICROBATCH)
        if zero_stage >= 3 and dp > 1
        else 0
    )
    best: tuple | None = None
    for layers, with_head in stages:
        cp_exposed = ep_comm = 0.0
        if arch.layers:
            head = (
                (params.lm_head or (arch.vocab * arch.hidden if arch.tied_embeddings and arch.kind == "decoder" else 0))
                if with_head
                else 0
            )
            layer_params = _layer_matmul_params(arch, params) / arch.layers
            matmul = tokens * (layers * layer_params * (6 + 2 * repeat) + 6 * head) / tp / rate
            if recompute == OP_SAC:  # the matrices whose outputs it did not save, forward again
                matmul += tokens * layers * 2 * op_sac_recomputed_params_per_layer(arch) / tp / rate
            local_params = (layers * layer_params + head) / tp
            if arch.is_moe:  # the GPU reads the experts it holds (E/ep; every one gets tokens), not the top-k
                routed = routed_expert_params(arch, params)
                active = routed * (arch.experts_per_token / arch.experts)
                local_params += layers * moe_layer_share(arch) * (routed / ep - active) / tp
            width = attention_width(arch) / tp
            score_flops = 4 * seq_len * width * tokens * layers  # forward QKᵀ and AV: local queries × all keys
            if flash_attention:
                kernel = (
                    score_flops
                    * CAUSAL_SHARE
                    * (1 + FLASH_BACKWARD_TO_FORWARD + (1 if recompute in ("selective", "full") else 0))
                )
                share = attention_kernel_fraction(gpu, attention_kernel)
                attention = kernel / (gpu.peak_flops_per_second(attention_dtype) * share)
            else:
                attention = score_flops * (3 + (1 if recompute in ("selective", "full") else 0)) / rate
            stored = activation_bytes_per_layer(
                arch, seq_len, micro_batch, tp, sequence_parallel, "none", flash_attention, cp
            )
            scores = 0.0 if flash_attention else 5 * arch.heads * seq_len * seq_len * micro_batch / (tp * cp)
            recomputed = {"none": 0.0, "selective": scores, "full": stored}.get(recompute, 0.0)
            if recompute == OP_SAC:  # what the block did not keep is written again
                recomputed = max(
                    0.0, stored - op_sac_bytes_per_layer(arch, seq_len, micro_batch, tp, sequence_parallel, cp)
                )
            passes = (FORWARD_PASSES + BACKWARD_PASSES) * stored + FORWARD_PASSES * recomputed
            logits = tokens * arch.vocab / tp * 4 * LOGIT_PASSES if arch.kind == "decoder" and with_head else 0.0
            memory = (layers * passes + logits) / hbm
            if cp > 1:  # the KV ring, hidden under the attention kernel where it can be; the all-gather is not
                cp_bandwidth = nvlink if tp * cp <= gpus_per_node else min(nvlink, nic)
                if cp_allgather:
                    cp_exposed = (
                        layers
                        * cp_allgather_bytes_per_layer(arch, seq_len, micro_batch, tp, cp, recompute)
                        / cp_bandwidth
                    )
                else:
                    ring = (
                        layers * cp_ring_bytes_per_layer(arch, seq_len, micro_batch, tp, cp, recompute) / cp_bandwidth
                    )
                    cp_exposed = max(0.0, ring - attention)
            if ep > 1 and arch.is_moe:  # EP ranks sit every tp·cp ranks: inside a node while ep·tp·cp fits
                ep_bandwidth = nvlink if ep * tp * cp <= gpus_per_node else min(nvlink, nic)
                ep_comm = (
                    layers
                    * moe_layer_share(arch)
                    * ep_all_to_all_bytes_per_layer(arch, tokens / tp, ep, recompute, ep_dispatch)
                    / ep_bandwidth
                )
        trainable = local_params if trainable_given is None else trainable_given
        weights = (
            WEIGHT_BYTES_16 * (WEIGHT_READS_PER_MICROBATCH + repeat + gathers) * local_params
            + GRADIENT_BYTES * GRADIENT_ACCESSES_PER_MICROBATCH * trainable
        ) / hbm
        per_microbatch = matmul + attention + memory + weights
        ep_comm = ep_exposed_seconds(ep_comm, per_microbatch, grad_accum, pp, ep_overlap)
        tp_comm = 0.0
        if tp > 1 and arch.layers:
            tp_bandwidth = nvlink if tp <= gpus_per_node else inter_node_bytes_per_second
            collectives = 4 + (2 if recompute in ("full", OP_SAC) else 0)
            tp_comm = collectives * layers * ring_allreduce_seconds(tokens * arch.hidden * 2, tp, tp_bandwidth)
        parts = (matmul, attention, memory, weights, per_microbatch, tp_comm, cp_exposed, ep_comm, trainable)
        if best is None or per_microbatch + sum(parts[5:8]) > best[4] + sum(best[5:8]):
            best = parts
    matmul, attention, memory, weights, per_microbatch, tp_comm, cp_comm, ep_comm, trainable = best
    stage_time = per_microbatch + tp_comm + cp_comm + ep_comm
    bubble = interleaved_bubble_fraction(pp, vp, grad_accum) * grad_accum * stage_time if pp > 1 else 0.0
    p2p = 0.0
    if pp > 1 and arch.layers:  # activations forward, gradients backward, v times per boundary (docstring)
        p2p_bytes = tokens * arch.hidden * 2 / (tp if sequence_parallel else 1)
        p2p = grad_accum * 2 * max(1, vp) * p2p_bytes / nic

    held = state_bytes_on_gpu
    optimizer = 2 * held / hbm
    offload = 0.0
    if offloaded_bytes:
        trainable = trainable_params_per_gpu or 0.0
        offload = (
            trainable * OFFLOAD_BYTES_PER_PARAM_OVER_PCIE / PCIE_BYTES_PER_SECOND
            + 2 * offloaded_bytes / CPU_ADAM_BYTES_PER_SECOND_PER_GPU
        )

    replica_bytes = gradient_bytes_per_replica if gradient_bytes_per_replica is not None else 0.0
    ranks = dp * cp  # CP ranks reduce their gradients with DP (train_layout docstring)
    shard = min(ranks, zero_shard_ranks or ranks)
    fractions = {"nvlink_fraction": nvlink_fraction, "nic_fraction": nic_fraction}
    dp_bandwidth, spans_nodes = dp_collective_bandwidth(
        gpu, tp, shard if zero_stage >= 3 else ranks, gpus_per_node, inter_node_bytes_per_second, **fractions
    )
    latency = inter_node_latency_seconds if spans_nodes else 0.0
    reduce_scale = reduce_bytes_per_gradient / GRADIENT_BYTES  # 2 when FSDP2 reduces in fp32 (docstring)
    if zero_stage >= 3 and reduce_once_per_step:  # m + 1 all-gathers, one reduce-scatter after the last backward
        gather = ring_allreduce_seconds(replica_bytes / 2, shard, dp_bandwidth, latency)
        reduce = ring_allreduce_seconds(replica_bytes * reduce_scale / 2, shard, dp_bandwidth, latency)
        dp_comm = step_gathers * gather + reduce
        exposed = step_gathers * max(0.0, gather - per_microbatch) + reduce  # nothing left to overlap the reduce
    elif zero_stage >= 3:  # two 16-bit all-gathers and a reduce-scatter in the reduce dtype, each half an all-reduce
        volume = ZERO3_VOLUME_FACTOR + (reduce_scale - 1) / 2
        per_mb = ring_allreduce_seconds(replica_bytes * volume, shard, dp_bandwidth, latency)
        dp_comm = per_mb * grad_accum
        exposed = grad_accum * max(0.0, per_mb - per_microbatch)
    else:
        dp_comm = ring_allreduce_seconds(replica_bytes, ranks, dp_bandwidth, latency)
        exposed = max(0.0, dp_comm - BACKWARD_SHARE_OF_COMPUTE * per_microbatch)
    if zero_stage >= 3 and shard < ranks:  # HSDP: the replicas all-reduce the gradient shard once per step
        replica_bandwidth, crosses = dp_collective_bandwidth(
            gpu, tp * shard, ranks // shard, gpus_per_node, inter_node_bytes_per_second, **fractions
        )
        replicas = ring_allreduce_seconds(
            replica_bytes * reduce_scale / shard,
            ranks // shard,
            replica_bandwidth,
            inter_node_latency_seconds if crosses else 0.0,
        )
        dp_comm += replicas
        exposed += max(0.0, replicas - BACKWARD_SHARE_OF_COMPUTE * per_microbatch)
    compute = grad_accum * per_microbatch + optimizer + offload
    total = compute + grad_accum * (tp_comm + cp_comm + ep_comm) + bubble + p2p + exposed
    return StepTime(
        compute=compute,
        tp_comm=grad_accum * tp_comm,
        pp_bubble=bubble,
        dp_comm_exposed=exposed,
        total=total,
        matmul=grad_accum * matmul,
        attention=grad_accum * attention,
        memory_bound=grad_accum * memory,
        optimizer=optimizer,
        offload=offload,
        dp_comm=dp_comm,
        weights=grad_accum * weights,
        cp_comm=grad_accum * cp_comm,
        ep_comm=grad_accum * ep_comm,
        pp_p2p=p2p,
    )


def job_mtbf_seconds(gpus: int, mtbf_gpu_hours: float | None = None) -> float:
    return (mtbf_gpu_hours or MTBF_GPU_HOURS) * 3600 / max(1, gpus)


def checkpoint_interval_seconds(checkpoint_write_seconds: float, job_mtbf: float) -> float:
    """Young–Daly optimum τ = √(2·δ·M)."""
    return math.sqrt(2 * max(checkpoint_write_seconds, 1e-3) * job_mtbf)


def _failures_and_checkpoints(
    gpus: int, checkpoint_write_seconds: float, mtbf_gpu_hours: float | None
) -> tuple[float, float, float]:
    """(seconds lost to failures and restarts, to checkpoint writes, per second of steps; the Young–Daly interval)."""
    mtbf = job_mtbf_seconds(gpus, mtbf_gpu_hours)
    delta = max(checkpoint_write_seconds, 1e-3)
    interval = checkpoint_interval_seconds(delta, mtbf)
    return (interval / 2 + RESTART_SECONDS) / mtbf, delta / interval, interval


def goodput(gpus: int, checkpoint_write_seconds: float, mtbf_gpu_hours: float | None = None) -> tuple[float, float]:
    """(share of wall time doing useful steps, checkpoint interval in seconds) with failures and checkpoints alone."""
    failures, checkpoints, interval = _failures_and_checkpoints(gpus, checkpoint_write_seconds, mtbf_gpu_hours)
    return 1 / (1 + failures + checkpoints), interval


@dataclass(frozen=True)
class WholeRun:
    """A run's wall time beyond its steady steps: each term the seconds it adds per second of steady steps."""

    goodput: float  # steady time ÷ wall time = 1 / (1 + failures + checkpoints + stragglers + evaluation)
    failures: float  # work lost since the last checkpoint and the restart, at the job's MTBF
    checkpoints: float  # synchronous checkpoint writes, δ/τ
    stragglers: float  # the slowest of the job's GPUs against the median one
    evaluation: float  # the framework's default evaluation passes
    checkpoint_interval_seconds: float


def straggler_slowdown(gpus: int) -> float:
    """σ·√(2 ln n): how far the slowest of n GPUs runs behind the median (STRAGGLER_SIGMA); 0 for one GPU."""
    return STRAGGLER_SIGMA * math.sqrt(2 * math.log(gpus)) if gpus > 1 else 0.0


def whole_run(
    gpus: int, checkpoint_write_seconds: float, framework: str = "", mtbf_gpu_hours: float | None = None
) -> WholeRun:
    """The whole-run terms of a job on `gpus` GPUs whose checkpoint takes `checkpoint_write_seconds` to write."""
    failures, checkpoints, interval = _failures_and_checkpoints(gpus, checkpoint_write_seconds, mtbf_gpu_hours)
    stragglers, evaluation = straggler_slowdown(gpus), EVALUATION_SHARE.get(framework, 0.0)
    share = 1 / (1 + failures + checkpoints + stragglers + evaluation)
    return WholeRun(share, failures, checkpoints, stragglers, evaluation, interval)
