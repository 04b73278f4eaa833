"""The `deployment` section of the ResolvedPlan: every number and string a target emits that sizing does not decide.

Each value is decided once, in `compiler/deployment/training.py` or `serving.py`; `Deployment.decisions` says why
(the report and `explain` list them). A new launch, serving or security decision adds a field here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .framework_configs import AccelerateConfig, DeepSpeedConfig, FsdpTpSettings


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeploymentDecision(Section):
    topic: str
    choice: str
    reason: str = Field(description="why, with the source of any constant (a documentation page, a default, a policy)")


class EnvVar(Section):
    name: str
    value: str
    comment: str = ""


class Files(Section):
    """Output paths (relative to out/<plan>/): one place, so targets that refer to each other's files agree."""

    plan_json: str = "plan.json"
    report: str = "REPORT.md"
    launcher: str = "launch/torchrun.sh"
    checkpoint_helper: str = Field(
        "launch/mlinfra_signal.py",
        description="hf-trainer and accelerate kinds: the importable module that turns the forwarded checkpoint signal into a save and a clean stop on every rank",
    )
    sbatch: str = "slurm/train.sbatch"
    ds_config: str = "deepspeed/ds_config.json"
    accelerate_config: str = "fsdp/accelerate_config.yaml"
    fsdp_tp_config: str = Field(
        "fsdp/fsdp_tp.json", description="FSDP2 × TP × PP: the mesh, TP plan and pipeline stages fsdp_tp.py applies"
    )
    fsdp_tp_script: str = Field(
        "fsdp/fsdp_tp.py",
        description="FSDP2 × TP × PP: builds the DeviceMesh, shards the model and runs its pipeline stages",
    )
    lora_tp_script: str = Field(
        "fsdp/lora_tp.py",
        description="LoRA × TP × PP: the adapters fsdp_tp.py wraps the targeted layers in, sharded as their base layers",
    )
    megatron_args: str = "megatron/args.sh"
    k8s_training: str = "k8s/training.yaml"
    k8s_serving: str = "k8s/serving.yaml"
    adapter_values: str = Field(
        "helm/prometheus-adapter-values.yaml",
        description="Helm values of prometheus-adapter: not a Kubernetes object, so outside k8s/ (kubectl apply -f k8s/ applies every file there)",
    )
    monitoring_rules: str = "monitoring/prometheus-rules.yaml"
    kustomization: str = Field(
        "kustomization.yaml",
        description="kubectl apply -k out/<plan>: lists the Kubernetes object files (beside k8s/, not in it)",
    )


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


class NodeShare(Section):
    """The catalog node a pod (or a Slurm job) is sized on, and its share of the node's allocatable CPU and memory
    (compiler/deployment/nodes.py)."""

    node_type: str = Field(description="catalog node type id (p5.48xlarge, dgx-h100, ...)")
    provider: str
    node_vcpus: int
    node_memory_bytes: int
    node_gpus: int
    node_local_nvme_bytes: int
    efa_interfaces: int = Field(description="EFA devices of the node (AWS)")
    gpus: int = Field(description="GPUs of the node the pod or job takes")
    cpu_millicores: int = Field(description="(node vCPU - system reserve - daemonsets) x gpus / node GPUs")
    memory_bytes: int = Field(description="(node memory - system reserve - eviction - daemonsets) x gpus / node GPUs")
    floor_bytes: int = Field(
        description="host memory the pod needs at least (weights through host memory, overhead, shm)"
    )
    fits: bool = Field(description="the share holds the floor")
    priced: bool = Field(description="the node the GPU's price per hour is from (the catalog's first node type)")
    outgrown_priced_node: bool = Field(
        description="the node the price is from holds the GPUs but its share is below the floor: a larger node is used"
    )
    reason: str = Field(description="the arithmetic")


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
    trainer_pod_regex: str = Field(description="names of the trainer pods (monitoring selects them)")
    data_mount: str | None = Field(None, description="train.data when it is a path: mounted from the node (hostPath)")


class EngineArg(Section):
    key: str = Field(description="vLLM: the EngineArgs field (config key); TGI: the launcher flag")
    value: bool | int | float | str
    reason: str
    frontend: bool = Field(
        False, description="an option of the HTTP server, not of the engine (Triton's vLLM backend leaves it out)"
    )


class Tensor(Section):
    name: str
    data_type: str
    dims: list[int]
    format: str = Field("", description="FORMAT_NCHW for images")
    optional: bool = False


class TritonModel(Section):
    """The model folder of a Triton repository: its name, backend and I/O."""

    name: str = Field(description="folder and API name")
    backend: Literal["vllm", "onnxruntime", "tensorrt"] = Field(
        description="vllm for LLMs; tensorrt on edge devices (a plan built on the device); else onnxruntime"
    )
    model_file: str = Field(
        "", description="the file Triton loads from the version folder: model.onnx, or model.plan for TensorRT"
    )
    io_type: str = Field("", description="tensor element type of the ONNX export")
    instance_count: int = 1
    max_queue_delay_microseconds: int = 0
    inputs: list[Tensor] = Field(default_factory=list)
    outputs: list[Tensor] = Field(default_factory=list)
    export_task: str = Field("", description="optimum-cli export onnx --task")
    export_dtype: str = Field("", description="optimum-cli export onnx --dtype")
    export_on_gpu: bool = False
    engine_build_flags: list[str] = Field(
        default_factory=list,
        description="tensorrt: trtexec flags after --onnx/--saveEngine (precision and the batch shapes)",
    )


class Engine(Section):
    """One served model: the whole service, or one stage of a multi-stage service."""

    stage: str = Field("", description="stage name; '' for a single service")
    engine: Literal["vllm", "triton", "tgi"]
    version: str
    directory: str = Field(description="the unit's folder under the engine's output folder")
    args: list[EngineArg] = Field(
        default_factory=list, description="vLLM engine arguments or TGI launcher arguments, in order"
    )
    prefix_caching: bool
    http_port: int
    metrics_port: int
    grpc_port: int | None = Field(None, description="Triton's gRPC port")
    ray_port: int = Field(description="Ray head port when a replica spans nodes (vLLM)")
    ray_wait_seconds: int = Field(description="how long the Ray head waits for every worker's GPUs")
    ray_poll_seconds: int = Field(5, description="how often the Ray head checks that the workers joined")
    ray_wait_polls: int = Field(60, description="checks in the wait: ray_wait_seconds ÷ ray_poll_seconds, rounded up")
    triton: TritonModel | None = None
    exit_timeout_seconds: int = Field(
        0,
        description="Triton --exit-timeout-secs: how long tritonserver waits for in-flight inferences after SIGTERM (the longest request; 0 = not Triton)",
    )


class ServingUnit(Section):
    """k8s/serving.yaml, per independently scaled unit."""

    rollout_max_surge: int = Field(1, description="replicas a rollout adds before removing one")
    rollout_max_unavailable: int = Field(0, description="replicas a rollout may take away below the sized count")
    disruption_max_unavailable: int = Field(1, description="pods (LWS groups) a node drain may evict at once")
    name: str = Field(description="object name (DNS-1035)")
    component: str
    stage: str = ""
    engine: Literal["vllm", "triton", "tgi"]
    image: str
    gpus_per_pod: int
    pods_per_replica: int
    http_port: int
    metrics_port: int
    health_path: str
    queue_metric: str
    adapter_metric: str
    probe_period_seconds: int
    probe_failure_threshold: int
    startup_failure_threshold: int
    startup_budget_seconds: int
    weights_source: Literal["hub", "object-store", "path"] = Field(
        description="where the weights come from: the Hugging Face Hub (model.hf_id), object storage (model.weights s3://, gs://, az://) or a path"
    )
    weights_location: str = Field(description="the Hub repo id or the URI / path the weights are read from")
    fetch_weights: bool = Field(
        description="an init container downloads the checkpoint into the model cache before the engine starts (Hub weights)"
    )
    fetch_patterns: list[str] = Field(
        default_factory=list, description="files the init container downloads (huggingface_hub allow_patterns)"
    )
    checkpoint_bytes: int = Field(
        description="bytes of the checkpoint as stored (what a download moves): the serving weights, or 2 bytes per parameter for a 16-bit checkpoint quantized at load time"
    )
    weights_bytes_per_pod: int = Field(
        description="weights one pod loads into its GPUs: the replica's weights ÷ its pods (one pipeline stage per pod)"
    )
    download_bytes_per_second: float = Field(
        description="assumed Hub download rate per pod (0 when nothing is downloaded)"
    )
    download_seconds: int = Field(description="checkpoint ÷ download rate: the init container's expected run time")
    load_seconds: int = Field(
        description="the pod's weights ÷ the storage read rate (sizing's startup_seconds, per pod)"
    )
    warmup_seconds: int = Field(
        description="engine start after the weights are in memory: CUDA graph capture, compilation, KV-cache profiling (policy)"
    )
    progress_deadline_seconds: int = Field(
        description="Deployment progressDeadlineSeconds: download + startup budget, so a first rollout is not reported failed while it downloads"
    )
    model_cache_bytes: int
    shared_cache: bool
    cpu_millicores: int = Field(
        description="CPU requested per pod, millicores: the pod's GPU share of its node (no CPU limit: limits throttle the tokenizer and API server)"
    )
    memory_bytes: int = Field(
        description="host memory request = limit per pod: the pod's GPU share of its node, which holds its weights (loaded through host memory) + overhead + /dev/shm"
    )
    node: NodeShare | None = Field(
        None, description="the catalog node the pod is sized on (None: the catalog lists none)"
    )
    qos_class: Literal["Guaranteed", "Burstable"] = Field(
        description="the pod's Kubernetes QoS class with these requests and limits"
    )
    termination_grace_seconds: int = Field(
        description="terminationGracePeriodSeconds: preStop sleep + the engine's drain"
    )
    pre_stop_seconds: int = Field(
        description="preStop sleep: the pod leaves the Service endpoints before SIGTERM reaches the engine"
    )
    longest_request_seconds: int = Field(
        description="the longest request a replica may be running when it is asked to stop"
    )
    drain_seconds: int = Field(
        0,
        description="how long the engine finishes in-flight requests after SIGTERM: the longest request, capped where the engine caps it (TGI: 90 s)",
    )
    min_replicas: int = Field(
        description="HPA/KEDA minReplicas: the availability floor (serve.min_replicas, or the default policy)"
    )
    max_replicas: int = Field(description="HPA/KEDA maxReplicas: the sizing's peak count, at least min_replicas")
    rdma_resource: str = Field(
        "", description="extended resource for the RDMA devices of multi-node pods ('' for none)"
    )
    rdma_count: int = Field(0, description="RDMA devices requested per multi-node pod")
    nccl_env: list[EnvVar] = Field(
        default_factory=list, description="NCCL settings of multi-node pods (the fabric sizing assumed)"
    )
    node_arch: str = Field(
        "", description="kubernetes.io/arch node label to select ('' = any): arm64 for Jetson images"
    )
    repository_init_image: str = Field(
        "", description="Triton: image of the init container that fills the model repository ('' = not Triton)"
    )
    repository_init_packages: list[str] = Field(
        default_factory=list,
        description="Triton: pip requirements the fill step installs before fetching / exporting the model file",
    )
    repository_init_gpus: int = Field(
        0, description="Triton: GPUs of the fill step (an fp16 ONNX export runs on a CUDA device)"
    )
    engine_build_gpus: int = Field(
        0, description="Triton tensorrt: GPUs of the build step (the device's GPU: the plan is built for it)"
    )
    engine_build_image: str = Field(
        "",
        description="Triton tensorrt: image of the init container that builds the TensorRT plan on the device (TensorRT of the server's NGC release); '' = none",
    )
    shm_bytes: int
    scale_down_window_seconds: int
    input_queue: str = ""
    output_queue: str = ""


class Autoscaling(Section):
    """HPA / KEDA behaviour shared by every serving unit (the scale-down window is per unit)."""

    scale_up_percent: int
    scale_up_pods: int
    period_seconds: int = Field(
        description="HPA sync period, scale-policy period, KEDA polling and metrics scrape interval"
    )
    prometheus_url: str = Field(description="the Prometheus KEDA queries")


class Kubernetes(Section):
    namespace: str
    secret_name: str
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="imagePullSecrets of every pod (cluster.kubernetes.image_pull_secret)"
    )
    object_store_secret: str = Field(
        "",
        description="Secret whose keys the containers that read object-storage weights get as environment (envFrom); '' for none",
    )
    service_account: str = Field(
        "",
        description="ServiceAccount of the pods, emitted with the workload-identity annotation; '' = the namespace's default",
    )
    service_account_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="annotations binding the ServiceAccount to the cloud identity (EKS IRSA, GKE Workload Identity, Azure Workload Identity)",
    )
    identity_pod_labels: dict[str, str] = Field(
        default_factory=dict, description="pod labels the workload-identity webhook selects on (Azure)"
    )
    storage_class: str | None
    shared_storage_class: str | None = Field(None, description="StorageClass of the ReadWriteMany claims")
    shared_claims: list[str] = Field(default_factory=list, description="the claims several pods mount (ReadWriteMany)")
    tolerations: list[dict[str, str | int]]
    node_selector: dict[str, str] = Field(description="the plan's extra labels; the GPU product label is added per pod")
    autoscaler: Literal["hpa", "keda"]
    autoscaling: Autoscaling
    model_cache_mount: str = Field(
        description="where serving pods mount the model cache (HF_HOME, Triton's repository)"
    )
    training: KubernetesTraining | None = None
    serving: list[ServingUnit] = Field(default_factory=list)


class TrainingAlerts(Section):
    """Alert timings of monitoring/prometheus-rules.yaml for a training job."""

    idle_util_percent: int
    idle_seconds: int
    stall_steps: int
    stall_seconds: int
    spend_window_days: int = Field(description="Slurm spend: the window the GPU count is summed over")


class BurnWindow(Section):
    long: str = Field(description="Prometheus duration of the long window")
    short: str
    burn_rate: float
    severity: Literal["critical", "warning"]


class Alerting(Section):
    """Alert policy of monitoring/prometheus-rules.yaml (each part a decision with its source)."""

    error_budget_fraction: float = Field(description="share of requests a p99 target lets be slower")
    burn_windows: list[BurnWindow]
    serving_spend_window: str = Field(description="Prometheus duration the serving spend rate is averaged over")
    spend_step_seconds: int = Field(description="Slurm spend: one GPU count per subquery step")


class Deployment(Section):
    scheduler: Literal["slurm", "kubernetes", "both"]
    files: Files = Field(default_factory=Files)
    launcher: Launcher | None = None
    frameworks: Frameworks | None = None
    slurm: Slurm | None = None
    kubernetes: Kubernetes | None = None
    engines: list[Engine] = Field(default_factory=list)
    hours_per_month: float = Field(description="hours a monthly figure counts (spend rules)")
    training_alerts: TrainingAlerts | None = None
    alerting: Alerting | None = None
    monitoring_assumptions: list[str] = Field(
        default_factory=list,
        description="what the alert rules assume of the site's Prometheus (stated in the rules file and the report)",
    )
    decisions: list[DeploymentDecision] = Field(default_factory=list)
