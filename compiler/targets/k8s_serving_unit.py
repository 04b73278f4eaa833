"""One serving unit as the k8s_serving target sees it: its view of the plan and its decisions, the engine's command
line, and the metadata and selector every document of the unit carries. Not a target itself."""

from __future__ import annotations

from dataclasses import dataclass

from ..deployment.units import unit_views
from ..plan import deployment_serving as decided_types
from ..plan.resolved import ResolvedPlan, Serving
from .base import shell_words
from .engine_common import tgi_launcher_words, vllm_serve_args
from .k8s_common import labels

ANNOTATION = "mlinfra.io/"  # prefix of the annotations that carry the reasons for chosen numbers

LWS_LEADER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on the leader pod (LWS API)


@dataclass(frozen=True)
class ServingUnit:
    """One independently scaled deployment: the whole service, or one stage of a multi-stage service.

    `plan` is a view of the ResolvedPlan whose model/hardware/serving sections are this unit's, so the shared
    helpers (node selector, labels...) that read a plan see the unit's own GPU; `decided` holds the unit's
    deployment decisions (plan.deployment.kubernetes.serving) and `engine_decision` its engine arguments.
    """

    plan: ResolvedPlan
    decided: decided_types.ServingUnit
    engine_decision: decided_types.Engine

    @property
    def name(self) -> str:
        return self.decided.name

    @property
    def component(self) -> str:
        return self.decided.component

    @property
    def input_queue(self) -> str:
        return self.decided.input_queue

    @property
    def output_queue(self) -> str:
        return self.decided.output_queue

    @property
    def serving(self) -> Serving:
        return self.plan.serving

    @property
    def engine(self) -> decided_types.ServingUnit:
        """Health path, queue metric and ports of the unit's engine."""
        return self.decided

    @property
    def multi_node(self) -> bool:
        return self.decided.pods_per_replica > 1


def serving_units(plan: ResolvedPlan) -> list[ServingUnit]:
    """The units to deploy: one per stage of a multi-stage service, else the service itself."""
    units = {u.stage: u for u in plan.deployment.kubernetes.serving}
    engines = {e.stage: e for e in plan.deployment.engines}
    return [ServingUnit(v.plan, units[v.stage], engines[v.stage]) for v in unit_views(plan)]


# ----------------------------------------------------------------------------------------------- engine commands
def model_word(model_id: str) -> str:
    """The model as a positional argument that argparse cannot take for a flag. Hub ids never start with "-"; a local
    path that does is the same path with "./" before it."""
    return f"./{model_id}" if model_id.startswith("-") else model_id


def vllm_args(unit: ServingUnit) -> list[str]:
    """`vllm serve` arguments: exactly those of the vLLM target (vllm/serve.sh), so no two files disagree."""
    return vllm_serve_args(unit.engine_decision)


def tgi_args(unit: ServingUnit) -> list[str]:
    """text-generation-launcher arguments: exactly those of the TGI target (tgi/launcher.sh)."""
    return tgi_launcher_words(unit.engine_decision)


def triton_args(unit: ServingUnit) -> list[str]:
    """tritonserver over the model repository the triton target emits, copied onto the model-cache volume."""
    return [
        f"--model-repository={unit.plan.deployment.kubernetes.model_cache_mount}/model_repository",
        f"--http-port={unit.decided.http_port}",
        f"--metrics-port={unit.decided.metrics_port}",
        f"--exit-timeout-secs={unit.engine_decision.exit_timeout_seconds}",
    ]


def engine_command(unit: ServingUnit) -> tuple[list[str], list[str]]:
    """(command, args) of the engine container of a single-pod replica or of an LWS leader."""
    engine = unit.serving.engine
    if engine == "vllm":
        if not unit.multi_node:
            return ["vllm", "serve"], vllm_args(unit)
        # The leader starts the Ray head, waits until every worker's GPUs joined the cluster, then serves.
        ready = (
            f'import ray, sys; ray.init(address="auto", logging_level="ERROR"); '
            f'sys.exit(ray.cluster_resources().get("GPU", 0) < {unit.serving.gpus_per_replica})'
        )
        script = (
            f"ray start --head --port={unit.engine_decision.ray_port} && until python3 -c {shell_words([ready])}; "
            f"do sleep {unit.decided.probe_period_seconds}; done && exec vllm serve {shell_words(vllm_args(unit))}"
        )
        return ["bash", "-c"], [script]
    if unit.multi_node:
        raise ValueError(f"engine {engine} cannot span nodes: a replica needs {unit.serving.nodes_per_replica} nodes")
    if engine == "tgi":
        return ["text-generation-launcher"], tgi_args(unit)
    return ["tritonserver"], triton_args(unit)


# ----------------------------------------------------------------------------------------------- documents
def object_meta(unit: ServingUnit, name: str | None = None, annotations: dict[str, str] | None = None) -> dict:
    meta = {
        "name": name or unit.name,
        "namespace": unit.plan.deployment.kubernetes.namespace,
        "labels": labels(unit.plan, unit.component),
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


def pod_selector(unit: ServingUnit) -> dict[str, str]:
    return {
        k: v
        for k, v in labels(unit.plan, unit.component).items()
        if k in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
    }
