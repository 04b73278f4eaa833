"""Training step time from the hardware: one optimizer step on the slowest GPU, term by term.

FLOPs per token and the GEMM and attention rates are in flops.py; the collectives and the communication terms in
communication.py; wall time with failures and checkpoints in goodput.py.

A CNN with a layer table is timed kernel by kernel instead (cnn_train.py: its convolutions' forward, data- and
weight-gradient kernels as `matmul`, batch norm / activation / add kernels as `memory`); the weight, optimizer and DP
terms below apply to it as to a transformer.

Time of one micro-batch on the slowest pipeline stage (the last: ⌈L/p⌉ layers + the LM head and loss):
* GEMMs: their FLOPs at `gpu.achievable_matmul_fraction` × the dense peak of the compute dtype (measured
  large-GEMM rate, catalog); fp8 GEMMs at no more than FP8_GEMM_MATMUL_FRACTION (DeepGEMM's measured share).
* Attention core: with flash attention, the kernel's FLOPs — forward 4·s²·d per head, backward 2.5× that
  (five GEMMs against two, Dao 2023 §3), half of it under a causal mask — at the kernel's measured share of
  peak (ATTENTION_KERNEL_FRACTION; the older Triton kernel TRITON_FLASH_SLOWDOWN times slower); without it,
  the full s×s score GEMMs at the GEMM rate, and the softmax (and with dropout the dropout) over the scores as
  memory traffic (next item).
* Memory-bound kernels (norms, activations, dropout, residual adds, rotary, softmax without flash): every
  activation byte Korthikanti et al. count is written by one kernel and read by the next in the forward
  (2 passes), and in the backward it is read once while its gradient is written and read (3 passes):
  5 passes at the achievable HBM rate; recompute repeats the forward passes of what it recomputes. The
  bytes are memory.py's, under the same dropout decision (`Workload.dropout`, activations.stores_dropout_masks):
  with dropout 0 no kernel writes a mask and the scores' dropout does not run (ATen's dropout returns its input at
  p = 0, activations.py docstring), so Table 2's layer moves s·b·h·(32 + 2·a·s/h) bytes per pass, not
  (34 + 5·a·s/h), and selective recompute repeats the softmax's 2·a·s²·b, not 5. The fp32 logits are written,
  read by the loss, and their gradient written and read (4 passes).
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
* Multi-token prediction, where the framework trains it (layout.MTP_FRAMEWORKS, Megatron-LM: on the last stage,
  megatron/core/transformer/multi_token_prediction.py `mtp_on_this_rank`): per module one more layer on the last stage
  in every term above (GEMMs with its 2d → d projection, attention, memory-bound kernels, TP, CP, EP as one MoE layer,
  weights read), and one more pass of the shared output head and its fp32 logits for the module's own loss.
* Optimizer: reads and writes the states a GPU holds once per step at the HBM rate; CPU offload moves
  gradients down and weights up over PCIe and runs Adam at the host's memory bandwidth (ZeRO-Offload, Ren
  et al. 2021 §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ...catalog.types import GpuSpec
from ..cnn.layers import table_for
from ..cnn.train import training_batch_time, transposes
from .activations import (
    OP_SAC,
    LayerShape,
    activation_bytes_per_layer,
    cnn_activation_bytes,
    cnn_element_bytes,
    op_sac_bytes_per_layer,
    op_sac_recomputed_params_per_layer,
    score_bytes_per_element,
    stores_dropout_masks,
)
from .communication import cp_exposed_seconds, dp_seconds, ep_seconds, pipeline_seconds, tp_comm_seconds, zero3_gathers
from .flops import (
    FROZEN_FLOPS_PER_PARAM,
    FULL_FLOPS_PER_PARAM,
    attention_kernel_fraction,
    attention_width,
    compute_dtype,
    layer_matmul_params,
    model_flops_per_token,
    mtp_module_matmul_params,
    output_head_params,
)
from .layout import Layout, Links, Workload
from .model_states import NF4_BITS_PER_PARAM
from .parallel import (
    ep_exposed_seconds,
    moe_layer_share,
    routed_expert_params,
)
from .step_rates import GRADIENT_BYTES, Rates, StepTraffic, achievable_rates, layout_recompute, microbatch_tokens

FLASH_BACKWARD_TO_FORWARD = 2.5  # Dao 2023 §3.1: the backward runs 5 GEMMs to the forward's 2
CAUSAL_SHARE = 0.5  # a causal kernel skips the masked half of the score matrix
FORWARD_PASSES = 2  # an activation written by one kernel and read by the next
BACKWARD_PASSES = 3  # the saved activation read, its gradient written and read
LOGIT_PASSES = 4  # fp32 logits written, read by the loss, gradient written, read by the head's backward

# Weights and gradients cross HBM on every micro-batch (the roofline's operands, Williams et al. 2009): each
# GEMM weight is read by the forward and by the backward's data-gradient GEMM (and by a full-recompute forward
# again); each trainable weight's 16-bit gradient is written, then read and written into the accumulation buffer.
WEIGHT_READS_PER_MICROBATCH = 2
GRADIENT_ACCESSES_PER_MICROBATCH = 3

# A QLoRA base is dequantised before every GEMM that reads it: bitsandbytes' MatMul4Bit runs dequantize_4bit in its
# forward and again for the input gradient in its backward (bitsandbytes/autograd/_functions.py), reading the NF4
# codes with their absmax and writing the 16-bit copy the GEMM then reads (Dettmers et al. 2023, QLoRA §3).
DEQUANT_BYTES_PER_PARAM = NF4_BITS_PER_PARAM / 8 + 2

WEIGHT_BYTES_16 = 2  # the 16-bit working copy the GEMMs read (fp8 recipes cast it per GEMM)
# CPU offload (ZeRO-Offload, Ren et al. 2021 §4): fp32 gradients go down and 16-bit weights come back over
# PCIe each step, and the CPU runs Adam over the offloaded states. PCIe 4.0 x16 is 32 GB/s per direction,
# ~25 GB/s achieved (NVIDIA bandwidthTest, pinned memory); one CPU socket streams ~100 GB/s of DDR
# (8 channels DDR4-3200 = 204.8 GB/s peak, ~50% in STREAM) shared by the 4 GPUs attached to it.
PCIE_BYTES_PER_SECOND = 25e9
CPU_ADAM_BYTES_PER_SECOND_PER_GPU = 100e9 / 4
OFFLOAD_BYTES_PER_PARAM_OVER_PCIE = 4 + 2


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


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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


def _cnn_terms(work: Workload, layout: Layout, gpu: GpuSpec, rates: Rates) -> tuple[float, float, float]:
    """(matmul, memory, parameters) of a model without transformer structure: FLOPs at the GEMM rate, or kernel by
    kernel from its layer table (cnn/train.py: convolutions as matmul, batch norm / activation / add as memory)."""
    arch, params, lay = work.arch, work.params, layout
    tokens = microbatch_tokens(work, lay)
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


def _stage_mtp(work: Workload, layout: Layout, with_head: bool) -> int:
    """MTP modules on this stage: the last one's, where the framework trains them (layout.MTP_FRAMEWORKS)."""
    return layout.mtp_layers(work) if with_head else 0


def _stage_params(work: Workload, layout: Layout, layers: int, with_head: bool) -> tuple[float, float, float]:
    """(matrix parameters per layer, LM head parameters on this stage, parameters one GPU of the stage reads); the
    last stage's MTP modules read their layer and projection (flops.mtp_module_matmul_params)."""
    arch, params, lay = work.arch, work.params, layout
    head = output_head_params(arch, params) if with_head else 0
    mtp = _stage_mtp(work, lay, with_head)
    layer_params = layer_matmul_params(arch, params) / arch.layers
    local_params = (layers * layer_params + head + mtp * mtp_module_matmul_params(arch, params)) / lay.tp
    if arch.is_moe:  # the GPU reads the experts it holds (E/ep; every one gets tokens), not the top-k
        routed = routed_expert_params(arch, params)
        active = routed * (arch.experts_per_token / arch.experts)
        local_params += (layers * moe_layer_share(arch) + mtp) * (routed / lay.ep - active) / lay.tp
    return layer_params, head, local_params


def _matmul_seconds(
    work: Workload, layout: Layout, rates: Rates, stage: tuple[int, bool], adapters: float | None
) -> float:
    """6 FLOPs per parameter per token (forward 2, backward 4; a frozen base 4, its `adapters` per GPU 6), 2 more per
    recomputed forward."""
    lay, tokens, (layers, with_head) = layout, microbatch_tokens(work, layout), stage
    layer_params, head, _ = _stage_params(work, lay, layers, with_head)
    repeat = 1 if layout_recompute(lay) == "full" else 0  # the forward again
    frozen = work.method != "full"
    base = FROZEN_FLOPS_PER_PARAM if frozen else FULL_FLOPS_PER_PARAM
    matmul = tokens * (layers * layer_params * (base + 2 * repeat) + base * head) / lay.tp / rates.matmul
    mtp = _stage_mtp(work, lay, with_head)  # each module: its layer and projection (recomputed as layers are), the head
    module = mtp_module_matmul_params(work.arch, work.params)
    matmul += tokens * mtp * (module * (base + 2 * repeat) + base * head) / lay.tp / rates.matmul
    if frozen and adapters:  # the adapters' own GEMMs: forward and both backward products
        matmul += tokens * FULL_FLOPS_PER_PARAM * adapters / rates.matmul
    if layout_recompute(lay) == OP_SAC:  # the matrices whose outputs it did not save, forward again
        matmul += tokens * layers * 2 * op_sac_recomputed_params_per_layer(work.arch) / lay.tp / rates.matmul
    return matmul


def _attention_seconds(work: Workload, layout: Layout, gpu: GpuSpec, rates: Rates, layers: int) -> float:
    """Scores and the weighted sum: local queries × all keys; in flash kernels at their share of the peak, the causal
    half skipped, the backward 2.5 forwards and a recompute one more; else at the GEMM rate."""
    lay, tokens = layout, microbatch_tokens(work, layout)
    recomputes = layout_recompute(lay) in ("selective", "full")
    width = attention_width(work.arch) / lay.tp
    score_flops = 4 * work.seq_len * width * tokens * layers  # forward QKᵀ and AV: local queries × all keys
    if work.flash_attention:
        kernel = score_flops * CAUSAL_SHARE * (1 + FLASH_BACKWARD_TO_FORWARD + (1 if recomputes else 0))
        share = attention_kernel_fraction(gpu, work.attention_kernel)
        return kernel / (gpu.peak_flops_per_second(rates.attention_dtype) * share)
    return score_flops * (3 + (1 if recomputes else 0)) / rates.matmul


def _memory_bound_seconds(work: Workload, layout: Layout, rates: Rates, layers: int, with_head: bool) -> float:
    """Activations written and read around the kernels (5 passes, and the recomputed ones again; dropout masks only
    with the workload's dropout > 0, as memory.py), and the fp32 logits."""
    arch, lay, recompute = work.arch, layout, layout_recompute(layout)
    shape = LayerShape(arch, work.seq_len, lay.micro_batch, lay.tp, lay.sequence_parallel)
    masks = stores_dropout_masks(work.dropout)  # the recipe's dropout, as memory.py: no mask traffic at p = 0
    stored = activation_bytes_per_layer(shape, "none", work.flash_attention, lay.cp, masks)
    scores = (
        0.0
        if work.flash_attention
        else score_bytes_per_element(masks) * arch.heads * work.seq_len**2 * lay.micro_batch / (lay.tp * lay.cp)
    )
    recomputed = {"none": 0.0, "selective": scores, "full": stored}.get(recompute, 0.0)
    if recompute == OP_SAC:  # what the block did not keep is written again
        recomputed = max(0.0, stored - op_sac_bytes_per_layer(*shape, lay.cp))
    passes = (FORWARD_PASSES + BACKWARD_PASSES) * stored + FORWARD_PASSES * recomputed
    tokens = microbatch_tokens(work, lay)
    logits = tokens * arch.vocab / lay.tp * 4 * LOGIT_PASSES if arch.kind == "decoder" and with_head else 0.0
    mtp = _stage_mtp(work, lay, with_head)  # each MTP module: one more layer and its own loss's logits
    return ((layers + mtp) * passes + (1 + mtp) * logits) / rates.hbm


def _stage_time(
    work: Workload, lay: Layout, gpu: GpuSpec, links: Links, traffic: StepTraffic, stage: tuple[int, bool]
) -> _Stage:
    """One micro-batch on a stage of `layers` layers (`with_head`: the last), term by term."""
    arch, rates = work.arch, achievable_rates(work, gpu, links)
    layers, with_head = stage
    cp = ep = 0.0
    repeat = 1 if layout_recompute(lay) == "full" else 0
    if not arch.layers or arch.kind == "cnn":
        matmul, memory, local_params = _cnn_terms(work, lay, gpu, rates)
        attention, repeat = 0.0, 0
    mtp = _stage_mtp(work, lay, with_head) if arch.layers else 0  # MTP modules: one more (MoE) layer each
    if arch.layers:
        matmul = _matmul_seconds(work, lay, rates, stage, traffic.trainable_params_per_replica)
        local_params = _stage_params(work, lay, layers, with_head)[2]
        attention = _attention_seconds(work, lay, gpu, rates, layers + mtp)
        memory = _memory_bound_seconds(work, lay, rates, layers, with_head)
        cp = cp_exposed_seconds(work, lay, links, rates, layers + mtp, attention)
        ep = ep_seconds(work, lay, links, rates, layers, mtp)
    given = traffic.trainable_params_per_replica
    trainable = local_params if given is None else given
    reads = WEIGHT_READS_PER_MICROBATCH + repeat + zero3_gathers(work, lay, traffic)
    dequant = DEQUANT_BYTES_PER_PARAM * (WEIGHT_READS_PER_MICROBATCH + repeat) if work.method == "qlora" else 0.0
    weights = (WEIGHT_BYTES_16 * reads + dequant) * local_params
    weights += GRADIENT_BYTES * GRADIENT_ACCESSES_PER_MICROBATCH * trainable
    weights /= rates.hbm
    per_microbatch = matmul + attention + memory + weights
    ep = ep_exposed_seconds(ep, per_microbatch, lay.microbatches(work), lay.pp, lay.ep_overlap)
    tp = tp_comm_seconds(work, lay, links, rates, layers + mtp)
    return _Stage(matmul, attention, memory, weights, per_microbatch, tp, cp, ep)


def _stages(work: Workload, layout: Layout) -> list[tuple[int, bool]]:
    """(layers, with the head) of the stages that set the stage time: the busiest without the head and the last."""
    arch, pp = work.arch, layout.pp
    if arch.kind == "cnn" or not arch.layers:
        return [(0, False)]
    split = layout.stage_layers or (_ceil_div(arch.layers, pp),) * pp
    return [(max(split[:-1]), False), (split[-1], True)] if pp > 1 else [(split[0], True)]


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
    bubble, p2p = pipeline_seconds(work, lay, links, stage_seconds)
    optimizer, offload = _optimizer_seconds(traffic, achievable_rates(work, gpu, links).optimizer_hbm)
    dp_comm, exposed = dp_seconds(work, lay, gpu, links, traffic, best.per_microbatch)
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
