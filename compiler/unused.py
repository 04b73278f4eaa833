"""Fields the plan gives that would change no output for this plan: refused with their location, so a setting never
silently does nothing (a Slurm partition on a Kubernetes-only plan, LoRA settings on a full fine-tune, ...).

Each rule names the field and why it has no effect; `check_unused` runs after validation, before sizing.
"""

from __future__ import annotations

from typing import Any

from .diagnostics import Diagnostic, PlanInputError
from .plan.spec import PlanSpec, weights_locations
from .source import LoadedYaml

CODE = "unused-field"
SLURM_ONLY = (
    "partition",
    "account",
    "qos",
    "reservation",
    "constraint",
    "extra_directives",
    "memory_per_node",
    "container_mounts",
    "max_time",
)
KUBERNETES_TRAINING = (
    "namespace",
    "job_api",
    "storage_class",
    "shared_storage_class",
    "secret_name",
    "image",
    "tolerations",
    "node_selector",
    "image_pull_secret",
    "object_store",
)
KUBERNETES_SERVING = (
    "namespace",
    "autoscaler",
    "storage_class",
    "shared_storage_class",
    "secret_name",
    "image",
    "tolerations",
    "node_selector",
    "image_pull_secret",
    "object_store",
)
OBJECT_STORE_SCHEMES = ("s3://", "gs://", "az://")
SERVING_IGNORES_PINS = (
    "dp",
    "zero_stage",
    "micro_batch",
    "recompute",
    "offload",
    "cp",
    "ep",
    "vp",
    "pp_first_stage_layers",
    "pp_last_stage_layers",
    "pp_stage_layers",
    "shard_group_gpus",
)


def _given(data: Any, path: tuple) -> bool:
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def unused_fields(spec: PlanSpec, data: Any) -> list[tuple[tuple, str]]:
    """(path, why) for every given field that no output of this plan uses."""
    found: list[tuple[tuple, str]] = []

    def refuse(path: tuple, why: str) -> None:
        if _given(data, path):
            found.append((path, why))

    weights = weights_locations(spec)
    if not any(w.lower().startswith(OBJECT_STORE_SCHEMES) for w in weights):
        refuse(
            ("cluster", "kubernetes", "object_store"),
            "no model.weights in object storage (s3://, gs://, az://) to read",
        )
    training = spec.workload in ("train", "finetune")
    scheduler = spec.cluster.scheduler
    if training:
        if spec.train.method == "full":
            refuse(
                ("train", "lora"),
                "LoRA settings apply to method lora or qlora; this plan trains all weights (method full)",
            )
        if spec.train.checkpoint.every != "auto":
            refuse(
                ("train", "checkpoint", "min_interval"),
                "the floor applies to the Young-Daly interval; train.checkpoint.every is given",
            )
        if spec.train.tokens is not None:
            refuse(("train", "epochs"), "epochs multiply dataset_tokens; with train.tokens given it changes nothing")
        refuse(("budget", "usd_per_month"), "a monthly budget is for serve plans; give budget.usd for a training run")
        refuse(("cluster", "kubernetes", "autoscaler"), "the autoscaler is for serve plans")
        refuse(
            ("model", "quantization"),
            "model.quantization chooses the serving engine's quantization flags; training reads 16-bit weights",
        )
        if scheduler == "kubernetes":
            for key in SLURM_ONLY:
                refuse(
                    ("cluster", "slurm", key), "scheduler kubernetes emits no Slurm job; use scheduler both to get one"
                )
        if scheduler == "slurm":
            for key in KUBERNETES_TRAINING:
                refuse(
                    ("cluster", "kubernetes", key),
                    "scheduler slurm emits no Kubernetes objects; use scheduler both to get them",
                )
    else:
        refuse(("budget", "usd"), "a total budget is for training runs; give budget.usd_per_month for a serve plan")
        refuse(("cluster", "slurm"), "serve plans emit no Slurm job (the engine launchers run under any scheduler)")
        refuse(("cluster", "kubernetes", "job_api"), "job_api is the kind of a training job")
        if scheduler == "slurm":
            for key in KUBERNETES_SERVING:
                if key != "namespace":  # the alert rules select the service's series by namespace
                    refuse(
                        ("cluster", "kubernetes", key),
                        "scheduler slurm emits no Kubernetes objects; use scheduler both to get them",
                    )
            refuse(
                ("serve", "min_replicas"),
                "the replica floor is the Kubernetes autoscaler's minReplicas; scheduler slurm emits none",
            )
        for key in SERVING_IGNORES_PINS:
            refuse(("parallelism", key), "serving pins only tp and pp (data parallelism is the replica count)")
    return found


def check_unused(spec: PlanSpec, loaded: LoadedYaml) -> None:
    problems = unused_fields(spec, loaded.data)
    if problems:
        diagnostics = []
        for path, why in problems:
            pos = loaded.position(path, key=True)
            diagnostics.append(
                Diagnostic(
                    pos.line, pos.column, ".".join(map(str, path)), f"has no effect: {why}", CODE, file=loaded.file
                )
            )
        raise PlanInputError(diagnostics, loaded.text)
