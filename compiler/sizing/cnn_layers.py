"""Per-layer shapes of the catalog's CNNs, built from their papers' architecture tables. Pure.

A layer is one kernel as TensorRT runs it: a convolution (or the classifier's matmul) with its batch norm,
ReLU and residual add fused into it, as the TensorRT Developer Guide ("Types of Fusions": convolution and
ReLU, convolution and element-wise sum; batch norm is a Scale folded into the convolution's weights) lists.
So a fused layer moves its input, its output, its weights and (a residual block's last 1×1) the shortcut.
Unfused (PyTorch eager), batch norm and ReLU each read and write the convolution's output once more and the
residual add reads two tensors and writes one: `unfused_extra_elements`.

* ResNet-50 v1.5 (He et al. 2016, Table 1; v1.5 puts the stride on the 3×3, NVIDIA DeepLearningExamples
  resnet50v1.5 README): 25.5 M parameters, 4.09 G multiply-adds.
* MobileNetV2 (Sandler et al. 2018, Table 2: t, c, n, s per bottleneck; Figure 4 for the block): 3.5 M
  parameters, 0.30 G multiply-adds (0.32 counted here with the 1×1 expansions of every block).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Layer:
    name: str
    macs_per_item: int  # multiply-adds for one image
    weight_elements: int
    input_elements: int  # per image
    output_elements: int
    residual_elements: int = 0  # shortcut read by a fused residual add
    bn_relu: bool = True  # followed by batch norm (+ ReLU) that TensorRT folds in

    @property
    def flops_per_item(self) -> int:
        return 2 * self.macs_per_item

    @property
    def fused_elements_per_item(self) -> int:
        return self.input_elements + self.output_elements + self.residual_elements

    @property
    def unfused_extra_elements(self) -> int:
        """Per image: BN reads + writes the output, ReLU again; a residual add reads two tensors, writes one."""
        bn_relu = 4 * self.output_elements if self.bn_relu else 0
        return bn_relu + (3 * self.output_elements if self.residual_elements else 0)


def conv(name: str, side_in: int, c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1,
         residual: bool = False, bn_relu: bool = True) -> tuple[Layer, int]:
    """A 'same'-padded convolution; returns the layer and its output side."""
    side_out = -(-side_in // stride)
    weights = kernel * kernel * (c_in // groups) * c_out
    layer = Layer(name, weights * side_out * side_out, weights, side_in * side_in * c_in,
                  side_out * side_out * c_out, side_out * side_out * c_out if residual else 0, bn_relu)
    return layer, side_out


def _pool_and_classifier(side: int, channels: int, classes: int) -> list[Layer]:
    pool = Layer("avgpool", side * side * channels, 0, side * side * channels, channels, bn_relu=False)
    fc = Layer("fc", channels * classes, channels * classes + classes, channels, classes, bn_relu=False)
    return [pool, fc]


def resnet50(image_side: int = 224, classes: int = 1000) -> tuple[Layer, ...]:
    layers: list[Layer] = []
    stem, side = conv("conv1", image_side, 3, 64, 7, 2)
    layers.append(stem)
    layers.append(Layer("maxpool", 9 * (side // 2) ** 2 * 64, 0, side * side * 64, (side // 2) ** 2 * 64, bn_relu=False))
    side, c_in = side // 2, 64
    for stage, (blocks, mid, out, stride) in enumerate(((3, 64, 256, 1), (4, 128, 512, 2), (6, 256, 1024, 2), (3, 512, 2048, 2)), 2):
        for block in range(blocks):
            s = stride if block == 0 else 1
            tag = f"conv{stage}_{block + 1}"
            a, _ = conv(f"{tag}a", side, c_in, mid, 1)
            b, side_out = conv(f"{tag}b", side, mid, mid, 3, s)
            layers += [a, b]
            if block == 0:
                down, _ = conv(f"{tag}_down", side, c_in, out, 1, s, bn_relu=True)
                layers.append(down)
            c, _ = conv(f"{tag}c", side_out, mid, out, 1, residual=True)
            layers.append(c)
            side, c_in = side_out, out
    return tuple(layers + _pool_and_classifier(side, c_in, classes))


def mobilenet_v2(image_side: int = 224, classes: int = 1000) -> tuple[Layer, ...]:
    layers: list[Layer] = []
    stem, side = conv("conv0", image_side, 3, 32, 3, 2)
    layers.append(stem)
    c_in = 32
    for i, (t, c, n, s) in enumerate(((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                      (6, 160, 3, 2), (6, 320, 1, 1)), 1):
        for j in range(n):
            stride = s if j == 0 else 1
            hidden, tag = c_in * t, f"block{i}_{j + 1}"
            if t != 1:
                expand, _ = conv(f"{tag}_expand", side, c_in, hidden, 1)
                layers.append(expand)
            depthwise, side_out = conv(f"{tag}_dw", side, hidden, hidden, 3, stride, groups=hidden)
            project, _ = conv(f"{tag}_project", side_out, hidden, c, 1, residual=stride == 1 and c_in == c, bn_relu=False)
            layers += [depthwise, project]
            side, c_in = side_out, c
    last, _ = conv("conv_last", side, c_in, 1280, 1)
    return tuple(layers + [last] + _pool_and_classifier(side, 1280, classes))


TABLES = {"resnet-50": resnet50, "mobilenet-v2": mobilenet_v2}


@lru_cache(maxsize=None)
def layer_table(name: str, image_side: int, classes: int) -> tuple[Layer, ...]:
    return TABLES[name](image_side, classes)
