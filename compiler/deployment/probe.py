"""Probe decisions (`mlinfra-compile probe`): the reduced shape, the layouts, the job's limits, each with its reason.

Training: the plan's own emitted job, shortened (compiler/probe_job.py): for each layout the plan reduced to one node
and fewer layers is compiled like any plan, and its launcher and framework configuration run probe_train.py; the
layers are the most at which the compiler predicts the layouts peak under the GPU's usable memory ÷ the published
memory margin. Serving (vLLM): the plan's own engine launch, measured by vLLM's own `vllm bench serve`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import yaml

from ..catalog.catalog import Catalog
from ..catalog.types import Architecture
from ..passes.training_families import MEMORY_FAMILY
from ..plan.deployment_fields import DeploymentDecision
from ..plan.deployment_training import Directive
from ..plan.probe import Probe, ProbeKubernetes, ProbeLayout, ServingProbe
from ..plan.resolved import ResolvedPlan
from ..plan.runs import runs_dir
from ..probe_environment import POWER_TOLERANCE
from ..sizing.train.memory import usable_memory_bytes
from ..units import format_bytes
from .probe_collectives import collectives
from .probe_kubernetes import extract_command, kubernetes_commands
from .training.launcher import DEFAULT_RDZV_PORT
from .training.slurm import directive_value

# a minutes-long measurement job; also the Kubernetes Job's activeDeadlineSeconds.
TIME_LIMIT_SECONDS = 15 * 60
# Three warm-up steps absorb the allocator's and the kernels' first-call costs; the median of ten is reported.
WARMUP_STEPS, MEASURED_STEPS = 3, 10
# The HBM test's size and the GEMM's side: a 4096² GEMM reaches cuBLAS's large-GEMM rate on H100.
GEMM_SIZE, COPY_BYTES = 4096, 1 << 30
PROMPTS_PER_CONCURRENCY = 2  # requests per benchmark: twice the concurrency, so every slot is refilled once


class ProbeError(ValueError):
    """A plan the probe cannot measure (a vision model off Triton, a TGI engine)."""


def _reduced(arch: Architecture, layers: int) -> Architecture:
    return arch.model_copy(update={"layers": layers, "dense_layers": min(arch.dense_layers, layers)})


def _slurm_directives(plan: ResolvedPlan) -> list[Directive]:
    given = plan.spec.cluster.slurm
    return [
        Directive(flag=flag, value=directive_value(value))
        for flag, value in (
            ("partition", given.partition),
            ("account", given.account),
            ("qos", given.qos),
            ("reservation", given.reservation),
            ("constraint", given.constraint),
        )
        if value is not None
    ]


def _layout(job, why: str) -> ProbeLayout:
    p = job.prediction()
    return ProbeLayout(
        name=job.name,
        folder=job.folder,
        framework=p["framework"],
        launch_kind=p["launch_kind"],
        micro_batch=p["micro_batch"],
        grad_accum=p["grad_accum"],
        global_batch=p["global_batch"],
        recompute=p["recompute"],
        zero_stage=p["zero_stage"],
        offload=p["offload"],
        tp=p["tp"],
        pp=p["pp"],
        dp=p["dp"],
        predicted_step_seconds=p["step_seconds"],
        predicted_allocated_bytes=p["allocated_bytes"],
        predicted_reserved_bytes=p["reserved_bytes"],
        plan_text=job.plan_text,
        why=why,
    )


def training_probe(
    plan: ResolvedPlan, catalog: Catalog, resolve_text, gpus: int | None = None, neighbours: bool = True
) -> Probe:
    """The plan's emitted job on one node, shortened (probe_job.py): the most layers whose compiled job's predicted
    peak × the P90 memory margin fits a GPU, at the chosen layout and the neighbours the compiler also sizes (each
    compiled by `resolve_text`, the pipeline's)."""
    from ..probe_job import probe_jobs

    arch, hw = plan.model.architecture, plan.hardware
    processes = min(hw.gpus, hw.gpus_per_node, gpus or hw.gpus_per_node)
    usable = usable_memory_bytes(hw.gpu_memory_bytes)
    margin = max(1.0, catalog.residuals[MEMORY_FAMILY[plan.spec.train.method]].p90)
    jobs = probe_jobs(resolve_text, plan, processes, usable / margin, neighbours=neighbours)
    if not jobs:
        raise ProbeError(
            f"not one layer of the model fits {processes} × {hw.gpu} at the plan's layout with the memory margin: "
            "the probe has no job to run"
        )
    layers = jobs[0].resolved.model.architecture.layers
    why = {"chosen": "the plan's layout as one node runs it"}
    layouts = [_layout(j, why.get(j.name, "a neighbour the compiler also sizes: how the step scales")) for j in jobs]
    decisions = _training_decisions(plan, jobs, processes, usable, margin, neighbours)
    sizes, nodes, collective_decisions = collectives(plan, processes)
    run = _ProbeRun(
        "training",
        _reduced(arch, layers),
        layers,
        processes,
        plan.spec.precision,
        plan.training.seq_len,
        layouts,
        None,
        collective_bytes=sizes,
        nodes=nodes,
    )
    return _probe(plan, run, decisions + collective_decisions)


def _training_decisions(
    plan: ResolvedPlan, jobs: list, processes: int, usable: float, margin: float, neighbours: bool
) -> list[DeploymentDecision]:
    """Why the training probe has this depth, this job, these layouts and this time limit: `usable` is the memory a
    process can use, `margin` the P90 of measured ÷ predicted peaks."""
    arch, hw, par = plan.model.architecture, plan.hardware, plan.parallelism
    chosen = jobs[0].prediction()
    layers = jobs[0].resolved.model.architecture.layers
    return [
        DeploymentDecision(
            topic="probe shape",
            choice=f"{layers} of the model's {arch.layers} layers",
            reason=f"the most layers whose compiled job's predicted peak ({format_bytes(chosen['reserved_bytes'])} "
            f"reserved per GPU) × {margin:.2f} (P90 of published measured ÷ predicted peaks, residuals "
            f"{MEMORY_FAMILY[plan.spec.train.method]}) fits the {format_bytes(usable)} a process can use on {hw.gpu}; random weights, "
            "random tokens, every other dimension the plan's",
        ),
        DeploymentDecision(
            topic="probe job",
            choice=f"the plan's {chosen['framework']} job ({chosen['launch_kind']} launch) on {processes} GPU(s)",
            reason=f"each layout is the plan reduced to one node ({processes} of {hw.gpu}) and compiled as any plan: "
            f"its own launcher and framework configuration run probe_train.py (a transformers Llama of the reduced "
            f"shape) for {WARMUP_STEPS} + {MEASURED_STEPS} optimizer steps, nothing saved; the plan's "
            f"TP{par.tp} PP{par.pp} ZeRO-{par.zero_stage} become TP{chosen['tp']} PP{chosen['pp']} "
            f"ZeRO-{chosen['zero_stage']} on one node",
        ),
        DeploymentDecision(
            topic="probe layouts",
            choice=", ".join(f"{j.name} ({j.folder}/)" for j in jobs),
            reason=(
                "the chosen layout and the neighbours (half the TP, twice and half the micro-batch) that the "
                "compiler sizes at the same depth; "
                if neighbours
                else "the chosen layout only (--chosen-only): one point, which calibrate fits exactly; "
            )
            + "each records the compiler's step and memory for exactly that job, which calibrate prices the same way",
        ),
        DeploymentDecision(
            topic="probe time limit",
            choice=f"{TIME_LIMIT_SECONDS // 60} minutes",
            reason=f"a minutes-long job: {WARMUP_STEPS} warm-up + {MEASURED_STEPS} measured steps per layout, then "
            "the GEMM, HBM and collective tests; the scheduler stops it at the limit",
        ),
    ]


@dataclass(frozen=True)
class _ProbeRun:
    """What a probe job runs: its kind, the (reduced) model on `processes` GPUs at a precision and sequence length,
    the training layouts or the serving benchmark, and (training) the collectives' sizes and the nodes they span."""

    kind: str
    architecture: Architecture
    layers: int
    processes: int
    precision: str
    seq_len: int
    layouts: list[ProbeLayout]
    serving: ServingProbe | None
    collective_bytes: list[int] = field(default_factory=list)
    nodes: int = 1


def _probe(plan: ResolvedPlan, run: _ProbeRun, decisions: list[DeploymentDecision]) -> Probe:
    image, image_decision = _kubernetes_image(plan)
    decisions = decisions + ([image_decision] if image_decision else []) + [_environment_decision(plan)]
    minutes = math.ceil(TIME_LIMIT_SECONDS / 60)
    gpu = plan.hardware.gpu_spec
    reduced = run.architecture
    return Probe(
        kind=run.kind,
        name=f"{plan.name}-probe",
        runs_dir=runs_dir(f"{plan.name}-probe"),
        plan=plan.name,
        gpu_id=plan.hardware.gpu,
        expected_device=gpu.k8s_product_label,
        expected_power_watts=gpu.tdp_watts,
        architecture=reduced,
        layers=run.layers,
        model_layers=plan.model.architecture.layers,
        shape_words=f"{run.layers} of {plan.model.architecture.layers} layers, random weights"
        if run.kind == "training"
        else "the plan's own model and weights, as its engine serves them (engine/vllm/)",
        mlp_hidden=reduced.ffn_hidden or reduced.moe_ffn_hidden,
        processes=run.processes,
        time_limit_seconds=TIME_LIMIT_SECONDS,
        precision=run.precision,
        seq_len=run.seq_len,
        warmup_steps=WARMUP_STEPS,
        steps=MEASURED_STEPS,
        gemm_size=GEMM_SIZE,
        copy_bytes=COPY_BYTES,
        collective_bytes=list(run.collective_bytes),
        nodes=run.nodes,
        interconnect=plan.hardware.interconnect,
        rdzv_port=DEFAULT_RDZV_PORT,
        layouts=run.layouts,
        serving=run.serving,
        slurm_time=f"{minutes // 60:02d}:{minutes % 60:02d}:00",
        slurm_directives=_slurm_directives(plan),
        kubernetes=ProbeKubernetes(image=image, commands=kubernetes_commands(plan, TIME_LIMIT_SECONDS))
        if image
        else None,
        decisions=decisions,
    )


def _kubernetes_image(plan: ResolvedPlan) -> tuple[str | None, DeploymentDecision | None]:
    """→ (the image a Kubernetes probe Job runs in, or None; the decision saying so, None off Kubernetes). The
    training image runs the plan's PyTorch; of the engines' images only vLLM's ships PyTorch and Python."""
    k8s = plan.deployment.kubernetes if plan.deployment else None
    if plan.spec.cluster.scheduler not in ("kubernetes", "both") or k8s is None:
        return None, None
    engine = k8s.serving[0] if k8s.serving else None
    image = k8s.training.image if k8s.training else (engine.image if engine and engine.engine == "vllm" else None)
    return image, DeploymentDecision(
        topic="probe on Kubernetes",
        choice=f"probe-job.yaml with {image}" if image else "no probe-job.yaml",
        reason="a one-pod Job on one node of the plan's GPU, in the plan's own "
        + ("training image" if k8s.training else "vLLM image (it ships PyTorch)")
        + "; the log holds the results as one JSON line between marker lines: "
        + extract_command(plan)
        if image
        else f"the {engine.engine + ' engine' if engine else 'plan'}'s image has no PyTorch to run probe.py; submit probe.sbatch or run "
        "probe.py under torchrun in a PyTorch image",
    )


def _environment_decision(plan: ResolvedPlan) -> DeploymentDecision:
    """What probe.py checks of the device before it measures: the GPU's name and power limit, the driver."""
    gpu = plan.hardware.gpu_spec
    return DeploymentDecision(
        topic="probe environment checks",
        choice=f"{gpu.k8s_product_label}, {gpu.tdp_watts:g} W",
        reason=f"the catalog's {gpu.id}: its product name (refused unless --allow-other-device) and TDP (a power limit more "
        f"than {POWER_TOLERANCE:.0%} off is a warning: a capped board is slower), and the least driver of torch's CUDA "
        f"major (NVIDIA CUDA Compatibility, Table 1); warnings go to the results and calibrate repeats them",
    )


def serving_probe(plan: ResolvedPlan) -> Probe:
    """The plan's own engine on one replica: its emitted launch (vllm/serve.sh with config.yaml's settings) started,
    then vLLM's own serving benchmark (`vllm bench serve`, random prompts of the plan's prompt and output lengths) at
    concurrency 1, the plan's max concurrency and their geometric middle."""
    from .probe_triton import applies as triton_vision
    from .probe_triton import triton_probe
    from .probe_triton_llm import applies as triton_llm
    from .probe_triton_llm import triton_llm_probe

    sv, traffic = plan.serving, plan.spec.serve.traffic
    if sv.engine != "vllm" and not triton_vision(plan) and not triton_llm(plan):
        raise ProbeError(
            f"the serving probe runs vLLM's own benchmark against the emitted engine (Triton's perf_analyzer for a "
            f"model on Triton); the {sv.engine} engine's benchmark for this model is not wired in, so this "
            "plan has no serving probe"
        )
    top = max(1, sv.max_concurrency)
    concurrencies = sorted({1, max(1, round(math.sqrt(top))), top})
    serving = ServingProbe(
        engine="vllm",
        concurrencies=concurrencies,
        prompt_tokens=traffic.prompt_tokens,
        output_tokens=traffic.output_tokens,
        prompts_per_concurrency=PROMPTS_PER_CONCURRENCY,
        tp=sv.tp,
        gpus=sv.gpus_per_replica,
        plan_text=_plan_text(plan),
    )
    decisions = [
        DeploymentDecision(
            topic="probe engine",
            choice="vLLM from vllm/serve.sh, measured by vLLM's own `vllm bench serve`",
            reason=f"the plan's own engine and settings on one replica ({sv.gpus_per_replica} GPU(s), TP {sv.tp}), "
            "CUDA graphs and all, so the measured time to first token and time per output token are the engine's; "
            "an eager PyTorch stand-in is dispatch-bound where the engine is not",
        ),
        DeploymentDecision(
            topic="probe concurrency",
            choice=", ".join(map(str, concurrencies)),
            reason=f"1 (the latency floor), the plan's max concurrency {sv.max_concurrency} and their geometric "
            f"middle; prompts of {traffic.prompt_tokens} tokens, {traffic.output_tokens} output tokens "
            f"(traffic), {PROMPTS_PER_CONCURRENCY} × the concurrency requests each (at least "
            f"{PROMPTS_PER_CONCURRENCY * 2})",
        ),
        DeploymentDecision(
            topic="probe time limit",
            choice=f"{TIME_LIMIT_SECONDS // 60} minutes",
            reason="a minutes-long job: the engine's start, then one benchmark per concurrency; the scheduler stops "
            "it at the limit",
        ),
    ]
    arch = plan.model.architecture
    run = _ProbeRun("serving", arch, arch.layers, sv.gpus_per_replica, sv.precision, traffic.prompt_tokens, [], serving)
    probe = _probe(plan, run, decisions)
    if triton_llm(plan):
        return triton_llm_probe(plan, probe)
    return triton_probe(plan, probe, serving.plan_text) if triton_vision(plan) else probe


def _unprobed_training(plan: ResolvedPlan) -> str | None:
    """What probe_train.py does not run that the plan's job does (its measurements would be of another job)."""
    train, launch = plan.spec.train, plan.deployment.launcher.kind
    if launch == "megatron":
        return None  # Megatron-LM's own script runs the plan's settings
    if train.optimizer != "adamw":
        return f"AdamW (torch's, DeepSpeed's CPU Adam under ZeRO-Offload), not {train.optimizer}"
    if plan.spec.precision == "fp8":
        return "bf16 autocast outside Megatron-LM, not fp8"
    if train.optimizer_in_backward or train.activation_offload:
        return "the optimizer after the backward and activations on the device"
    return None


def decide_probe(
    plan: ResolvedPlan, catalog: Catalog, resolve_text, gpus: int | None = None, neighbours: bool = True
) -> Probe:
    from .probe_triton import applies as triton_vision

    if plan.model is None or plan.stages or plan.model.architecture.kind != "decoder" and not triton_vision(plan):
        raise ProbeError(
            "the probe measures decoder models (training or serving) and vision models served by Triton, a staged "
            "service each stage as a plan of its own (probe_stages.py); other vision probes are not built"
        )
    if plan.training is not None:
        unprobed = _unprobed_training(plan)
        if unprobed:
            raise ProbeError(f"the training probe runs {unprobed}; this plan's job is not probed yet")
        return training_probe(plan, catalog, resolve_text, gpus, neighbours)
    return serving_probe(plan)


def _plan_text(plan: ResolvedPlan) -> str:
    """The plan as given, without a site calibration (calibrate names its own file when it compiles it)."""
    data = plan.spec.model_dump(mode="json", exclude_unset=True)
    data.get("cluster", {}).pop("calibration", None)
    return yaml.safe_dump(data, sort_keys=False, width=1 << 30)
