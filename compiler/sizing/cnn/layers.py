"""Per-layer shapes of the catalog's CNNs, built from their papers' architecture tables. Pure.

A layer is a convolution (or the classifier's matmul, a pool, an upsample) with what follows it: batch norm,
an activation, a residual add. How many of those run as kernels of their own is the runtime's `fusion`:
* "tensorrt": all folded into the convolution (TensorRT Developer Guide, "Types of Fusions": convolution and
  ReLU/activation, convolution and element-wise sum; batch norm is a Scale folded into the weights), so a
  layer moves its input, its output, its weights and the shortcut it adds;
* "onnxruntime": batch norm folded ("Graph Optimizations in ONNX Runtime": Conv BatchNorm Fusion is a basic
  optimization for every execution provider; Conv Activation Fusion is listed for the CPU provider only), so
  the activation reads and writes the output again and the add reads two tensors and writes one;
* "eager" (PyTorch): batch norm moves the output once more on top of that.

* ResNet-50 v1.5 (He et al. 2016, Table 1; v1.5 puts the stride on the 3×3, NVIDIA DeepLearningExamples
  resnet50v1.5 README): 25.5 M parameters, 4.09 G multiply-adds.
* MobileNetV2 (Sandler et al. 2018, Table 2: t, c, n, s per bottleneck; Figure 4 for the block): 3.5 M
  parameters, 0.30 G multiply-adds.
* YOLO11 n/s (Ultralytics, ultralytics/cfg/models/11/yolo11.yaml: depth 0.50, width 0.25 / 0.50, max 1024
  channels; modules as ultralytics/nn/modules/block.py and head.py define C3k2, C3k, Bottleneck, SPPF, C2PSA,
  PSABlock, Attention and Detect): the yaml's summary gives 2,624,080 / 9,458,752 parameters and 6.6 / 21.7
  GFLOPs at 640 px. A concat is free (TensorRT writes the inputs into the concatenated buffer); an upsample
  or a max-pool reads its input and writes its output; the DFL decode and NMS after the head are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...catalog.types import Architecture


@dataclass(frozen=True)
class Layer:
    macs_per_item: int  # multiply-adds for one image
    weight_elements: int
    input_elements: int  # per image
    output_elements: int
    residual_elements: int = 0  # the shortcut a residual add reads
    batch_norm: bool = True
    activation: bool = True  # ReLU / SiLU after the batch norm (or after the add)

    @property
    def flops_per_item(self) -> int:
        return 2 * self.macs_per_item

    @property
    def fused_elements_per_item(self) -> int:
        return self.input_elements + self.output_elements + self.residual_elements

    def extra_elements_per_item(self, fusion: str) -> int:
        """What the runtime's separate batch-norm, activation and add kernels read and write per image."""
        if fusion == "tensorrt":
            return 0
        out = self.output_elements
        extra = (2 * out if self.activation else 0) + (3 * out if self.residual_elements else 0)
        return extra + (2 * out if fusion == "eager" and self.batch_norm else 0)


FUSIONS = ("tensorrt", "onnxruntime", "eager")


@dataclass(frozen=True)
class After:
    """What follows a convolution in its layer: a residual add (reading the shortcut), batch norm, an activation."""

    residual: bool = False
    batch_norm: bool = True
    activation: bool = True


def conv(
    side_in: int, c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, after: After = After()
) -> tuple[Layer, int]:
    """A 'same'-padded convolution; returns the layer and its output side."""
    side_out = -(-side_in // stride)
    weights = kernel * kernel * (c_in // groups) * c_out
    layer = Layer(
        weights * side_out * side_out,
        weights,
        side_in * side_in * c_in,
        side_out * side_out * c_out,
        side_out * side_out * c_out if after.residual else 0,
        after.batch_norm,
        after.activation,
    )
    return layer, side_out


def _pool_and_classifier(side: int, channels: int, classes: int) -> list[Layer]:
    pool = Layer(side * side * channels, 0, side * side * channels, channels, batch_norm=False, activation=False)
    fc = Layer(channels * classes, channels * classes + classes, channels, classes, batch_norm=False, activation=False)
    return [pool, fc]


def resnet50(image_side: int = 224, classes: int = 1000) -> tuple[Layer, ...]:
    layers: list[Layer] = []
    stem, side = conv(image_side, 3, 64, 7, 2)
    layers.append(stem)
    layers.append(
        Layer(9 * (side // 2) ** 2 * 64, 0, side * side * 64, (side // 2) ** 2 * 64, batch_norm=False, activation=False)
    )
    side, c_in = side // 2, 64
    for blocks, mid, out, stride in ((3, 64, 256, 1), (4, 128, 512, 2), (6, 256, 1024, 2), (3, 512, 2048, 2)):
        for block in range(blocks):
            s = stride if block == 0 else 1
            a, _ = conv(side, c_in, mid, 1)
            b, side_out = conv(side, mid, mid, 3, s)
            layers += [a, b]
            if block == 0:
                down, _ = conv(side, c_in, out, 1, s, after=After(activation=False))
                layers.append(down)
            c, _ = conv(side_out, mid, out, 1, after=After(residual=True))
            layers.append(c)
            side, c_in = side_out, out
    return tuple(layers + _pool_and_classifier(side, c_in, classes))


def mobilenet_v2(image_side: int = 224, classes: int = 1000) -> tuple[Layer, ...]:
    layers: list[Layer] = []
    stem, side = conv(image_side, 3, 32, 3, 2)
    layers.append(stem)
    c_in = 32
    for t, c, n, s in (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ):
        for j in range(n):
            stride = s if j == 0 else 1
            hidden = c_in * t
            if t != 1:
                expand, _ = conv(side, c_in, hidden, 1)
                layers.append(expand)
            depthwise, side_out = conv(side, hidden, hidden, 3, stride, groups=hidden)
            project, _ = conv(side_out, hidden, c, 1, after=After(residual=stride == 1 and c_in == c, activation=False))
            layers += [depthwise, project]
            side, c_in = side_out, c
    last, _ = conv(side, c_in, 1280, 1)
    return tuple(layers + [last] + _pool_and_classifier(side, 1280, classes))


def _width(channels: int, width: float, max_channels: int = 1024) -> int:
    """Ultralytics make_divisible(min(c, max_channels) × width, 8)."""
    return max(8, -(-int(min(channels, max_channels) * width) // 8) * 8)


def _memory_op(input_elements: int, output_elements: int) -> Layer:
    return Layer(0, 0, input_elements, output_elements, batch_norm=False, activation=False)


def _bottleneck(side: int, c: int, hidden: int, shortcut: bool) -> list[Layer]:
    a, _ = conv(side, c, hidden, 3)
    b, _ = conv(side, hidden, c, 3, after=After(residual=shortcut))
    return [a, b]


def _c3k2(side: int, c1: int, c2: int, c3k: bool, e: float = 0.5) -> list[Layer]:
    """C3k2 with one repeat (depth 0.50 × 2): cv1 splits into 2 × c, one block, cv2 joins (2 + 1) × c."""
    c = int(c2 * e)
    layers = [conv(side, c1, 2 * c, 1)[0]]
    if c3k:  # C3k(c, c, 2): two 1×1 halves, two bottlenecks at e=1.0, a 1×1 join
        h = c // 2
        layers += [conv(side, c, h, 1)[0], conv(side, c, h, 1)[0]]
        layers += _bottleneck(side, h, h, True) + _bottleneck(side, h, h, True)
        layers.append(conv(side, 2 * h, c, 1)[0])
    else:  # Bottleneck(c, c, e=0.5)
        layers += _bottleneck(side, c, c // 2, True)
    return layers + [conv(side, 3 * c, c2, 1)[0]]


def _sppf(side: int, c1: int, c2: int) -> list[Layer]:
    h = c1 // 2
    pools = [_memory_op(side * side * h, side * side * h) for _ in range(3)]  # three 5×5 max-pools
    return [conv(side, c1, h, 1)[0], *pools, conv(side, 4 * h, c2, 1)[0]]


def _c2psa(side: int, c1: int) -> list[Layer]:
    """C2PSA(c1, c1, 1): cv1 to 2c, one PSABlock on c (attention over side² tokens, then a 2× FFN), cv2 back."""
    c, tokens = c1 // 2, side * side
    heads = max(1, c // 64)
    key_dim = c // heads // 2
    qkv_out = c + 2 * key_dim * heads
    scores = heads * tokens * tokens
    # q·kᵀ and attention·v over side² tokens; the scores are written, soft-maxed and read back
    attention = Layer(
        scores * (key_dim + c // heads),
        0,
        tokens * qkv_out,
        tokens * c + 2 * scores,
        batch_norm=False,
        activation=False,
    )
    return [
        conv(side, c1, 2 * c, 1)[0],
        conv(side, c, qkv_out, 1, after=After(activation=False))[0],
        attention,
        conv(side, c, c, 3, groups=c, after=After(activation=False))[0],
        conv(side, c, c, 1, after=After(residual=True, activation=False))[0],
        conv(side, c, 2 * c, 1)[0],
        conv(side, 2 * c, c, 1, after=After(residual=True, activation=False))[0],
        conv(side, 2 * c, c1, 1)[0],
    ]


def _detect(sides: tuple[int, ...], channels: tuple[int, ...], classes: int, reg_max: int = 16) -> list[Layer]:
    box, cls = max(16, channels[0] // 4, 4 * reg_max), max(channels[0], min(classes, 100))
    layers: list[Layer] = []
    for side, x in zip(sides, channels):  # per level: box branch (cv2), class branch (cv3, depthwise-separable)
        layers += [
            conv(side, x, box, 3)[0],
            conv(side, box, box, 3)[0],
            conv(side, box, 4 * reg_max, 1, after=After(batch_norm=False, activation=False))[0],
            conv(side, x, x, 3, groups=x)[0],
            conv(side, x, cls, 1)[0],
            conv(side, cls, cls, 3, groups=cls)[0],
            conv(side, cls, cls, 1)[0],
            conv(side, cls, classes, 1, after=After(batch_norm=False, activation=False))[0],
        ]
    return layers


def yolo11(width: float, image_side: int = 640, classes: int = 80) -> tuple[Layer, ...]:
    """yolo11.yaml in order: backbone 0-10, head 11-23 (upsample, concat, C3k2 ...), Detect on P3, P4, P5."""
    w = lambda c: _width(c, width)  # noqa: E731
    p1 = image_side // 2
    p2, p3, p4, p5 = p1 // 2, p1 // 4, p1 // 8, p1 // 16
    layers = [
        conv(image_side, 3, w(64), 3, 2)[0],
        conv(p1, w(64), w(128), 3, 2)[0],
        *_c3k2(p2, w(128), w(256), False, 0.25),
        conv(p2, w(256), w(256), 3, 2)[0],
        *_c3k2(p3, w(256), w(512), False, 0.25),
        conv(p3, w(512), w(512), 3, 2)[0],
        *_c3k2(p4, w(512), w(512), True),
        conv(p4, w(512), w(1024), 3, 2)[0],
        *_c3k2(p5, w(1024), w(1024), True),
        *_sppf(p5, w(1024), w(1024)),
        *_c2psa(p5, w(1024)),
        _memory_op(p5 * p5 * w(1024), p4 * p4 * w(1024)),
        *_c3k2(p4, w(1024) + w(512), w(512), False),
        _memory_op(p4 * p4 * w(512), p3 * p3 * w(512)),
        *_c3k2(p3, w(512) + w(512), w(256), False),
        conv(p3, w(256), w(256), 3, 2)[0],
        *_c3k2(p4, w(256) + w(512), w(512), False),
        conv(p4, w(512), w(512), 3, 2)[0],
        *_c3k2(p5, w(512) + w(1024), w(1024), True),
        *_detect((p3, p4, p5), (w(256), w(512), w(1024)), classes),
    ]
    return tuple(layers)


TABLES = {
    "resnet-50": resnet50,
    "mobilenet-v2": mobilenet_v2,
    "yolo11n": lambda side, classes: yolo11(0.25, side, classes),
    "yolo11s": lambda side, classes: yolo11(0.50, side, classes),
}


@cache
def layer_table(name: str, image_side: int, classes: int) -> tuple[Layer, ...]:
    return TABLES[name](image_side, classes)


def table_for(arch: Architecture) -> tuple[Layer, ...]:
    """The model's per-layer table, or () when the catalog has none (whole-model roofline)."""
    if arch.kind != "cnn" or not arch.layer_table:
        return ()
    return layer_table(arch.layer_table, arch.image_size or 224, arch.vocab or 1000)
