"""A pod that outgrows the node its GPU is priced on is costed at the node it lands on (deployment/pod_price.py): every
candidate of the sizing searches, not only the chosen plan, so the search ranks them at the price they would pay;
passes/price_on_node.py words the decision and checks that the deployment placed the pods where they were priced."""

from __future__ import annotations

import pytest

from compiler.catalog.loader import load_gpus
from compiler.pipeline import resolve_text
from tests.conftest import REPO

RESNET = (REPO / "examples" / "resnet50-triton.yaml").read_text()


def _on(gpu: str, pricing: str = "on-demand") -> str:
    return RESNET.replace("gpus: [t4-16gb, l4-24gb, a10g-24gb]", f"gpus: [{gpu}]").replace(
        "pricing: on-demand", f"pricing: {pricing}"
    )


def _price_decision(plan):
    return [d for d in plan.decisions if d.topic == "price per GPU-hour"]


def test_a_pod_that_outgrows_g5_xlarge_costs_g5_2xlarge_per_hour():
    plan = resolve_text(_on("a10g-24gb"))
    pods = plan.serving.replicas * plan.serving.gpus_per_replica
    assert plan.deployment.kubernetes.serving[0].node.node_type == "g5.2xlarge"
    assert plan.hardware.usd_per_gpu_hour == pytest.approx(1.212)  # g5.2xlarge $1.212/h, 1 GPU; not g5.xlarge's 1.01
    assert plan.cost.usd_per_hour == pytest.approx(pods * 1.212)
    assert plan.cost.usd_per_month == pytest.approx(pods * 1.212 * 730)
    (decision,) = _price_decision(plan)
    assert "g5.2xlarge $1.212/h" in decision.reason and "g5.xlarge: $1.006/h" in decision.reason
    assert "$1.01 on g5.xlarge" in decision.choice
    assert not any("g5.2xlarge" in w for w in plan.warnings)


def test_spot_scales_the_node_price_by_the_gpus_own_ratio():
    plan = resolve_text(_on("a10g-24gb", "spot"))
    spot = load_gpus()["a10g-24gb"].price_usd_per_gpu_hour
    assert plan.hardware.usd_per_gpu_hour == pytest.approx(1.212 * spot["spot"] / spot["on-demand"])
    assert "only the node's on-demand price is sourced" in _price_decision(plan)[0].reason


def test_a_pod_that_fits_the_priced_node_keeps_the_gpus_price():
    plan = resolve_text(_on("h100-sxm-80gb"))  # a 1-GPU pod's share of p5.48xlarge (2 TiB / 8) holds it
    assert plan.deployment.kubernetes.serving[0].node.priced
    assert plan.hardware.usd_per_gpu_hour == 6.88
    assert plan.cost.usd_per_hour == pytest.approx(plan.serving.replicas * 6.88)
    assert not _price_decision(plan)


def test_over_budget_on_the_larger_node_is_infeasible():
    """The search itself refuses the plan: at g5.2xlarge's $1.212/GPU-hour two 1-GPU replicas cost 2 × 1.212 × 730 =
    $1,770/month, over a budget that g5.xlarge's $1.01 (2 × 1.01 × 730 = $1,475) would have met."""
    from compiler.diagnostics import InfeasiblePlan

    text = _on("a10g-24gb").replace("optimize: cost", "optimize: cost\nbudget: {usd_per_month: 1000}")
    cheap = resolve_text(text.replace("usd_per_month: 1000", "usd_per_month: 100000"))
    assert cheap.serving.replicas * cheap.serving.gpus_per_replica == 2
    on_priced_node = cheap.cost.usd_per_month * 1.01 / 1.212
    budget = (on_priced_node + cheap.cost.usd_per_month) / 2  # met at g5.xlarge's price, not at g5.2xlarge's
    with pytest.raises(InfeasiblePlan, match=r"costs \$1,770/month > budget \$1,622/month"):
        resolve_text(text.replace("usd_per_month: 1000", f"usd_per_month: {budget:.0f}"))


def test_every_priced_node_agrees_with_its_gpus_price():
    """The GPU's on-demand price per GPU-hour is its first node's list price / GPUs, within 1%: the GPU prices are
    rounded (a100-sxm-40gb 2.75 vs p4d.24xlarge 2.7447, +0.2%; a10g-24gb 1.01 vs g5.xlarge 1.006, +0.4%; l4-24gb
    0.80 vs g6.xlarge 0.8048, -0.6%); h200-sxm-141gb's p5e.48xlarge has no sourced price."""
    for gpu in load_gpus().values():
        first = gpu.node_types[0] if gpu.node_types else None
        if first is None or first.price_usd_per_hour is None:
            continue
        per_gpu = first.price_usd_per_hour / first.gpus
        assert gpu.price_usd_per_gpu_hour["on-demand"] == pytest.approx(per_gpu, rel=0.01), gpu.id


def test_every_node_says_where_its_price_is_from():
    for gpu in load_gpus().values():
        for node in gpu.node_types:
            assert node.price_source, node.id
            assert (node.price_usd_per_hour is None) == node.price_source.startswith("none"), node.id
