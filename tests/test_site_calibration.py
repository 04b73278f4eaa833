"""cluster.calibration: measured steps at stated layouts refit the site's achievable matmul share."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from compiler.catalog.catalog import load_catalog
from compiler.pipeline import resolve
from compiler.site_calibration import calibrate
from compiler.site_calibration_file import SiteCalibration, SitePoint
from compiler.site_calibration_fit import predicted_step
from compiler.sizing.search_cache import SearchCache
from compiler.sizing.train.memory import usable_memory_bytes
from tests.conftest import REPO, run_cli

POINT = dict(
    gpu="h100-sxm-80gb",
    model="llama-3.1-8b",
    gpus=8,
    tp=1,
    pp=1,
    zero_stage=2,
    micro_batch=1,
    global_batch=64,
    seq_len=4096,
    recompute="none",
)


def _site(step_seconds: float) -> SiteCalibration:
    return SiteCalibration(
        site="cluster-a",
        measured_at="2026-11-20",
        source="test",
        points=[SitePoint(**POINT, step_seconds=step_seconds)],
    )


def test_a_step_measured_as_predicted_keeps_the_catalog_share():
    catalog = load_catalog()
    share = catalog.gpus["h100-sxm-80gb"].achievable_matmul_fraction
    predicted = predicted_step(SitePoint(**POINT, step_seconds=1.0), catalog, share, SearchCache())
    fitted, decisions = calibrate(catalog, _site(predicted))
    assert fitted.gpus["h100-sxm-80gb"].achievable_matmul_fraction == pytest.approx(share, rel=0.01)
    assert "predicted ÷ measured 1 with the catalog's share" in decisions[0].reason


def test_a_slower_site_gets_a_lower_share_and_slower_plans(tmp_path):
    catalog = load_catalog()
    share = catalog.gpus["h100-sxm-80gb"].achievable_matmul_fraction
    predicted = predicted_step(SitePoint(**POINT, step_seconds=1.0), catalog, share, SearchCache())
    fitted, decisions = calibrate(catalog, _site(predicted * 1.25))
    assert fitted.gpus["h100-sxm-80gb"].achievable_matmul_fraction < share
    assert predicted_step(
        SitePoint(**POINT, step_seconds=1.0),
        fitted,
        fitted.gpus["h100-sxm-80gb"].achievable_matmul_fraction,
        SearchCache(),
    ) == pytest.approx(predicted * 1.25, rel=0.01)
    assert fitted.gpus["a100-sxm-80gb"] == catalog.gpus["a100-sxm-80gb"]  # only measured GPUs change


def _plan_with_site(tmp_path, site: dict) -> object:
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    plan = yaml.safe_load((REPO / "examples" / "llama3-8b-pretrain.yaml").read_text())
    plan["cluster"]["calibration"] = "site.yaml"
    plan["budget"] = {}
    plan["cluster"]["gpus"] = ["h100-sxm-80gb"]
    plan["cluster"].pop("gpu", None)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    return tmp_path / "plan.yaml"


def test_the_report_names_the_site_numbers(tmp_path):
    site = {
        "site": "cluster-a",
        "measured_at": "2026-11-20",
        "source": "probe job 4711",
        "points": [{**POINT, "step_seconds": 9.0}],
    }
    plan = resolve(_plan_with_site(tmp_path, site))
    decision = next(d for d in plan.decisions if d.topic == "site calibration (h100-sxm-80gb)")
    assert "cluster-a" in decision.reason and "probe job 4711" in decision.reason and "9.00 s" in decision.reason


def test_on_a_site_fit_the_step_median_is_the_fit_and_the_published_rows_give_only_the_spread(tmp_path):
    """Fitted shares already give the site's measured step: the steady-step family's P50 is not applied again (a
    calibrated plan's headline step would otherwise sit ×P50 above what the site measured); its spread stays, and a
    whole run keeps what its median adds beyond a steady step."""
    site = {"site": "cluster-a", "measured_at": "2026-11-20", "source": "t", "points": [{**POINT, "step_seconds": 9.0}]}
    plan = resolve(_plan_with_site(tmp_path, site))
    published = load_catalog().residuals
    step, run = published["train-step-time"], published["train-whole-run"]
    ranges = {r.quantity: r for r in plan.ranges}
    seconds = ranges["training.step_seconds"]
    assert seconds.p50 == pytest.approx(seconds.roofline) == pytest.approx(plan.training.step_seconds)
    assert seconds.p90 / seconds.p50 == pytest.approx(step.p90 / step.p50)
    hours = ranges["training.gpu_hours"]
    assert hours.p50 / hours.roofline == pytest.approx(run.p50 / step.p50)
    assert (
        "re-centred on the site calibration's fit" in next(d for d in plan.decisions if d.topic == "calibration").choice
    )


def test_a_site_that_measured_another_gpu_leaves_the_published_median_and_gate(tmp_path):
    """Steps measured on an A100 fit the A100's shares; the H100 plan's step and gate keep the published median."""
    site = {
        "site": "cluster-a",
        "measured_at": "2026-11-20",
        "source": "t",
        "points": [{**POINT, "gpu": "a100-sxm-80gb", "step_seconds": 9.0}],
    }
    plan = resolve(_plan_with_site(tmp_path, site))
    assert plan.hardware.gpu == "h100-sxm-80gb"
    step = load_catalog().residuals["train-step-time"]
    seconds = next(r for r in plan.ranges if r.quantity == "training.step_seconds")
    assert seconds.p50 / seconds.roofline == pytest.approx(step.p50)
    assert "re-centred" not in next(d for d in plan.decisions if d.topic == "calibration").choice


@pytest.mark.parametrize(
    "change,message", [({"gpu": "no-such-gpu"}, "catalog lacks"), ({"step_seconds": -1}, "step_seconds")]
)
def test_a_bad_calibration_file_is_a_located_error(tmp_path, change, message):
    site = {
        "site": "cluster-a",
        "measured_at": "2026-11-20",
        "source": "x",
        "points": [{**POINT, "step_seconds": 9.0, **change}],
    }
    result = run_cli(_plan_with_site(tmp_path, site), "-o", tmp_path / "out")
    assert (
        result.returncode == 2 and "cluster.calibration" in result.stderr and "[invalid-calibration]" in result.stderr
    )
    assert message in result.stderr and "Traceback" not in result.stderr


MEMORY = {
    "gpu": "h100-sxm-80gb",
    "device": "cuda",
    "factor": 1.5,
    "points": [
        {
            "layout": "chosen",
            "measured_allocated_bytes": 10 << 30,
            "measured_reserved_bytes": 12 << 30,
            "predicted_allocated_bytes": 7 << 30,
            "predicted_reserved_bytes": 8 << 30,
        },
        {
            "layout": "micro-batch 2",
            "measured_allocated_bytes": 11 << 30,
            "measured_reserved_bytes": 13 << 30,
            "predicted_allocated_bytes": 10 << 30,
            "predicted_reserved_bytes": 12 << 30,
        },
    ],
}


def test_a_site_memory_factor_shrinks_what_a_full_training_fit_may_use(tmp_path):
    """The largest measured ÷ predicted peak (12 ÷ 8 = 1.5) replaces the published memory rows: usable ÷ 1.5."""
    site = {
        "site": "cluster-a",
        "measured_at": "2026-11-20",
        "source": "probe job 4711",
        "points": [{**POINT, "step_seconds": 9.0}],
    }
    without = resolve(_plan_with_site(tmp_path, site))
    plan = resolve(_plan_with_site(tmp_path, {**site, "memory": MEMORY}))
    gpu_bytes = plan.hardware.gpu_memory_bytes
    assert plan.memory_per_gpu_bytes.usable == pytest.approx(usable_memory_bytes(gpu_bytes) / 1.5, rel=1e-6)
    assert without.memory_per_gpu_bytes.usable > plan.memory_per_gpu_bytes.usable
    decision = next(d for d in plan.decisions if d.topic == "site calibration (memory)")
    assert (
        "memory factor 1.500" in decision.choice
        and "12.0 GiB reserved" in decision.reason
        and "8.0 GiB" in decision.reason
    )
    assert "the device's ÷ 1.50: measured ÷ predicted peak reserved memory at cluster-a" in next(
        d.reason for d in plan.decisions if d.topic == "parallelism"
    )


def test_a_memory_factor_its_points_do_not_give_is_refused(tmp_path):
    site = {
        "site": "cluster-a",
        "measured_at": "2026-11-20",
        "source": "x",
        "points": [{**POINT, "step_seconds": 9.0}],
        "memory": {**MEMORY, "factor": 1.1},
    }
    result = run_cli("explain", _plan_with_site(tmp_path, site))
    assert result.returncode == 2 and "invalid-calibration" in result.stderr and "largest measured" in result.stderr


def test_a_tp_step_is_refitted_with_the_sites_measured_links():
    """A TP2 step measured at a site whose links run at 10% of NVLink: the refit prices TP's all-reduces at that share
    (as the recompiled plan does), so it recovers the share the step was made with instead of blaming the GEMMs."""
    from dataclasses import replace

    from compiler.catalog.catalog import SiteLinks

    catalog = load_catalog()
    gpu = catalog.gpus["h100-sxm-80gb"]
    point = SitePoint(**{**POINT, "tp": 2, "zero_stage": 1, "global_batch": 32}, step_seconds=1.0)
    slow = replace(catalog, site_links=SiteLinks(gpu.id, "ib-400g", 0.1, None))
    measured = predicted_step(point, slow, 0.5, SearchCache())
    assert measured > predicted_step(point, catalog, 0.5, SearchCache())  # the slow links cost time at TP2
    links = {
        "gpu": gpu.id,
        "interconnect": "ib-400g",
        "device": "cuda",
        "ranks_per_node": 8,
        "intra_node": [
            {
                "op": "all_reduce",
                "bytes": 1 << 28,
                "ranks": 8,
                "bus_bytes_per_second": 0.1 * gpu.intra_node_bandwidth_bytes_per_second,
            }
        ],
    }
    site = SiteCalibration.model_validate(
        {
            "site": "cluster-a",
            "measured_at": "2026-11-20",
            "source": "test",
            "points": [point.model_copy(update={"step_seconds": measured}).model_dump()],
            "interconnect": links,
        }
    )
    fitted, decisions = calibrate(catalog, site)
    assert fitted.site_links.intra_node_fraction == pytest.approx(0.1)
    assert fitted.gpus[gpu.id].achievable_matmul_fraction == pytest.approx(0.5, rel=0.01)


def test_steps_at_two_micro_batch_counts_recover_both_the_matmul_and_the_optimizer_share():
    """A site whose optimizer pass runs at a third of the catalog's HBM share and whose GEMMs at 0.6: steps measured
    with one and eight micro-batches per GPU separate the two, and the fit finds both (one share alone cannot explain both)."""
    catalog = load_catalog()
    entry = catalog.gpus["h100-sxm-80gb"]
    slow_optimizer = entry.achievable_memory_bandwidth_fraction / 3
    site_gpu = entry.model_copy(update={"achievable_optimizer_bandwidth_fraction": slow_optimizer})
    site_catalog = replace(catalog, gpus={**catalog.gpus, "h100-sxm-80gb": site_gpu})
    points = []
    for micro_batch, global_batch in ((1, 8), (1, 64)):  # one and eight micro-batches per GPU of 8
        point = SitePoint(**{**POINT, "micro_batch": micro_batch, "global_batch": global_batch}, step_seconds=1.0)
        seconds = predicted_step(point, site_catalog, 0.6, SearchCache())
        points.append(point.model_copy(update={"step_seconds": seconds}))
    site = SiteCalibration(site="cluster-a", measured_at="2026-11-20", source="test", points=points)
    fitted, decisions = calibrate(catalog, site)
    gpu = fitted.gpus["h100-sxm-80gb"]
    assert gpu.achievable_matmul_fraction == pytest.approx(0.6, rel=0.02)
    assert gpu.achievable_optimizer_bandwidth_fraction == pytest.approx(slow_optimizer, rel=0.05)
    assert any(d.topic == "site calibration (h100-sxm-80gb, per step)" for d in decisions)


def test_steps_of_one_micro_batch_leave_the_optimizer_share_to_the_catalog():
    catalog = load_catalog()
    share = catalog.gpus["h100-sxm-80gb"].achievable_matmul_fraction
    predicted = predicted_step(SitePoint(**POINT, step_seconds=1.0), catalog, share, SearchCache())
    fitted, decisions = calibrate(catalog, _site(predicted * 1.25))
    assert fitted.gpus["h100-sxm-80gb"].achievable_optimizer_bandwidth_fraction is None
    assert not any("per step" in d.topic for d in decisions)


# resnet-50's preset as a probe's results carry it (probe.py _vision_points: the non-default fields)
RESNET_50 = {
    "kind": "cnn",
    "vocab": 1000,
    "image_size": 224,
    "params_override": 25557032,
    "gflops_per_sample": 8.18,
    "layer_table": "resnet-50",
}
VISION = {"gpu": "t4-16gb", "model": "resnet-50", "precision": "fp16", "engine": "triton", "tokens": 1}


def test_vision_batches_measured_slower_lower_the_matmul_share_the_vision_sizing_uses():
    """A vision point is the vision sizing's batch time (per-layer roofline, onnxruntime's fusion): the example's T4
    batch of 32 is the plan's capacity; on an A10G, where a quarter or more of that batch scales with the matmul
    share, a batch measured 1.5× slower fits a lower share whose prediction meets the measurement."""
    from compiler.site_calibration_file import VisionPoint
    from compiler.site_calibration_fit import predicted_vision_batch

    catalog = load_catalog()
    t4 = VisionPoint(**VISION, batch=32, step_seconds=1.0)
    predicted = predicted_vision_batch(t4, catalog, catalog.gpus["t4-16gb"].achievable_matmul_fraction)
    plan = resolve(REPO / "examples" / "resnet50-triton.yaml")
    assert plan.hardware.gpu == "t4-16gb" and 32 / predicted == pytest.approx(
        plan.serving.requests_per_second_per_replica
    )
    share = catalog.gpus["a10g-24gb"].achievable_matmul_fraction
    point = VisionPoint(**{**VISION, "gpu": "a10g-24gb"}, batch=32, step_seconds=1.0)
    predicted = predicted_vision_batch(point, catalog, share)
    slower = SiteCalibration(
        site="ci",
        measured_at="2026-11-28",
        source="x",
        vision_points=[{**VISION, "gpu": "a10g-24gb", "batch": 32, "step_seconds": 1.5 * predicted}],
    )
    fitted, decisions = calibrate(catalog, slower)
    new_share = fitted.gpus["a10g-24gb"].achievable_matmul_fraction
    assert new_share < share and fitted.site_fitted_vision == ("a10g-24gb",) and not fitted.site_fitted_serving
    assert predicted_vision_batch(point, fitted, new_share) == pytest.approx(1.5 * predicted, rel=1e-3)
    assert "vision batch step(s)" in decisions[0].reason and len(decisions) == 1


def test_read_bound_vision_batches_fit_no_share_and_say_why():
    """A batch whose prediction the matmul share barely moves (batch 1 on any GPU: the weights' reads; batch 32 on a
    T4) fits nothing: launch time measured at batch 1 would drag the share to its bound. On a T4 the shares stay the
    catalog's; on an A10G the share is fitted to batch 32 alone, so its prediction meets that measurement whatever
    batch 1 measured."""
    from compiler.site_calibration_file import VisionPoint
    from compiler.site_calibration_fit import MIN_VISION_SENSITIVITY, predicted_vision_batch, vision_sensitivity

    catalog = load_catalog()

    def site(gpu, measured):
        points = [{**VISION, "gpu": gpu, "batch": b, "step_seconds": t} for b, t in measured]
        return SiteCalibration(site="ci", measured_at="2026-11-28", source="x", vision_points=points)

    t4 = [(1, 2e-3), (6, 4e-3), (32, 15e-3)]  # batch 1 three times its read time: kernel launches
    fitted, decisions = calibrate(catalog, site("t4-16gb", t4))
    assert fitted.gpus["t4-16gb"] == catalog.gpus["t4-16gb"]
    (held,) = decisions
    assert held.topic == "site calibration (t4-16gb, vision batches)" and held.choice.startswith("3 of")
    for b, _ in t4:
        sensitivity = vision_sensitivity(VisionPoint(**VISION, batch=b, step_seconds=1), catalog)
        assert sensitivity < MIN_VISION_SENSITIVITY and f"batch {b} ×{sensitivity:.3g}" in held.reason
    a10g = VisionPoint(**{**VISION, "gpu": "a10g-24gb"}, batch=32, step_seconds=1)
    target = 1.3 * predicted_vision_batch(a10g, catalog, catalog.gpus["a10g-24gb"].achievable_matmul_fraction)
    fitted, decisions = calibrate(catalog, site("a10g-24gb", [(1, 2e-3), (32, target)]))
    share = fitted.gpus["a10g-24gb"].achievable_matmul_fraction
    assert predicted_vision_batch(a10g, fitted, share) == pytest.approx(target, rel=1e-3)
    assert [d.choice.split(" ")[0] for d in decisions] == ["achievable", "1"]


def _resnet_with_vision_point(tmp_path, point: dict):
    """resnet50-triton (a T4) with a site file of one vision point; the plan's path."""
    site = {"site": "cluster-a", "measured_at": "2026-11-20", "source": "x", "vision_points": [{**VISION, **point}]}
    plan = yaml.safe_load((REPO / "examples" / "resnet50-triton.yaml").read_text())
    plan["cluster"]["calibration"] = "site.yaml"
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    return tmp_path / "plan.yaml"


def test_a_vision_point_with_both_shapes_is_a_located_error(tmp_path):
    point = {"architecture": RESNET_50, "batch": 8, "step_seconds": 0.01}
    result = run_cli(_resnet_with_vision_point(tmp_path, point), "-o", tmp_path / "out")
    assert result.returncode == 2 and "[invalid-calibration]" in result.stderr, result.stderr
    first = result.stderr.splitlines()[0]
    assert "site.yaml:" in first and "vision_points.0" in first and "not both" in first, first


@pytest.mark.parametrize("gpu,recentred", [("t4-16gb", True), ("a10g-24gb", False)])
def test_a_site_recentres_the_vision_ranges_only_on_a_gpu_it_measured(tmp_path, gpu, recentred):
    """resnet50-triton serves on a T4: vision batches measured there make the fit the median (the published rows give
    only the spread); batches measured on an A10G fit that GPU's share and leave the T4 plan at the published median."""
    resolved = resolve(_resnet_with_vision_point(tmp_path, {"gpu": gpu, "batch": 32, "step_seconds": 0.2}))
    published = load_catalog().residuals
    assert resolved.ranges
    for r in resolved.ranges:
        median = 1.0 if recentred else published[r.family].p50
        assert r.p50 == pytest.approx(
            r.roofline / median if r.quantity == "serving.ttft_seconds" else r.roofline * median
        )


def test_vision_batches_on_an_llm_plans_gpu_leave_its_ranges_and_say_so(tmp_path):
    """A site that measured only vision batches on the LLM plan's GPU fits no LLM step: its ranges keep the published
    medians, and the calibration decision does not claim a re-centring."""
    site = {
        "site": "cluster-a",
        "measured_at": "2026-11-20",
        "source": "x",
        "vision_points": [{**VISION, "gpu": "l4-24gb", "batch": 32, "step_seconds": 0.2}],
    }
    plan = yaml.safe_load((REPO / "examples" / "llama3-8b-chat.yaml").read_text())
    plan["cluster"]["calibration"] = "site.yaml"
    plan["cluster"]["gpus"] = ["l4-24gb"]
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    resolved = resolve(tmp_path / "plan.yaml")
    published = load_catalog().residuals
    assert resolved.hardware.gpu == "l4-24gb" and resolved.ranges
    assert all(r.p50 != pytest.approx(r.roofline) for r in resolved.ranges if published[r.family].p50 != 1)
    assert "re-centred" not in next(d for d in resolved.decisions if d.topic == "calibration").choice


def test_a_prefill_and_decode_steps_fit_both_shares_together():
    """A prefill reads the weights at the HBM share and decode GEMMs run at the matmul share, so one fit moves the
    other's predictions; the fits alternate (FIT_ROUNDS) until the prefill and every decode step are met: steps made
    at matmul 0.5 and HBM 0.6 give back both shares, each step's calibrated prediction within 1%."""
    from compiler.site_calibration_file import ServingPoint
    from compiler.site_calibration_fit import predicted_serving_step

    catalog = load_catalog()
    shape = dict(gpu="h100-sxm-80gb", model="llama-3.1-8b")
    points = [
        ServingPoint(**shape, phase="prefill", batch=1, tokens=1024, step_seconds=1.0),
        *(ServingPoint(**shape, phase="decode", batch=b, tokens=1100, step_seconds=1.0) for b in (1, 8, 32)),
    ]
    points = [p.model_copy(update={"step_seconds": predicted_serving_step(p, catalog, 0.5, 0.6)}) for p in points]
    site = SiteCalibration(site="cluster-a", measured_at="2026-11-20", source="test", serving_points=points)
    fitted, decisions = calibrate(catalog, site)
    gpu = fitted.gpus["h100-sxm-80gb"]
    assert gpu.achievable_matmul_fraction == pytest.approx(0.5, rel=0.01)
    assert gpu.achievable_memory_bandwidth_fraction == pytest.approx(0.6, rel=0.01)
    for p in points:
        predicted = predicted_serving_step(
            p, fitted, gpu.achievable_matmul_fraction, gpu.achievable_memory_bandwidth_fraction
        )
        assert predicted == pytest.approx(p.step_seconds, rel=0.01), p.phase
    assert [d.choice.split(" → ")[0] for d in decisions] == [
        "achievable matmul share 0.800",
        "achievable HBM bandwidth share 0.900",
    ]
