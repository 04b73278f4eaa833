"""Target: kustomize — `kustomization.yaml` at the top of out/<plan>/, listing every Kubernetes object file the plan
emits (k8s/*.yaml and the PrometheusRule), so `kubectl apply -k out/<plan>` applies the whole stack.

It sits beside k8s/, not in it: `kubectl apply -f out/<plan>/k8s/` sends every file of that folder to the API server,
and a Kustomization is not an object the server knows. The list is the rendered paths of the targets it needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target, dump_yaml_documents


def applies(plan: ResolvedPlan) -> bool:
    return plan.deployment is not None and plan.deployment.scheduler in ("kubernetes", "both")


def resources(plan: ResolvedPlan, rendered: Mapping[str, OutputFile]) -> list[str]:
    files = plan.deployment.files
    objects = (files.k8s_training, files.k8s_serving, files.monitoring_rules)
    return sorted(path for path in rendered if path in objects)


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources(plan, rendered or {}),
    }
    return [OutputFile(plan.deployment.files.kustomization, dump_yaml_documents([kustomization]))]


TARGET = Target("kustomize", applies, render, needs=("k8s_training", "k8s_serving", "monitoring"))
