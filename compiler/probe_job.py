"""The training probe's jobs: the plan's own emitted job, shortened. Each probed layout is a reduced plan (the plan's
architecture with fewer layers, one node, the plan's framework, launch kind and layout pinned, the probe's training
script as the entrypoint) compiled by the same pipeline as any plan, so its launcher, framework configuration and
predicted step time and memory are what the compiler decides for exactly that reduced job. A layout the compiler
cannot size is left out: every probed layout is one the search prices, and calibrate prices it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import yaml

from .diagnostics import InfeasiblePlan, PlanInputError
from .plan.resolved import ResolvedPlan

PROBE_TOKENS = 1_000_000  # the reduced plan's training amount: any; the probe runs a step budget, not the plan
JOB_SCRIPT = "probe_train.py"
WARMUP_STEPS, MEASURED_STEPS = 3, 10  # deployment/probe.py's, repeated here for Megatron's iteration count
# Megatron-LM shortened through its own flags, placed after the plan's (argparse: the last one wins): mock data, the
# step budget, every iteration logged (its "elapsed time per iteration (ms)" and memory report), no evaluation; the
# plan's checkpoint is neither loaded nor written: --load/--save point at a scratch folder beside the probe (Megatron
# has no flag to skip its final save: it writes the reduced model's weights there once, after the measured steps)
MEGATRON_SCRATCH = "megatron-scratch"
MEGATRON_PROBE_ARGS = (
    "--mock-data",
    "--train-iters",
    str(WARMUP_STEPS + MEASURED_STEPS),
    "--log-interval",
    "1",
    "--eval-iters",
    "0",
    "--save-interval",
    "1000000",
    "--save",
    MEGATRON_SCRATCH,
    "--load",
    MEGATRON_SCRATCH,
    "--no-save-optim",
    "--no-save-rng",
)
# the neighbours of the chosen layout, tried in this order (each compiled; one the compiler refuses is left out):
# what the step costs at half the TP (more data parallelism), twice and half the micro-batch
NEIGHBOURS = (
    ("TP ÷2", {"tp": 0.5}),
    ("micro-batch ×2", {"micro_batch": 2.0}),
    ("micro-batch ÷2", {"micro_batch": 0.5}),
)
MAX_LAYOUTS = 3  # the chosen layout and two neighbours: 3 × 13 steps stay well inside the time limit


@dataclass(frozen=True)
class ProbeJob:
    """One probed layout: its name, the reduced plan (YAML text) and that plan resolved."""

    name: str
    folder: str
    plan_text: str
    resolved: ResolvedPlan

    def prediction(self) -> dict:
        """What the compiler predicts for this reduced job: the step, its parts and the peak memory per GPU."""
        memory, par = self.resolved.memory_per_gpu_bytes, self.resolved.parallelism
        return {
            "step_seconds": step_roofline(self.resolved),
            "allocated_bytes": memory.allocated,
            "reserved_bytes": memory.reserved,
            "framework": par.framework,
            "launch_kind": self.resolved.deployment.launcher.kind,
            "tp": par.tp,
            "pp": par.pp,
            "dp": par.dp,
            "zero_stage": par.zero_stage,
            "micro_batch": par.micro_batch,
            "grad_accum": par.grad_accum,
            "global_batch": par.global_batch,
            "recompute": par.recompute,
            "offload": par.offload_optimizer,
        }


def _architecture(plan: ResolvedPlan, layers: int) -> dict:
    arch = plan.model.architecture
    reduced = arch.model_copy(update={"layers": layers, "dense_layers": min(arch.dense_layers, layers)})
    return reduced.model_dump(mode="json", exclude_defaults=True)


def _entrypoint(plan: ResolvedPlan, given: dict) -> dict:
    """The probe's training script under the plan's launch kind; Megatron-LM: the plan's own pretrain script (it
    must be reachable from the job's working folder, out/runs/<plan>-probe/ under Slurm: e.g. an absolute path in the
    image), shortened by its flags."""
    kind = plan.deployment.launcher.kind
    if kind == "megatron":
        script = given.get("script", "pretrain_gpt.py")
        return {**given, "kind": kind, "script": script, "args": [*given.get("args", []), *MEGATRON_PROBE_ARGS]}
    return {**given, "kind": kind, "script": JOB_SCRIPT, "args": []}


def job_spec(plan: ResolvedPlan, gpus: int, layers: int, micro_batch: int, tp: int | None = None) -> dict:
    """The reduced plan: the plan's spec with the model's layers reduced, one node of `gpus` GPUs of the chosen type,
    its decided framework, launch kind and layout pinned (PP 1: one node), the probe script as the entrypoint."""
    spec, par = plan.spec, plan.parallelism
    data = spec.model_dump(mode="json", exclude_unset=True)
    train = data["train"]
    for key in ("tokens", "dataset_tokens", "epochs", "global_batch_tokens", "deadline", "data", "mtbf_gpu_hours"):
        train.pop(key, None)
    tp = min(tp or par.tp, gpus)
    dp = gpus // tp
    # one data-parallel rank has nothing to shard; FSDP2 × TP runs fully_shard (ZeRO-3) at any DP
    zero = par.zero_stage if dp > 1 or par.framework == "fsdp" else 0
    train.update(
        tokens=PROBE_TOKENS,
        global_batch=dp * micro_batch,
        framework=par.framework,
        entrypoint=_entrypoint(plan, train.get("entrypoint", {})),
    )
    cluster = {
        key: data["cluster"][key]
        for key in ("scheduler", "interconnect", "storage", "pricing")
        if key in data["cluster"]
    }
    cluster.update(gpu=plan.hardware.gpu, count=gpus, gpus_per_node=gpus)
    pins = {
        "tp": tp,
        "pp": 1,
        "zero_stage": zero,
        "micro_batch": micro_batch,
        "recompute": par.recompute,
        "offload": par.offload_optimizer and zero > 0,
    }
    model = {"architecture": _architecture(plan, layers)}
    if spec.model.hf_id:
        model["hf_id"] = spec.model.hf_id
    return {
        "name": f"{plan.name[:50]}-probe",
        "workload": spec.workload,
        "model": model,
        "precision": spec.precision,
        "train": train,
        "cluster": cluster,
        "parallelism": pins,
        "optimize": spec.optimize if spec.optimize != "latency" else "cost",
    }


# A plan's YAML text through the ordinary pipeline (pipeline.resolve_text, handed in by the pipeline itself: this
# module is below it)
ResolveText = Callable[[str], ResolvedPlan]


def _try(
    resolve_text: ResolveText,
    plan: ResolvedPlan,
    gpus: int,
    layers: int,
    micro_batch: int,
    budget_bytes: float,
    tp: int | None = None,
) -> tuple[str, ResolvedPlan] | None:
    """The reduced plan's text and resolution, or None when the compiler refuses it or its predicted peak exceeds
    the budget."""
    text = yaml.safe_dump(job_spec(plan, gpus, layers, micro_batch, tp), sort_keys=False, width=1 << 30)
    try:
        resolved = resolve_text(text)
    except (InfeasiblePlan, PlanInputError):
        return None
    return (text, resolved) if resolved.memory_per_gpu_bytes.reserved <= budget_bytes else None


def _most_layers(
    resolve_text: ResolveText, plan: ResolvedPlan, gpus: int, micro_batch: int, budget_bytes: float
) -> int:
    """The most layers (≤ the model's) at which the compiler sizes the reduced job on one node within the budget: a
    bisection over compiles; 0 when not even one layer fits."""
    low, high = 0, plan.model.architecture.layers
    while low < high:
        mid = (low + high + 1) // 2
        fits = _try(resolve_text, plan, gpus, mid, micro_batch, budget_bytes)
        low, high = (mid, high) if fits else (low, mid - 1)
    return low


def probe_jobs(
    resolve_text: ResolveText,
    plan: ResolvedPlan,
    gpus: int,
    budget_bytes: float,
    layers: int | None = None,
    neighbours: bool = True,
) -> list[ProbeJob]:
    """The chosen layout and the neighbours the compiler sizes at the same reduced depth, each predicted to peak
    under `budget_bytes` per GPU; `resolve_text` compiles a reduced plan."""
    mb = plan.parallelism.micro_batch
    # deep enough to measure, shallow enough that the twice-the-micro-batch neighbour fits too
    layers = (
        layers
        or (neighbours and _most_layers(resolve_text, plan, gpus, 2 * mb, budget_bytes))
        or _most_layers(resolve_text, plan, gpus, mb, budget_bytes)
    )
    if layers < 1:
        return []
    jobs, tp = [], min(plan.parallelism.tp, gpus)
    for name, change in (("chosen", {}), *(NEIGHBOURS if neighbours else ())):
        b = max(1, round(mb * change.get("micro_batch", 1.0)))
        t = max(1, int(tp * change.get("tp", 1.0)))
        if name != "chosen" and (b, t) == (mb, tp) or len(jobs) == MAX_LAYOUTS:
            continue
        found = _try(resolve_text, plan, gpus, layers, b, budget_bytes, t)
        if found is not None:
            folder = "job" if name == "chosen" else (f"job-tp{t}" if t != tp else f"job-mb{b}")
            jobs.append(ProbeJob(name, folder, *found))
    return jobs


def step_roofline(plan: ResolvedPlan) -> float:
    """The step the GPU shares predict: the roofline. The headline also carries the published rows' P50 factor,
    which a site's own measurement should replace; probe and calibrate compare measured steps with the roofline."""
    return next((r.roofline for r in plan.ranges if r.quantity == "training.step_seconds"), plan.training.step_seconds)
