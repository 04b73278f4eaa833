"""Non-generative serving (CNNs, ViTs, encoders) and edge devices: items/s at a batch, dynamic batching.

Pure. A request is one item (an image, or a sequence of `prompt_tokens` for an encoder); its rates are
items per second. Roofline per batch of b items:

    t_batch(b) = max(b × FLOPs/item / achievable rate, weights / achievable bandwidth)

A CNN with a layer table (`Architecture.layer_table`, cnn_layers.py) is sized layer by layer instead, each
layer a roofline of its own (Williams et al. 2009, "Roofline"), summed:

    t_batch(b) = Σ_layers max(b × FLOPs_l / achievable rate, (weights_l + b × activations_l) × bytes / achievable bandwidth)

A TensorRT engine on an edge device (Jetson) also pays a fixed time per layer that no roofline term holds
(TENSORRT_EDGE_LAYER_FIXED_SECONDS: each fused kernel's launch, ramp-up and tail; measured with the engine in a CUDA
graph, a lower bound without one), from published batch-1 latencies:

    t_batch(b) = Σ_layers max(...) + layers × TENSORRT_EDGE_LAYER_FIXED_SECONDS

activations_l = input + output (+ the shortcut a residual add reads) per image, plus what the runtime's own
batch-norm, activation and add kernels move (cnn_layers: `fusion` tensorrt, onnxruntime or eager). Engine
'triton' serves a CNN on its onnxruntime backend (deployment/serving/triton_model.py), so plans size "onnxruntime":
batch norm folded into the convolution, activation and add as kernels of their own. Small layers are bandwidth-bound
where the whole-model FLOPs/rate ratio hides it (T4: 65 TFLOPS against 320 GB/s).

FLOPs per item: `Architecture.gflops_per_sample` when the catalog gives it (CNNs: read as FLOPs, 2 per
multiply-add); otherwise 2·N per token over the tokens — ViT patches (image/patch)² + 1 class token
(Dosovitskiy et al. 2020), or the encoder's sequence — plus full (non-causal) attention 2·L·s²·H·2d.

Dynamic batching (Triton `max_queue_delay_microseconds`): a request waits at most the queue delay for
its batch to form, then at most one running batch, then its own batch, so the worst-case latency is
delay + 2·t_batch(b) and the delay the SLO leaves is SLO − 2·t_batch(b). This is a bound, not a
percentile; at utilisation ρ < 1 the p99 stays under it. Capacity is b / t_batch(b).

Edge devices (`GpuSpec.edge`, Jetson) are sized the same way, one model per device, and report their
power (TDP × devices) against the request's power budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...deployment.pod_price import node_price, serving_pod
from ..cnn.layers import Layer, table_for
from ..reasons import because
from ..train.flops import matmul_flops_per_second
from .memory import WEIGHT_ELEMENT_BYTES
from .replica import compute_dtype, memory_bytes_per_second
from .types import (
    HOURS_PER_MONTH,
    MAX_PARETO,
    ReplicaPlan,
    ServeCandidate,
    ServeMemory,
    ServeRejection,
    ServeRequest,
    ServeSearchResult,
    pareto_front,
    rank_key,
    replica_plan,
)

if TYPE_CHECKING:
    from ...catalog.params import ParamCounts
    from ...catalog.types import Architecture, GpuSpec

# Largest batch tried. Triton's dynamic batcher has no default cap of its own (it uses the model's
# max_batch_size); 256 is the largest batch in NVIDIA's published ResNet-50 TensorRT inference tables
# (Deep Learning Examples, ConvNets "Inference performance" tables list batch 1 … 256).
MAX_VISION_BATCH = 256
FLOPS_PER_GFLOP = 1e9
ACTIVATION_BYTES = 2
# The runtime each engine serves a CNN with: Triton's onnxruntime backend (CUDA execution provider, no TensorRT
# accelerator), except on an edge device, where deployment/serving/triton_model.py builds a TensorRT plan on the device
# (a CNN's inputs are fixed-size, so a TensorRT profile fits them).
CNN_FUSION = {"triton": "onnxruntime"}
# Fixed time per layer of a TensorRT engine on a Jetson: MLPerf Inference SingleStream ResNet-50 (NVIDIA, INT8, batch 1,
# one CUDA graph per query, C++ LoadGen; AGX Orin and Orin NX, v2.1-v3.1, benchmarks/calibration/mlperf_singlestream.csv)
# less our roofline for it, over its 56 layers: 5.7-7.7 µs (python -m benchmarks.tensorrt_layer_fixed_time); the
# median. Only there: on an L4 the same benchmark leaves 2.5 µs, and data-centre plans run ONNX Runtime, not TensorRT.
# A Python-timed engine call without a CUDA graph (Ultralytics' tables) pays more; the serve-vision-batch1 range has it.
TENSORRT_EDGE_LAYER_FIXED_SECONDS = 5.89e-6
EDGE_CNN_FUSION = {"triton": "tensorrt"}


def cnn_fusion(engine: str, edge: bool) -> str:
    return (EDGE_CNN_FUSION if edge else CNN_FUSION).get(engine, "eager")


def tokens_per_item(arch: Architecture, sequence_tokens: int) -> int:
    if arch.kind == "vision-transformer":  # patches + class token (+ YOLOS's [DET] tokens, Fang et al. 2021 §2.1)
        return (arch.image_size // arch.patch_size) ** 2 + 1 + arch.detection_queries
    return sequence_tokens


def flops_per_item(arch: Architecture, params: ParamCounts, sequence_tokens: int) -> float:
    """Forward FLOPs for one item. ViT-L/16 at 224 px: 2 × 304e6 × 197 + 24 × 2·197²·16·128 ≈ 1.24e11."""
    if arch.gflops_per_sample:
        return arch.gflops_per_sample * FLOPS_PER_GFLOP
    s = tokens_per_item(arch, sequence_tokens)
    embedding = arch.vocab * arch.hidden if arch.kind == "encoder" else 0  # lookups, not matmuls
    attention = 2 * arch.layers * s * s * arch.heads * 2 * arch.attention_head_dim
    return 2 * (params.total - embedding) * s + attention


def weights_bytes(params: ParamCounts, precision: str) -> int:
    """All weights at the precision's element width (CNN quantisation is per-channel: scales negligible)."""
    return int(params.total * WEIGHT_ELEMENT_BYTES[precision])


def element_bytes(precision: str) -> float:
    """Activations and weights move at the precision's width (int8 engines keep int8 tensors between layers; int4 is
    weight-only, its activations 16-bit)."""
    return WEIGHT_ELEMENT_BYTES[precision] if precision in ("fp16", "bf16", "fp8", "int8") else ACTIVATION_BYTES


def activation_bytes(arch: Architecture, batch: int, sequence_tokens: int, precision: str = "fp16") -> int:
    """Transformer activations of a batch at the widest point (tokens × (2h + ffn) × 2 B); a CNN with a layer
    table: its largest layer's input + output (+ shortcut) for the batch, the most live at once; else 0."""
    if arch.kind == "cnn":
        layers = table_for(arch)
        return int(batch * max((x.fused_elements_per_item for x in layers), default=0) * element_bytes(precision))
    return batch * tokens_per_item(arch, sequence_tokens) * (2 * arch.hidden + arch.ffn_hidden) * ACTIVATION_BYTES


@dataclass(frozen=True)
class BatchTime:
    seconds: float
    compute_seconds: float  # the sum of the layers' compute terms
    memory_seconds: float  # the sum of the layers' traffic terms
    memory_bound_layers: int
    layers: int
    traffic_bytes: float  # moved for the batch
    fixed_seconds: float = 0.0  # layers × TENSORRT_EDGE_LAYER_FIXED_SECONDS (TensorRT on an edge device), in `seconds`


def layered_batch_time(
    layers: tuple[Layer, ...], gpu: GpuSpec, dtype: str, precision: str, batch: int, fusion: str = "tensorrt"
) -> BatchTime:
    rate, bandwidth, width = matmul_flops_per_second(gpu, dtype), memory_bytes_per_second(gpu), element_bytes(precision)
    total = compute = memory = traffic = 0.0
    bound = 0
    for layer in layers:
        elements = layer.fused_elements_per_item + layer.extra_elements_per_item(fusion)
        moved = (layer.weight_elements + batch * elements) * width
        c, m = batch * layer.flops_per_item / rate, moved / bandwidth
        total, compute, memory, traffic = total + max(c, m), compute + c, memory + m, traffic + moved
        bound += m > c
    fixed = layer_fixed_seconds(gpu, fusion) * len(layers)
    return BatchTime(total + fixed, compute, memory, bound, len(layers), traffic, fixed)


def layer_fixed_seconds(gpu: GpuSpec, fusion: str) -> float:
    """The fixed time per layer where its source applies: TensorRT engines on edge devices."""
    return TENSORRT_EDGE_LAYER_FIXED_SECONDS if fusion == "tensorrt" and gpu.edge else 0.0


def batch_time(
    arch: Architecture,
    gpu: GpuSpec,
    dtype: str,
    precision: str,
    flops: float,
    weight_bytes: int,
    batch: int,
    fusion: str = "tensorrt",
) -> BatchTime:
    layers = table_for(arch)
    if layers:
        return layered_batch_time(layers, gpu, dtype, precision, batch, fusion)
    c, m = batch * flops / matmul_flops_per_second(gpu, dtype), weight_bytes / memory_bytes_per_second(gpu)
    return BatchTime(max(c, m), c, m, int(m > c), 1, weight_bytes)


def roofline_reason(timing: BatchTime, batch: int, fusion: str):
    if timing.layers == 1:
        return None
    return because(
        "cnn-roofline",
        layers=timing.layers,
        memory_bound_layers=timing.memory_bound_layers,
        traffic_bytes_per_item=timing.traffic_bytes / batch,
        compute_seconds=timing.compute_seconds,
        memory_seconds=timing.memory_seconds,
        fusion=fusion,
        fixed_seconds=timing.fixed_seconds,
    )


def batch_sizes() -> list[int]:
    return [2**i for i in range(int(math.log2(MAX_VISION_BATCH)) + 1)]


def search_vision(req: ServeRequest, gpus: dict[str, GpuSpec]) -> ServeSearchResult:
    candidates, rejected, evaluated = [], [], 0
    flops = flops_per_item(req.arch, req.params, req.prompt_tokens)
    for gpu_id in req.gpu_ids:
        gpu = gpus.get(gpu_id)
        if gpu is None or req.pricing not in gpu.price_usd_per_gpu_hour:
            rejected.append(ServeRejection(gpu_id, because("not-in-catalog-or-no-price")))
            continue
        for precision in req.precisions:
            dtype = compute_dtype(precision, gpu)
            if dtype is None:
                rejected.append(
                    ServeRejection(
                        f"{gpu.id} {precision}", because("no-tensor-cores", gpu_name=gpu.name, precision=precision)
                    )
                )
                continue
            evaluated += 1
            fit, rejection = evaluate_device(req, gpu, precision, dtype, flops)
            if fit:
                candidates.append(fit)
            else:
                rejected.append(rejection)
    kept = tuple(rejected)
    if not candidates:
        reason = because("vision-no-gpu", model_id=req.model_id, rejections=kept)
        return ServeSearchResult(None, (), kept, evaluated, reason, None, ())
    chosen = min(candidates, key=lambda c: rank_key(req, c))
    pareto = pareto_front(candidates)[:MAX_PARETO]
    if req.budget_usd_per_month is not None and chosen.usd_per_month > req.budget_usd_per_month:
        cheapest = min(candidates, key=lambda c: c.usd_per_month)
        if cheapest.usd_per_month > req.budget_usd_per_month:
            reason = because(
                "config-over-budget",
                cheapest=cheapest.description,
                usd=cheapest.usd_per_month,
                budget=req.budget_usd_per_month,
            )
            return ServeSearchResult(None, pareto, kept, evaluated, reason, cheapest, ())
        chosen = cheapest
    return ServeSearchResult(chosen, pareto, kept, evaluated, None, None, ())


@dataclass(frozen=True)
class _DeviceRun:
    """One model copy per GPU at one precision: what every batch's timing and the candidate read."""

    req: ServeRequest
    gpu: GpuSpec
    precision: str
    dtype: str
    flops: float
    weights: int
    usable: int
    fusion: str

    @property
    def where(self) -> str:
        return f"{self.gpu.id} {self.precision}"

    def activations(self, batch: int) -> int:
        return activation_bytes(self.req.arch, batch, self.req.prompt_tokens, self.precision)

    def time(self, batch: int) -> BatchTime:
        return batch_time(
            self.req.arch, self.gpu, self.dtype, self.precision, self.flops, self.weights, batch, self.fusion
        )


def evaluate_device(req: ServeRequest, gpu: GpuSpec, precision: str, dtype: str, flops: float):
    """→ (candidate, None) or (None, rejection) for one model copy per GPU."""
    run = _DeviceRun(
        req,
        gpu,
        precision,
        dtype,
        flops,
        weights=weights_bytes(req.params, precision),
        usable=int(gpu.memory_bytes * req.gpu_memory_utilization),
        fusion=cnn_fusion(req.engine, gpu.edge),
    )
    best = _largest_batch(run)
    if best is None:
        return None, _no_batch_rejection(run)
    b, timing = best
    counts = replica_plan(req, b / timing.seconds, gpu.edge)
    power = counts.replicas * gpu.tdp_watts
    if gpu.edge and req.power_budget_watts is not None and power > req.power_budget_watts:
        return None, ServeRejection(
            run.where,
            because(
                "over-power-budget",
                devices=counts.replicas,
                tdp=gpu.tdp_watts,
                power=power,
                budget=req.power_budget_watts,
            ),
        )
    return _candidate(run, b, timing, counts), None


def _largest_batch(run: _DeviceRun) -> tuple[int, BatchTime] | None:
    """The largest batch whose weights and activations fit and whose worst case (2 batches) meets the SLO."""
    slo = run.req.latency_p99_seconds
    best = None
    for b in batch_sizes():
        if run.weights + run.activations(b) > run.usable:
            break
        timing = run.time(b)
        if slo is not None and 2 * timing.seconds > slo:
            break
        best = (b, timing)
    return best


def _no_batch_rejection(run: _DeviceRun) -> ServeRejection:
    """Why not even batch 1 fits: the weights exceed the usable memory, or one batch's worst case exceeds the SLO."""
    if run.weights > run.usable:
        return ServeRejection(run.where, because("vision-weights-exceed", weights=run.weights, usable=run.usable))
    t1 = run.time(1).seconds
    return ServeRejection(run.where, because("batch-one-over-slo", batch_seconds=t1, slo=run.req.latency_p99_seconds))


def _candidate(run: _DeviceRun, b: int, timing: BatchTime, counts: ReplicaPlan) -> ServeCandidate:
    """The candidate serving batches of `b` with dynamic batching, and the replicas the request needs."""
    req, gpu, weights = run.req, run.gpu, run.weights
    t = timing.seconds
    capacity = b / t
    replicas = counts.replicas
    slo = req.latency_p99_seconds
    delay = max(0.0, slo - 2 * t) if slo is not None else t
    priced = node_price(gpu, serving_pod(1, 1, 1, weights, gpu.edge), req.pricing)  # where its pods land
    usd_per_hour = replicas * priced.usd_per_gpu_hour
    items_per_hour = req.requests_per_second * 3600
    activations = run.activations(b)
    return ServeCandidate(
        gpu_id=gpu.id,
        precision=run.precision,
        tp=1,
        pp=1,
        gpus_per_replica=1,
        nodes_per_replica=1,
        max_concurrency=b,
        max_num_batched_tokens=0,
        kv_cache_tokens=0,
        kv_bytes_per_token=0,
        kv_bytes_per_token_per_gpu=0,
        memory=ServeMemory(
            weights=weights,
            kv_cache=0,
            activations=activations,
            other=0,
            total=weights + activations,
            usable=run.usable,
        ),
        weights_bytes_total=weights,
        ttft_seconds=delay + 2 * t,
        tpot_seconds=0.0,
        latency_seconds=delay + 2 * t,
        step_bound="compute" if timing.compute_seconds >= timing.memory_seconds else "memory",
        tokens_per_second_per_replica=capacity,
        requests_per_second_per_replica=capacity,
        requests_per_second=req.requests_per_second,
        queue_target_per_replica=float(b),
        replicas=replicas,
        min_replicas=counts.min_replicas,
        max_replicas=replicas,
        usd_per_hour=usd_per_hour,
        usd_per_month=usd_per_hour * HOURS_PER_MONTH,
        usd_per_million_tokens=usd_per_hour / items_per_hour * 1e6,
        gpu_memory_utilization=req.gpu_memory_utilization,
        target_utilization=req.target_utilization,
        queueing=because(
            "dynamic-batching", batch=b, batch_seconds=t, delay=delay, roofline=roofline_reason(timing, b, run.fusion)
        ),
        max_queue_delay_seconds=delay,
        preferred_batch_sizes=tuple(x for x in batch_sizes() if x <= b and x >= b // 4),
        power_watts=replicas * gpu.tdp_watts,
        replicas_needed=counts.needed,
        replica_floor=counts.floor,
        node_price=priced,
    )
