"""Kubernetes training job: numbers from the plan in the right places; JobSet and PyTorchJob valid per CRD."""

from __future__ import annotations

import pydantic
import pytest
import yaml

from compiler.pipeline import render, render_files
from compiler.targets import k8s_training
from compiler.targets.k8s_common import literal, quantity_bytes
from tests.fixtures.resolved_plans import deployed, serving_plan, training_plan
from tests.tools.kubelet import kubelet_expand
from tests.tools.realtools import validate_k8s

HOSTILE = 'x\'; $(touch /tmp/pwned) `id` "q" $(MASTER_ADDR) {a: b} - &anchor *alias # c: d\\n'
ON_DEMAND = {
    "scheduler": "kubernetes",
    "gpus": ["h100-sxm-80gb"],
    "kubernetes": {"namespace": "ml", "shared_storage_class": "lustre-csi"},
}
SPOT = {**ON_DEMAND, "pricing": "spot"}
PYTORCHJOB = {
    **ON_DEMAND,
    "kubernetes": {"namespace": "ml", "shared_storage_class": "lustre-csi", "job_api": "pytorchjob"},
}


def documents(plan) -> list[dict]:
    return list(yaml.safe_load_all(render_files(plan, only=("k8s_training",))[0].text))


def docs(plan) -> dict[str, dict]:
    return {d["kind"]: d for d in documents(plan)}


def pod_of(job: dict, replica: str = "Master") -> dict:
    if job["kind"] == "JobSet":
        return job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]


def env_of(pod: dict) -> dict[str, dict]:
    return {e["name"]: e for e in pod["containers"][0]["env"]}


def test_applies_to_kubernetes_training_only():
    assert k8s_training.applies(training_plan())  # scheduler: both
    assert not k8s_training.applies(training_plan(cluster={"scheduler": "slurm", "gpus": ["h100-sxm-80gb"]}))
    assert not k8s_training.applies(serving_plan())


def test_documents_come_in_kind_order():
    assert [d["kind"] for d in documents(training_plan())] == ["ConfigMap", "PersistentVolumeClaim", "JobSet"]
    assert [d["kind"] for d in documents(training_plan(cluster=PYTORCHJOB))] == [
        "ConfigMap",
        "PersistentVolumeClaim",
        "PyTorchJob",
    ]


def test_jobset_runs_one_pod_per_node_with_all_its_gpus():
    job = docs(training_plan())["JobSet"]
    spec = job["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["parallelism"] == spec["completions"] == 8 and spec["completionMode"] == "Indexed"  # 8 nodes
    pod = pod_of(job)
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8  # gpus_per_node
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    term = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod_labels(job).items()  # selects its own pods


def pod_labels(job: dict) -> dict:
    return job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]


def test_jobset_env_tells_the_launcher_where_to_meet():
    job = docs(training_plan())["JobSet"]
    env = env_of(pod_of(job))
    # <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>, the DNS name JobSet gives pod 0
    name, rjob = job["metadata"]["name"], job["spec"]["replicatedJobs"][0]["name"]
    assert env["MASTER_ADDR"]["value"] == f"{name}-{rjob}-0-0.{job['spec']['network']['subdomain']}"
    assert env["MASTER_ADDR"]["value"] == "llama3-8b-pretrain-trainer-0-0.llama3-8b-pretrain"
    assert job["spec"]["network"]["enableDNSHostnames"] is True
    assert (
        env["MASTER_PORT"]["value"] == "29500"
        and env["NNODES"]["value"] == "8"
        and env["NPROC_PER_NODE"]["value"] == "8"
    )
    assert (
        env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    assert pod_of(job)["containers"][0]["command"] == ["bash", "/mlinfra/launch/torchrun.sh"]


def test_secret_is_referenced_never_inlined():
    plan = training_plan(
        cluster={
            **ON_DEMAND,
            "kubernetes": {"namespace": "ml", "shared_storage_class": "lustre-csi", "secret_name": "my-hf"},
        }
    )
    token = env_of(pod_of(docs(plan)["JobSet"]))["HF_TOKEN"]
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "my-hf", "key": "HF_TOKEN", "optional": True}},
    }
    assert "kind: Secret" not in render_files(plan, only=("k8s_training",))[0].text


def test_checkpoint_pvc_holds_the_retained_checkpoints():
    claim = docs(training_plan())["PersistentVolumeClaim"]
    # 128,484,179,968 B × (3 kept + 1 being written) × 1.10 = 565,330,391,859 B = 526.5 GiB → 527Gi
    assert claim["spec"]["resources"]["requests"]["storage"] == "527Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    job = docs(training_plan())["JobSet"]
    mount = {m["name"]: m["mountPath"] for m in pod_of(job)["containers"][0]["volumeMounts"]}
    assert mount["checkpoints"] == "/lustre/ckpt"  # the plan's checkpoint dir, where the launcher points the script
    claims = [v for v in pod_of(job)["volumes"] if "persistentVolumeClaim" in v]
    assert claims[0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_storage_class_from_the_plan():
    plan = training_plan(
        cluster={
            **ON_DEMAND,
            "kubernetes": {"namespace": "ml", "storage_class": "lustre-rwx"},
        }
    )
    assert docs(plan)["PersistentVolumeClaim"]["spec"]["storageClassName"] == "lustre-rwx"


def test_shm_is_a_memory_emptydir_of_one_gib_per_gpu():
    volumes = {v["name"]: v for v in pod_of(docs(training_plan())["JobSet"])["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}  # 8 GPUs × 1 GiB


def test_quantities_round_up_to_whole_gib():
    assert quantity_bytes(512 * 2**30) == "512Gi"
    assert quantity_bytes(512 * 2**30 + 1) == "513Gi"
    assert quantity_bytes(1) == "1Gi"


def test_launcher_in_the_configmap_is_the_generated_one():
    plan = training_plan()
    config_map = docs(plan)["ConfigMap"]
    files = {f.path: f for f in render(plan).files}
    assert config_map["data"]["launch__torchrun.sh"] == files["launch/torchrun.sh"].text  # byte-identical to Slurm's
    assert config_map["data"]["deepspeed__ds_config.json"] == files["deepspeed/ds_config.json"].text
    items = pod_of(docs(plan)["JobSet"])["volumes"][0]["configMap"]["items"]
    assert {i["path"]: i["mode"] for i in items} == {"launch/torchrun.sh": 0o755, "deepspeed/ds_config.json": 0o644}


def test_spot_plans_restart_more_and_preemption_costs_no_retry():
    spot = docs(training_plan(cluster=SPOT))["JobSet"]
    assert spot["spec"]["failurePolicy"]["maxRestarts"] == 20
    assert spot["spec"]["failurePolicy"]["rules"] == [
        {
            "name": "restart-on-preemption",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
        }
    ]
    job = spot["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podFailurePolicy"]["rules"][0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert job["backoffLimit"] == 0 and pod_of(spot)["restartPolicy"] == "Never"  # podFailurePolicy needs Never

    on_demand = docs(training_plan(cluster=ON_DEMAND))["JobSet"]
    assert on_demand["spec"]["failurePolicy"] == {"maxRestarts": 3}
    assert "podFailurePolicy" not in on_demand["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (
        docs(training_plan(cluster={**PYTORCHJOB, "pricing": "spot"}))["PyTorchJob"]["spec"]["runPolicy"][
            "backoffLimit"
        ]
        == 20
    )
    assert docs(training_plan(cluster=PYTORCHJOB))["PyTorchJob"]["spec"]["runPolicy"]["backoffLimit"] == 3


def test_pytorchjob_follows_the_operator():
    job = docs(training_plan(cluster=PYTORCHJOB))["PyTorchJob"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 7  # 8 nodes
    for replica in ("Master", "Worker"):
        pod = pod_of(job, replica)
        container = pod["containers"][0]
        assert specs[replica]["restartPolicy"] == "OnFailure"
        assert container["name"] == "pytorch"  # the operator injects its env into this container...
        assert container["ports"] == [
            {"name": "pytorchjob-port", "containerPort": 29500}
        ]  # ...MASTER_PORT from this port
        assert "MASTER_ADDR" not in env_of(pod) and "MASTER_PORT" not in env_of(pod)  # no duplicates of the operator's
        assert env_of(pod)["NNODES"]["value"] == "8"
    one_node = deployed(
        training_plan(cluster=PYTORCHJOB).model_copy(
            update={"hardware": training_plan().hardware.model_copy(update={"nodes": 1, "gpus": 8})}
        )
    )
    assert set(docs(one_node)["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]) == {"Master"}


def test_namespace_is_validated_before_it_reaches_a_manifest():
    with pytest.raises(pydantic.ValidationError):
        training_plan(cluster={**ON_DEMAND, "kubernetes": {"namespace": "ml\nkind: Secret"}})


def test_hostile_strings_stay_inert_values():
    plan = training_plan(
        train={
            "tokens": "1T",
            "seq_len": 8192,
            "entrypoint": {"script": "t.py", "args": ["--x", HOSTILE], "env": {"X": HOSTILE}},
        },
        cluster={
            **ON_DEMAND,
            "kubernetes": {
                "namespace": "ml",
                "shared_storage_class": "lustre-csi",
                "image": HOSTILE,
                "node_selector": {"pool": "a-b_c.9"},
            },
        },
    )
    plan = deployed(
        plan.model_copy(update={"training": plan.training.model_copy(update={"checkpoint_dir": "/ckpt/" + HOSTILE})})
    )
    pod = pod_of(docs(plan)["JobSet"])
    container = pod["containers"][0]
    assert container["image"] == HOSTILE  # parsed back: still one plain string
    assert pod["nodeSelector"]["pool"] == "a-b_c.9"  # a hostile label value is refused by the plan's schema
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["checkpoints"] == "/ckpt/" + HOSTILE
    # the plan's env and args reach the process only through the launcher (shell-quoted by the torchrun target),
    # never through the kubelet's $(VAR) expansion of env values / command / args
    assert "X" not in env_of(pod) and HOSTILE not in container["command"]
    launcher = next(f.text for f in render(plan).files if f.path == "launch/torchrun.sh")
    assert docs(plan)["ConfigMap"]["data"]["launch__torchrun.sh"] == launcher


def test_literal_survives_the_kubelet_expansion():
    defined = {"MASTER_ADDR": "10.0.0.1", "HF_TOKEN": "secret"}
    assert kubelet_expand(HOSTILE, defined) != HOSTILE  # unescaped, $(MASTER_ADDR) would be replaced
    for text in (HOSTILE, "$", "$$", "a$", "$(HF_TOKEN)", "$$(HF_TOKEN)", "$(unterminated", "$x$(y)"):
        assert kubelet_expand(literal(text), defined) == text


def test_manifests_validate_and_a_broken_one_does_not(tmp_path):
    paths = []
    for label, cluster in (
        ("jobset", ON_DEMAND),
        ("jobset-spot", SPOT),
        ("pytorchjob", PYTORCHJOB),
        ("pytorchjob-spot", {**PYTORCHJOB, "pricing": "spot"}),
    ):
        path = tmp_path / f"{label}.yaml"
        path.write_text(render_files(training_plan(cluster=cluster), only=("k8s_training",))[0].text)
        paths.append(path)
    assert validate_k8s(paths) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(paths[0].read_text().replace("replicatedJobs:", "replicatedJob:"))
    errors = validate_k8s([bad])
    assert errors and any("replicatedJob" in e for e in errors)
    bad_pod = tmp_path / "bad-pod.yaml"
    bad_pod.write_text(paths[2].read_text().replace("containerPort: 29500", "containerPort: '29500'"))
    assert validate_k8s([bad_pod])  # a type error deep inside the embedded pod template is caught too
