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
from typing import NamedTuple

from ...catalog.params import ParamCounts
from ...catalog.types import Architecture, GpuSpec
from ..cnn.layers import table_for
from ..cnn.train import training_batch_time, transposes
from .activations import (
    OP_SAC,
    activation_bytes_per_layer,
    cnn_activation_bytes,
    cnn_element_bytes,
    op_sac_bytes_per_layer,
    op_sac_recomputed_params_per_layer,
    recompute_kind,
)
from .layout import Layout, Links, Workload
from .memory import NF4_BITS_PER_PARAM
from .parallel import (
    cp_allgather_bytes_per_layer,
    cp_by_allgather,
    cp_ring_bytes_per_layer,
    ep_all_to_all_bytes_per_layer,
    ep_exposed_seconds,
    interleaved_bubble_fraction,
    moe_layer_share,
    routed_expert_params,
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
# GEMM FLOPs per parameter per token: forward 2, backward 2 for the input gradient and 2 for the weight gradient
# (Kaplan et al. 2020 §2.1; Narayanan et al. 2021 §3.5). A frozen base (LoRA, QLoRA) skips the weight gradients: 4
# (Hu et al. 2021, LoRA §4.2: "we do not need to calculate the gradients for the vast majority of the parameters";
# PEFT and torchtune set requires_grad=False on the base, so autograd computes no dW), while the adapters pay 6.
FULL_FLOPS_PER_PARAM = 6
FROZEN_FLOPS_PER_PARAM = 4
# A QLoRA base is dequantised before every GEMM that reads it: bitsandbytes' MatMul4Bit runs dequantize_4bit in its
# forward and again for the input gradient in its backward (bitsandbytes/autograd/_functions.py), reading the NF4
# codes with their absmax and writing the 16-bit copy the GEMM then reads (Dettmers et al. 2023, QLoRA §3).
DEQUANT_BYTES_PER_PARAM = NF4_BITS_PER_PARAM / 8 + 2
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


def frozen_base_flops_saved_per_token(arch: Architecture, params: ParamCounts, adapter_params: float) -> float:
    """What a frozen base (LoRA, QLoRA) takes off 6·N: the base's weight gradients, less the adapters' own 6 FLOPs
    per parameter."""
    frozen = (FULL_FLOPS_PER_PARAM - FROZEN_FLOPS_PER_PARAM) * matmul_params(arch, params)
    return frozen - FULL_FLOPS_PER_PARAM * adapter_params


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


@dataclass(frozen=True)
class StepTraffic:
    """What a layout's memory breakdown and framework say one step moves and updates, beyond the layout itself
    (candidate.layout_step_time derives it): the states the optimizer reads on the GPU and on the host, the
    parameters trained, and the bytes one replica reduces, at what width and how often."""

    state_bytes_on_gpu: float = 0.0
    offloaded_bytes: float = 0.0
    trainable_params_per_gpu: float | None = None
    trainable_params_per_replica: float | None = None
    gradient_bytes_per_replica: float | None = None
    reduce_bytes_per_gradient: float = GRADIENT_BYTES
    reduce_once_per_step: bool = False  # FSDP2 stages under pipelining (memory.pipeline_without_sync)


class _Rates(NamedTuple):
    """The achievable rates a step runs at on one GPU and its links (bytes/s, FLOP/s)."""

    matmul: float
    attention_dtype: str
    hbm: float
    nvlink: float
    nic: float


def _rates(work: Workload, gpu: GpuSpec, links: Links) -> _Rates:
    return _Rates(
        matmul_flops_per_second(gpu, compute_dtype(work.precision, gpu)),
        ATTENTION_DTYPE[work.precision],
        gpu.memory_bandwidth_bytes_per_second * gpu.achievable_memory_bandwidth_fraction,
        gpu.intra_node_bandwidth_bytes_per_second * links.nvlink_fraction,
        links.inter_node_bytes_per_second * links.nic_fraction,
    )


class _Stage(NamedTuple):
    """Seconds of one micro-batch on a pipeline stage, term by term."""

    matmul: float
    attention: float
    memory: float
    weights: float
    per_microbatch: float
    tp_comm: float
    cp_comm: float
    ep_comm: float

    @property
    def busy(self) -> float:
        return self.per_microbatch + sum((self.tp_comm, self.cp_comm, self.ep_comm))


def _tokens(work: Workload, layout: Layout) -> float:
    """Tokens one GPU computes per micro-batch: its sequences' s/CP."""
    return work.seq_len * layout.micro_batch / layout.cp


def _cnn_terms(work: Workload, layout: Layout, gpu: GpuSpec, rates: _Rates) -> tuple[float, float, float]:
    """(matmul, memory, parameters) of a model without transformer structure: FLOPs at the GEMM rate, or kernel by
    kernel from its layer table (cnn/train.py: convolutions as matmul, batch norm / activation / add as memory)."""
    arch, params, lay = work.arch, work.params, layout
    tokens = _tokens(work, lay)
    matmul = model_flops_per_token(arch, params, work.seq_len) * tokens / lay.tp / rates.matmul
    table = table_for(arch)
    if table:
        dtype = compute_dtype(work.precision, gpu)
        element = cnn_element_bytes(work.precision)
        cnn = training_batch_time(
            table, lay.micro_batch, rates.matmul, rates.hbm, element, transposes(work.precision, dtype)
        )
        matmul, memory = cnn.convolution_seconds / lay.tp, cnn.elementwise_seconds / lay.tp
    else:  # the catalog's activations per sample, streamed as a transformer layer's (5 passes)
        stored = cnn_activation_bytes(arch, work.precision, lay.micro_batch)
        memory = (FORWARD_PASSES + BACKWARD_PASSES) * stored / lay.tp / rates.hbm
    return matmul, memory, params.active / lay.tp


def _recompute(layout: Layout) -> str:
    return recompute_kind(layout.recompute, layout.framework)


def _stage_params(work: Workload, layout: Layout, layers: int, with_head: bool) -> tuple[float, float, float]:
    """(matrix parameters per layer, LM head parameters on this stage, parameters one GPU of the stage reads)."""
    arch, params, lay = work.arch, work.params, layout
    head = 0
    if with_head:
        tied = arch.vocab * arch.hidden if arch.tied_embeddings and arch.kind == "decoder" else 0
        head = params.lm_head or tied
    layer_params = _layer_matmul_params(arch, params) / arch.layers
    local_params = (layers * layer_params + head) / lay.tp
    if arch.is_moe:  # the GPU reads the experts it holds (E/ep; every one gets tokens), not the top-k
        routed = routed_expert_params(arch, params)
        active = routed * (arch.experts_per_token / arch.experts)
        local_params += layers * moe_layer_share(arch) * (routed / lay.ep - active) / lay.tp
    return layer_params, head, local_params


def _matmul_seconds(
    work: Workload, layout: Layout, rates: _Rates, stage: tuple[int, bool], adapters: float | None
) -> float:
    """6 FLOPs per parameter per token (forward 2, backward 4; a frozen base 4, its `adapters` per GPU 6), 2 more per
    recomputed forward."""
    lay, tokens, (layers, with_head) = layout, _tokens(work, layout), stage
    layer_params, head, _ = _stage_params(work, lay, layers, with_head)
    repeat = 1 if _recompute(lay) == "full" else 0  # the forward again
    frozen = work.method != "full"
    base = FROZEN_FLOPS_PER_PARAM if frozen else FULL_FLOPS_PER_PARAM
    matmul = tokens * (layers * layer_params * (base + 2 * repeat) + base * head) / lay.tp / rates.matmul
    if frozen and adapters:  # the adapters' own GEMMs: forward and both backward products
        matmul += tokens * FULL_FLOPS_PER_PARAM * adapters / rates.matmul
    if _recompute(lay) == OP_SAC:  # the matrices whose outputs it did not save, forward again
        matmul += tokens * layers * 2 * op_sac_recomputed_params_per_layer(work.arch) / lay.tp / rates.matmul
    return matmul


def _attention_seconds(work: Workload, layout: Layout, gpu: GpuSpec, rates: _Rates, layers: int) -> float:
    """Scores and the weighted sum: local queries × all keys; in flash kernels at their share of the peak, the causal
    half skipped, the backward 2.5 forwards and a recompute one more; else at the GEMM rate."""
    lay, tokens = layout, _tokens(work, layout)
    recomputes = _recompute(lay) in ("selective", "full")
    width = attention_width(work.arch) / lay.tp
    score_flops = 4 * work.seq_len * width * tokens * layers  # forward QKᵀ and AV: local queries × all keys
    if work.flash_attention:
        kernel = score_flops * CAUSAL_SHARE * (1 + FLASH_BACKWARD_TO_FORWARD + (1 if recomputes else 0))
        share = attention_kernel_fraction(gpu, work.attention_kernel)
        return kernel / (gpu.peak_flops_per_second(rates.attention_dtype) * share)
    return score_flops * (3 + (1 if recomputes else 0)) / rates.matmul


def _memory_bound_seconds(work: Workload, layout: Layout, rates: _Rates, layers: int, with_head: bool) -> float:
    """Activations written and read around the kernels (5 passes, and the recomputed ones again), and the fp32 logits."""
    arch, lay, recompute = work.arch, layout, _recompute(layout)
    shape = (arch, work.seq_len, lay.micro_batch, lay.tp, lay.sequence_parallel)
    stored = activation_bytes_per_layer(*shape, "none", work.flash_attention, lay.cp)
    scores = (
        0.0
        if work.flash_attention
        else 5 * arch.heads * work.seq_len * work.seq_len * lay.micro_batch / (lay.tp * lay.cp)
    )
    recomputed = {"none": 0.0, "selective": scores, "full": stored}.get(recompute, 0.0)
    if recompute == OP_SAC:  # what the block did not keep is written again
        recomputed = max(0.0, stored - op_sac_bytes_per_layer(*shape, lay.cp))
    passes = (FORWARD_PASSES + BACKWARD_PASSES) * stored + FORWARD_PASSES * recomputed
    tokens = _tokens(work, lay)
    logits = tokens * arch.vocab / lay.tp * 4 * LOGIT_PASSES if arch.kind == "decoder" and with_head else 0.0
    return (layers * passes + logits) / rates.hbm


def _cp_exposed_seconds(
    work: Workload, layout: Layout, links: Links, rates: _Rates, layers: int, attention: float
) -> float:
    """CP's K/V exchange: the ring hidden under the attention kernel where it can be; the all-gather (the FSDP2
    script) whole."""
    lay, recompute = layout, _recompute(layout)
    if lay.cp <= 1:
        return 0.0
    bandwidth = rates.nvlink if lay.tp * lay.cp <= links.gpus_per_node else min(rates.nvlink, rates.nic)
    shape = (work.arch, work.seq_len, lay.micro_batch, lay.tp, lay.cp, recompute)
    if cp_by_allgather(lay.framework):
        return layers * cp_allgather_bytes_per_layer(*shape) / bandwidth
    return max(0.0, layers * cp_ring_bytes_per_layer(*shape) / bandwidth - attention)


def _ep_seconds(work: Workload, layout: Layout, links: Links, rates: _Rates, layers: int) -> float:
    """EP all-to-alls (dispatch and combine) of the MoE layers; EP ranks sit every tp·cp ranks: inside a node while
    ep·tp·cp fits."""
    arch, lay = work.arch, layout
    if lay.ep <= 1 or not arch.is_moe:
        return 0.0
    bandwidth = rates.nvlink if lay.ep * lay.tp * lay.cp <= links.gpus_per_node else min(rates.nvlink, rates.nic)
    volume = ep_all_to_all_bytes_per_layer(arch, _tokens(work, lay) / lay.tp, lay.ep, _recompute(lay), lay.ep_dispatch)
    return layers * moe_layer_share(arch) * volume / bandwidth


def _tp_comm_seconds(work: Workload, layout: Layout, links: Links, rates: _Rates, layers: int) -> float:
    """4 all-reduces of the activations per layer (2 forward, 2 backward), 2 more with a recomputed forward."""
    lay = layout
    if lay.tp <= 1 or not work.arch.layers:
        return 0.0
    bandwidth = rates.nvlink if lay.tp <= links.gpus_per_node else links.inter_node_bytes_per_second
    collectives = 4 + (2 if _recompute(lay) in ("full", OP_SAC) else 0)
    size = _tokens(work, lay) * work.arch.hidden * 2
    return collectives * layers * ring_allreduce_seconds(size, lay.tp, bandwidth)


def _zero3_gathers(work: Workload, layout: Layout, traffic: StepTraffic) -> float:
    """16-bit weight all-gathers per micro-batch at ZeRO-3 across DP: 2, or m + 1 a step under FSDP2 pipelining."""
    lay = layout
    if lay.zero < 3 or lay.dp <= 1:
        return 0
    microbatches = lay.microbatches(work)
    if traffic.reduce_once_per_step:
        return pipeline_gathers_per_step(microbatches, work.memory.reshard_after_forward) / microbatches
    return ZERO3_GATHERS_PER_MICROBATCH


def _stage_time(
    work: Workload, lay: Layout, gpu: GpuSpec, links: Links, traffic: StepTraffic, stage: tuple[int, bool]
) -> _Stage:
    """One micro-batch on a stage of `layers` layers (`with_head`: the last), term by term."""
    arch, rates = work.arch, _rates(work, gpu, links)
    layers, with_head = stage
    cp = ep = 0.0
    repeat = 1 if _recompute(lay) == "full" else 0
    if not arch.layers or arch.kind == "cnn":
        matmul, memory, local_params = _cnn_terms(work, lay, gpu, rates)
        attention, repeat = 0.0, 0
    if arch.layers:
        matmul = _matmul_seconds(work, lay, rates, stage, traffic.trainable_params_per_replica)
        local_params = _stage_params(work, lay, layers, with_head)[2]
        attention = _attention_seconds(work, lay, gpu, rates, layers)
        memory = _memory_bound_seconds(work, lay, rates, layers, with_head)
        cp = _cp_exposed_seconds(work, lay, links, rates, layers, attention)
        ep = _ep_seconds(work, lay, links, rates, layers)
    given = traffic.trainable_params_per_replica
    trainable = local_params if given is None else given
    reads = WEIGHT_READS_PER_MICROBATCH + repeat + _zero3_gathers(work, lay, traffic)
    dequant = DEQUANT_BYTES_PER_PARAM * (WEIGHT_READS_PER_MICROBATCH + repeat) if work.method == "qlora" else 0.0
    weights = (WEIGHT_BYTES_16 * reads + dequant) * local_params
    weights += GRADIENT_BYTES * GRADIENT_ACCESSES_PER_MICROBATCH * trainable
    weights /= rates.hbm
    per_microbatch = matmul + attention + memory + weights
    ep = ep_exposed_seconds(ep, per_microbatch, lay.microbatches(work), lay.pp, lay.ep_overlap)
    tp = _tp_comm_seconds(work, lay, links, rates, layers)
    return _Stage(matmul, attention, memory, weights, per_microbatch, tp, cp, ep)


def _stages(work: Workload, layout: Layout) -> list[tuple[int, bool]]:
    """(layers, with the head) of the stages that set the stage time: the busiest without the head and the last."""
    arch, pp = work.arch, layout.pp
    if arch.kind == "cnn" or not arch.layers:
        return [(0, False)]
    split = layout.stage_layers or (_ceil_div(arch.layers, pp),) * pp
    return [(max(split[:-1]), False), (split[-1], True)] if pp > 1 else [(split[0], True)]


def _pipeline_seconds(work: Workload, layout: Layout, links: Links, stage_seconds: float) -> tuple[float, float]:
    """(bubble, point-to-point): the interleaved 1F1B bubble, and activations forward and gradients backward, v times
    per boundary."""
    lay = layout
    if lay.pp <= 1:
        return 0.0, 0.0
    microbatches = lay.microbatches(work)
    bubble = interleaved_bubble_fraction(lay.pp, lay.vp, microbatches) * microbatches * stage_seconds
    if not work.arch.layers:
        return bubble, 0.0
    p2p_bytes = _tokens(work, lay) * work.arch.hidden * 2 / (lay.tp if lay.sequence_parallel else 1)
    nic = links.inter_node_bytes_per_second * links.nic_fraction
    return bubble, microbatches * 2 * max(1, lay.vp) * p2p_bytes / nic


def _optimizer_seconds(traffic: StepTraffic, hbm: float) -> tuple[float, float]:
    """(optimizer on the GPU: its states read and written once; offload: gradients and updated weights over PCIe and
    the CPU Adam over the host states)."""
    optimizer = 2 * traffic.state_bytes_on_gpu / hbm
    if not traffic.offloaded_bytes:
        return optimizer, 0.0
    trainable = traffic.trainable_params_per_gpu or 0.0
    offload = (
        trainable * OFFLOAD_BYTES_PER_PARAM_OVER_PCIE / PCIE_BYTES_PER_SECOND
        + 2 * traffic.offloaded_bytes / CPU_ADAM_BYTES_PER_SECOND_PER_GPU
    )
    return optimizer, offload


def _dp_seconds(
    work: Workload, layout: Layout, gpu: GpuSpec, links: Links, traffic: StepTraffic, per_microbatch: float
) -> tuple[float, float]:
    """(DP collectives a step, what of them the backward does not hide): ZeRO-3's all-gathers and reduce-scatters
    per micro-batch (once a step under FSDP2 pipelining), else one all-reduce overlapped with the last backward; HSDP
    adds the replicas' all-reduce of the gradient shard."""
    lay, microbatches = layout, layout.microbatches(work)
    replica_bytes = traffic.gradient_bytes_per_replica if traffic.gradient_bytes_per_replica is not None else 0.0
    ranks = lay.data_ranks  # CP ranks reduce their gradients with DP (parallel.py docstring)
    shard = min(ranks, lay.shard_group or ranks)
    fractions = {"nvlink_fraction": links.nvlink_fraction, "nic_fraction": links.nic_fraction}
    group = shard if lay.zero >= 3 else ranks
    nic = links.inter_node_bytes_per_second
    bandwidth, spans_nodes = dp_collective_bandwidth(gpu, lay.tp, group, links.gpus_per_node, nic, **fractions)
    latency = links.inter_node_latency_seconds if spans_nodes else 0.0
    reduce_scale = traffic.reduce_bytes_per_gradient / GRADIENT_BYTES  # 2 when FSDP2 reduces in fp32 (docstring)
    if lay.zero >= 3 and traffic.reduce_once_per_step:  # m + 1 all-gathers, one reduce-scatter after the last backward
        step_gathers = pipeline_gathers_per_step(microbatches, work.memory.reshard_after_forward)
        gather = ring_allreduce_seconds(replica_bytes / 2, shard, bandwidth, latency)
        reduce = ring_allreduce_seconds(replica_bytes * reduce_scale / 2, shard, bandwidth, latency)
        dp_comm = step_gathers * gather + reduce
        exposed = step_gathers * max(0.0, gather - per_microbatch) + reduce  # nothing left to overlap the reduce
    elif lay.zero >= 3:  # two 16-bit all-gathers and a reduce-scatter in the reduce dtype, each half an all-reduce
        volume = ZERO3_VOLUME_FACTOR + (reduce_scale - 1) / 2
        per_mb = ring_allreduce_seconds(replica_bytes * volume, shard, bandwidth, latency)
        dp_comm = per_mb * microbatches
        exposed = microbatches * max(0.0, per_mb - per_microbatch)
    else:
        dp_comm = ring_allreduce_seconds(replica_bytes, ranks, bandwidth, latency)
        exposed = max(0.0, dp_comm - BACKWARD_SHARE_OF_COMPUTE * per_microbatch)
    if lay.zero >= 3 and shard < ranks:  # HSDP: the replicas all-reduce the gradient shard once per step
        replica_bandwidth, crosses = dp_collective_bandwidth(
            gpu, lay.tp * shard, ranks // shard, links.gpus_per_node, nic, **fractions
        )
        replicas = ring_allreduce_seconds(
            replica_bytes * reduce_scale / shard,
            ranks // shard,
            replica_bandwidth,
            links.inter_node_latency_seconds if crosses else 0.0,
        )
        dp_comm += replicas
        exposed += max(0.0, replicas - BACKWARD_SHARE_OF_COMPUTE * per_microbatch)
    return dp_comm, exposed


def step_time(work: Workload, layout: Layout, gpu: GpuSpec, links: Links, traffic: StepTraffic) -> StepTime:
    """One optimizer step on the slowest GPU: the layout's micro-batches (global batch ÷ micro-batch ÷ DP) through
    its TP×CP×PP×DP split (EP inside DP; the stage split, default ⌈L/p⌉; ZeRO-3 over the HSDP group when smaller than
    DP); `links`: the achieved shares of the intra-node link and the NICs (a site's measured ones); CP by all-gather
    under the FSDP2 script (parallel.py docstring), not overlapped with compute; `traffic.reduce_once_per_step`:
    FSDP2 stages under torch.distributed.pipelining (memory.pipeline_without_sync), whose all-gathers depend on
    reshard_after_forward (pipeline_gathers_per_step)."""
    lay, m = layout, layout.microbatches(work)
    stages = [_stage_time(work, lay, gpu, links, traffic, stage) for stage in _stages(work, lay)]
    best = stages[0]
    for stage in stages[1:]:  # the slower sets the stage time (the first of equals)
        if stage.busy > best.busy:
            best = stage
    stage_seconds = best.per_microbatch + best.tp_comm + best.cp_comm + best.ep_comm
    bubble, p2p = _pipeline_seconds(work, lay, links, stage_seconds)
    optimizer, offload = _optimizer_seconds(traffic, _rates(work, gpu, links).hbm)
    dp_comm, exposed = _dp_seconds(work, lay, gpu, links, traffic, best.per_microbatch)
    compute = m * best.per_microbatch + optimizer + offload
    total = compute + m * (best.tp_comm + best.cp_comm + best.ep_comm) + bubble + p2p + exposed
    return StepTime(
        compute=compute,
        tp_comm=m * best.tp_comm,
        pp_bubble=bubble,
        dp_comm_exposed=exposed,
        total=total,
        matmul=m * best.matmul,
        attention=m * best.attention,
        memory_bound=m * best.memory,
        optimizer=optimizer,
        offload=offload,
        dp_comm=dp_comm,
        weights=m * best.weights,
        cp_comm=m * best.cp_comm,
        ep_comm=m * best.ep_comm,
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
