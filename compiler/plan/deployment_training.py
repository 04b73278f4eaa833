"""The training sections of the Deployment: the launcher (launch/torchrun.sh), the framework files it reads
(DeepSpeed, Accelerate, FSDP2 × TP, Megatron-LM), the Slurm job and the Kubernetes trainer pods."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .deployment_fields import EnvVar, NodeShare, Section
from .framework_configs import AccelerateConfig, DeepSpeedConfig, FsdpTpSettings


class Checkpoint(Section):
    """Checkpoints as the job sees them (launch environment, framework flags)."""

    dir: str
    interval_seconds: float
    interval_steps: int = Field(
        description="interval in optimizer steps (Megatron --save-interval, MLINFRA_CHECKPOINT_INTERVAL_STEPS)"
    )
    keep: int
    source: Literal["plan", "young-daly", "floor"] = Field(
        description="train.checkpoint.every as given, the Young-Daly interval of the sizing, or train.checkpoint.min_interval above it"
    )


class Lora(Section):
    rank: int
    alpha: float
    targets: list[str]
    method: Literal["lora", "qlora"]
    quant_storage: Literal["bfloat16", "float16", "float32"] | None = Field(
        None,
        description="QLoRA under FSDP: the dtype the NF4 base is packed in (bitsandbytes quant_storage, "
        "MLINFRA_LORA_QUANT_STORAGE); absent: bitsandbytes' uint8",
    )
    quant_storage_reason: str = Field("", description="why that storage ('' when absent)")


LaunchKind = Literal["torchrun", "deepspeed", "hf-trainer", "accelerate", "megatron"]


class Launcher(Section):
    """launch/torchrun.sh: one torchrun agent (or `accelerate launch`, which runs torchrun's agent in-process) per node."""

    program: str = "torchrun"
    kind: LaunchKind = Field(
        "torchrun", description="the launch contract: how the script is started and reads the generated configuration"
    )
    kind_reason: str = Field("", description="how entrypoint.kind auto chose the kind ('' when the plan gives it)")
    config_flag: str = Field(
        "", description="flag before the framework file's path on the script's command line ('' for none)"
    )
    framework_args: list[str] = Field(
        default_factory=list,
        description="arguments the launch kind's parser takes from the plan (Hugging Face TrainingArguments: checkpoint directory, interval and retention, batch, accumulation, clipping, precision, steps, recompute), before the plan's own",
    )
    reads: list[str] = Field(
        default_factory=list,
        description="generated files the launched job reads besides the launcher (Kubernetes carries them in its ConfigMap)",
    )
    megatron_args: bool = Field(False, description="append megatron/args.sh's MEGATRON_ARGS to the script's arguments")
    checkpoint_signal: Literal["USR1", "TERM"] = Field(
        "USR1",
        description="signal the launcher forwards to the workers when Slurm warns before the time limit (MLINFRA_CHECKPOINT_SIGNAL)",
    )
    checkpoint_helper: str = Field(
        "",
        description="generated module the script imports to checkpoint on that signal (its folder is put on PYTHONPATH); '' when the kind has a framework flag (Megatron) or the plain-script contract",
    )
    checkpoint_usage: str = Field(
        "",
        description="how the script takes the final checkpoint on the signal: one line of Python for the launch kind",
    )
    script: str
    python_script: bool
    args: list[str] = Field(description="the plan's own arguments, passed shell-quoted after the script")
    nodes: int
    nnodes: str = Field(description="torchrun --nnodes: N, or MIN:MAX when elastic")
    min_nodes: int
    nproc_per_node: int
    world_size: int
    elastic: bool = Field(description="spot capacity: torchrun restarts the workers after a failure (max_restarts)")
    node_range: bool = Field(
        False,
        description="nnodes is MIN:MAX: a restart may run on fewer nodes (what runs re-derives its data parallelism and keeps the global batch)",
    )
    restart_reason: str = Field("", description="why the job restarts on a node range or only at its full size")
    max_restarts: int
    rdzv_port: int
    cpus_per_node: int
    omp_threads: int
    precision: str
    framework: str
    framework_config: str = Field(
        "", description="file the framework reads (DeepSpeed or accelerate config), '' for none"
    )
    fabric_env: list[EnvVar]
    framework_env: list[EnvVar] = Field(
        default_factory=list, description="environment the launch kind's framework requires"
    )
    user_env: list[EnvVar]
    checkpoint: Checkpoint
    data: str | None = Field(None, description="train.data: dataset location given to the job (MLINFRA_DATA)")
    model_weights: str | None = Field(None, description="model.weights: the weights to start from (MLINFRA_WEIGHTS)")
    model_id: str | None = Field(
        None, description="model.hf_id as given: the model id (tokenizer, config) (MLINFRA_MODEL_ID)"
    )
    lora: Lora | None = None
    checkpoint_prune_keep: int = Field(
        0,
        description="Megatron-LM: node 0's launcher deletes all but the newest N complete iter_* checkpoints after saves (never the one latest_checkpointed_iteration.txt names, nor a newer one still being written); 0 = no pruning",
    )
    create_dirs: list[str] = Field(
        default_factory=list,
        description="folders made before the job starts (the checkpoint directory on the shared filesystem: pyxis mounts only existing folders, Megatron-LM saves into it)",
    )
    data_mount: str | None = Field(
        None,
        description="the folder containers mount for train.data (a Megatron data prefix PREFIX names PREFIX.bin/.idx: its folder)",
    )


class MegatronTarget(Section):
    """Megatron-LM as a versioned target (compiler/deployment/megatron_launch.py)."""

    core_version: str = Field(description="megatron-core release (major.minor) whose arguments megatron/args.sh uses")
    version_reason: str
    image: str = Field(description="the container image the release was read from ('' when the plan gives the version)")
    path: str = Field(description="Megatron-LM's folder inside the image ('' when unknown)")
    script: str = Field(description="the entry point torchrun starts")
    script_reason: str
    older_spellings: list[str] = Field(
        default_factory=list, description="flags written in an older release's spelling, with why"
    )
    retention: str = Field(description="how train.checkpoint.keep is held")
    gradients: str = Field(
        "",
        description="the gradient buffer and DP reduction dtype the memory was sized with (train.megatron.grad_reduce; '' for fp16/fp32 models)",
    )
    sized_params: int = Field(
        description="parameters of the model without its MTP modules (catalog/params.py count_params)"
    )
    mtp_params: int = Field(
        0,
        description="multi-token-prediction parameters trained beside them (catalog/params.py mtp_params; DeepSeek-V3 report §2.2): sized on the last pipeline stage, where Megatron-LM builds them (memory, step FLOPs and time, checkpoint)",
    )
    launched_params: int = Field(
        description="parameters of the model args.sh builds and the sizing counts: sized + MTP"
    )


class FrameworkArg(Section):
    flag: str
    value: str | None = Field(None, description="None for a switch")


class Frameworks(Section):
    """What the training framework reads besides the launch environment."""

    deepspeed_config: DeepSpeedConfig | None = Field(None, description="deepspeed/ds_config.json as written")
    accelerate_config: AccelerateConfig | None = Field(None, description="fsdp/accelerate_config.yaml as written")
    megatron_args: list[FrameworkArg] | None = Field(
        None, description="megatron/args.sh, in Megatron-LM's argument-group order"
    )
    megatron: MegatronTarget | None = Field(None, description="the Megatron-LM release, entry point and retention")
    fsdp_tp: FsdpTpSettings | None = Field(
        None,
        description="fsdp/fsdp_tp.json as written: the FSDP2 × TP × PP mesh, TP plan, sharding options and, with PP, the schedule and stage split (compiler/deployment/fsdp_tp.py)",
    )


class Directive(Section):
    flag: str
    value: str = Field(description="quoted for sbatch's directive parser")


class Slurm(Section):
    """slurm/train.sbatch."""

    job_name: str
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    memory: str = Field(
        description="--mem value: 0 (all of the node) or MiB; '' for a job below a node (--mem-per-gpu)"
    )
    exclusive: bool = Field(True, description="--exclusive: the job uses every GPU of its nodes")
    cpus_per_gpu: int = Field(0, description="--cpus-per-gpu of a job below a node (0: whole-node job)")
    memory_per_gpu: str = Field("", description="--mem-per-gpu of a job below a node, MiB ('' : whole-node job)")
    share_reason: str = Field("", description="where the per-GPU CPUs and memory of a job below a node come from")
    max_job_seconds: float = Field(description="longest single job: cluster.slurm.max_time, or the default")
    time: str = Field(description="--time, D-HH:MM:SS")
    time_limit_seconds: float
    time_margin_fraction: float
    launch_overhead_seconds: float
    links: int = Field(description="jobs in the array chain (1 = no chain)")
    steps_per_link: int
    signal_lead_seconds: int
    log_pattern: str
    directives: list[Directive] = Field(description="partition, account, qos, reservation, constraint as given")
    extra_directives: list[str]
    container_image: str | None = None
    container_mounts: list[str] = Field(default_factory=list, description="pyxis mounts besides the submit directory")


class KubernetesTraining(Section):
    """k8s/training.yaml: a JobSet or a PyTorchJob running launch/torchrun.sh."""

    job_api: Literal["jobset", "pytorchjob"]
    image: str
    replicated_job: str
    launch_mount: str
    max_restarts: int
    shm_bytes: int
    checkpoint_claim_bytes: int
    rdzv_port: int
    image_reason: str = Field("", description="why this image: the plan's field, or the default's torch version")
    node: NodeShare | None = Field(
        None, description="the catalog node a trainer pod takes (None: the catalog lists none)"
    )
    cpu_millicores: int = Field(0, description="CPU request per trainer pod: its GPU share of the node (no limit)")
    memory_bytes: int = Field(0, description="host memory request = limit per trainer pod: its GPU share of the node")
    fabric: str = Field("", description="fabric family of a multi-node job (ib, roce, efa, eth), '' on one node")
    fabric_resource: str = Field(
        "", description="extended resource of the fabric's NICs (multi-node jobs), '' for none"
    )
    fabric_count: int = Field(0, description="count of fabric_resource per pod")
    hugepages_bytes: int = Field(
        0, description="hugepages-2Mi per pod: EFA's libfabric buffers (deployment/nodes.py docstring); 0 = none"
    )
    trainer_pod_regex: str = Field(description="names of the trainer pods (monitoring selects them)")
    data_mount: str | None = Field(None, description="train.data when it is a path: mounted from the node (hostPath)")
