"""The sizing searches price every candidate on the node its pod lands on (deployment/pod_price.py), with the shapes the
deployment pass places: the alternatives in plan.json are at those prices, and the search ranks by them.

Node prices (compiler/catalog/gpus.yaml, AWS us-east-1 on-demand list / GPUs): g6e.xlarge $1.861/h (1 × L40S, the
priced node), g6e.2xlarge $2.24208/h (1), g6e.12xlarge $10.49264/h (4), g6e.48xlarge $30.13118/h (8); g6.xlarge
$0.8048/h (1 × L4, priced), g6.12xlarge $4.6016/h (4); g5.12xlarge $5.672/h (4 × A10G); p4de.24xlarge $27.44705/h
(8 × A100 80GB, priced). A month is 730 h (sizing/serve/types.py HOURS_PER_MONTH).
"""

from __future__ import annotations

import pytest

from compiler.catalog.catalog import load_catalog
from compiler.passes.context import PassContext
from compiler.passes.price_on_node import NodePriceMismatch, check_price_on_node
from compiler.pipeline import resolve_text
from tests.conftest import REPO

CHAT = (REPO / "examples" / "llama3-8b-chat.yaml").read_text()
TRITON = (REPO / "examples" / "llama3-8b-triton.yaml").read_text()
SFT = (REPO / "examples" / "mistral-7b-fsdp-finetune.yaml").read_text()
CHAT_GPUS = "gpus: [l4-24gb, l40s-48gb, a10g-24gb]"
MONTH = 730


def _alternative(plan, description: str):
    (found,) = [a for a in plan.alternatives if a.description == description]
    return found


def _price_decisions(plan) -> list:
    return [d for d in plan.decisions if d.topic.endswith("price per GPU-hour")]


def test_an_alternative_that_needs_more_gpus_than_the_priced_node_pays_its_landing_node():
    """llama3-8b-chat's alternatives: a TP2/TP4/TP8 pod does not fit a 1-GPU g6e.xlarge or g5.xlarge."""
    plan = resolve_text(CHAT)
    assert plan.hardware.gpu == "l40s-48gb" and plan.serving.tp == 1
    tp2 = _alternative(plan, "2 × (2 × l40s-48gb) bf16 TP2 PP1 batch 256")
    assert tp2.usd == pytest.approx(4 * 10.49264 / 4 * MONTH)  # $7,659.6 on g6e.12xlarge, not 4 × 1.86 × 730 = $5,431
    tp8 = _alternative(plan, "2 × (8 × l40s-48gb) bf16 TP8 PP1 batch 256")
    assert tp8.usd == pytest.approx(16 * 30.13118 / 8 * MONTH)  # $43,991 on g6e.48xlarge, not $21,725
    a10g = _alternative(plan, "3 × (4 × a10g-24gb) bf16 TP4 PP1 batch 256")
    assert a10g.usd == pytest.approx(12 * 5.672 / 4 * MONTH)  # $12,422 on g5.12xlarge, not 12 × 1.01 × 730 = $8,848


def test_an_alternative_whose_pod_outgrows_the_priced_nodes_memory_pays_its_landing_node():
    """Optimised for latency, llama3-8b-triton picks TP8 A100s; its 1-GPU L40S alternative's pod needs 32 GiB of host
    memory (16 GB of weights + 16 GiB overhead), more than g6e.xlarge's share, so it is priced on g6e.2xlarge."""
    plan = resolve_text(TRITON.replace("optimize: cost", "optimize: latency"))
    assert plan.hardware.gpu == "a100-sxm-80gb" and plan.serving.tp == 8
    l40s = _alternative(plan, "2 × (1 × l40s-48gb) bf16 TP1 PP1 batch 178")
    assert l40s.usd == pytest.approx(2 * 2.24208 * MONTH)  # $3,273, not 2 × 1.86 × 730 = $2,716
    assert plan.cost.usd_per_month == pytest.approx(16 * 3.43 * MONTH)  # TP8 fits p4de.24xlarge: the A100's price
    assert not _price_decisions(plan)


def test_the_serving_search_ranks_candidates_at_their_landing_price():
    """Two TP4 replicas of L4 cost 8 × 0.80 × 730 = $4,672/month at g6.xlarge's price, less than two A100s
    (2 × 3.43 × 730 = $5,008); but a 4-GPU pod lands on g6.12xlarge at $1.1504/GPU-hour: $6,718. The A100s win."""
    l4 = resolve_text(CHAT.replace(CHAT_GPUS, "gpus: [l4-24gb]"))
    assert (l4.serving.replicas, l4.serving.tp) == (2, 4)
    assert l4.deployment.kubernetes.serving[0].node.node_type == "g6.12xlarge"
    assert l4.hardware.usd_per_gpu_hour == pytest.approx(4.6016 / 4)
    assert l4.cost.usd_per_month == pytest.approx(8 * 4.6016 / 4 * MONTH)
    (decision,) = _price_decisions(l4)
    assert "the pod needs 4 GPUs, more than g6.xlarge's 1" in decision.reason
    assert "g6.12xlarge $4.6016/h on-demand / 4 GPU" in decision.reason
    both = resolve_text(CHAT.replace(CHAT_GPUS, "gpus: [l4-24gb, a100-sxm-80gb]"))
    assert 8 * 0.80 * MONTH < 2 * 3.43 * MONTH < l4.cost.usd_per_month
    assert both.hardware.gpu == "a100-sxm-80gb" and both.cost.usd_per_month == pytest.approx(2 * 3.43 * MONTH)


def _sft_on_kubernetes(gpus: str, scheduler: str = "kubernetes") -> str:
    return (
        SFT.replace("scheduler: slurm", f"scheduler: {scheduler}")
        .replace("  gpu: a100-sxm-80gb\n  count: 8\n", f"  gpus: [{gpus}]\n")
        .replace(
            "slurm: {partition: a100}",
            "kubernetes: {namespace: ml, shared_storage_class: efs}"
            if scheduler != "slurm"
            else "slurm: {partition: a100}",
        )
        .replace("interconnect: ib-200g", "interconnect: efa-400g")
        .replace("deadline: 3d", "deadline: 12h")
    )


def test_the_training_search_ranks_layouts_at_their_landing_price():
    """Mistral-7B SFT in 12 h on Kubernetes: 32 L40S (four 8-GPU trainer pods) would cost ~$166 at g6e.xlarge's
    $1.86/GPU-hour, but an 8-GPU pod lands on g6e.48xlarge at $3.766 ($336): 16 A100s on p4de.24xlarge are cheaper."""
    l40s = resolve_text(_sft_on_kubernetes("l40s-48gb"))
    assert (l40s.hardware.gpus, l40s.hardware.gpus_per_node) == (32, 8)
    assert l40s.deployment.kubernetes.training.node.node_type == "g6e.48xlarge"
    assert l40s.hardware.usd_per_gpu_hour == pytest.approx(30.13118 / 8)
    assert l40s.cost.usd_total == pytest.approx(l40s.training.gpu_hours * 30.13118 / 8)
    (decision,) = _price_decisions(l40s)
    assert "the pod needs 8 GPUs, more than g6e.xlarge's 1" in decision.reason
    both = resolve_text(_sft_on_kubernetes("l40s-48gb, a100-sxm-80gb"))
    assert both.hardware.gpu == "a100-sxm-80gb"
    assert both.cost.usd_total < l40s.cost.usd_total
    assert both.cost.usd_total > l40s.cost.usd_total * 1.86 / (30.13118 / 8)  # the L40S would win at the list price
    slurm = resolve_text(_sft_on_kubernetes("l40s-48gb", "slurm"))  # Slurm places no pods on catalog nodes
    assert slurm.hardware.usd_per_gpu_hour == 1.86 and not _price_decisions(slurm)


def test_a_landing_node_without_a_sourced_price_keeps_the_catalog_price_and_says_so():
    """A100 PCIe's nodes are Azure's, none with a stored price: a TP2 pod on Standard_NC48ads_A100_v4 pays the GPU's
    catalog $2.40 and the plan warns that the node's premium is left out."""
    text = CHAT.replace(CHAT_GPUS, "gpus: [a100-pcie-80gb]").replace(
        "optimize: cost", "optimize: cost\nparallelism: {tp: 2}"
    )
    plan = resolve_text(text)
    assert plan.deployment.kubernetes.serving[0].node.node_type == "standard-nc48ads-a100-v4"
    assert plan.hardware.usd_per_gpu_hour == 2.40 and not _price_decisions(plan)
    (warning,) = [w for w in plan.warnings if "no sourced price" in w]
    assert "the pod needs 2 GPUs, more than standard-nc24ads-a100-v4's 1" in warning
    assert "a100-pcie-80gb's catalog $2.40/GPU-hour" in warning


def test_the_check_refuses_a_plan_priced_off_the_node_its_pods_land_on():
    plan = resolve_text(CHAT)
    context = PassContext(load_catalog(None))
    assert check_price_on_node(plan, context) is plan
    cheap = plan.hardware.model_copy(update={"usd_per_gpu_hour": 1.86})  # g6e.xlarge's, where the pod does not fit
    with pytest.raises(NodePriceMismatch, match="land on g6e.2xlarge"):
        check_price_on_node(plan.model_copy(update={"hardware": cheap}), context)
