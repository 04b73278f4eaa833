"""Node shapes: pods request their GPU share of the catalog node they are priced on, multi-node training pods get the
fabric's device, the shared model cache names a ReadWriteMany StorageClass, the training image is new enough for the
emitted scripts, and a Hugging Face Trainer/TRL script is recognised (or refused) under entrypoint.kind auto."""

from __future__ import annotations

import json

import pytest
import yaml

from compiler.catalog.loader import load_gpus
from compiler.diagnostics import FieldRefused
from compiler.pipeline import compile_plan
from tests.conftest import EXAMPLES, REPO
from tests.fixtures.resolved_plans import deployed
from tests.test_target_torchrun import small_training_plan

GPUS = load_gpus()
MIB, GIB = 2**20, 2**30


def cpu_millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def memory_bytes(quantity: str) -> int:
    units = {"Mi": MIB, "Gi": GIB}
    return int(quantity[:-2]) * units[quantity[-2:]]


def allocatable(node) -> tuple[float, float]:
    """Independent of compiler/deployment/nodes.py: the GKE/EKS CPU ranges (6% of core 1, 1% of core 2, 0.5% of cores
    3-4, 0.25% above), EKS memory 11 MiB x maxPods + 255 MiB on AWS, else GKE's memory table, 100 MiB eviction, and the
    0.5 CPU / 1 GiB daemonset allowance."""
    cores = node.vcpus
    cpu_reserve = 0.06 * min(cores, 1) + 0.01 * min(max(cores - 1, 0), 1) + 0.005 * min(max(cores - 2, 0), 2)
    cpu_reserve += 0.0025 * max(cores - 4, 0)
    gib = node.memory_bytes / GIB
    if node.provider == "aws":
        memory_reserve = (11 * node.max_pods + 255) * MIB
    else:
        tiers = [(4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02)]
        memory_reserve, start = 0.0, 0.0
        for size, rate in tiers:
            memory_reserve += max(0.0, min(gib, start + size) - start) * rate * GIB
            start += size
    return (cores - cpu_reserve - 0.5) * 1000, node.memory_bytes - memory_reserve - 100 * MIB - GIB


def pod_containers(doc: dict):
    """(pod spec) of every pod template in a document."""
    if isinstance(doc, dict):
        if "containers" in doc:
            yield doc
            return
        for value in doc.values():
            yield from pod_containers(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from pod_containers(value)


def gpu_pods(files: dict[str, str]):
    """(GPU entry, pod spec, GPU container) of every pod that holds GPUs."""
    by_label = {g.k8s_product_label: g for g in GPUS.values()}
    for path, text in files.items():
        if path.startswith("k8s/") and path.endswith(".yaml"):
            for doc in yaml.safe_load_all(text):
                for pod in pod_containers(doc):
                    for c in pod["containers"]:
                        if c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu"):
                            yield by_label[pod["nodeSelector"]["nvidia.com/gpu.product"]], pod, c


def nodes_in_plan(plan: dict) -> list[dict]:
    k8s = plan["deployment"]["kubernetes"]
    found = [u["node"] for u in k8s.get("serving") or []]
    return found + ([k8s["training"]["node"]] if k8s.get("training") else [])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_pod_fits_the_node_it_is_priced_on(example):
    """Requests <= the pod's GPU share of the allocatable CPU and memory of the catalog node plan.json names; that node
    is the one the GPU's price is from (the catalog's first) unless plan.json says why not."""
    files = {f.path: f.text for f in compile_plan(example).files}
    if not any(p.startswith("k8s/") for p in files):
        pytest.skip("no Kubernetes output")
    plan = json.loads(files["plan.json"])
    named = {n["node_type"]: n for n in nodes_in_plan(plan) if n}
    pods = list(gpu_pods(files))
    assert pods
    for gpu, _pod, container in pods:
        gpus = container["resources"]["limits"]["nvidia.com/gpu"]
        requests = container["resources"]["requests"]
        assert "cpu" in requests and "memory" in requests, f"{container['name']}: no CPU/memory request"
        node = next(n for n in gpu.node_types if n.id in named)
        cpu, memory = allocatable(node)
        assert cpu_millicores(requests["cpu"]) <= cpu * gpus / node.gpus + 1, (node.id, requests)
        assert memory_bytes(requests["memory"]) <= memory * gpus / node.gpus + MIB, (node.id, requests)
        if node.id != gpu.node_types[0].id:
            assert f"not {gpu.node_types[0].id}, the node the price is from" in named[node.id]["reason"]


def test_p4d_share_by_hand():
    """p4d.24xlarge: 96 vCPU -> reserve 60 + 10 + 10 + 0.25% x 92,000 = 310 m, - 500 m = 95,190 m; 1152 GiB - (11 x 737
    + 255 = 8,362 MiB) - 100 MiB - 1,024 MiB - 5,128 x 2 MiB of EFA huge pages = 1,159,906 MiB; one GPU of eight:
    11,898 m, 144,988 MiB."""
    from compiler.deployment.nodes import share

    p4d = GPUS["a100-sxm-40gb"].node_types[0]
    assert p4d.id == "p4d.24xlarge"
    assert share(p4d, 1) == (11_898, 144_988 * MIB)


def test_catalog_node_types_are_sourced_and_the_priced_node_holds_a_gpu():
    for gpu in GPUS.values():
        assert gpu.node_types, gpu.id
        assert all(n.source and n.vcpus and n.gpus for n in gpu.node_types)
        assert gpu.node_types[0].id.split(".")[0] in gpu.source or gpu.node_types[0].provider != "aws", gpu.id


# ----------------------------------------------------------------------------------------------- training pods
def multi_node(interconnect: str, **cluster):
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=8,
        cluster={
            "scheduler": "kubernetes",
            "gpus_per_node": 8,
            "interconnect": interconnect,
            "kubernetes": {"shared_storage_class": "efs-sc"},
            **cluster,
        },
    )
    # the fixture's hardware is built by hand: the fabric the sizing assumed is set here
    return deployed(
        plan.model_copy(update={"hardware": plan.hardware.model_copy(update={"interconnect": interconnect})})
    )


def trainer_container(plan) -> dict:
    from compiler.targets import k8s_training
    from tests.test_target_torchrun import render_training

    rendered = render_training(plan)
    text = k8s_training.render(plan, rendered)[0].text
    (pod,) = [p for d in yaml.safe_load_all(text) for p in pod_containers(d)]
    return pod["containers"][0]


@pytest.mark.parametrize(
    "interconnect, resource, count",
    [("efa-3200g", "vpc.amazonaws.com/efa", 32), ("ib-400g", "rdma/rdma_shared_device_a", 1), ("eth-100g", None, 0)],
)
def test_multi_node_trainer_requests_the_fabric_device(interconnect, resource, count):
    c = trainer_container(multi_node(interconnect))
    limits = c["resources"]["limits"]
    if resource:
        assert limits[resource] == count == c["resources"]["requests"][resource]
        assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    else:
        assert not any("rdma" in k or "efa" in k for k in limits) and "securityContext" not in c


def test_efa_trainer_requests_huge_pages_and_memory_beside_the_nodes_pool():
    """EFA pods request hugepages-2Mi: 5120Mi (request = limit); their memory request is a share of what the kubelet
    leaves allocatable once the node's 5,128 pre-allocated 2-MiB pages are taken out, so both fit together."""
    from compiler.deployment.nodes import allocatable

    c = trainer_container(multi_node("efa-3200g"))
    assert c["resources"]["limits"]["hugepages-2Mi"] == "5120Mi" == c["resources"]["requests"]["hugepages-2Mi"]
    p5 = GPUS["h100-sxm-80gb"].node_types[0]
    reserve = (11 * p5.max_pods + 255 + 100 + 1024 + 5128 * 2) * MIB
    assert allocatable(p5)[1] == p5.memory_bytes - reserve
    assert memory_bytes(c["resources"]["requests"]["memory"]) <= p5.memory_bytes - reserve
    assert "hugepages-2Mi" not in trainer_container(multi_node("ib-400g"))["resources"]["limits"]


def test_efa_trainer_lands_on_the_aws_node_and_exports_the_efa_nccl_settings():
    plan = multi_node("efa-3200g")
    assert plan.deployment.kubernetes.training.node.node_type == "p5.48xlarge"
    env = {e.name: e.value for e in plan.deployment.launcher.fabric_env}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_ib_trainer_lands_on_an_infiniband_node():
    node = multi_node("ib-400g").deployment.kubernetes.training.node
    assert node.provider in ("azure", "on-prem") and "a ib fabric" in node.reason


# ----------------------------------------------------------------------------------------------- storage class
def test_a_shared_claim_without_a_readwritemany_class_is_refused():
    with pytest.raises(FieldRefused) as refused:
        small_training_plan(nodes=2, gpus_per_node=8, cluster={"scheduler": "kubernetes", "gpus_per_node": 8})
    assert refused.value.loc == ("cluster", "kubernetes", "shared_storage_class")
    assert refused.value.code == "storage-class-missing"


def test_the_shared_claim_names_the_readwritemany_class():
    from compiler.targets import k8s_training
    from tests.test_target_torchrun import render_training

    plan = multi_node("ib-400g")
    docs = list(yaml.safe_load_all(k8s_training.render(plan, render_training(plan))[0].text))
    (claim,) = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["spec"]["storageClassName"] == "efs-sc"


def test_the_missing_class_is_a_located_cli_error(cli, tmp_path):
    plan = (REPO / "examples/llama3-405b-serve.yaml").read_text().replace(", shared_storage_class: lustre-csi", "")
    path = tmp_path / "serve.yaml"
    path.write_text(plan)
    result = cli(path, "-o", tmp_path / "out")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "error: cluster.kubernetes.shared_storage_class:" in result.stderr
    assert "[storage-class-missing]" in result.stderr


# ----------------------------------------------------------------------------------------------- image
def test_default_training_image_has_the_torch_fsdp_tp_needs():
    plan = multi_node("ib-400g")
    assert plan.deployment.kubernetes.training.image == "nvcr.io/nvidia/pytorch:25.02-py3"
    assert "torch.distributed.fsdp.fully_shard" in plan.deployment.kubernetes.training.image_reason


def test_an_old_ngc_image_is_refused_for_an_fsdp_tp_plan():
    from compiler.deployment.images import check_image
    from tests.fixtures.resolved_plans import training_plan

    plan = training_plan()
    plan = plan.model_copy(update={"parallelism": plan.parallelism.model_copy(update={"framework": "fsdp", "tp": 2})})
    with pytest.raises(FieldRefused) as refused:
        check_image(plan, "nvcr.io/nvidia/pytorch:24.05-py3", ("cluster", "kubernetes", "image"))
    assert refused.value.code == "image-too-old"
    check_image(plan, "nvcr.io/nvidia/pytorch:25.02-py3", ("cluster", "kubernetes", "image"))


# ----------------------------------------------------------------------------------------------- HF / TRL scripts
def deepspeed_plan(script: str, args=()):
    return small_training_plan(
        framework="deepspeed",
        zero_stage=2,
        train={"tokens": "1M", "entrypoint": {"script": script, "args": list(args)}},
    )


@pytest.mark.parametrize(
    "script, args, kind",
    [
        ("/opt/trl/trl/scripts/sft.py", [], "hf-trainer"),
        ("run_clm.py", [], "hf-trainer"),
        ("train.py", ["--output_dir", "/ckpt"], "hf-trainer"),
        ("train.py", [], "deepspeed"),
        ("run_clm_no_trainer.py", [], "deepspeed"),
    ],
)
def test_auto_recognises_a_trainer_script(script, args, kind):
    launch = deepspeed_plan(script, args).deployment.launcher
    assert launch.kind == kind
    assert (launch.config_flag == "--deepspeed") == (kind == "hf-trainer")


def test_a_script_that_only_looks_like_a_trainer_script_is_refused():
    with pytest.raises(FieldRefused) as refused:
        deepspeed_plan("my_sft_job.py")
    assert refused.value.loc == ("train", "entrypoint", "script") and refused.value.code == "ambiguous-entrypoint"
