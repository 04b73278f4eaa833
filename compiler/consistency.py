"""The compiler's final check: values that repeat across generated files agree with the resolved plan.

Run on every compile after rendering, before anything is written; a disagreement is a bug in a target
(exit 3), never a user error. Tests exercise it too, but it is here so a wrong file can never ship.
"""

from __future__ import annotations

from . import training_consistency
from .plan.resolved import ResolvedPlan
from .targets.base import OutputFile, load_generated_yaml, load_generated_yaml_documents


class InconsistentOutput(AssertionError):
    pass


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise InconsistentOutput(message)


def _yaml_docs(text: str) -> list[dict]:
    return [d for d in load_generated_yaml_documents(text) if isinstance(d, dict)]


def _training(plan: ResolvedPlan, files: dict[str, str]) -> None:
    par, hw = plan.parallelism, plan.hardware
    _expect(par.global_batch == par.micro_batch * par.grad_accum * par.dp, "global batch != micro × grad-accum × DP")
    _expect(
        par.tp * par.cp * par.pp * par.dp == hw.gpus,
        f"TP×CP×PP×DP = {par.tp * par.cp * par.pp * par.dp} but {hw.gpus} GPUs",
    )
    _expect(hw.nodes * hw.gpus_per_node == hw.gpus, "nodes × GPUs per node != GPUs")
    training_consistency.check(files, plan)  # the cross-file checks of the training targets


def _serving(plan: ResolvedPlan, files: dict[str, str]) -> None:
    s = plan.serving
    _expect(s.min_replicas <= s.replicas <= s.max_replicas, "replicas outside the autoscaler bounds")
    _expect(s.attention_dp * s.tp * s.pp == s.gpus_per_replica, "attention DP × TP × PP != GPUs per replica")
    if "vllm/config.yaml" in files and not plan.stages:
        cfg = load_generated_yaml(files["vllm/config.yaml"])
        _expect(cfg.get("tensor_parallel_size", 1) == s.tp, "vLLM tensor_parallel_size != plan TP")
        _expect(cfg.get("pipeline_parallel_size", 1) == s.pp, "vLLM pipeline_parallel_size != plan PP")
        _expect(cfg.get("data_parallel_size", 1) == s.attention_dp, "vLLM data_parallel_size != plan attention DP")
        _expect(cfg.get("max_model_len", 0) <= s.kv_cache_tokens, "max_model_len exceeds what the KV cache holds")
    for path, text in files.items():
        if not (path.startswith("k8s/") and path.endswith(".yaml")):
            continue
        for doc in _yaml_docs(text):
            if doc.get("kind") == "HorizontalPodAutoscaler" and not plan.stages:
                spec = doc["spec"]
                decided = plan.deployment.kubernetes.serving[0]
                _expect(
                    (spec["minReplicas"], spec["maxReplicas"]) == (decided.min_replicas, decided.max_replicas),
                    "HPA bounds differ from the deployment decision",
                )
                _expect(s.replicas <= spec["maxReplicas"], "HPA bounds exclude the planned replicas")


def check_consistency(plan: ResolvedPlan, files: list[OutputFile]) -> None:
    texts = {f.path: f.text for f in files}
    if plan.training and plan.hardware:
        _training(plan, texts)
    if plan.serving:
        _serving(plan, texts)
