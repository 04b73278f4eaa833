"""The `probe` section of the ResolvedPlan: what `mlinfra-compile probe` measures and how its job runs.

Decided by the decide_probe pass (compiler/deployment/probe.py) only when the probe is requested; absent from an
ordinary compile's plan.json. The probe files (compiler/targets/probe.py) render from this section alone.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..catalog.types import Architecture
from .deployment_fields import DeploymentDecision, Section
from .deployment_training import Directive


class ProbeLayout(Section):
    """One training layout the probe measures on one node: a reduced plan (probe_job.py) compiled into `folder`, its
    emitted launcher and framework configuration run with the probe's training script."""

    name: str = Field(description="'chosen' or what differs from it, e.g. 'micro-batch ×2'")
    folder: str = Field(description="the reduced job's files, beside probe.py")
    framework: str
    launch_kind: str
    micro_batch: int
    grad_accum: int = 1
    global_batch: int
    recompute: Literal["none", "selective", "full"]
    zero_stage: Literal[0, 1, 2, 3]
    offload: bool = False
    tp: int = 1
    pp: int = 1
    dp: int = 1
    predicted_step_seconds: float = Field(description="the compiler's step time for exactly this reduced job")
    predicted_allocated_bytes: int = Field(description="the compiler's peak allocated memory per GPU for this job")
    predicted_reserved_bytes: int
    plan_text: str = Field(description="the reduced plan (YAML): calibrate compiles it against the site file")
    why: str


class ServingProbe(Section):
    """The plan's engine on one replica, started from its emitted launch, measured by the engine's own benchmark."""

    engine: Literal["vllm"]
    concurrencies: list[int] = Field(description="`vllm bench serve --max-concurrency` points")
    prompt_tokens: int = Field(description="--random-input-len: the plan's traffic.prompt_tokens")
    output_tokens: int = Field(description="--random-output-len: the plan's traffic.output_tokens")
    prompts_per_concurrency: int = Field(description="--num-prompts ÷ the concurrency")
    tp: int
    gpus: int = Field(description="the replica's GPUs")
    plan_text: str = Field(
        description="the plan as given (YAML, without its site calibration: calibrate names its own file when it "
        "compiles it against the measured points)"
    )


class TritonProbe(Section):
    """A Triton vision plan's repository served by its own tritonserver launch, measured by Triton's perf_analyzer."""

    engine: Literal["triton"] = "triton"
    model: str = Field(description="the Triton model perf_analyzer measures (-m): the repository's model folder")
    batches: list[int] = Field(description="perf_analyzer's client batch sizes (-b), one run each")
    concurrency: int = Field(description="--concurrency-range C:C, batches in flight")
    measurement_interval_ms: int = Field(description="--measurement-interval: perf_analyzer's time window")
    prompt_tokens: int = Field(description="an encoder's sequence (traffic.prompt_tokens); images: unused")
    predicted_batch_seconds: list[float] = Field(
        description="the vision sizing's time for each batch at the catalog's shares"
    )
    plan_text: str = Field(description="the plan as given (YAML, without its site calibration)")


class TritonLlmProbe(Section):
    """A Triton LLM plan's repository (backend vllm) served by its own tritonserver launch, measured by perf_analyzer
    in streaming mode at the vLLM probe's concurrencies and lengths (`serving`)."""

    engine: Literal["triton-vllm"] = "triton-vllm"
    model: str = Field(description="the Triton model perf_analyzer measures (-m): the repository's model folder")
    prompt_word: str = Field(description="the word each prompt repeats, one token per repetition")
    sampling_parameters: str = Field(description="the requests' sampling_parameters (JSON text)")
    warmup_requests: list[int] = Field(description="--warmup-request-count at each of `serving.concurrencies`")
    stability_percentage: int = Field(description="--stability-percentage: one measurement of --request-count")


class ProbeKubernetes(Section):
    """probe-job.yaml: a ConfigMap with the script and settings and a one-pod Job on one GPU node of the plan's type."""

    image: str = Field(
        description="the plan's own training (or engine) image: it carries Python (and PyTorch, or Triton's server)"
    )
    commands: list[str] = Field(
        description="how REPORT.md says to run it from the probe's folder: apply, wait, retrieve the results from the "
        "log, calibrate"
    )
    perf_analyzer_image: str | None = Field(
        None,
        description="Triton: the SDK image (<server image>-sdk, the server's release) an init container copies "
        "perf_analyzer from; the server image has none",
    )


class UnprobedStage(Section):
    """A stage of a staged service the probe cannot measure, and why."""

    stage: str
    reason: str


class ProbeService(Section):
    """A stage of a staged service probed as a plan of its own (deployment/probe_stages.py): its sibling stages' probes
    and how all their results calibrate one site file for the staged plan."""

    plan: str = Field(description="the staged plan (serve.stages) this stage belongs to")
    stage: str
    probes: list[str] = Field(description="every stage's probe folder, in stage order")
    calibrate: str = Field(
        description="from this folder: every stage's results (the Slurm jobs' out/runs/<probe>/) into one site file"
    )
    calibrate_kubernetes: str = Field(
        description="from this folder: every stage's probe-results.json, each retrieved in its own probe folder"
    )
    unprobed: list[UnprobedStage] = Field(
        default_factory=list,
        description="stages no probe measures (their engine's benchmark is not wired in): they keep the published "
        "ranges when the staged plan compiles with the site file",
    )


class Probe(Section):
    kind: Literal["training", "serving"]
    name: str = Field(description="the probe's folder and job name: <plan>-probe")
    runs_dir: str = Field(
        description="where the probe job works and writes its log and probe-results.json, relative to its folder: "
        "out/runs/<plan>-probe/, which a re-run of probe never replaces (compiler/plan/runs.py)"
    )
    plan: str
    gpu_id: str
    expected_device: str = Field(description="the GPU product name the probe checks the node against")
    expected_power_watts: float = Field(
        description="the catalog's TDP of the plan's GPU: the power limit the probe expects"
    )
    architecture: Architecture = Field(description="the plan's shape with its layers reduced to `layers`")
    layers: int
    model_layers: int
    shape_words: str = Field(description="what model the probe runs, in words (REPORT.md)")
    mlp_hidden: int = Field(
        description="the MLP width the probe builds: ffn_hidden, or an MoE's expert width as one dense MLP"
    )
    processes: int = Field(description="torchrun processes on the one node (one per GPU)")
    time_limit_seconds: int
    precision: str
    seq_len: int = Field(description="training: tokens per sequence; serving: the prompt length")
    warmup_steps: int
    steps: int = Field(description="measured steps per layout (the median is reported)")
    gemm_size: int = Field(description="side of the square matrices of the GEMM-rate test")
    copy_bytes: int = Field(description="bytes of the device-to-device copy of the HBM-rate test")
    collective_bytes: list[int] = Field(
        default_factory=list,
        description="message sizes of the all-reduce and all-gather bus-bandwidth tests (none: one process)",
    )
    nodes: int = Field(1, description="2: the collectives are also measured across two nodes (the plan spans nodes)")
    interconnect: str = Field(description="the plan's inter-node fabric (catalog id), which the two-node test measures")
    rdzv_port: int = Field(description="the two-node torchrun rendezvous port on the first node")
    layouts: list[ProbeLayout] = Field(default_factory=list)
    serving: ServingProbe | None = None
    triton: TritonProbe | None = Field(None, description="a Triton vision plan's probe (perf_analyzer)")
    triton_llm: TritonLlmProbe | None = Field(
        None, description="a Triton LLM plan's probe (perf_analyzer --streaming; its points in `serving`)"
    )
    slurm_time: str = Field(description="#SBATCH --time")
    slurm_directives: list[Directive] = Field(
        default_factory=list, description="partition, account, qos, reservation, constraint as given"
    )
    kubernetes: ProbeKubernetes | None = None
    service: ProbeService | None = Field(
        None, description="a staged service's stage: the other stages' probes and the one calibrate for them all"
    )
    decisions: list[DeploymentDecision] = Field(default_factory=list)
