"""A CNN's training step, kernel by kernel, from its layer table (cnn_layers). Pure.

PyTorch runs a training step as separate kernels (eager mode), and each is a roofline of its own (Williams et al.
2009): max(FLOPs / achievable rate, bytes / achievable bandwidth); the step is their sum. A layer of the table
(a convolution with its batch norm, activation and residual add) runs, per image:
* convolution: forward (x → y), data gradient (dy → dx) and weight gradient (x, dy → dW), each one forward's
  FLOPs (the backward is twice the forward: PaLM App. B's 6N = 2N + 4N) and each reading its operands and writing
  its result, I + O elements; the weights' own traffic and the optimizer are train_time's weight and optimizer terms.
* layout: cuDNN's tensor-core convolutions work in NHWC; an NCHW tensor (PyTorch's default memory format) is
  transposed on the way in and back on the way out of every convolution kernel (NVIDIA Deep Learning Performance
  Guide, "Convolutional Layers User's Guide", Tensor Layouts In Memory: NCHW vs NHWC; MosaicML Composer's
  Channels Last method card), 2(I + O) more per kernel. CUDA-core fp32 kernels (no TF32, e.g. Volta) take NCHW
  as it is. CHANNELS_LAST says which precisions train channels-last.
* batch norm in training uses the batch's statistics, so nothing folds into the convolution (PyTorch
  aten/src/ATen/native/cuda/Normalization.cuh): forward batch_norm_collect_statistics reads y, then
  batch_norm_transform_input reads y and writes it, 3·O; backward batch_norm_backward_reduce reads dy and y, then
  batch_norm_backward_elemt reads dy and y and writes dx, 5·O.
* activation (ReLU in place, torchvision's resnet): forward reads and writes y, 2·O; backward threshold_backward
  reads the gradient and the saved output and writes the gradient, 3·O.
* residual add (`out += identity`, in place): forward reads two tensors and writes one, 3·O; backward the block
  input's gradient is the sum of the shortcut's and the branch's, 3 × the shortcut.
Layers without weights (pools, upsamples, YOLO11's attention scores) move their input and output in each direction, at
no less than their forward-and-backward FLOPs' time.

Stored for the backward (`stored_elements_per_item`): each convolution's output (batch norm's input) and each
activation's or add's output (which the next convolution also keeps as its input); a layer without batch norm or
activation keeps its output for the next layer. ResNet-50 at 224 px: 20.9 M elements, 41.9 MB at 16 bits; NVIDIA's
published recipes fit it: batch 256 (10.7 GB) on a 16 GB V100 in AMP, and fp32 at batch 112 there (9.4 GB) but at
256 (21.4 GB) only on the 32 GB part (DeepLearningExamples ConvNets configs.yml, resnet50 DGX1V / DGX2V).
"""

from __future__ import annotations

from dataclasses import dataclass

from .layers import Layer

CONVOLUTION_KERNELS = 3  # forward, data gradient, weight gradient
TRANSPOSE_PASSES = 2  # NCHW → NHWC read + write, once for what goes in and once for what comes out
BATCH_NORM_FORWARD_PASSES, BATCH_NORM_BACKWARD_PASSES = 3, 5
ACTIVATION_FORWARD_PASSES, ACTIVATION_BACKWARD_PASSES = 2, 3
RESIDUAL_FORWARD_PASSES, RESIDUAL_BACKWARD_PASSES = 3, 3
# Channels-last (NHWC) for 16-bit training, NCHW otherwise: NVIDIA DeepLearningExamples PyTorch ConvNets configs.yml
# (@7bdfc81d, the commit of its published training tables) sets `memory_format: nhwc` for every AMP recipe and leaves
# TF32/FP32 at PyTorch's default NCHW; PyTorch's channels-last tutorial recommends it with AMP.
CHANNELS_LAST = ("fp16", "bf16", "fp8")
TENSOR_CORE_DTYPES = ("tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class CnnTrainTime:
    convolution_seconds: float  # Σ over convolution kernels of max(compute, traffic)
    elementwise_seconds: float  # batch norm, activation, add, pooling kernels: traffic only
    compute_seconds: float  # the convolutions' FLOPs alone
    traffic_bytes: float  # activations moved by the batch, every kernel
    memory_bound_kernels: int
    kernels: int
    transposes: bool

    @property
    def seconds(self) -> float:
        return self.convolution_seconds + self.elementwise_seconds


def transposes(precision: str, dtype: str) -> bool:
    """Whether the convolutions pay NCHW ↔ NHWC transposes: an NCHW recipe on tensor cores."""
    return precision not in CHANNELS_LAST and dtype in TENSOR_CORE_DTYPES


def elementwise_elements_per_item(layer: Layer) -> int:
    """Batch norm, activation and residual add, forward and backward; a pool or upsample's own traffic."""
    out = layer.output_elements
    if not layer.weight_elements:  # pool / upsample: read input, write output; the backward the reverse
        return 2 * (layer.input_elements + out)
    moved = (BATCH_NORM_FORWARD_PASSES + BATCH_NORM_BACKWARD_PASSES) * out if layer.batch_norm else 0
    moved += (ACTIVATION_FORWARD_PASSES + ACTIVATION_BACKWARD_PASSES) * out if layer.activation else 0
    if layer.residual_elements:
        moved += RESIDUAL_FORWARD_PASSES * out + RESIDUAL_BACKWARD_PASSES * layer.residual_elements
    return moved


def convolution_kernel_elements_per_item(layer: Layer, transpose: bool) -> int:
    """What one of a convolution's three kernels reads and writes per image (the weights aside)."""
    moved = layer.input_elements + layer.output_elements
    return moved * (1 + TRANSPOSE_PASSES) if transpose else moved


def stored_elements_per_item(layers: tuple[Layer, ...]) -> int:
    """Activations one image keeps for the backward (module docstring)."""
    total = 0
    for x in layers:
        kept = x.output_elements * (x.batch_norm + (x.activation or bool(x.residual_elements)))
        total += kept or x.output_elements
    return total


def training_batch_time(
    layers: tuple[Layer, ...],
    batch: int,
    rate_flops_per_second: float,
    bandwidth_bytes_per_second: float,
    element_bytes: float,
    transpose: bool,
) -> CnnTrainTime:
    """Forward and backward of `batch` images, kernel by kernel."""
    convolution = elementwise = compute = traffic = 0.0
    bound = kernels = 0
    for x in layers:
        if x.weight_elements:
            c = batch * x.flops_per_item / rate_flops_per_second
            moved = batch * convolution_kernel_elements_per_item(x, transpose) * element_bytes
            m = moved / bandwidth_bytes_per_second
            convolution += CONVOLUTION_KERNELS * max(c, m)
            compute += CONVOLUTION_KERNELS * c
            traffic += CONVOLUTION_KERNELS * moved
            bound += CONVOLUTION_KERNELS * (m > c)
            kernels += CONVOLUTION_KERNELS
        moved = batch * elementwise_elements_per_item(x) * element_bytes
        if moved:
            m = moved / bandwidth_bytes_per_second
            # a weightless layer's own FLOPs (YOLO11's attention scores, a pool's compares): forward and backward
            c = 0.0 if x.weight_elements else CONVOLUTION_KERNELS * batch * x.flops_per_item / rate_flops_per_second
            elementwise += max(c, m)
            traffic += moved
            kernels += 1
            bound += m > c
    return CnnTrainTime(convolution, elementwise, compute, traffic, bound, kernels, transpose)
