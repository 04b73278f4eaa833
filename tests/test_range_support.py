"""Support by model size: a family's residuals.yaml records the fewest and most active parameters of its fitted rows'
models; a plan whose model lies strictly outside that span keeps the family's range but says it is borrowed
(Range.outside, a warning), combined with the GPU reason where both apply. A family whose rows do not all name their
model's size makes no claim."""

from __future__ import annotations

import dataclasses

from benchmarks.residuals import Row, active_params_span
from compiler.catalog.catalog import load_catalog
from compiler.passes.attach_ranges import _range
from compiler.passes.context import PassContext
from compiler.pipeline import resolve_text
from tests.conftest import REPO

EXAMPLES = REPO / "examples"
LLAMA_31_405B_ACTIVE = 405_853_388_800  # count_params(llama-3.1-405b).active
LARGEST_WHOLE_RUN_ACTIVE = 179_530_961_920  # Falcon-180B, the largest model of the fitted whole-run rows


def _resolved(example: str):
    return resolve_text((EXAMPLES / f"{example}.yaml").read_text(encoding="utf-8"))


def _outside(plan, family: str) -> set[str]:
    return {r.outside for r in plan.ranges if r.family == family}


def test_a_plan_inside_every_span_has_no_size_reason():
    """Llama-3.1-8B pre-training on H100: 8.03B active lies inside the step rows' 1.65B-1.01T, the whole runs'
    1.01B-180B and the memory peaks' 3.21B-176B."""
    plan = _resolved("llama3-8b-pretrain")
    residuals = load_catalog().residuals
    assert plan.model.params_active == 8_030_261_248
    for r in plan.ranges:
        fewest, most = residuals[r.family].active_params
        assert fewest <= plan.model.params_active <= most
        assert r.outside == ""
    assert not any("active parameters" in w for w in plan.warnings)


def test_a_model_at_the_edge_of_the_span_is_inside():
    """Strictly outside only: Llama-3-70B LoRA is the largest model of the LoRA memory rows, and ResNet-50 the only one
    of the batched vision rows, so their ranges are measured, not borrowed."""
    plan = _resolved("llama3-70b-lora-k8s")
    assert plan.model.params_active == load_catalog().residuals["memory-lora"].active_params[1] == 70_553_706_496
    assert _outside(plan, "memory-lora") == {""}
    resnet = _resolved("resnet50-triton")  # ResNet-50 is both ends of the batched vision rows' span
    assert (
        load_catalog().residuals["serve-vision"].active_params == (resnet.model.params_active,) * 2 == (25_557_032,) * 2
    )
    assert _outside(resnet, "serve-vision") == {""}


def test_a_model_just_outside_the_span_is_outside():
    """No tolerance factor: Llama-3.1-70B (70.55B) is 2.3 % above the serving-throughput rows' largest model,
    Llama-2-70B (68.98B), on a GPU those rows ran on (H200): the size alone is the reason."""
    plan = _resolved("llama3-70b-fp8-slo")
    assert plan.model.params_active == 70_553_706_496
    assert load_catalog().residuals["serve-throughput"].active_params[1] == 68_976_648_192
    assert _outside(plan, "serve-throughput") == {
        "no published serve-throughput row served a model of 70.6B active parameters (its rows: 6.05B–69B)"
    }


def test_a_model_larger_than_every_row_says_its_range_is_borrowed():
    """Llama-3.1-405B pre-training: larger than every whole pre-training run (Falcon-180B the largest) and every
    full-training memory peak (BLOOM-176B), inside the step rows (up to the 1T GPT)."""
    plan = _resolved("llama3-405b-pretrain")
    whole_run = load_catalog().residuals["train-whole-run"]
    assert plan.model.params_active == LLAMA_31_405B_ACTIVE > whole_run.active_params[1] == LARGEST_WHOLE_RUN_ACTIVE
    assert _outside(plan, "train-whole-run") == {
        "no published train-whole-run row trained a model of 406B active parameters (its rows: 1.01B–180B)"
    }
    assert _outside(plan, "memory-full") == {
        "no published memory-full row measured a model of 406B active parameters (its rows: 3.21B–176B)"
    }
    assert _outside(plan, "train-step-time") == {""}
    borrowed = [w for w in plan.warnings if "borrowed from models of other sizes" in w]
    assert len(borrowed) == 2 and borrowed[0].startswith("no published train-whole-run row trained a model of 406B")


def test_a_model_smaller_than_every_row_says_so_too():
    """MobileNet (3.5M) served at a batch: the batched vision rows are all ResNet-50 (25.6M)."""
    plan = _resolved("mobilenet-jetson")
    assert plan.model.params_active == 3_504_872
    assert _outside(plan, "serve-vision") == {
        "no published serve-vision row served a model of 3.5M active parameters (its rows: 25.6M)"
    }


def test_a_gpu_and_a_size_outside_are_one_reason():
    """Llama-3.1-70B (70.55B) on H200: no TTFT row ran on an H200, and the largest TTFT row served Llama-2-70B (68.98B)."""
    plan = _resolved("llama3-70b-fp8-slo")
    assert plan.model.params_active == 70_553_706_496 and plan.hardware.gpu == "h200-sxm-141gb"
    assert _outside(plan, "serve-ttft") == {
        "no published serve-ttft row ran on h200-sxm-141gb (its rows: a100-sxm-80gb, h100-sxm-80gb, l40s-48gb), nor "
        "served a model of 70.6B active parameters (its rows: 6.05B–69B)"
    }
    assert any("borrowed from other GPUs and models of other sizes" in w for w in plan.warnings)


def test_a_family_whose_rows_do_not_all_name_a_size_makes_no_claim():
    """The benchmark leaves the span empty when one fitted row names no size, and the compiler then says nothing of
    size for a plan far beyond the named rows."""
    named = Row("train-whole-run", "a", 1.0, 2020, active_params=7_000_000_000)
    larger = Row("train-whole-run", "b", 1.0, 2021, active_params=70_000_000_000)
    unnamed = Row("train-whole-run", "c", 1.0, 2022)
    assert active_params_span((named, larger))["train-whole-run"] == [7_000_000_000, 70_000_000_000]
    assert active_params_span((named, larger, unnamed))["train-whole-run"] == []

    plan = _resolved("llama3-405b-pretrain")
    published = load_catalog()
    residuals = dict(published.residuals)
    residuals["train-whole-run"] = residuals["train-whole-run"].model_copy(update={"active_params": ()})
    unclaimed = dataclasses.replace(published, residuals=residuals)
    hours = plan.training.gpu_hours
    assert "406B active parameters" in _range(PassContext(published), "", hours, "train-whole-run", plan).outside
    assert _range(PassContext(unclaimed), "", hours, "train-whole-run", plan).outside == ""
