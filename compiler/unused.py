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
    rules = _object_store_rules(spec)
    rules += _training_rules(spec) if spec.workload in ("train", "finetune") else _serving_rules(spec)
    return [(path, why) for path, why in rules if _given(data, path)]


def _object_store_rules(spec: PlanSpec) -> list[tuple[tuple, str]]:
    """The object store is unused when no model.weights location is in object storage."""
    if any(w.lower().startswith(OBJECT_STORE_SCHEMES) for w in weights_locations(spec)):
        return []
    return [
        (("cluster", "kubernetes", "object_store"), "no model.weights in object storage (s3://, gs://, az://) to read")
    ]


def _training_rules(spec: PlanSpec) -> list[tuple[tuple, str]]:
    """(path, why) a training plan would not use, given or not."""
    rules: list[tuple[tuple, str]] = []
    if spec.train.method == "full":
        rules.append(
            (
                ("train", "lora"),
                "LoRA settings apply to method lora or qlora; this plan trains all weights (method full)",
            )
        )
    if spec.train.checkpoint.every != "auto":
        rules.append(
            (
                ("train", "checkpoint", "min_interval"),
                "the floor applies to the Young-Daly interval; train.checkpoint.every is given",
            )
        )
    if spec.train.tokens is not None:
        rules.append(
            (("train", "epochs"), "epochs multiply dataset_tokens; with train.tokens given it changes nothing")
        )
    rules += [
        (("budget", "usd_per_month"), "a monthly budget is for serve plans; give budget.usd for a training run"),
        (("cluster", "kubernetes", "autoscaler"), "the autoscaler is for serve plans"),
        (
            ("model", "quantization"),
            "model.quantization chooses the serving engine's quantization flags; training reads 16-bit weights",
        ),
    ]
    scheduler = spec.cluster.scheduler
    if scheduler == "kubernetes":
        why = "scheduler kubernetes emits no Slurm job; use scheduler both to get one"
        rules += [(("cluster", "slurm", key), why) for key in SLURM_ONLY]
    if scheduler == "slurm":
        why = "scheduler slurm emits no Kubernetes objects; use scheduler both to get them"
        rules += [(("cluster", "kubernetes", key), why) for key in KUBERNETES_TRAINING]
    return rules


def _serving_rules(spec: PlanSpec) -> list[tuple[tuple, str]]:
    """(path, why) a serve plan would not use, given or not."""
    rules: list[tuple[tuple, str]] = [
        (("budget", "usd"), "a total budget is for training runs; give budget.usd_per_month for a serve plan"),
        (("cluster", "slurm"), "serve plans emit no Slurm job (the engine launchers run under any scheduler)"),
        (("cluster", "kubernetes", "job_api"), "job_api is the kind of a training job"),
    ]
    if spec.cluster.scheduler == "slurm":
        why = "scheduler slurm emits no Kubernetes objects; use scheduler both to get them"
        # the alert rules select the service's series by namespace
        rules += [(("cluster", "kubernetes", key), why) for key in KUBERNETES_SERVING if key != "namespace"]
        rules.append(
            (
                ("serve", "min_replicas"),
                "the replica floor is the Kubernetes autoscaler's minReplicas; scheduler slurm emits none",
            )
        )
    why = "serving pins only tp and pp (data parallelism is the replica count)"
    rules += [(("parallelism", key), why) for key in SERVING_IGNORES_PINS]
    return rules


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
