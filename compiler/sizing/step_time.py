"""Training step time from the hardware, and wall time with failures and checkpoints.

* FLOPs per token (PaLM, Chowdhery et al. 2022, App. B): 6·N + 12·L·H·Q·T, N the active parameters that
  take part in matmuls (the input embedding is a lookup), H·Q = heads × head dim, T = sequence length.
  This is the numerator of MFU. Recompute adds hardware FLOPs only (HFU): full recompute repeats the
  forward (2·N + 4·L·H·Q·T), selective the attention core (4·L·H·Q·T) (Korthikanti et al. 2022 §5).
* Compute: FLOPs at the catalog's achievable share of the dense peak (measured large-GEMM rate), plus the
  memory-bound element-wise work: every stored activation byte is written once in the forward and read
  in the backward, and the backward writes gradients of the same size (×3), at the achievable HBM rate.
* Optimizer step: reads and writes weights, gradients and states once per step at the HBM rate.
* TP: Megatron does 2 all-reduces of s·b·h activations per layer in the forward and 2 in the backward
  (Shoeybi et al. 2019 §3), ring cost 2(t−1)/t × bytes over NVLink, on the critical path.
* PP: 1F1B bubble (p−1)/(m+p−1) of the step (Narayanan et al. 2021 §2.2).
* DP: ring all-reduce of the gradients 2(d−1)/d × bytes over the inter-node fabric (ZeRO-3 moves 1.5×,
  ZeRO paper §7); PyTorch DDP buckets overlap it with the backward pass (Li et al. 2020, VLDB), so only
  what exceeds the backward time (2/3 of compute) is exposed.
* Goodput: per-GPU MTBF from Llama 3 (Dubey et al. 2024, §3.3.4: 419 unexpected interruptions in 54 days
  on 16,384 H100s → 50,679 GPU-hours); checkpoint every Young-Daly τ = √(2·δ·M); the lost fraction is
  δ/τ + (τ/2 + restart)/M.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..catalog.params import ParamCounts
from ..catalog.types import Architecture, GpuSpec

MTBF_GPU_HOURS = 54 * 24 * 16384 / 419  # Llama 3 paper §3.3.4
# Restart after a failure: relaunch + checkpoint load; Llama 3 reports automated restarts within minutes
# (§3.3.4); 10 minutes is the figure used for the time limit's launch allowance as well.
RESTART_SECONDS = 600
BACKWARD_SHARE_OF_COMPUTE = 2 / 3  # backward is 4N of the 6N FLOPs per token
COMPUTE_DTYPE = {"fp32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
ELEMENTWISE_PASSES = 3  # forward write, backward read, gradient write
# CPU offload (ZeRO-Offload, Ren et al. 2021 §4): fp32 gradients go down and 16-bit weights come back over
# PCIe each step, and the CPU runs Adam over the offloaded states. PCIe 4.0 x16 is 32 GB/s per direction,
# ~25 GB/s achieved (NVIDIA bandwidthTest, pinned memory); one CPU socket streams ~100 GB/s of DDR
# (8 channels DDR4-3200 = 204.8 GB/s peak, ~50% in STREAM) shared by the 4 GPUs attached to it.
PCIE_BYTES_PER_SECOND = 25e9
CPU_ADAM_BYTES_PER_SECOND_PER_GPU = 100e9 / 4
OFFLOAD_BYTES_PER_PARAM_OVER_PCIE = 4 + 2


@dataclass(frozen=True)
class StepTime:
    compute: float
    tp_comm: float
    pp_bubble: float
    dp_comm_exposed: float
    total: float


def model_flops_per_token(arch: Architecture, params: ParamCounts, seq_len: int) -> float:
    matmul_params = params.active - (params.embedding - params.lm_head)
    attention = 12 * arch.layers * arch.heads * arch.attention_head_dim * seq_len
    return 6 * matmul_params + attention


def hardware_flops_per_token(arch: Architecture, params: ParamCounts, seq_len: int, recompute: str) -> float:
    attention_forward = 4 * arch.layers * arch.heads * arch.attention_head_dim * seq_len
    extra = {"none": 0.0, "selective": attention_forward,
             "full": 2 * (params.active - (params.embedding - params.lm_head)) + attention_forward}[recompute]
    return model_flops_per_token(arch, params, seq_len) + extra


def ring_allreduce_seconds(bytes_: float, ranks: int, bandwidth: float, latency: float = 0.0) -> float:
    if ranks <= 1 or bytes_ <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * bytes_ / bandwidth + 2 * (ranks - 1) * latency


def step_time(arch: Architecture, params: ParamCounts, gpu: GpuSpec, *, precision: str, seq_len: int, micro_batch: int,
              grad_accum: int, tp: int, pp: int, dp: int, zero_stage: int, recompute: str, activation_bytes: float,
              offloaded_bytes: float, trainable_params_per_gpu: float,
              state_bytes: float, gradient_bytes_per_gpu: float, inter_node_bytes_per_second: float,
              inter_node_latency: float, gpus_per_node: int) -> StepTime:
    dtype = COMPUTE_DTYPE[precision]
    rate = gpu.peak_flops_per_second(dtype) * gpu.achievable_matmul_fraction
    hbm = gpu.memory_bandwidth_bytes_per_second * gpu.achievable_memory_bandwidth_fraction
    flops = hardware_flops_per_token(arch, params, seq_len, recompute) * seq_len * micro_batch * grad_accum / (tp * pp)
    elementwise = ELEMENTWISE_PASSES * activation_bytes * grad_accum / hbm
    optimizer = 2 * state_bytes / hbm
    offload = 0.0
    if offloaded_bytes:
        offload = (trainable_params_per_gpu * OFFLOAD_BYTES_PER_PARAM_OVER_PCIE / PCIE_BYTES_PER_SECOND
                    + 2 * offloaded_bytes / CPU_ADAM_BYTES_PER_SECOND_PER_GPU)
    compute = flops / rate + elementwise + optimizer + offload
    activation_msg = seq_len * micro_batch * arch.hidden * 2
    layers_on_stage = -(-arch.layers // pp)
    tp_bandwidth = gpu.intra_node_bandwidth_bytes_per_second if tp <= gpus_per_node else inter_node_bytes_per_second
    tp_comm = 4 * layers_on_stage * grad_accum * ring_allreduce_seconds(activation_msg, tp, tp_bandwidth) if tp > 1 else 0.0
    bubble = (pp - 1) / (grad_accum + pp - 1) if pp > 1 else 0.0
    busy = compute + tp_comm
    pp_bubble = busy * bubble / (1 - bubble) if bubble else 0.0
    volume = gradient_bytes_per_gpu * (1.5 if zero_stage == 3 else 1.0)
    dp_bandwidth = inter_node_bytes_per_second if dp * tp * pp > gpus_per_node else gpu.intra_node_bandwidth_bytes_per_second
    dp_comm = ring_allreduce_seconds(volume, dp, dp_bandwidth, inter_node_latency)
    exposed = max(0.0, dp_comm - BACKWARD_SHARE_OF_COMPUTE * compute)
    return StepTime(compute, tp_comm, pp_bubble, exposed, compute + tp_comm + pp_bubble + exposed)


def goodput(gpus: int, checkpoint_write_seconds: float, mtbf_gpu_hours: float | None = None) -> tuple[float, float]:
    """(goodput share, Young-Daly checkpoint interval in seconds) for a job on `gpus` GPUs."""
    job_mtbf = (mtbf_gpu_hours or MTBF_GPU_HOURS) * 3600 / gpus
    delta = max(checkpoint_write_seconds, 1e-3)
    interval = math.sqrt(2 * delta * job_mtbf)
    lost = delta / interval + (interval / 2 + RESTART_SECONDS) / job_mtbf
    return 1 / (1 + lost), interval
