"""ResolvedPlan: every number decided. The only input of the targets; dumped as out/<plan>/plan.json."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_serializer

from ..catalog.types import Architecture, GpuSpec
from .deployment import Deployment
from .probe import Probe
from .recipe import Recipe
from .runs import runs_dir
from .spec import PlanSpec

SCHEMA_VERSION = 1


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelInfo(Section):
    id: str = Field(description="preset id, or 'custom'")
    name: str
    hf_id: str = Field(description="model id given to engines (Hugging Face repo id)")
    weights_uri: str = ""
    quantization: str = Field(
        "none",
        description="the checkpoint's own quantization: model.quantization, else what the preset's repository ships "
        "(serve plans; none = 16-bit weights)",
    )
    weight_block: int = Field(
        0,
        description="fp8 block scaling of the checkpoint: one fp32 scale per weight_block × weight_block weights, "
        "counted in the weights' bytes (0: none counted)",
    )
    architecture: Architecture
    params_total: int
    params_active: int
    assumed: bool = Field(False, description="architecture assumed from a parameter count")


class Hardware(Section):
    gpu: str
    gpus: int
    nodes: int
    gpus_per_node: int
    gpu_memory_bytes: int
    interconnect: str
    storage: str
    pricing: str
    usd_per_gpu_hour: float
    gpu_spec: GpuSpec = Field(description="the catalog entry used, with its source")


class Parallelism(Section):
    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero_stage: int = 0
    micro_batch: int = 1
    grad_accum: int = 1
    global_batch: int = 1
    recompute: Literal["none", "selective", "full"] = "none"
    sequence_parallel: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False
    framework: Literal["deepspeed", "fsdp", "megatron", "ddp", "vllm", "triton", "tgi"] = "ddp"
    cp: int = Field(1, description="context-parallel degree: GPUs that split each sequence (ring attention)")
    ep: int = Field(
        1, description="expert-parallel degree (MoE): GPUs of the data-parallel group the routed experts are split over"
    )
    vp: int = Field(1, description="virtual pipeline stages (model chunks) per pipeline GPU; > 1 is interleaved 1F1B")
    ep_overlap: bool = Field(
        False,
        description="EP all-to-alls overlapped with another micro-batch's compute (DeepSeek-V3 DualPipe; Megatron-Core --overlap-moe-expert-parallel-comm); chosen where Megatron-Core allows it: EP > 1, VP when PP > 1, no full recompute",
    )
    pp_stage_layers: list[int] = Field(
        default_factory=list, description="transformer layers on each pipeline stage, first to last"
    )
    shard_group_gpus: int | None = Field(
        None,
        description="HSDP: data-parallel ranks of one ZeRO-3 shard group (replicated across groups; fsdp_tp.json dp_shard); None: all data-parallel ranks",
    )


class MemoryPerGpu(Section):
    weights: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    kv_cache: int = 0
    other: int = 0
    total: int = 0
    usable: int = 0
    cpu_offload: int = 0
    allocated: int = 0  # training: what torch.cuda.max_memory_allocated counts at the peak
    reserved: int = 0  # training: allocated + what the caching allocator strands (train_memory docstring)


class Training(Section):
    tokens: float
    seq_len: int
    flops_per_token: float
    flops_total: float
    steps: int
    step_seconds: float
    step_compute_seconds: float
    step_tp_comm_seconds: float
    step_pp_bubble_seconds: float
    step_dp_comm_seconds: float
    step_matmul_seconds: float  # the parts of step_compute_seconds
    step_attention_seconds: float
    step_memory_bound_seconds: float
    step_weight_traffic_seconds: float
    step_optimizer_seconds: float
    mfu: float
    hfu: float
    tokens_per_second: float
    wall_seconds: float
    gpu_hours: float
    goodput: float
    deadline_seconds: float | None
    checkpoint_bytes: int
    checkpoint_write_seconds: float
    checkpoint_interval_seconds: float
    checkpoint_keep: int
    checkpoint_dir: str
    dataset_read_bytes_per_second: float
    allreduce_bytes_per_step: float
    network_bytes_per_second_needed: float
    step_cp_comm_seconds: float = Field(
        0.0, description="context-parallel KV ring transfers not hidden under attention, per step"
    )
    gate_quantile: Literal["p50", "p90"] = Field("p90", description="the quantile deadline and budget are checked at")
    memory_quantile: Literal["none", "p50", "p90"] = Field(
        "none", description="the quantile of the published memory residuals a layout must fit at (none: the roofline)"
    )
    step_ep_comm_seconds: float = Field(0.0, description="expert-parallel all-to-alls (dispatch and combine), per step")
    step_pp_p2p_seconds: float = Field(
        0.0, description="pipeline point-to-point sends, per step (v per stage boundary when interleaved)"
    )
    # the whole run beyond its steady steps (sizing/train_time.py whole_run): seconds each adds per second of steps;
    # goodput = 1 / (1 + their sum)
    whole_run_failures_share: float = Field(
        0.0,
        description="work lost since the last checkpoint and the restart, per failure at the job's MTBF (Llama 3 paper §3.3.4)",
    )
    whole_run_checkpoints_share: float = Field(
        0.0, description="synchronous checkpoint writes, write time ÷ Young-Daly interval"
    )
    whole_run_stragglers_share: float = Field(
        0.0, description="the slowest of the job's GPUs behind the median one (Sinha et al. 2022 spread)"
    )
    whole_run_evaluation_share: float = Field(
        0.0,
        description="the framework's default evaluation passes (Megatron-LM: 100 forward iterations every 1000 steps)",
    )


class Serving(Section):
    engine: str
    precision: str
    kv_cache_dtype: str
    replicas: int = Field(
        description="replicas deployed at peak: max(replicas_needed, replica_floor); cost and GPU counts use it"
    )
    min_replicas: int
    max_replicas: int
    replicas_needed: int = Field(0, description="capacity need at peak traffic, before the availability floor")
    replica_floor: int = Field(
        1,
        description="availability floor: serve.min_replicas, or the default policy where an autoscaler deploys the service (1 = none)",
    )
    tp: int
    pp: int
    speculative_method: str = Field(
        "", description="speculative decoding draft (serve.speculative.method: 'mtp'); '' = off"
    )
    speculative_tokens: int = Field(
        0, description="draft tokens proposed per decode step (vLLM num_speculative_tokens)"
    )
    acceptance_rate: float = Field(
        0.0,
        description="per-draft-token acceptance the sizing uses (the plan's, else the low end of the published range)",
    )
    tokens_per_step: float = Field(
        1.0,
        description="expected output tokens per verify pass, (1 − α^(k+1)) / (1 − α); decode times are per output token",
    )
    attention_dp: int = Field(
        1,
        description="attention data-parallel ranks per replica (serve.attention_dp), each of tp × pp GPUs with its own KV cache and batch; the routed experts split over all of them",
    )
    gpus_per_replica: int
    nodes_per_replica: int
    context_len: int
    max_concurrency: int = Field(
        description="sequences a replica runs at once (with attention DP: all ranks together, max_num_seqs × attention_dp)"
    )
    max_num_batched_tokens: int
    kv_cache_tokens: int
    kv_bytes_per_token: int
    gpu_memory_utilization: float
    ttft_seconds: float = Field(description="p99 at the operating point at peak traffic (vision: request latency)")
    tpot_seconds: float = Field(description="p99 at the operating point at peak traffic")
    tokens_per_second_per_replica: float
    requests_per_second_per_replica: float
    queue_target_per_replica: float = Field(description="waiting requests per replica that the autoscaler targets")
    weights_bytes: int
    startup_seconds: float = Field(description="weight load time from storage; budgets the startup probe")
    ttft_slo_seconds: float | None = None
    tpot_slo_seconds: float | None = None
    latency_slo_seconds: float | None = None
    max_queue_delay_seconds: float = 0.0
    preferred_batch_sizes: list[int] = Field(default_factory=list)
    ttft_p50_seconds: float = Field(
        0.0, description="LLMs: at the operating point at peak traffic (ttft_seconds is its p99)"
    )
    tpot_p50_seconds: float = 0.0
    utilization_at_peak: float = Field(
        0.0, description="a replica's utilisation at peak traffic over replicas_needed (the capacity-sized count)"
    )
    target_utilization: float = Field(
        0.0, description="the load point replicas are sized for at peak: serve.target_utilization, or the default"
    )
    load_point_pinned: bool = Field(False, description="the plan gave serve.target_utilization")
    in_flight_at_peak: float = Field(0.0, description="sequences a replica runs at peak traffic (Little's law)")
    ttft_batch1_seconds: float = Field(0.0, description="one request alone: one prefill and one decode step")
    tpot_batch1_seconds: float = 0.0
    ttft_at_capacity_seconds: float = Field(
        0.0, description="p99 at max concurrency and the autoscaler's target utilisation"
    )
    tpot_at_capacity_seconds: float = 0.0
    concurrency: int | None = Field(
        None, description="closed-loop clients the plan states at average load (None: an open-loop request rate)"
    )
    requests_per_second: float = Field(
        0.0, description="the service's average request rate: as given, or what the closed-loop clients produce"
    )
    requests_per_second_at_peak: float = Field(
        0.0, description="LLMs: a replica's request rate at the operating point at peak traffic"
    )
    itl_p50_seconds: float = Field(
        0.0,
        description="LLMs: one decode step at the operating point at peak traffic, the inter-token latency most tokens see (tpot adds the prefills interleaved with them)",
    )


class Cost(Section):
    usd_per_hour: float = 0.0
    usd_total: float = 0.0
    usd_per_month: float = 0.0
    usd_per_million_tokens: float = 0.0
    budget_usd: float | None = None
    budget_usd_per_month: float | None = None
    alert_at: float = 0.8


class Alternative(Section):
    description: str
    usd: float = Field(description="total (train) or per month (serve), at P50 when the plan carries ranges")
    seconds: float = Field(description="wall time (train) or request latency (serve), at P50 when ranged")
    chosen: bool = False
    ttft_seconds: float = Field(0.0, description="serving LLMs: time to first token p99 at peak (P50 when ranged)")
    tpot_seconds: float = Field(0.0, description="serving LLMs: time per output token p99 at peak (P50 when ranged)")
    spread: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="field name -> (P10, P90) where a published family covers it"
    )


class Rejection(Section):
    description: str
    reason: str


class Range(Section):
    """A headline with the spread its family of published figures shows: the roofline prediction × (actual ÷
    predicted) at P10, P50 and P90 (÷ for rates) over the family's rows (compiler/catalog/residuals.yaml,
    benchmarks/residuals.py). The headline at `quantity` is the P50."""

    quantity: str = Field(description="dotted plan.json path of the headline (its P50), e.g. training.wall_seconds")
    roofline: float = Field(description="the uncalibrated prediction the family's ratios multiply")
    p10: float
    p50: float
    p90: float
    family: str
    rows: int
    outside: str = Field(
        "",
        description=(
            "why the plan lies outside the family's rows (a GPU none of them ran on, a model's active parameters beyond"
            " their span); empty: inside or unknown"
        ),
    )


class Stage(Section):
    """One stage of a multi-stage service, sized for the rate it receives."""

    name: str
    model: ModelInfo
    hardware: Hardware
    serving: Serving
    memory_per_gpu_bytes: MemoryPerGpu
    usd_per_month: float
    gpus_per_last_stage_gpu: float = Field(description="this stage's GPUs per GPU of the last stage")
    queue: str = Field("", description="queue this stage reads from (empty for the first stage)")
    ranges: list[Range] = Field(
        default_factory=list,
        description="the stage's headlines at P50 with P10 and P90, as a single-stage plan's (the last stage's are "
        "the plan's ranges)",
    )


class Decision(Section):
    topic: str
    choice: str
    reason: str


class ResolvedPlan(Section):
    schema_version: int = SCHEMA_VERSION
    generator: str
    name: str
    workload: str
    plan_file: str = Field(
        description="the plan's file name (no directory, so output does not depend on where it is run)"
    )
    spec: PlanSpec
    model: ModelInfo | None = None
    hardware: Hardware | None = None
    parallelism: Parallelism = Field(default_factory=Parallelism)
    memory_per_gpu_bytes: MemoryPerGpu = Field(default_factory=MemoryPerGpu)
    training: Training | None = None
    recipe: Recipe | None = Field(
        None, description="train/finetune: the optimizer recipe, each value with its source (compiler/recipe/)"
    )
    serving: Serving | None = None
    stages: list[Stage] = Field(
        default_factory=list, description="multi-stage services: every stage; the top-level sections describe the last"
    )
    cost: Cost = Field(default_factory=Cost)
    alternatives: list[Alternative] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    ranges: list[Range] = Field(default_factory=list, description="the headline predictions with their P10-P90 spread")
    warnings: list[str] = Field(default_factory=list)
    search_evaluated: int = 0
    deployment: Deployment | None = Field(
        None,
        description="how the plan is deployed: launcher, scheduler, pods, engines, files (passes/resolve_deployment.py)",
    )
    probe: Probe | None = Field(
        None, description="`mlinfra-compile probe` only: the measurement job (deployment/probe.py); left out otherwise"
    )

    @computed_field(
        description="where the plan's Slurm job works and writes its logs (sbatch --chdir), relative to out/<plan>/: "
        "out/runs/<plan>/, which no compile replaces (compiler/plan/runs.py); null without a Slurm job"
    )
    @property
    def runs_dir(self) -> str | None:
        return runs_dir(self.name) if self.deployment is not None and self.deployment.slurm is not None else None

    @model_serializer(mode="wrap")
    def _without_absent_probe(self, handler):
        """An ordinary compile's plan.json has no probe key (only the probe's own plan.json carries the section)."""
        data = handler(self)
        if data.get("probe") is None:
            data.pop("probe", None)
        return data
