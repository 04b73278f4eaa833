"""The serving sections of the Deployment: each engine's arguments and Triton model folder, and each independently
scaled unit of k8s/serving.yaml with the autoscaling they share."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .deployment_fields import EnvVar, NodeShare, Section


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
    hugepages_bytes: int = Field(
        0, description="hugepages-2Mi per multi-node pod on EFA (deployment/nodes.py docstring); 0 = none"
    )
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
