"""The launcher every node runs: torchrun or accelerate, its node range and restarts, the fabric's collective
environment, the framework's flags and environment, the checkpoint interval and the signal the script saves on."""

from __future__ import annotations

import posixpath
import re

from ...plan.deployment import Files
from ...plan.deployment_fields import EnvVar
from ...plan.deployment_training import Checkpoint, Launcher, Lora
from ...plan.resolved import ResolvedPlan
from ...plan.spec import PlanSpec
from .. import megatron_launch, megatron_version
from ..frameworks import MIXED_PRECISION
from ..fsdp_tp import uses_fsdp_tp
from ..nodes import fabric_family
from ..recipe_flags import hf_trainer_args
from .elastic import SPOT_MAX_RESTARTS, nnodes_range, restart_policy
from .launch_kind import LAUNCH_KINDS, auto_kind, launch_kind
from .node_share import DEFAULT_CPUS_PER_GPU, partial_node, slurm_share

# torchrun's default rendezvous port (torch.distributed.run: --master-port default 29500).
DEFAULT_RDZV_PORT = 29500

# Environment for the collective library, by fabric family (NCCL env docs:
# docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). Every value is only a default:
# the launcher keeps a value already set in the environment, because device names are site-specific.
_IB_ENV = [
    ("NCCL_IB_DISABLE", "0", "use the InfiniBand verbs transport"),
    ("NCCL_IB_HCA", "mlx5", "all ports of every HCA whose name starts with mlx5 (prefix match)"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "bootstrap over any interface but loopback and docker bridges"),
]
_ROCE_ENV = [
    ("NCCL_IB_DISABLE", "0", "RoCE runs on the IB verbs transport"),
    ("NCCL_IB_HCA", "mlx5", "all ports of every HCA whose name starts with mlx5 (prefix match)"),
    ("NCCL_IB_GID_INDEX", "3", "GID index of RoCE v2 on Mellanox/NVIDIA NICs with the default GID table"),
    ("NCCL_IB_TC", "106", "traffic class of the lossless (PFC/ECN) queue in NVIDIA's RoCE guides"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "bootstrap over any interface but loopback and docker bridges"),
]
_EFA_ENV = [
    ("FI_PROVIDER", "efa", "libfabric provider used by the aws-ofi-nccl plugin"),
    ("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA on p4d/p5 (AWS EFA docs)"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "bootstrap over any interface but loopback and docker bridges"),
]
_SOCKET_ENV = [
    ("NCCL_IB_DISABLE", "1", "no RDMA fabric: TCP sockets"),
    ("NCCL_SOCKET_IFNAME", "^lo,docker", "any interface but loopback and docker bridges"),
]
_FABRIC_ENV = {"ib": _IB_ENV, "roce": _ROCE_ENV, "efa": _EFA_ENV}

URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_local_path(location: str) -> bool:
    """A filesystem path the job's nodes see (mounted into containers), not a URI the script fetches."""
    return location.startswith("/") and not URI.match(location)


def fabric_env(interconnect: str) -> list[EnvVar]:
    family = fabric_family(interconnect)
    return [EnvVar(name=n, value=v, comment=c) for n, v, c in _FABRIC_ENV.get(family, _SOCKET_ENV)]


def checkpoint(plan: ResolvedPlan, spec: PlanSpec) -> Checkpoint:
    """The interval the job checkpoints at: train.checkpoint.every when given, else the sizing's Young-Daly interval."""
    t, given, floor = plan.training, spec.train.checkpoint.every, spec.train.checkpoint.min_interval
    seconds = t.checkpoint_interval_seconds if given == "auto" else float(given)
    source = "young-daly" if given == "auto" else "plan"
    if given == "auto" and floor is not None and floor > seconds:
        seconds, source = float(floor), "floor"
    steps = 1 if t.step_seconds <= 0 else max(1, round(seconds / t.step_seconds))
    return Checkpoint(
        dir=t.checkpoint_dir, interval_seconds=seconds, interval_steps=steps, keep=t.checkpoint_keep, source=source
    )


# Hugging Face TrainingArguments' precision switch per plan precision (fp8 trains on bf16 weights, as in ds_config).
HF_PRECISION_FLAG = {"bf16": "--bf16", "fp8": "--bf16", "fp16": "--fp16"}


def framework_args(plan: ResolvedPlan, kind: str, ck: Checkpoint) -> list[str]:
    """The plan's decisions as flags where the launch kind's parser has them (Megatron's are in megatron/args.sh;
    torchrun/deepspeed/accelerate scripts read the MLINFRA_* environment). Hugging Face TrainingArguments: checkpoint
    directory, interval and retention, and the batch, clipping and precision that its DeepSpeed integration checks
    against ds_config.json (HfTrainerDeepSpeedConfig.trainer_config_process refuses a mismatch: TrainingArguments'
    defaults, batch 8 and no bf16, would stop the job); max_steps = the sized steps; gradient_checkpointing when the
    layout recomputes activations (the Trainer has only per-layer full recompute); the optimizer recipe (learning rate,
    schedule, warmup, weight decay, Adam betas and eps, gradient clip: deployment/recipe_flags.py)."""
    if kind != "hf-trainer":
        return []
    par = plan.parallelism
    args = [
        "--output_dir",
        ck.dir,
        "--save_steps",
        str(ck.interval_steps),
        "--save_total_limit",
        str(ck.keep),
        "--per_device_train_batch_size",
        str(par.micro_batch),
        "--gradient_accumulation_steps",
        str(par.grad_accum),
        "--max_steps",
        str(plan.training.steps),
        *hf_trainer_args(plan.recipe),
    ]
    if plan.spec.precision in HF_PRECISION_FLAG:
        args.append(HF_PRECISION_FLAG[plan.spec.precision])
    if par.recompute != "none":
        args.append("--gradient_checkpointing")
    return args


def framework_env(plan: ResolvedPlan, kind: str) -> list[EnvVar]:
    """Megatron-LM's validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor parallelism on Hopper and earlier
    (megatron/training/arguments.py: one hardware queue keeps TP communication ahead of the GEMMs it overlaps)."""
    if kind == "megatron" and plan.parallelism.tp > 1:
        return [
            EnvVar(
                name="CUDA_DEVICE_MAX_CONNECTIONS",
                value="1",
                comment="Megatron-LM asserts it with tensor parallelism (before Blackwell)",
            )
        ]
    return []


# accelerate loop checks before accelerator.save_state. Both agree over every rank first (one all-reduce of the flag
# per step), since the signal can land between two ranks' step ends and a rank stopping alone would hang the others.
CHECKPOINT_USAGE = {
    "hf-trainer": "from mlinfra_signal import CheckpointOnSignal, last_checkpoint; trainer = Trainer(..., "
    "callbacks=[CheckpointOnSignal()]); trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))",
    "accelerate": "from mlinfra_signal import CheckpointSignal; stop = CheckpointSignal(); then after each step: "
    "if stop.agreed(accelerator.device): accelerator.save_state(os.environ['MLINFRA_CHECKPOINT_DIR']); break",
    "megatron": "--exit-signal-handler (megatron/args.sh): Megatron-LM saves and exits on SIGTERM",
}
PLAIN_USAGE = (
    "signal.signal(getattr(signal, 'SIG' + os.environ['MLINFRA_CHECKPOINT_SIGNAL']), handler); the handler "
    "sets a flag the loop reads after each step, then saves to $MLINFRA_CHECKPOINT_DIR and exits 0"
)
HELPER_KINDS = ("hf-trainer", "accelerate")


def launcher(plan: ResolvedPlan, spec: PlanSpec, files: Files) -> Launcher:
    entry, hw, framework = spec.train.entrypoint, plan.hardware, plan.parallelism.framework
    kind = launch_kind(plan, spec)
    helper = files.checkpoint_helper if kind in HELPER_KINDS else ""
    config = framework_config(plan, files)
    cpus = cpus_per_node(plan, spec)
    script, prune_keep = entry_script(plan, spec, kind)
    data = spec.train.data
    return Launcher(
        program="accelerate" if kind == "accelerate" else "torchrun",
        kind=kind,
        kind_reason="" if entry.kind != "auto" else auto_kind(plan, spec)[1],
        config_flag=LAUNCH_KINDS[kind][1].get(framework, ""),
        megatron_args=kind == "megatron",
        framework_args=framework_args(plan, kind, checkpoint(plan, spec)),
        reads=generated_reads(plan, spec, files, kind, config, helper),
        checkpoint_signal="TERM" if kind == "megatron" else "USR1",
        checkpoint_helper=helper,
        checkpoint_usage=CHECKPOINT_USAGE.get(kind, PLAIN_USAGE),
        script=script,
        python_script=script.endswith(".py"),
        args=list(entry.args),
        **node_fields(plan, spec, kind),
        rdzv_port=DEFAULT_RDZV_PORT,
        cpus_per_node=cpus,
        omp_threads=max(1, cpus // hw.gpus_per_node),
        precision=spec.precision,
        framework=framework,
        framework_config=config,
        fabric_env=fabric_env(hw.interconnect),
        framework_env=framework_env(plan, kind),
        user_env=[EnvVar(name=k, value=v) for k, v in sorted(entry.env.items())],
        checkpoint=checkpoint(plan, spec),
        data=spec.train.data,
        lora=lora_adapters(spec, framework),
        model_weights=spec.model.weights if spec.model else None,
        model_id=spec.model.hf_id if spec.model else None,
        checkpoint_prune_keep=prune_keep,
        create_dirs=[d for d in (plan.training.checkpoint_dir,) if is_local_path(d)],
        data_mount=data_folder(data, kind) if data and is_local_path(data) else None,
    )


def framework_config(plan: ResolvedPlan, files: Files) -> str:
    """The framework file the job reads: DeepSpeed's or accelerate's config, the FSDP2 × TP settings, or none."""
    if uses_fsdp_tp(plan):
        return files.fsdp_tp_config
    return {"deepspeed": files.ds_config, "fsdp": files.accelerate_config}.get(plan.parallelism.framework, "")


def cpus_per_node(plan: ResolvedPlan, spec: PlanSpec) -> int:
    """CPUs per node: a job below a node gets its share, else cluster.slurm.cpus_per_node or the default per GPU."""
    gpus = plan.hardware.gpus_per_node
    if partial_node(plan):
        return slurm_share(plan, spec)[0] * gpus
    cpus = spec.cluster.slurm.cpus_per_node
    return DEFAULT_CPUS_PER_GPU * gpus if cpus is None else cpus


def lora_adapters(spec: PlanSpec, framework: str) -> Lora | None:
    """train.lora for a LoRA or QLoRA run; None for full training. QLoRA under FSDP: the NF4 storage dtype."""
    if spec.train.method not in ("lora", "qlora"):
        return None
    storage = fsdp_quant_storage(spec.precision) if spec.train.method == "qlora" and framework == "fsdp" else None
    return Lora(
        rank=spec.train.lora.rank,
        alpha=spec.train.lora.alpha,
        targets=list(spec.train.lora.targets),
        method=spec.train.method,
        quant_storage=storage,
        quant_storage_reason=QUANT_STORAGE_REASON if storage else "",
    )


# Accelerate's FSDP mixed precision (frameworks.MIXED_PRECISION) → the dtype FSDP gives every parameter
QUANT_STORAGE = {"no": "float32", "fp16": "float16", "bf16": "bfloat16"}
QUANT_STORAGE_REASON = (
    "FSDP flattens only float tensors and casts each to its mixed-precision param_dtype, so the NF4 bytes are packed "
    "in that dtype and the cast leaves them as they are (bitsandbytes docs 'FSDP-QLoRA': quant_storage; PEFT docs "
    "'Use PEFT QLoRA and FSDP': BitsAndBytesConfig(bnb_4bit_quant_storage=...) and the model loaded in the same "
    "dtype); fsdp/accelerate_config.yaml sets fsdp_use_orig_params false as that guide does, so the script wraps "
    "with PEFT's fsdp_auto_wrap_policy (the adapters in FSDP units of their own). Under fp16 that guide prefers float32 "
    "storage with accelerate's mixed_precision 'no' and autocast; here FSDP's own fp16 policy casts, so float16"
)


def fsdp_quant_storage(precision: str) -> str:
    """The NF4 storage dtype under FSDP: accelerate's mixed precision for the plan's precision, as a torch dtype name."""
    return QUANT_STORAGE[MIXED_PRECISION[precision]]


def entry_script(plan: ResolvedPlan, spec: PlanSpec, kind: str) -> tuple[str, int]:
    """→ (the script torchrun starts, checkpoints the launcher keeps when it prunes them, 0 for none): the plan's
    script; for Megatron-LM, pretrain_gpt.py in the image's Megatron-LM, the launcher holding the retention."""
    if kind != "megatron":
        return spec.train.entrypoint.script, 0
    rel = megatron_version.release(spec)
    script = megatron_launch.entry_script(spec, rel)[0]
    return script, megatron_launch.retention(rel, checkpoint(plan, spec), plan.training.steps)[1]


def generated_reads(plan: ResolvedPlan, spec: PlanSpec, files: Files, kind: str, config: str, helper: str) -> list[str]:
    """Generated files the job reads besides the launcher: the framework file, Megatron's arguments, the FSDP2 × TP
    scripts and the checkpoint helper, each where it applies."""
    fsdp_tp = uses_fsdp_tp(plan)
    return [
        p
        for p in (
            config,
            files.megatron_args if kind == "megatron" else "",
            files.fsdp_tp_script if fsdp_tp else "",
            files.lora_tp_script if fsdp_tp and spec.train.method == "lora" else "",
            files.fsdp_cp_script if fsdp_tp and plan.parallelism.cp > 1 else "",
            helper,
        )
        if p
    ]


def node_fields(plan: ResolvedPlan, spec: PlanSpec, kind: str) -> dict:
    """Nodes and GPUs of the job; on spot capacity, the restarts torchrun allows and the node range it may restart on."""
    hw = plan.hardware
    elastic = spec.cluster.pricing == "spot"
    node_range, restart_reason = restart_policy(plan, kind, elastic)
    minimum, maximum = nnodes_range(plan, node_range)
    return {
        "nodes": hw.nodes,
        "nnodes": f"{minimum}:{maximum}" if node_range else str(maximum),
        "min_nodes": minimum,
        "nproc_per_node": hw.gpus_per_node,
        "world_size": hw.nodes * hw.gpus_per_node,
        "elastic": elastic,
        "node_range": node_range,
        "restart_reason": restart_reason,
        "max_restarts": SPOT_MAX_RESTARTS if elastic else 0,
    }


def data_folder(data: str, kind: str) -> str:
    """What containers mount for train.data: Megatron-LM's --data-path is a prefix PREFIX naming PREFIX.bin and
    PREFIX.idx (megatron/core/datasets/indexed_dataset.py), so its folder; any other script's path as given."""
    return posixpath.dirname(data.rstrip("/")) or "/" if kind == "megatron" else data
