"""Training deployment decisions: the torchrun launcher, the Slurm job and its chain, the Kubernetes job.

Moved here from the targets (torchrun.py, slurm.py, k8s_training.py), which now only place these values.
"""

from __future__ import annotations

import math
import re

from ..diagnostics import FieldRefused, InfeasiblePlan
from ..plan.deployment import (
    Checkpoint,
    DeploymentDecision,
    Directive,
    EnvVar,
    Files,
    KubernetesTraining,
    Launcher,
    Lora,
    Slurm,
)
from ..plan.resolved import ResolvedPlan
from ..plan.runs import runs_dir
from ..plan.spec import PlanSpec
from . import hf_trainer, nodes
from .frameworks import uses_megatron
from .fsdp_tp import uses_fsdp_tp
from .images import check_image, training_image
from .recipe_flags import hf_trainer_args

# torchrun's default rendezvous port (torch.distributed.run: --master-port default 29500).
DEFAULT_RDZV_PORT = 29500

# CPU cores per GPU when the plan gives no cpus_per_node: the smallest of the common 8-GPU servers,
# AWS p4d.24xlarge (96 vCPUs / 8 A100, aws.amazon.com/ec2/instance-types/p4), so the request fits
# DGX A100 (128 cores), DGX H100 (112 cores) and p5.48xlarge (192 vCPUs) as well.
DEFAULT_CPUS_PER_GPU = 12

# Spot pricing makes the job elastic: torchrun keeps running while at least this share of the
# planned nodes is alive (a policy choice: below half the throughput the deadline is lost anyway).
SPOT_MIN_NODE_FRACTION = 0.5
# Restarts torchrun may do per job on spot capacity (each reloads the last checkpoint); on
# on-demand/reserved capacity a failure ends the job and Slurm/Kubernetes requeue it instead.
SPOT_MAX_RESTARTS = 10

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

# ----------------------------------------------------------------------------------------------- Slurm
# Longest single job. Slurm's own default is unlimited, but sites cap partitions; 24 h is at or below
# the common caps (NERSC Perlmutter regular QOS 48 h, many university partitions 24-72 h). Longer runs chain.
MAX_JOB_SECONDS = 24 * 3600
# Share added to the estimated training time of a job: step-time variance between the sizing model
# and the real run. The step-time range's P90 (published steps ÷ ours, attach_ranges) when it says more: a
# chain sized at the point estimate would end before the run does on a site as slow as 1 in 10 published runs.
TIME_MARGIN_FRACTION = 0.10
STEP_RANGE = "training.step_seconds"


def time_margin_fraction(plan: ResolvedPlan) -> float:
    spread = next((r for r in plan.ranges if r.quantity == STEP_RANGE), None)
    return max(TIME_MARGIN_FRACTION, spread.p90 / spread.predicted - 1 if spread and spread.predicted else 0.0)


# Fixed start-up cost of every job: container start, rendezvous, NCCL communicator set-up, data-loader
# warm-up (an assumption; restoring the checkpoint is counted separately from its write time).
LAUNCH_OVERHEAD_SECONDS = 600
# The time-limit warning must cover one in-flight step plus a checkpoint write; the write time is
# doubled for contention on the shared filesystem when every rank writes at once.
CHECKPOINT_WRITE_SAFETY = 2.0
# sbatch(1) --signal: "sig_time must be an integer between 0 and 65535".
MAX_SIGNAL_LEAD_SECONDS = 65535
# Host memory per GPU of a job that shares its node (--mem when the plan gives no memory_per_node): the smallest of
# the common 8-GPU servers, AWS p4d.24xlarge, 1,152 GiB / 8 GPUs (aws.amazon.com/ec2/instance-types/p4), as for CPUs.
HOST_MEMORY_PER_GPU_BYTES = 144 * 2**30
# Slurm memory unit for --mem: MiB (sbatch(1): "Default units are megabytes").
BYTES_PER_MIB = 2**20
# Characters sbatch takes as-is in a directive value; anything else is double-quoted (sbatch's script
# parser strips double quotes and honours backslash escapes inside them).
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.,:@+%=/&|!*\[\]()-]+$")

# ----------------------------------------------------------------------------------------------- Kubernetes
GIB = 2**30
LAUNCH_MOUNT = "/mlinfra"  # the ConfigMap's files: $MLINFRA_OUT_DIR of the launcher
REPLICATED_JOB = "trainer"
# /dev/shm rule: 1 GiB per GPU process. DataLoader workers hand every batch to their trainer process through shared
# memory, and NCCL's shared-memory transport uses it between the node's ranks; the container runtime's 64 MiB default
# breaks both (NVIDIA's PyTorch container notes: raise --shm-size or use --ipc=host for multi-process data loading).
SHM_BYTES_PER_GPU = GIB
# Checkpoint PVC = checkpoint_bytes × (kept + 1 being written: the oldest is deleted only after the new one lands)
# × 1.10 for filesystem metadata and partial shards of an interrupted write.
CHECKPOINTS_IN_FLIGHT = 1
CHECKPOINT_FS_HEADROOM = 1.10
# Whole-job restarts before the job is marked failed (policy). Spot: a reclaim that marks the pods DisruptionTarget
# restarts without spending one (see k8s_training._jobset); 20 covers reclaims that surface as plain pod failures (a
# node gone before its pods were marked), each a restart from the last checkpoint. On-demand/reserved nodes fail
# rarely: Llama 3 (arXiv:2407.21783, §3.3.4) saw 419 unexpected interruptions in 54 days on 16,384 GPUs, one per
# ~2,100 GPU-days (a 64-GPU job: one a month), so 3 retries cover a bad node and a repeated failure needs a human look.
MAX_RESTARTS = {"spot": 20, "on-demand": 3, "reserved": 3}

URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_local_path(location: str) -> bool:
    """A filesystem path the job's nodes see (mounted into containers), not a URI the script fetches."""
    return location.startswith("/") and not URI.match(location)


# ----------------------------------------------------------------------------------------------- launcher
def fabric_family(interconnect: str) -> str:
    """The fabric family of a catalog interconnect id: ib, roce, efa, or eth (TCP)."""
    return interconnect.split("-", 1)[0].lower()


def fabric_env(interconnect: str) -> list[EnvVar]:
    family = fabric_family(interconnect)
    return [EnvVar(name=n, value=v, comment=c) for n, v, c in _FABRIC_ENV.get(family, _SOCKET_ENV)]


def nnodes_range(plan: ResolvedPlan, elastic: bool) -> tuple[int, int]:
    """(minimum, maximum) nodes: N:N, or on spot capacity MIN:N, where every count from MIN to N keeps whole model
    replicas (TP×CP×PP GPUs each) and the global batch a whole number of micro-batches per data-parallel rank: torchrun's
    elastic rendezvous restarts on any count in the range, and Megatron-LM (validate_args: world size % model-parallel
    size, global batch % (micro-batch × DP)) and the plain-script contract (MLINFRA_GLOBAL_BATCH kept by scaling the
    accumulation) need both. N:N when no smaller count qualifies."""
    nodes = plan.hardware.nodes
    if not elastic:
        return nodes, nodes
    fits = [_restartable(plan, n) for n in range(nodes + 1)]
    minimum = nodes
    while minimum > max(1, math.ceil(nodes * SPOT_MIN_NODE_FRACTION)) and fits[minimum - 1]:
        minimum -= 1
    return minimum, nodes


def _restartable(plan: ResolvedPlan, nodes: int) -> bool:
    """A layout runs on `nodes` nodes with the plan's model parallelism and global batch."""
    par = plan.parallelism
    replica_gpus = par.tp * par.cp * par.pp
    gpus = nodes * plan.hardware.gpus_per_node
    if nodes < 1 or gpus % replica_gpus:
        return False
    return par.global_batch % (par.micro_batch * (gpus // replica_gpus)) == 0


# Why a spot job restarts only at its full size, per launch: the program (or its config) fixes the world size.
FIXED_SIZE_REASONS = {
    "accelerate": "accelerate launch takes a fixed --num_machines (it sets torchrun's --nnodes to it, accelerate 1.15 "
    "utils/launch.py prepare_multi_gpu_env; no node range)",
    "fsdp_tp": "fsdp/fsdp_tp.py builds the decided mesh and stops at another world size (its step splits the decided "
    "per-rank batch, and a smaller DeviceMesh would change the global batch the plan was sized for)",
    "deepspeed": "deepspeed/ds_config.json fixes train_batch_size = micro-batch × accumulation × DP, which DeepSpeed "
    "asserts at start (DeepSpeedConfig._batch_assertion): fewer ranks stop the job",
    "hf-trainer": "the Trainer's --per_device_train_batch_size and --gradient_accumulation_steps are fixed: fewer ranks "
    "would train a smaller global batch than sized",
}


def restart_policy(plan: ResolvedPlan, kind: str, elastic: bool) -> tuple[bool, str]:
    """(node range or not, why) for a spot job: a range only where what runs re-derives its data parallelism from the
    live world size and keeps the global batch: Megatron-LM (DP = world / model-parallel size, micro-batches per step
    = global batch / (micro × DP); its default torch_dist checkpoints reshard over DP on load) and a plain torchrun
    script (the launch contract: MLINFRA_GLOBAL_BATCH kept by scaling the accumulation)."""
    if not elastic:
        return False, "fixed node count; the scheduler requeues a failed job"
    if kind == "accelerate":
        fixed = FIXED_SIZE_REASONS["accelerate"]
    elif uses_fsdp_tp(plan):
        fixed = FIXED_SIZE_REASONS["fsdp_tp"]
    elif plan.parallelism.framework == "deepspeed":
        fixed = FIXED_SIZE_REASONS["deepspeed"]
    elif kind == "hf-trainer":
        fixed = FIXED_SIZE_REASONS["hf-trainer"]
    elif (minimum := nnodes_range(plan, True)[0]) < plan.hardware.nodes:
        return True, (
            f"spot capacity: torchrun restarts on {minimum} to {plan.hardware.nodes} nodes, up to "
            f"{SPOT_MAX_RESTARTS} times from the last checkpoint; "
            + (
                "Megatron-LM re-derives DP from the world size and keeps the global batch"
                if kind == "megatron" or plan.parallelism.framework == "megatron"
                else "the script keeps the global batch ($MLINFRA_GLOBAL_BATCH) by scaling its accumulation"
            )
            + f"; every count in the range keeps whole model replicas and divides the global batch "
            f"{plan.parallelism.global_batch} into whole micro-batches of {plan.parallelism.micro_batch} per DP rank"
        )
    else:
        fixed = (
            f"no smaller node count (down to half) that torchrun may restart on keeps whole model replicas and "
            f"the global batch {plan.parallelism.global_batch} in whole micro-batches of {plan.parallelism.micro_batch} "
            "per data-parallel rank at every count in between"
        )
    return (
        False,
        f"spot capacity: the job restarts at its full size, up to {SPOT_MAX_RESTARTS} times from the last checkpoint: {fixed}",
    )


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


# The launch contract of each kind: (frameworks it can launch, flag before the framework file on the script's
# command line per framework). deepspeed: deepspeed.add_config_arguments adds --deepspeed_config (the
# `deepspeed` launcher's convention); hf-trainer: transformers TrainingArguments.deepspeed is `--deepspeed PATH`
# (TRL's parsers inherit it); accelerate: `accelerate launch --config_file` reads the file itself; megatron:
# pretrain_gpt.py reads megatron/args.sh's words.
LAUNCH_KINDS = {
    "torchrun": ({"ddp", "deepspeed", "fsdp", "megatron"}, {}),
    "deepspeed": ({"deepspeed"}, {"deepspeed": "--deepspeed_config"}),
    "hf-trainer": ({"ddp", "deepspeed"}, {"deepspeed": "--deepspeed"}),
    "accelerate": ({"fsdp"}, {}),
    "megatron": ({"megatron"}, {}),
}
# entrypoint.kind auto: the kind that reads what the framework's target writes.
AUTO_KIND = {"ddp": "torchrun", "deepspeed": "deepspeed", "fsdp": "accelerate", "megatron": "megatron"}


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


# Megatron-LM's training entry points are pretrain_*.py (pretrain_gpt.py, pretrain_mamba.py, pretrain_t5.py, ...): each
# parses the full Megatron argument set of megatron/args.sh (megatron.training.arguments.parse_args).
MEGATRON_ENTRY = re.compile(r"(^|/)pretrain_[A-Za-z0-9_]+\.py$")


def auto_kind(plan: ResolvedPlan, spec: PlanSpec) -> tuple[str, str]:
    """(kind, how it was decided) under entrypoint.kind auto. A Hugging Face Trainer/TRL script on a ddp or deepspeed
    layout is recognised by its file name (hf_trainer.HF_TRAINER_SCRIPTS) or by TrainingArguments flags among the
    plan's own arguments, and gets kind hf-trainer (--deepspeed, not --deepspeed_config); a name that hints at one but
    is not known is refused at train.entrypoint.script as ambiguous (exit 2)."""
    framework, entry = plan.parallelism.framework, spec.train.entrypoint
    # FSDP2 × TP × PP: the script applies fsdp/fsdp_tp.py; Accelerate's FSDP1 config has no TP/PP
    if uses_fsdp_tp(plan):
        return "torchrun", "the FSDP2 × TP × PP script fsdp/fsdp_tp.py runs under torchrun"
    default = AUTO_KIND.get(framework, "torchrun")
    if framework not in LAUNCH_KINDS["hf-trainer"][0]:
        return default, f"the kind that reads what the {framework} target writes"
    found = hf_trainer.evidence(entry.script, entry.args)
    if found:
        return "hf-trainer", f"a Hugging Face Trainer/TRL script: {found}"
    if hint := hf_trainer.hint(entry.script):
        raise FieldRefused(
            ("train", "entrypoint", "script"),
            f"{entry.script!r} looks like a Hugging Face Trainer/TRL script ({hint!r} in its name) but is not one "
            f"auto recognises: set train.entrypoint.kind to hf-trainer (TrainingArguments flags, --deepspeed) or to "
            f"{default} (the plain {framework} contract)",
            "ambiguous-entrypoint",
        )
    return default, f"the kind that reads what the {framework} target writes"


def launch_kind(plan: ResolvedPlan, spec: PlanSpec) -> str:
    """The launch contract; a given kind that cannot start what was sized is refused at train.entrypoint.kind (or at the
    script for megatron), exit 2, with the kinds that can."""
    framework, given = plan.parallelism.framework, spec.train.entrypoint.kind
    tensor_parallel = uses_fsdp_tp(plan)
    if given == "auto":
        return auto_kind(plan, spec)[0]
    allowed = LAUNCH_KINDS[given][0] - ({"fsdp"} if tensor_parallel and given == "accelerate" else set())
    fits = uses_megatron(plan) if given == "megatron" else framework in allowed
    if not fits:
        sized = (
            f"train.framework {framework}"
            if spec.train.framework != "auto"
            else f"the {framework} layout the sizing chose (train.framework auto)"
        )
        sized += (
            " with tensor/pipeline parallelism (FSDP2 × TP × PP: fsdp/fsdp_tp.py under torchrun)"
            if tensor_parallel
            else ""
        )
        can = (
            ["torchrun"]
            if tensor_parallel
            else sorted(k for k, (frameworks, _) in LAUNCH_KINDS.items() if framework in frameworks and k != "megatron")
        )
        raise FieldRefused(
            ("train", "entrypoint", "kind"),
            f"kind {given} cannot launch {sized}: {given} launches "
            + (" or ".join(sorted(allowed)) if given != "megatron" else "Megatron-LM layouts (megatron/args.sh)")
            + f"; use kind {' or '.join(can)} (or auto), or set train.framework to one that {given} launches",
            "launch-kind-mismatch",
        )
    if given == "megatron" and not MEGATRON_ENTRY.search(spec.train.entrypoint.script):
        raise FieldRefused(
            ("train", "entrypoint", "script"),
            f"kind megatron passes Megatron-LM's arguments (megatron/args.sh) to the script, and "
            f"{spec.train.entrypoint.script!r} is not a Megatron-LM entry point (pretrain_gpt.py, pretrain_mamba.py, "
            "... : pretrain_*.py); give that script, or use kind torchrun, whose script can source "
            "$MLINFRA_OUT_DIR/megatron/args.sh itself",
            "launch-kind-mismatch",
        )
    return given


# The final checkpoint at the time limit, per launch kind: the one line the script needs. Megatron-LM has a flag
# (--exit-signal-handler, in megatron/args.sh); a plain script installs its own handler; the Hugging Face Trainer and
# accelerate get the generated launch/mlinfra_signal.py (on PYTHONPATH): a TrainerCallback that sets the Trainer's own
# should_save + should_training_stop at the next step end (it saves checkpoint-N into --output_dir), or a flag an
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
    config = {"deepspeed": files.ds_config, "fsdp": files.accelerate_config}.get(framework, "")
    if uses_fsdp_tp(plan):
        config = files.fsdp_tp_config
    elastic = spec.cluster.pricing == "spot"
    node_range, restart_reason = restart_policy(plan, kind, elastic)
    minimum, maximum = nnodes_range(plan, node_range)
    cpus = spec.cluster.slurm.cpus_per_node
    if partial_node(plan):
        cpus = slurm_share(plan, spec)[0] * hw.gpus_per_node
    elif cpus is None:
        cpus = DEFAULT_CPUS_PER_GPU * hw.gpus_per_node
    lora = None
    if spec.train.method in ("lora", "qlora"):
        lora = Lora(
            rank=spec.train.lora.rank,
            alpha=spec.train.lora.alpha,
            targets=list(spec.train.lora.targets),
            method=spec.train.method,
        )
    return Launcher(
        program="accelerate" if kind == "accelerate" else "torchrun",
        kind=kind,
        kind_reason="" if entry.kind != "auto" else auto_kind(plan, spec)[1],
        config_flag=LAUNCH_KINDS[kind][1].get(framework, ""),
        megatron_args=kind == "megatron",
        framework_args=framework_args(plan, kind, checkpoint(plan, spec)),
        reads=[
            p
            for p in (
                config,
                files.megatron_args if kind == "megatron" else "",
                files.fsdp_tp_script if uses_fsdp_tp(plan) else "",
                files.lora_tp_script if uses_fsdp_tp(plan) and spec.train.method == "lora" else "",
                helper,
            )
            if p
        ],
        checkpoint_signal="TERM" if kind == "megatron" else "USR1",
        checkpoint_helper=helper,
        checkpoint_usage=CHECKPOINT_USAGE.get(kind, PLAIN_USAGE),
        script=entry.script,
        python_script=entry.script.endswith(".py"),
        args=list(entry.args),
        nodes=hw.nodes,
        nnodes=f"{minimum}:{maximum}" if node_range else str(maximum),
        min_nodes=minimum,
        nproc_per_node=hw.gpus_per_node,
        world_size=hw.nodes * hw.gpus_per_node,
        elastic=elastic,
        node_range=node_range,
        restart_reason=restart_reason,
        max_restarts=SPOT_MAX_RESTARTS if elastic else 0,
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
        lora=lora,
        model_weights=spec.model.weights if spec.model else None,
        model_id=spec.model.hf_id if spec.model else None,
    )


# ----------------------------------------------------------------------------------------------- Slurm
def directive_value(value: str) -> str:
    if _PLAIN_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _directive(flag: str) -> str:
    """A user's `--flag=value` with its value quoted for sbatch's directive parser."""
    name, sep, value = flag.partition("=")
    return f"{name}={directive_value(value)}" if sep else name


def pyxis_mountable(path: str) -> bool:
    """pyxis --container-mounts separates entries with ',' and source from target with ':'."""
    return "," not in path and ":" not in path


# pyxis writes each mount as the fstab line "SRC DST FLAGS" for enroot (pyxis args.c add_mount), which enroot-mount reads
# with glibc getmntent_r: fields split at blanks, and \040 \011 \012 \134 decode to space, tab, newline and backslash
# (getmntent(3)). A path with a space is mounted only in that spelling; the backslash is escaped first.
FSTAB_ESCAPES = (("\\", "\\134"), (" ", "\\040"), ("\t", "\\011"), ("\n", "\\012"))


def fstab_escape(path: str) -> str:
    for raw, escaped in FSTAB_ESCAPES:
        path = path.replace(raw, escaped)
    return path


def fstab_unescape(text: str) -> str:
    for raw, escaped in reversed(FSTAB_ESCAPES):
        text = text.replace(escaped, raw)
    return text


def warnings(launch: Launcher, job: Slurm | None, spec: PlanSpec) -> list[str]:
    out = []
    if (
        launch.precision == "fp8" and launch.framework != "megatron"
    ):  # only Megatron's arguments turn fp8 on (--fp8-format)
        out.append(
            f"precision fp8 is sized with fp8 GEMMs, but the {launch.framework} files carry bf16 (DeepSpeed, "
            "Accelerate and FSDP have no fp8 switch of their own): the script must convert its model "
            "(Transformer Engine's fp8_autocast, or torchao's convert_to_float8_training as torchtitan does), "
            "or the steps run at bf16 speed"
        )
    if job and job.container_image:
        targets = mount_targets(job.container_mounts)
        for field, path in job_paths(launch):
            if not covered(path, targets):
                out.append(
                    f"{field} {path!r} has ',' or ':' and cannot be a pyxis mount: the container does not see it; "
                    "mount its parent with cluster.slurm.container_mounts"
                )
    return out


def slurm_time(seconds: float) -> str:
    """D-HH:MM:SS, rounded up to whole minutes."""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def signal_lead_seconds(plan: ResolvedPlan) -> int:
    """Seconds before the limit at which SIGUSR1 arrives: one step + CHECKPOINT_WRITE_SAFETY × write time."""
    t = plan.training
    lead = math.ceil(t.step_seconds + CHECKPOINT_WRITE_SAFETY * t.checkpoint_write_seconds)
    return min(MAX_SIGNAL_LEAD_SECONDS, lead)


def job_chain(
    plan: ResolvedPlan, interval_seconds: float, max_job_seconds: float = MAX_JOB_SECONDS
) -> tuple[int, int, float]:
    """(links, steps per link, time limit in seconds) for the run.

    Effective step = step time × (1 + checkpoint write / checkpoint interval) (periodic saves stall training);
    a link's limit = steps × effective step × (1 + time margin) + launch + restore + warning lead; the
    links are sized with the same margin, so a run as slow as the step range's P90 still completes.
    """
    t = plan.training
    write_share = t.checkpoint_write_seconds / interval_seconds if interval_seconds > 0 else 0.0
    step = t.step_seconds * (1 + write_share) * (1 + time_margin_fraction(plan))
    overhead = LAUNCH_OVERHEAD_SECONDS + t.checkpoint_write_seconds + signal_lead_seconds(plan)
    steps = max(1, t.steps)
    if steps * step + overhead <= max_job_seconds:
        return 1, steps, steps * step + overhead
    if overhead + step > max_job_seconds:
        raise InfeasiblePlan(
            f"cluster.slurm.max_time {slurm_time(max_job_seconds)} cannot hold one step "
            f"({step:.0f} s) plus launch, restore and the checkpoint warning ({overhead:.0f} s)"
        )
    per_link = max(1, math.floor((max_job_seconds - overhead) / step))
    links = math.ceil(steps / per_link)
    return links, per_link, per_link * step + overhead


def job_paths(launch: Launcher) -> list[tuple[str, str]]:
    """(field, path) of every local path the job reads or writes besides the submit directory."""
    paths = [
        ("train.data", launch.data),
        ("train.checkpoint.dir", launch.checkpoint.dir),
        ("model.weights", launch.model_weights),
    ]
    return [(f, p) for f, p in paths if p and is_local_path(p)]


def mount_targets(mounts: list[str]) -> list[str]:
    """The container side of pyxis mounts (SRC[:DST[:FLAGS]]; DST defaults to SRC)."""
    parts = [m.split(":") for m in mounts]
    return [fstab_unescape(p[1] if len(p) > 1 and p[1] else p[0]) for p in parts]


def covered(path: str, targets: list[str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets)


def partial_node(plan: ResolvedPlan) -> bool:
    """The job uses fewer GPUs than its node has (a 1-GPU fine-tune on an 8-GPU server): share the node."""
    return plan.hardware.nodes == 1 and plan.hardware.gpus_per_node < plan.hardware.gpu_spec.gpus_per_node


def slurm_share(plan: ResolvedPlan, spec: PlanSpec) -> tuple[int, int, str]:
    """(CPUs, memory bytes, reason) per GPU of a job below a node: the node's own figures divided by its GPUs, from
    cluster.slurm.cpus_per_node / memory_per_node where given, else one GPU's share of the first catalog node that has
    the catalog's GPUs per node (the priced one where it does; its system reserve stands for slurmd and the OS, which
    sites keep out of a node's CPUs / RealMemory)."""
    given, gpu = spec.cluster.slurm, plan.hardware.gpu_spec
    node_gpus = gpu.gpus_per_node
    node_type = next((n for n in gpu.node_types if n.gpus >= node_gpus), None)
    one = nodes.node_share(gpu, node_type, 1, 0) if node_type else None
    cpus = (
        given.cpus_per_node // node_gpus
        if given.cpus_per_node is not None
        else (one.cpu_millicores // 1000 if one else DEFAULT_CPUS_PER_GPU)
    )
    if given.memory_per_node is not None:
        memory = given.memory_per_node // node_gpus
    else:
        memory = one.memory_bytes if one else HOST_MEMORY_PER_GPU_BYTES
    sources = [
        f"CPUs: cluster.slurm.cpus_per_node / {node_gpus} GPUs" if given.cpus_per_node is not None else "",
        f"memory: cluster.slurm.memory_per_node / {node_gpus} GPUs" if given.memory_per_node is not None else "",
    ]
    if given.cpus_per_node is None or given.memory_per_node is None:
        sources.append(
            f"one GPU's share of {one.reason} (whole CPUs)"
            if one
            else f"no catalog node has {node_gpus} GPUs: {DEFAULT_CPUS_PER_GPU} CPU, "
            f"{HOST_MEMORY_PER_GPU_BYTES // GIB} GiB per GPU (AWS p4d.24xlarge's share)"
        )
        sources.append("cluster.slurm.cpus_per_node / memory_per_node give the site's node instead")
    return max(1, cpus), memory, "; ".join(x for x in sources if x)


def slurm(plan: ResolvedPlan, spec: PlanSpec, launch: Launcher) -> Slurm:
    given = spec.cluster.slurm
    max_job = given.max_time if given.max_time is not None else MAX_JOB_SECONDS
    links, steps_per_link, limit = job_chain(plan, launch.checkpoint.interval_seconds, max_job)
    mounts = list(given.container_mounts)
    if given.container_image:
        check_image(plan, given.container_image, ("cluster", "slurm", "container_image"))
        for _, path in job_paths(launch):  # each at the same path inside the container, unless the plan mounts it
            if pyxis_mountable(path) and not covered(path, mount_targets(mounts)):
                mounts.append(f"{fstab_escape(path)}:{fstab_escape(path)}")
    share = partial_node(plan)
    cpus_per_gpu, memory_per_gpu_bytes, share_reason = slurm_share(plan, spec) if share else (0, 0, "")
    if share:
        memory = ""
    elif given.memory_per_node is not None:
        memory = f"{given.memory_per_node // BYTES_PER_MIB}M"
    else:
        memory = "0"
    return Slurm(
        job_name=plan.name,
        nodes=plan.hardware.nodes,
        gpus_per_node=plan.hardware.gpus_per_node,
        cpus_per_task=launch.cpus_per_node,
        memory=memory,
        exclusive=not share,
        cpus_per_gpu=cpus_per_gpu,
        memory_per_gpu=f"{memory_per_gpu_bytes // BYTES_PER_MIB}M" if share else "",
        share_reason=share_reason,
        max_job_seconds=max_job,
        time=slurm_time(limit),
        time_limit_seconds=limit,
        time_margin_fraction=time_margin_fraction(plan),
        launch_overhead_seconds=LAUNCH_OVERHEAD_SECONDS,
        links=links,
        steps_per_link=steps_per_link,
        signal_lead_seconds=signal_lead_seconds(plan),
        log_pattern="%x-%A_%a" if links > 1 else "%x-%j",
        directives=[
            Directive(flag=flag, value=directive_value(value))
            for flag, value in (
                ("partition", given.partition),
                ("account", given.account),
                ("qos", given.qos),
                ("reservation", given.reservation),
                ("constraint", given.constraint),
            )
            if value is not None
        ],
        extra_directives=[_directive(d) for d in given.extra_directives],
        container_image=given.container_image,
        container_mounts=mounts,
    )


# ----------------------------------------------------------------------------------------------- Kubernetes
def kubernetes_training(plan: ResolvedPlan, spec: PlanSpec, launch: Launcher) -> KubernetesTraining:
    k8s = spec.cluster.kubernetes
    t = plan.training
    if k8s.job_api == "pytorchjob":
        pods = f"{plan.name}-(master|worker)-[0-9]+"
    else:
        pods = f"{plan.name}-{REPLICATED_JOB}-[0-9]+-[0-9]+-.+"
    image, image_reason = training_image(plan, spec)
    hw, shm = plan.hardware, SHM_BYTES_PER_GPU * plan.hardware.gpus_per_node
    fabric = fabric_family(hw.interconnect) if hw.nodes > 1 else ""
    node = nodes.choose(hw.gpu_spec, hw.gpus_per_node, shm, fabric)
    resource, count = nodes.fabric_device(fabric, node)
    return KubernetesTraining(
        job_api=k8s.job_api,
        image=image,
        image_reason=image_reason,
        node=node,
        cpu_millicores=node.cpu_millicores if node else DEFAULT_CPUS_PER_GPU * hw.gpus_per_node * 1000,
        memory_bytes=node.memory_bytes if node else shm + HOST_MEMORY_PER_GPU_BYTES * hw.gpus_per_node,
        fabric=fabric,
        fabric_resource=resource,
        fabric_count=count,
        replicated_job=REPLICATED_JOB,
        launch_mount=LAUNCH_MOUNT,
        max_restarts=MAX_RESTARTS[spec.cluster.pricing],
        shm_bytes=shm,
        checkpoint_claim_bytes=int(
            t.checkpoint_bytes * (t.checkpoint_keep + CHECKPOINTS_IN_FLIGHT) * CHECKPOINT_FS_HEADROOM
        ),
        rdzv_port=DEFAULT_RDZV_PORT,
        trainer_pod_regex=pods,
        data_mount=launch.data if launch.data and is_local_path(launch.data) else None,
    )


# ----------------------------------------------------------------------------------------------- reasons
KIND_CONTRACT = {
    "torchrun": "torchrun runs the script; it reads the plan from the MLINFRA_* environment (framework file in MLINFRA_DS_CONFIG / MLINFRA_ACCELERATE_CONFIG)",
    "deepspeed": "torchrun runs the script with --deepspeed_config deepspeed/ds_config.json (deepspeed.add_config_arguments)",
    "hf-trainer": "torchrun runs the Hugging Face Trainer/TRL script with TrainingArguments flags for checkpoints, batch, "
    "clipping, precision, steps and recompute (its DeepSpeed integration refuses a ds_config.json that "
    "disagrees with them), and --deepspeed deepspeed/ds_config.json (TrainingArguments.deepspeed)",
    "accelerate": "accelerate launch --config_file fsdp/accelerate_config.yaml runs the script (accelerate sets the FSDP environment the Accelerator reads)",
    "megatron": "torchrun runs pretrain_gpt.py with the words of megatron/args.sh, then the plan's own arguments",
}


def launch_line(launch: Launcher) -> str:
    if launch.program == "accelerate":
        head = f"accelerate launch --num_machines={launch.nodes} --num_processes={launch.world_size} --max_restarts={launch.max_restarts}"
    else:
        head = f"torchrun --nnodes={launch.nnodes} --nproc-per-node={launch.nproc_per_node} --max-restarts={launch.max_restarts}"
    return f"{head} {launch.script}"


def launcher_reason(launch: Launcher) -> str:
    return launch.restart_reason


def decisions(
    launch: Launcher, job: Slurm | None, k8s: KubernetesTraining | None, kind_given: bool = False
) -> list[DeploymentDecision]:
    ck = launch.checkpoint
    out = [
        DeploymentDecision(topic="launcher", choice=launch_line(launch), reason=launcher_reason(launch)),
        DeploymentDecision(
            topic="launch contract",
            choice=f"{launch.kind}: {KIND_CONTRACT[launch.kind]}; the job reads "
            + ", ".join([Files().launcher, *launch.reads])
            + (
                " (submit: cd out/<plan> && sbatch slurm/train.sbatch, "
                "which runs bash launch/torchrun.sh on every node through srun)"
                if job
                else ""
            ),
            reason="train.entrypoint.kind" if kind_given else f"train.entrypoint.kind auto: {launch.kind_reason}",
        ),
        DeploymentDecision(
            topic="checkpoint signal",
            choice=f"the launcher forwards SIGUSR1 from Slurm to the workers as SIG{launch.checkpoint_signal} "
            f"(MLINFRA_CHECKPOINT_SIGNAL={launch.checkpoint_signal}); SIGTERM goes to the agent, which stops the workers",
            reason=(
                "Megatron-LM --exit-signal-handler saves and exits on SIGTERM (its --exit-signal default)"
                if launch.checkpoint_signal == "TERM"
                else "torchrun starts workers in their own session, so a signal to the job step reaches them only if "
                "the launcher forwards it; the script checkpoints on it"
                + (
                    f" through {launch.checkpoint_helper} (the launcher puts its folder on PYTHONPATH; every "
                    "rank agrees on the step to stop at with one all-reduce of the flag per step)"
                    if launch.checkpoint_helper
                    else ""
                )
                + f": {launch.checkpoint_usage}"
            ),
        ),
        DeploymentDecision(
            topic="CPUs",
            choice=f"{launch.cpus_per_node} per node, OMP_NUM_THREADS={launch.omp_threads}",
            reason="cluster.slurm.cpus_per_node"
            if launch.cpus_per_node != DEFAULT_CPUS_PER_GPU * launch.nproc_per_node
            else f"{DEFAULT_CPUS_PER_GPU} per GPU, the smallest common 8-GPU server (AWS p4d.24xlarge)",
        ),
        DeploymentDecision(
            topic="checkpoint interval",
            choice=f"every {ck.interval_seconds:.0f} s = {ck.interval_steps} steps, keep {ck.keep}, in {ck.dir}",
            reason={
                "plan": "train.checkpoint.every",
                "young-daly": "Young-Daly interval from the sizing",
                "floor": "train.checkpoint.min_interval, above the Young-Daly interval",
            }[ck.source]
            + "; exported as MLINFRA_CHECKPOINT_INTERVAL_SECONDS/_STEPS and MLINFRA_CHECKPOINT_KEEP (DeepSpeed and "
            "accelerate configs have no interval key), Megatron --save-interval, Hugging Face --save_steps/--save_total_limit/--output_dir",
        ),
    ]
    if launch.data:
        out.append(
            DeploymentDecision(
                topic="data",
                choice=launch.data,
                reason="train.data, exported as MLINFRA_DATA"
                + (
                    " and mounted at the same path in containers"
                    if is_local_path(launch.data) and pyxis_mountable(launch.data)
                    else ""
                ),
            )
        )
    if launch.model_weights or launch.model_id:
        out.append(
            DeploymentDecision(
                topic="model",
                choice=", ".join(x for x in (launch.model_weights, launch.model_id) if x),
                reason="model.weights / model.hf_id, exported as MLINFRA_WEIGHTS / MLINFRA_MODEL_ID",
            )
        )
    if launch.lora:
        out.append(
            DeploymentDecision(
                topic="adapters",
                choice=f"{launch.lora.method} rank {launch.lora.rank}, alpha {launch.lora.alpha:g}, "
                f"on {', '.join(launch.lora.targets)}",
                reason="train.lora, exported as MLINFRA_LORA_*",
            )
        )
    if job:
        out.append(
            DeploymentDecision(
                topic="Slurm time limit",
                choice=f"{job.time} per job"
                + (f", a chain of {job.links} jobs of {job.steps_per_link} steps" if job.links > 1 else ""),
                reason=f"steps × step time (+ checkpoint writes) + {job.time_margin_fraction:.0%} margin (the step-time range's P90, "
                f"at least {TIME_MARGIN_FRACTION:.0%}) + {job.launch_overhead_seconds:.0f} s launch "
                f"+ restore + warning lead; jobs longer than {slurm_time(job.max_job_seconds)} "
                + (
                    "(cluster.slurm.max_time)"
                    if job.max_job_seconds != MAX_JOB_SECONDS
                    else "(default; set cluster.slurm.max_time to the site's limit)"
                )
                + " chain as a job array",
            )
        )
        if not job.exclusive:
            out.append(
                DeploymentDecision(
                    topic="Slurm share",
                    choice=f"--gpus-per-node={job.gpus_per_node} --cpus-per-gpu={job.cpus_per_gpu} "
                    f"--mem-per-gpu={job.memory_per_gpu}, not exclusive",
                    reason="the job uses fewer GPUs than its node has, so other jobs share the node; "
                    + job.share_reason,
                )
            )
        out.append(
            DeploymentDecision(
                topic="Slurm job folder",
                choice=f"out/runs/{job.job_name}/ (--chdir={runs_dir(job.job_name)}): the job's working directory and logs",
                reason="beside the plan's folder, which every compile replaces whole; a compile makes this one and never "
                "replaces or empties it, so a running job keeps its directory and files",
            )
        )
        out.append(
            DeploymentDecision(
                topic="Slurm signal",
                choice=f"SIGUSR1 {job.signal_lead_seconds} s before the limit",
                reason=f"one step + {CHECKPOINT_WRITE_SAFETY:g} × the checkpoint write time",
            )
        )
    if k8s:
        out.append(
            DeploymentDecision(
                topic="Kubernetes job",
                choice=f"{k8s.job_api}, image {k8s.image}, {k8s.max_restarts} restarts",
                reason=f"image: {k8s.image_reason}; restarts: Llama 3 interruption rate (on-demand) or spot reclaims (spot)",
            )
        )
        out += k8s_pod_decisions(k8s, launch)
    return out


def k8s_pod_decisions(k8s: KubernetesTraining, launch: Launcher) -> list[DeploymentDecision]:
    out = [
        DeploymentDecision(
            topic="trainer pod resources",
            choice=f"{k8s.cpu_millicores / 1000:g} CPU requested (no limit), {k8s.memory_bytes / GIB:.1f} GiB memory "
            f"request = limit, {launch.nproc_per_node} GPU" + (f"; node {k8s.node.node_type}" if k8s.node else ""),
            reason=f"the pod's GPU share of {k8s.node.reason}"
            if k8s.node
            else f"no catalog node holds {launch.nproc_per_node} GPUs: {DEFAULT_CPUS_PER_GPU} CPU and "
            f"{HOST_MEMORY_PER_GPU_BYTES // GIB} GiB per GPU (AWS p4d.24xlarge's share)",
        )
    ]
    if k8s.fabric_resource:
        out.append(
            DeploymentDecision(
                topic="trainer fabric",
                choice=f"{k8s.fabric_resource}: {k8s.fabric_count} per pod, IPC_LOCK; "
                + ", ".join(f"{e.name}={e.value}" for e in launch.fabric_env),
                reason=f"{launch.nodes} nodes on a {k8s.fabric} fabric: {nodes.FABRIC_DEVICE_SOURCE[k8s.fabric]}; "
                "NCCL settings exported by launch/torchrun.sh (a value already set in the pod's environment is kept)",
            )
        )
    return out
