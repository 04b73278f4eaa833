"""Credentials by reference (compiler/deployment/credentials.py): an image pull secret, object-store credentials
as a Secret's environment or a workload-identity ServiceAccount; names and identities refused with their location
when they are not what Kubernetes or the weights' cloud accepts; never a secret value in the output."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from compiler.diagnostics import PlanInputError
from compiler.pipeline import compile_plan
from tests.tools.realtools import validate_k8s

ARN = "arn:aws:iam::123456789012:role/llama-weights"
GSA = "llama-weights@my-project-42.iam.gserviceaccount.com"


def _plan(kubernetes: str, weights: str = "s3://models/llama-3.1-8b", workload: str = "serve") -> str:
    body = (
        "serve:\n  engine: vllm\n  traffic: {requests_per_second: 4}\n"
        if workload == "serve"
        else "train: {tokens: 1e9, method: lora}\n"
    )
    return (
        textwrap.dedent(f"""\
        name: llama-creds
        workload: {workload}
        model: {{preset: llama-3.1-8b, hf_id: meta-llama/Llama-3.1-8B-Instruct{', weights: "' + weights + '"' if weights else ""}}}
        precision: bf16
        """)
        + body
        + textwrap.dedent(f"""\
        cluster:
          scheduler: kubernetes
          gpu: {"l40s-48gb" if workload == "serve" else "h100-sxm-80gb"}
          storage: s3
          kubernetes:
            namespace: serving
        """)
        + textwrap.indent(textwrap.dedent(kubernetes), "    ")
    )


def _compile(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return {f.path: f.text for f in compile_plan(path).files}


def _refused(tmp_path: Path, text: str):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(PlanInputError) as exc:
        compile_plan(path)
    return exc.value.diagnostics


def _docs(files: dict[str, str], name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(files[name]) if d]


def test_irsa_service_account_and_pull_secret_reach_every_pod(tmp_path):
    files = _compile(tmp_path, _plan(f'image_pull_secret: regcred\nobject_store: {{workload_identity: "{ARN}"}}\n'))
    docs = _docs(files, "k8s/serving.yaml")
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert account["metadata"]["name"] == "llama-creds-weights"
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ARN}
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "llama-creds-weights" and pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert "envFrom" not in pod["containers"][0]  # the identity comes from the ServiceAccount, not from keys
    assert docs[0]["kind"] == "ServiceAccount"  # created before the pods that use it
    path = tmp_path / "serving.yaml"
    path.write_text(files["k8s/serving.yaml"])
    assert validate_k8s([path]) == []


def test_gke_identity_binds_through_the_gke_annotation(tmp_path):
    files = _compile(
        tmp_path,
        _plan(
            f'object_store: {{workload_identity: "{GSA}", service_account: llama-reader}}\n',
            weights="gs://models/llama-3.1-8b",
        ),
    )
    (account,) = [d for d in _docs(files, "k8s/serving.yaml") if d["kind"] == "ServiceAccount"]
    assert (account["metadata"]["name"], account["metadata"]["annotations"]) == (
        "llama-reader",
        {"iam.gke.io/gcp-service-account": GSA},
    )


def test_object_store_secret_is_the_weight_readers_environment_by_reference(tmp_path):
    files = _compile(tmp_path, _plan("object_store: {secret: s3-reader}\n"))
    pod = next(d for d in _docs(files, "k8s/serving.yaml") if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3-reader"}}]
    assert "serviceAccountName" not in pod and not any(
        d["kind"] == "ServiceAccount" for d in _docs(files, "k8s/serving.yaml")
    )
    assert "Secret s3-reader" in files["REPORT.md"]


def test_a_training_job_reading_s3_weights_gets_the_same_references(tmp_path):
    files = _compile(
        tmp_path, _plan("image_pull_secret: regcred\nobject_store: {secret: s3-reader}\n", workload="finetune")
    )
    docs = _docs(files, "k8s/training.yaml")
    job = next(d for d in docs if d["kind"] == "JobSet")
    pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3-reader"}}]


@pytest.mark.parametrize(
    "kubernetes, weights, path, says",
    [
        (
            f'object_store: {{workload_identity: "{GSA}"}}\n',
            "s3://m/x",
            "cluster.kubernetes.object_store.workload_identity",
            "IAM role ARN",
        ),
        (
            f'object_store: {{workload_identity: "{ARN}"}}\n',
            "gs://m/x",
            "cluster.kubernetes.object_store.workload_identity",
            "Google service-account",
        ),
        ("object_store: {secret: gcs-key}\n", "gs://m/x", "cluster.kubernetes.object_store.secret", "s3:// only"),
        (
            "object_store: {secret: s3-reader}\n",
            "",
            "cluster.kubernetes.object_store",
            "no model.weights in object storage",
        ),
        (
            f'object_store: {{secret: s3-reader, workload_identity: "{ARN}"}}\n',
            "s3://m/x",
            "cluster.kubernetes.object_store",
            "exactly one",
        ),
        (
            'object_store: {workload_identity: "arn:aws:iam::1:role/x"}\n',
            "s3://m/x",
            "cluster.kubernetes.object_store.workload_identity",
            "",
        ),
        ('image_pull_secret: "Reg_Cred"\n', "", "cluster.kubernetes.image_pull_secret", ""),
        ('object_store: {secret: "s3-reader\\n  key: x"}\n', "s3://m/x", "cluster.kubernetes.object_store.secret", ""),
    ],
)
def test_credentials_that_cannot_work_are_refused_at_their_field(tmp_path, kubernetes, weights, path, says):
    (diag, *_) = _refused(tmp_path, _plan(kubernetes, weights=weights))
    assert diag.path == path and diag.line > 1, diag
    assert says in diag.message, diag.message


def test_azure_identity_labels_the_pods_for_the_webhook(tmp_path):
    client = "0f0e0d0c-1b2a-3c4d-5e6f-708192a3b4c5"
    files = _compile(
        tmp_path, _plan(f'object_store: {{workload_identity: "{client}"}}\n', weights="az://models/llama-3.1-8b")
    )
    docs = _docs(files, "k8s/serving.yaml")
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert account["metadata"]["annotations"] == {"azure.workload.identity/client-id": client}
    template = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert template["spec"]["serviceAccountName"] == "llama-creds-weights"
