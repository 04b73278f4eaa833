"""The CNN family: the per-layer roofline against published images/s (benchmarks/accuracy_vision.py)."""

from __future__ import annotations

import pytest

from benchmarks.accuracy_vision import TOLERANCE, family_stats, left_out, vision_cases
from compiler.sizing.cnn_layers import layer_table


def test_every_used_row_stays_within_the_readme_tolerance():
    cases = vision_cases()
    rows, median, worst = family_stats(cases)
    assert rows >= 6
    assert worst <= TOLERANCE, [f"{c.name}: {c.error:+.0%}" for c in cases if abs(c.error) > TOLERANCE]
    assert median <= 0.30


def test_left_out_rows_say_why():
    assert all(why.startswith("no: ") for _, why in left_out())


@pytest.mark.parametrize("table, params, macs", [
    ("resnet-50", 25_557_032, 4.09e9),  # torchvision resnet50: 25,557,032 params, 4.09 GMACs
    ("mobilenet-v2", 3_504_872, 0.30e9),  # torchvision mobilenet_v2: 3,504,872 params, 0.30 GMACs
])
def test_layer_tables_reproduce_the_published_totals(table, params, macs):
    """The tables leave out batch-norm parameters (folded into the convolutions), so weights land within 1 %."""
    layers = layer_table(table, 224, 1000)
    assert sum(x.weight_elements for x in layers) == pytest.approx(params, rel=0.01)
    assert sum(x.macs_per_item for x in layers) == pytest.approx(macs, rel=0.02)


def test_resnet50_on_a_t4_is_bandwidth_bound_and_fusion_pays():
    """FLOPs alone gave 6,440 img/s on a T4; the layers' traffic at 272 GB/s brings it under 4,000 fused, and
    eager BN/ReLU/add kernels (PyTorch) more than double the traffic."""
    from compiler.catalog.loader import load_gpus, load_models
    from compiler.catalog.params import count_params
    from compiler.sizing.vision import batch_time, flops_per_item, weights_bytes

    arch, t4 = load_models()["resnet-50"].architecture, load_gpus()["t4-16gb"]
    params = count_params(arch)
    args = (arch, t4, "fp16", "fp16", flops_per_item(arch, params, 1), weights_bytes(params, "fp16"), 256)
    fused, eager = batch_time(*args, fused=True), batch_time(*args, fused=False)
    assert 3000 < 256 / fused.seconds < 4500
    assert fused.memory_bound_layers > 0 and eager.traffic_bytes > 2 * fused.traffic_bytes
