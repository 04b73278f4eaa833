"""One Engine per serving unit (vLLM, TGI or Triton) with its ports, Ray settings and drain: the longest request a
replica may hold."""

from __future__ import annotations

import math

from ...plan.deployment_serving import Engine
from ...plan.resolved import ResolvedPlan
from ...plan.spec import PlanSpec
from ..units import UnitView
from .engine_args import HTTP_PORT, TGI_HTTP_PORT, TGI_VERSION, VLLM_VERSION, tgi_args, vllm_args
from .triton_model import TRITON_GRPC_PORT, TRITON_HTTP_PORT, TRITON_METRICS_PORT, TRITON_SERVER_VERSION, triton_model

RAY_PORT = 6379  # Ray head's default GCS port (`ray start --head`), as in vLLM's multi-node-serving.sh
# How long the head waits for every worker's GPUs to join the Ray cluster: vLLM's multi-node-serving.sh uses
# ray_init_timeout=300 s for the same wait.
RAY_WAIT_SECONDS = 300
RAY_POLL_SECONDS = 5  # how often the head checks that the workers joined: 60 checks in the wait, each a short ray.init

# The drain of a one-shot request is at least the pod's default grace period.
VISION_MIN_GRACE_SECONDS = 30  # the Kubernetes default terminationGracePeriodSeconds, for one-shot (vision) requests


def stage_prompt_tokens(unit: UnitView, spec: PlanSpec) -> int:
    return (
        next((st.prompt_tokens for st in spec.serve.stages or [] if st.name == unit.stage and st.prompt_tokens), None)
        or spec.serve.traffic.prompt_tokens
    )


def longest_request_seconds(plan: ResolvedPlan, prompt_tokens: int) -> int:
    s = plan.serving
    if plan.model.architecture.kind != "decoder":  # one-shot (vision, encoder) requests
        return max(VISION_MIN_GRACE_SECONDS, math.ceil(s.latency_slo_seconds or s.ttft_seconds))
    ttft, tpot = s.ttft_at_capacity_seconds or s.ttft_seconds, s.tpot_at_capacity_seconds or s.tpot_seconds
    return math.ceil(ttft + max(1, s.context_len - prompt_tokens) * tpot)


def engine(unit: UnitView, spec: PlanSpec) -> Engine:
    s, plan = unit.plan.serving, unit.plan
    prefix_caching = spec.serve.prefix_caching
    ray = {
        "ray_port": RAY_PORT,
        "ray_wait_seconds": RAY_WAIT_SECONDS,
        "ray_poll_seconds": RAY_POLL_SECONDS,
        "ray_wait_polls": math.ceil(RAY_WAIT_SECONDS / RAY_POLL_SECONDS),
    }
    drain = (
        longest_request_seconds(plan, stage_prompt_tokens(unit, spec))
        if plan.model.architecture.kind == "decoder"
        else 0
    )
    if s.engine == "vllm":
        return Engine(
            stage=unit.stage,
            engine="vllm",
            version=VLLM_VERSION,
            directory=unit.stage,
            args=vllm_args(plan, prefix_caching, drain),
            prefix_caching=prefix_caching,
            http_port=HTTP_PORT,
            metrics_port=HTTP_PORT,
            **ray,
        )
    if s.engine == "tgi":
        return Engine(
            stage=unit.stage,
            engine="tgi",
            version=TGI_VERSION,
            directory=unit.stage,
            args=tgi_args(plan),
            prefix_caching=prefix_caching,
            http_port=TGI_HTTP_PORT,
            metrics_port=TGI_HTTP_PORT,
            **ray,
        )
    # Triton: LLMs run on its vLLM backend, which reads the vLLM engine arguments (model.json)
    args = vllm_args(plan, prefix_caching, drain) if plan.model.architecture.kind == "decoder" else []
    return Engine(
        stage=unit.stage,
        engine="triton",
        version=TRITON_SERVER_VERSION,
        directory=unit.stage,
        args=args,
        prefix_caching=prefix_caching,
        http_port=TRITON_HTTP_PORT,
        metrics_port=TRITON_METRICS_PORT,
        grpc_port=TRITON_GRPC_PORT,
        triton=triton_model(plan),
        exit_timeout_seconds=longest_request_seconds(plan, stage_prompt_tokens(unit, spec)),
        **ray,
    )
