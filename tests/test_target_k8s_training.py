"""Kubernetes training job: numbers from the plan in the right places; JobSet and PyTorchJob valid per CRD."""

from __future__ import annotations

import yaml

from compiler.pipeline import render
from compiler.targets import k8s_training
from tests.fixtures.resolved_plans import training_plan
from tests.tools.realtools import validate_k8s

HOSTILE = "x'; $(touch /tmp/pwned) `id` {a: b}"


def docs(plan):
    return {d["kind"]: d for d in yaml.safe_load_all(k8s_training.render(plan)[0].text)}


def pod_of(job):
    if job["kind"] == "JobSet":
        return job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_jobset_runs_one_pod_per_node_with_all_its_gpus():
    d = docs(training_plan())
    job = d["JobSet"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 8  # 8 nodes in the fixture
    container = pod_of(d["JobSet"])["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod_of(d["JobSet"])["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    env = {e["name"]: e for e in container["env"]}
    assert env["MASTER_ADDR"]["value"] == "llama3-8b-pretrain-trainer-0-0.llama3-8b-pretrain"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token" and "value" not in env["HF_TOKEN"]


def test_checkpoint_pvc_holds_the_retained_checkpoints():
    claim = docs(training_plan())["PersistentVolumeClaim"]
    # 128,484,179,968 B × (3 kept + 1 being written) × 1.1 = 565.3e9 B → 527 GiB
    assert claim["spec"]["resources"]["requests"]["storage"] == "527Gi"


def test_launcher_in_the_configmap_is_the_generated_one():
    plan = training_plan()
    cm = docs(plan)["ConfigMap"]
    launcher = next(f.text for f in render(plan).files if f.path == "launch/torchrun.sh")
    assert cm["data"]["launch__torchrun.sh"] == launcher  # byte-identical to the Slurm launcher
    assert "deepspeed__ds_config.json" in cm["data"]


def test_spot_plans_restart_more():
    assert docs(training_plan(cluster={"scheduler": "kubernetes", "gpus": ["h100-sxm-80gb"], "pricing": "spot"}))["JobSet"]["spec"]["failurePolicy"]["maxRestarts"] == 20
    assert docs(training_plan())["JobSet"]["spec"]["failurePolicy"]["maxRestarts"] == 3


def test_pytorchjob_option_has_master_and_workers():
    plan = training_plan(cluster={"scheduler": "kubernetes", "gpus": ["h100-sxm-80gb"], "kubernetes": {"namespace": "ml", "job_api": "pytorchjob"}})
    specs = docs(plan)["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 7


def test_hostile_strings_stay_inert_values():
    plan = training_plan(train={"tokens": "1T", "seq_len": 8192, "entrypoint": {"script": "t.py", "env": {"X": HOSTILE}}},
                         cluster={"scheduler": "kubernetes", "gpus": ["h100-sxm-80gb"], "kubernetes": {"namespace": "ml", "image": HOSTILE}})
    pod = pod_of(docs(plan)["JobSet"])
    assert pod["containers"][0]["image"] == HOSTILE
    assert {"name": "X", "value": HOSTILE} in pod["containers"][0]["env"]


def test_manifests_validate_and_a_broken_one_does_not(tmp_path):
    paths = []
    for api in ("jobset", "pytorchjob"):
        plan = training_plan(cluster={"scheduler": "kubernetes", "gpus": ["h100-sxm-80gb"], "kubernetes": {"namespace": "ml", "job_api": api}})
        path = tmp_path / f"{api}.yaml"
        path.write_text(k8s_training.render(plan)[0].text)
        paths.append(path)
    assert validate_k8s(paths) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(paths[0].read_text().replace("replicatedJobs:", "replicatedJob:"))
    assert validate_k8s([bad])
