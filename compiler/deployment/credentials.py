"""Credentials a deployment references — never their values: the Hugging Face token (HF_TOKEN from a Secret), an image
pull secret, and how pods reach weights in object storage (a Secret's environment, or a workload-identity
ServiceAccount). Names are the plan's, validated as Kubernetes names (plan/spec_cluster.py); the identity's form is
checked against the weights' scheme before the passes (serve_checks.py)."""

from __future__ import annotations

import re

from ..plan.deployment_fields import DeploymentDecision
from ..plan.spec import PlanSpec, weights_locations
from ..plan.spec_cluster import AZURE_CLIENT_ID, GCP_SERVICE_ACCOUNT, IAM_ROLE_ARN

# ServiceAccount annotation (and pod label) that binds pods to a cloud identity, per identity form:
# EKS IRSA: eks.amazonaws.com/role-arn (AWS EKS docs, "Assign IAM roles to Kubernetes service accounts");
# GKE: iam.gke.io/gcp-service-account (GKE docs, "Workload Identity Federation for GKE", linking a KSA to an IAM SA);
# Azure: azure.workload.identity/client-id on the ServiceAccount + the pod label azure.workload.identity/use: "true"
# (Azure Workload Identity docs, "Service account labels and annotations").
IDENTITY_BINDINGS = (
    (IAM_ROLE_ARN, {"eks.amazonaws.com/role-arn": "{id}"}, {}, "EKS IAM role for service accounts"),
    (GCP_SERVICE_ACCOUNT, {"iam.gke.io/gcp-service-account": "{id}"}, {}, "GKE Workload Identity"),
    (
        AZURE_CLIENT_ID,
        {"azure.workload.identity/client-id": "{id}"},
        {"azure.workload.identity/use": "true"},
        "Azure Workload Identity",
    ),
)
SERVICE_ACCOUNT_SUFFIX = "weights"  # default ServiceAccount name: <plan>-weights


def identity_binding(identity: str) -> tuple[dict[str, str], dict[str, str], str]:
    """(ServiceAccount annotations, pod labels, what binds them) for a validated workload identity."""
    for pattern, service_annotations, pod_labels, what in IDENTITY_BINDINGS:
        if re.fullmatch(pattern, identity):
            return {k: v.format(id=identity) for k, v in service_annotations.items()}, dict(pod_labels), what
    # plan/spec_cluster.py's pattern admits only the three forms
    raise ValueError(f"not a workload identity: {identity!r}")


def credentials(spec: PlanSpec, name: str) -> tuple[dict, DeploymentDecision]:
    """The Kubernetes section's credential fields and the decision that states them."""
    k8s = spec.cluster.kubernetes
    store = k8s.object_store
    fields = {
        "image_pull_secrets": [k8s.image_pull_secret] if k8s.image_pull_secret else [],
        "object_store_secret": store.secret if store and store.secret else "",
        "service_account": "",
        "service_account_annotations": {},
        "identity_pod_labels": {},
    }
    parts = [f"HF_TOKEN from Secret {k8s.secret_name} key HF_TOKEN (optional: public models need none)"]
    if k8s.image_pull_secret:
        parts.append(f"images pulled with Secret {k8s.image_pull_secret} (imagePullSecrets)")
    if store and store.secret:
        parts.append(
            f"object-store keys from Secret {store.secret} as the environment of the containers that read the weights (envFrom)"
        )
    elif store:
        annotations, pod_labels, what = identity_binding(store.workload_identity)
        account = store.service_account or f"{name}-{SERVICE_ACCOUNT_SUFFIX}"
        fields |= {
            "service_account": account,
            "service_account_annotations": annotations,
            "identity_pod_labels": pod_labels,
        }
        parts.append(f"weights read as {store.workload_identity} through ServiceAccount {account} ({what})")
    elif any(w.lower().startswith(("s3://", "gs://", "az://")) for w in weights_locations(spec)):
        parts.append("no object-store credentials: the pods rely on the node's own identity or a public bucket")
    decision = DeploymentDecision(
        topic="secrets",
        choice="; ".join(parts),
        reason=(
            "by reference only: the plan names Secrets and identities, no value reaches a generated file; names are "
            "validated as Kubernetes names (DNS-1123 subdomains), identities by their cloud's form"
        ),
    )
    return fields, decision
