"""The plan's serve section: engine, traffic, latency SLOs, speculative decoding and the stages of a multi-stage
service."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .spec_fields import DNS1123_LABEL, MIN_RATE, Precision, Seconds, Spec, offers
from .spec_model import ModelSpec


class TrafficSpec(Spec):
    requests_per_second: float | None = Field(
        None,
        ge=MIN_RATE,
        le=1e9,
        description="average request rate (open loop: requests arrive whatever the latency); give this or concurrency",
    )
    concurrency: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="closed loop: clients each sending the next request when the previous one completes (vllm bench serve --max-concurrency, genai-perf --concurrency); give this or requests_per_second",
    )
    prompt_tokens: int = Field(512, ge=1, le=10_000_000, description="average prompt length")
    output_tokens: int = Field(256, ge=1, le=10_000_000, description="average generated length")
    peak_factor: float = Field(1.0, ge=1, le=1000, description="peak / average load (request rate or clients)")

    @model_validator(mode="after")
    def one_kind_of_load(self) -> TrafficSpec:
        if self.requests_per_second is None and self.concurrency is None:
            raise PydanticCustomError(
                "missing-field", "give requests_per_second (open loop) or concurrency (closed loop)", {}
            )
        if self.requests_per_second is not None and self.concurrency is not None:
            raise PydanticCustomError(
                "conflicting-fields", "give requests_per_second (open loop) or concurrency (closed loop), not both", {}
            )
        return self


class SloSpec(Spec):
    ttft_p99: Seconds | None = Field(None, description="time to first token, p99", examples=["2s"])
    tpot_p99: Seconds | None = Field(None, description="time per output token, p99", examples=["50ms"])
    latency_p99: Seconds | None = Field(None, description="request latency p99 (vision models)", examples=["100ms"])


class StageSpec(Spec):
    """One stage of a multi-stage service (e.g. an image encoder feeding an LLM through a queue)."""

    name: Annotated[str, Field(pattern=DNS1123_LABEL)] = Field(description="stage name; names its deployment and queue")
    model: ModelSpec = Field(description="the stage's model")
    precision: Precision = Field(
        "bf16", description="the stage's serving precision (left out: a pre-quantized checkpoint's own, as precision)"
    )
    engine: Literal["vllm", "triton", "tgi"] = Field("vllm", description="the stage's serving engine")
    gpus: list[str] | None = Field(
        None, description="GPU types this stage may use (default: the cluster's)", json_schema_extra=offers("gpus")
    )
    items_per_request: float = Field(
        1.0, ge=MIN_RATE, le=1e6, description="items this stage handles per request entering the service"
    )
    prompt_tokens: int | None = Field(
        None, ge=1, le=10_000_000, description="LLM stages: prompt length (default: traffic's)"
    )
    output_tokens: int | None = Field(
        None, ge=1, le=10_000_000, description="LLM stages: output length (default: traffic's)"
    )
    slo: SloSpec = Field(default_factory=SloSpec, description="the stage's own latency targets")


class SpeculativeSpec(Spec):
    method: Literal["mtp"] = Field(
        "mtp",
        description="draft: the checkpoint's own multi-token-prediction module (architecture.mtp_layers; vLLM speculative method 'mtp')",
    )
    num_speculative_tokens: int = Field(
        ge=1, le=16, description="draft tokens proposed per decode step (vLLM num_speculative_tokens)"
    )
    acceptance_rate: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="probability the target model accepts each draft token; default: DeepSeek-V3 report §5.4.3, 0.85-0.90 for its MTP module, sized at 0.85",
    )


class ServeSpec(Spec):
    engine: Literal["vllm", "triton", "tgi"] = Field("vllm", description="serving engine")
    context_len: int = Field(8192, ge=1, le=10_000_000, description="max tokens per sequence (prompt + output)")
    traffic: TrafficSpec = Field(description="load (a request rate or closed-loop clients) and lengths")
    slo: SloSpec = Field(default_factory=SloSpec, description="without it, maximise throughput")
    precisions: list[Precision] | None = Field(
        None, description="serving precisions the search may use; default: the plan's precision"
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="KV cache element type (auto = the weights' dtype)"
    )
    prefix_caching: bool = Field(True, description="reuse KV of shared prompt prefixes")
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="pin the sequences a replica runs at once (vLLM max_num_seqs, TGI max-batch-size, TensorRT-LLM max batch); default: the search picks. With attention_dp, per DP rank",
    )
    speculative: SpeculativeSpec | None = Field(
        None,
        description="speculative decoding (vLLM --speculative-config): each decode step verifies the draft's tokens; the decode time per output token divides by the tokens a step yields",
    )
    attention_dp: int = Field(
        1,
        ge=1,
        le=64,
        description="MoE models on engine vllm: attention data-parallel ranks per replica (vLLM --data-parallel-size with --enable-expert-parallel): each rank holds the attention and dense layers (split by its own TP) and its own KV cache and batch; the routed experts are split over all attention_dp × TP GPUs of one node. 1 = off",
    )
    stages: list[StageSpec] | None = Field(
        None,
        description="a multi-stage service: stages in order, decoupled by queues (top-level model is then omitted)",
    )
    min_replicas: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="availability floor: replicas kept however low the load (HPA/KEDA minReplicas); default: 2 (1 on edge devices), or the sizing's minimum when higher. Counted in cost and GPUs: a service deploys max(peak need, floor)",
    )
    target_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="the load point: each replica runs at this share of its capacity at peak traffic, so replicas = peak ÷ (capacity × this), and TTFT/TPOT are sized and checked there; default 0.6 (Vertex AI's autoscaling target). Pin it to the load a benchmark or a site runs at",
    )

    @field_validator("stages")
    @classmethod
    def stage_names_unique(cls, stages: list[StageSpec] | None) -> list[StageSpec] | None:
        """A stage name names its Deployment, Service and queue: two stages of one name would be one object. An empty
        list is no staged service: refused here rather than read as 'no stages, so a model is missing'."""
        if stages is not None and not stages:
            raise PydanticCustomError(
                "empty-stages", "stages is empty: list the stages in order, or leave stages out and give a model", {}
            )
        names = [s.name for s in stages or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise PydanticCustomError(
                "duplicate-stage-name", "stage name {n} is used more than once", {"n": repr(twice[0])}
            )
        return stages
