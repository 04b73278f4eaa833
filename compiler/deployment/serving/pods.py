"""The Kubernetes serving unit: images, probes, weights download and model cache, pod resources on a catalog node,
RDMA for multi-node replicas, graceful termination and autoscaling."""

from __future__ import annotations

import hashlib
import math

from ...plan.deployment_fields import EnvVar, NodeShare
from ...plan.deployment_serving import Autoscaling, ServingUnit
from ...plan.resolved import ResolvedPlan, Serving
from ...plan.spec import PlanSpec
from .. import nodes
from ..pod_price import landing_node, serving_pod, serving_shm_bytes
from ..training.node_share import DEFAULT_CPUS_PER_GPU
from ..units import UnitView
from .engine_args import HTTP_PORT, STREAMED_SCHEMES, TGI_DRAIN_SECONDS, TGI_VERSION, VLLM_VERSION, model_source
from .engines import longest_request_seconds, stage_prompt_tokens
from .triton_model import ENGINE_BUILD_GPUS, ENGINE_BUILD_IMAGE, TRITON_METRICS_PORT, triton_images, triton_model

# Rollout and disruption policy of a serving unit (ours): a new replica comes up before an old one leaves (surge one,
# none unavailable), so capacity never drops below the SLO-sized level; a node drain evicts one pod (one LWS group) at
# a time (PodDisruptionBudget maxUnavailable 1).
ROLLOUT_MAX_SURGE, ROLLOUT_MAX_UNAVAILABLE, DISRUPTION_MAX_UNAVAILABLE = 1, 0, 1

# ----------------------------------------------------------------------------------------------- Kubernetes
# Kubernetes probe defaults (periodSeconds 10, failureThreshold 3; kubernetes.io "Configure Liveness, Readiness
# and Startup Probes"), written out so a reviewer sees them.
PROBE_PERIOD_SECONDS = 10
PROBE_FAILURE_THRESHOLD = 3
# The startup probe covers what happens after the weights are on the pod: the pod's share of the weights read from
# the cache (serving.startup_seconds ÷ pods per replica: a bandwidth roofline) plus the engine's warm-up. Our policy,
# not a measurement: budget twice that.
STARTUP_BUDGET_FACTOR = 2.0
# Engine warm-up once the weights are in GPU memory: vLLM's torch.compile + CUDA graph capture + KV-cache profiling,
# TGI's prefill warm-up, Triton's model load. A policy (minutes for large vLLM models on a cold compile cache, per
# vLLM's docs "torch.compile integration": the first compile is cached for later starts), not a measurement.
WARMUP_SECONDS = {"vllm": 180, "tgi": 180, "triton-vllm": 180, "triton": 60}
# Hub weights are downloaded by an init container into the model cache before the engine starts, so the startup
# probe never races a download (a probe sized for a stream from object storage would restart the pod mid-download:
# CrashLoopBackOff on the first rollout). The rate is an assumption stated in the report: plain-Python
# huggingface_hub downloads top out near 500 MB/s on very fast links (hf_transfer's README, pypi.org/project/
# hf-transfer: "a power user tool, to go beyond ~500MB/s"), and a cluster's egress is shared; we assume a fifth.
HUB_DOWNLOAD_BYTES_PER_SECOND = 100e6
HUB_DOWNLOAD_SOURCE = (
    "assumed 100 MB/s per pod: a fifth of the ~500 MB/s ceiling of plain-Python huggingface_hub "
    "downloads (hf_transfer README, pypi.org/project/hf-transfer), a policy for shared cluster egress"
)
# What the init container downloads (huggingface_hub snapshot_download allow_patterns): safetensors weights, configs
# and tokenizer files, as vLLM's loader uses them; not `original/` consolidated .pth copies (Llama repos) or .bin
# duplicates, which would double the bytes.
FETCH_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "*.py"]
CHECKPOINT_BYTES_PER_PARAM_16BIT = 2  # a checkpoint that is not pre-quantized is stored in bf16/fp16
# Model cache = weights + headroom: ext4 reserves 5 % of blocks for root (mke2fs -m default), and another 5 % holds
# tokenizer/config files and the changed files of a new revision while it downloads.
MODEL_CACHE_HEADROOM_FRACTION = 0.10
# Storage kinds that are shared filesystems: one ReadWriteMany cache for all replicas. Anything else (object
# storage, local NVMe) gets a per-pod ephemeral volume that each pod fills from the weights source.
SHARED_FILESYSTEMS = frozenset({"lustre", "nfs", "gpfs", "weka", "vast", "cephfs", "filestore", "efs", "azurefile"})
# Scale-down: a replica given back costs serving.startup_seconds to get again, so keep it until the load has been low
# at least that long (the break-even rule of ski rental, Karlin et al. 1988), never less than the Kubernetes default.
DEFAULT_SCALE_DOWN_WINDOW_SECONDS = 300
# Deployment progressDeadlineSeconds: the Kubernetes default (600 s, kubernetes.io "Deployments", Progress Deadline
# Seconds) on top of the expected download and startup budget, so `kubectl rollout status` of a first rollout does
# not report a Deployment that is still downloading its weights as failed.
PROGRESS_DEADLINE_DEFAULT_SECONDS = 600
# Pinned engine images (release tags of the upstream images); spec.cluster.kubernetes.image overrides. Tag formats
# checked 2026-11-24: vLLM on Docker Hub as vllm/vllm-openai:vX.Y.Z (CUDA 13 build, driver >= 580; a -cu129 suffix is
# the CUDA 12 build), TGI on GHCR as ghcr.io/huggingface/text-generation-inference:X.Y.Z (3.3.6 published), Triton on
# NGC as nvcr.io/nvidia/tritonserver:YY.MM-<flavour> (25.10-py3 and 25.10-vllm-python-py3 published).
ENGINE_IMAGES = {
    "vllm": f"vllm/vllm-openai:v{VLLM_VERSION}",  # the release whose flags the vLLM target emits
    "tgi": f"ghcr.io/huggingface/text-generation-inference:{TGI_VERSION}",
    "triton": "nvcr.io/nvidia/tritonserver:25.10-vllm-python-py3",
}

# HPA behaviour. Scale-up: the Kubernetes defaults (no stabilisation; +100 % or +4 pods per 15 s, the larger;
# kubernetes.io "Horizontal Pod Autoscaling", default behavior) — a queue that grows breaks TTFT within seconds.
SCALE_UP_PERCENT = 100
SCALE_UP_PODS = 4
SCALE_PERIOD_SECONDS = 15  # also the HPA sync period (kube-controller-manager --horizontal-pod-autoscaler-sync-period)
# Prometheus that KEDA queries: the Service prometheus-operator creates for every Prometheus ("prometheus-operated")
# in the namespace kube-prometheus-stack is usually installed in. An assumption: edit it for another install.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
# Pod resources: the pod's GPU share of the catalog node it is priced on (compiler/deployment/nodes.py), CPU as a
# request without a limit (CFS quotas throttle the tokenizer / detokenizer and the API server's event loop, which sit
# on the TTFT path; requests without limits give the Burstable QoS class), host memory request = limit. The share must
# hold the pod's floor: safetensors are read through host memory on their way to the GPU, so the pod's weights + an
# overhead (Python, CUDA context and NCCL host buffers, tokenizer, API server; a policy) + the RAM-backed /dev/shm,
# whose pages count against the pod's memory; a node whose share is smaller is passed over for a larger one. The
# sizes, and the pod's shape, are in compiler/deployment/pod_price.py: the serving search prices its candidates there.
# Edge devices (Jetson: 6-12 CPU cores, 8-64 GB shared by CPU and GPU): a small request that fits the device.
EDGE_CPUS = 2
# The availability floor (serve.min_replicas, default 2, 1 on edge devices) is decided by the serving search, which
# counts it in cost and GPUs (sizing/serve_types.py replica_plan); the autoscaler's bounds are its min/max replicas.
# Graceful termination. preStop sleeps until the endpoint controller and kube-proxy have taken the pod out of the
# Service (a few seconds; 15 s is the figure of the Kubernetes "Pod Lifecycle" termination examples), then the kubelet
# sends SIGTERM and the engine's HTTP server (uvicorn for vLLM, axum for TGI, Triton's own) finishes the requests it
# holds. The grace period adds the longest request a replica may hold: the sized TTFT at capacity + the longest
# generation max_model_len allows (context - prompt tokens) at the sized TPOT at capacity.
PRE_STOP_SECONDS = 15

# RDMA for multi-node replicas: the fabric the sizing assumed must be the one NCCL gets; the device resource per fabric
# is nodes.RDMA_RESOURCES; memory registration needs CAP_IPC_LOCK. Plain Ethernet (tcp) needs nothing.
RDMA_SOURCE = nodes.FABRIC_DEVICE_SOURCE
# NCCL: use the RDMA NICs (NCCL_IB_DISABLE=0 is the default, written so a site override is visible); bootstrap over
# the pod network's eth0. EFA goes through the aws-ofi-nccl plugin (FI_PROVIDER=efa).
NCCL_ENV = {
    "ib": [
        ("NCCL_IB_DISABLE", "0", "InfiniBand verbs for the inter-node collectives"),
        ("NCCL_SOCKET_IFNAME", "eth0", "bootstrap over the pod network"),
    ],
    "roce": [
        ("NCCL_IB_DISABLE", "0", "RoCE through the verbs transport"),
        ("NCCL_IB_GID_INDEX", "3", "RoCE v2 GID (IPv4-mapped)"),
        ("NCCL_SOCKET_IFNAME", "eth0", "bootstrap over the pod network"),
    ],
    "efa": [
        ("FI_PROVIDER", "efa", "libfabric EFA provider for aws-ofi-nccl"),
        ("NCCL_SOCKET_IFNAME", "eth0", "bootstrap over the pod network"),
    ],
}
CACHE_MOUNT = "/models"  # HF_HOME and Triton's model repository live on the model-cache volume


def autoscaling() -> Autoscaling:
    return Autoscaling(
        scale_up_percent=SCALE_UP_PERCENT,
        scale_up_pods=SCALE_UP_PODS,
        period_seconds=SCALE_PERIOD_SECONDS,
        prometheus_url=PROMETHEUS_URL,
    )


# What differs between engines: health path, queue metric (Prometheus name and custom-metrics API name), metrics port.
ENGINE_ENDPOINTS = {
    # vLLM: GET /health; vllm:num_requests_waiting gauge (vllm/v1/metrics/loggers.py).
    "vllm": ("/health", "vllm:num_requests_waiting", "vllm_num_requests_waiting", HTTP_PORT),
    # TGI: GET /health; tgi_queue_size gauge (router/src/server.rs).
    "tgi": ("/health", "tgi_queue_size", "tgi_queue_size", HTTP_PORT),
    # Triton: /v2/health/ready (KServe v2 protocol); pending-request gauge on the metrics port 8002.
    "triton": (
        "/v2/health/ready",
        "nv_inference_pending_request_count",
        "nv_inference_pending_request_count",
        TRITON_METRICS_PORT,
    ),
}


# ----------------------------------------------------------------------------------------------- Kubernetes units
def object_name(*parts: str) -> str:
    """A DNS-1035 label (Service names): ≤ 63 characters, starting with a letter; shortened with a stable hash."""
    name = "-".join(parts)
    if not name[0].isalpha():
        name = f"m-{name}"
    if len(name) > 63:
        name = f"{name[:54].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name


def gpus_per_pod(serving: Serving) -> int:
    """GPUs of one pod: the whole replica on one node; with a LeaderWorkerSet, TP per pod and one pod per PP stage."""
    if serving.nodes_per_replica == 1:
        return serving.gpus_per_replica
    if serving.pp != serving.nodes_per_replica or serving.tp * serving.pp != serving.gpus_per_replica:
        raise ValueError(
            f"a multi-node replica must be one pipeline stage per node with TP GPUs each: got TP={serving.tp}, "
            f"PP={serving.pp}, {serving.nodes_per_replica} nodes, {serving.gpus_per_replica} GPUs per replica"
        )
    return serving.tp


def startup_failure_threshold(load_seconds: float, warmup_seconds: float) -> int:
    """Startup probe failures allowed, so that failureThreshold × periodSeconds ≥ factor × (load + warm-up)."""
    return max(1, math.ceil(STARTUP_BUDGET_FACTOR * (load_seconds + warmup_seconds) / PROBE_PERIOD_SECONDS))


def weights_source(plan: ResolvedPlan) -> str:
    uri = plan.model.weights_uri
    if not uri:
        return "hub"
    return "object-store" if uri.lower().startswith(STREAMED_SCHEMES) else "path"


def checkpoint_bytes(plan: ResolvedPlan) -> int:
    """The checkpoint as stored: a 16-bit one is 2 bytes per parameter even when the engine quantizes it at load."""
    s = plan.serving
    if plan.model.quantization == "none":
        return max(s.weights_bytes, CHECKPOINT_BYTES_PER_PARAM_16BIT * plan.model.params_total)
    return s.weights_bytes


def model_cache_bytes(checkpoint: int) -> int:
    return math.ceil(checkpoint * (1 + MODEL_CACHE_HEADROOM_FRACTION))


def warmup_key(plan: ResolvedPlan) -> str:
    engine = plan.serving.engine
    return "triton-vllm" if engine == "triton" and plan.model.architecture.kind == "decoder" else engine


def scale_down_window_seconds(serving: Serving) -> int:
    return max(DEFAULT_SCALE_DOWN_WINDOW_SECONDS, math.ceil(serving.startup_seconds))


def pod_cpu_millicores(node: NodeShare | None, edge: bool, pod_gpus: int) -> int:
    """The node share's CPU; an edge device's small policy request; without a catalog node, DEFAULT_CPUS_PER_GPU."""
    if edge:
        return EDGE_CPUS * 1000
    return node.cpu_millicores if node is not None else DEFAULT_CPUS_PER_GPU * pod_gpus * 1000


def serving_unit(
    plan: ResolvedPlan, unit: UnitView, spec: PlanSpec, on_kubernetes: bool, fabric: str = "tcp"
) -> ServingUnit:
    s = unit.plan.serving
    health, queue, adapter, metrics_port = ENGINE_ENDPOINTS[s.engine]
    return ServingUnit(
        rollout_max_surge=ROLLOUT_MAX_SURGE,
        rollout_max_unavailable=ROLLOUT_MAX_UNAVAILABLE,
        disruption_max_unavailable=DISRUPTION_MAX_UNAVAILABLE,
        name=object_name(plan.name, unit.stage) if unit.stage else object_name(plan.name),
        component=unit.stage or "server",
        stage=unit.stage,
        engine=s.engine,
        **image_fields(unit.plan, spec),
        pods_per_replica=s.nodes_per_replica,
        http_port=HTTP_PORT,
        metrics_port=metrics_port,
        health_path=health,
        queue_metric=queue,
        adapter_metric=adapter,
        probe_period_seconds=PROBE_PERIOD_SECONDS,
        probe_failure_threshold=PROBE_FAILURE_THRESHOLD,
        **weights_fields(unit.plan),
        **pod_resource_fields(unit.plan, on_kubernetes, fabric),
        **termination_fields(unit, spec),
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        scale_down_window_seconds=scale_down_window_seconds(s),
        input_queue=unit.input_queue,
        output_queue=unit.output_queue,
    )


def image_fields(plan: ResolvedPlan, spec: PlanSpec) -> dict:
    """The server image (the plan's, else the engine's), the node architecture, and Triton's init containers that
    fill the model repository and build a TensorRT plan."""
    s = plan.serving
    edge = plan.hardware.gpu_spec.edge
    builds = s.engine == "triton" and triton_model(plan).backend == "tensorrt"
    image, init_image, packages, init_gpus = (
        triton_images(plan, edge) if s.engine == "triton" else (ENGINE_IMAGES[s.engine], "", [], 0)
    )
    return {
        "image": spec.cluster.kubernetes.image or image,
        "node_arch": "arm64" if edge else "",
        "repository_init_image": init_image,
        "repository_init_packages": packages,
        "repository_init_gpus": init_gpus,
        "engine_build_image": ENGINE_BUILD_IMAGE if builds else "",
        "engine_build_gpus": ENGINE_BUILD_GPUS if builds else 0,
    }


def weights_fields(plan: ResolvedPlan) -> dict:
    """Where the weights come from, the download and load they take, the startup probe's budget for them and the
    model cache that holds them."""
    s = plan.serving
    source = weights_source(plan)
    fetch = source == "hub" and (s.engine != "triton" or plan.model.architecture.kind == "decoder")
    checkpoint = checkpoint_bytes(plan)
    rate = HUB_DOWNLOAD_BYTES_PER_SECOND if fetch else 0.0
    download = math.ceil(checkpoint / rate) if fetch else 0
    load = math.ceil(s.startup_seconds / s.nodes_per_replica)
    warmup = WARMUP_SECONDS[warmup_key(plan)]
    threshold = startup_failure_threshold(load, warmup)
    return {
        "startup_failure_threshold": threshold,
        "startup_budget_seconds": threshold * PROBE_PERIOD_SECONDS,
        "weights_source": source,
        "weights_location": model_source(plan),
        "fetch_weights": fetch,
        "fetch_patterns": list(FETCH_PATTERNS) if fetch else [],
        "checkpoint_bytes": checkpoint,
        "weights_bytes_per_pod": weights_bytes_per_pod(s),
        "download_bytes_per_second": rate,
        "download_seconds": download,
        "load_seconds": load,
        "warmup_seconds": warmup,
        "progress_deadline_seconds": download + threshold * PROBE_PERIOD_SECONDS + PROGRESS_DEADLINE_DEFAULT_SECONDS,
        "model_cache_bytes": model_cache_bytes(checkpoint),
        "shared_cache": plan.hardware.storage in SHARED_FILESYSTEMS,
    }


def weights_bytes_per_pod(serving: Serving) -> int:
    """The replica's weights ÷ its pods (one pipeline stage per pod)."""
    return math.ceil(serving.weights_bytes / serving.nodes_per_replica)


def pod_shape(plan: ResolvedPlan, on_kubernetes: bool) -> tuple[int, int, int]:
    """(GPUs, /dev/shm bytes, host-memory floor bytes) of one serving pod."""
    s = plan.serving
    edge = plan.hardware.gpu_spec.edge
    if (
        on_kubernetes
    ):  # the shape check raises for a replica a LeaderWorkerSet cannot place; only Kubernetes places pods
        gpus_per_pod(s)
    pod = serving_pod(s.gpus_per_replica, s.tp, s.nodes_per_replica, s.weights_bytes, edge)
    return pod.gpus, serving_shm_bytes(pod.gpus, edge), pod.floor_bytes


def pod_node(plan: ResolvedPlan, on_kubernetes: bool, fabric: str) -> NodeShare | None:
    """The catalog node a serving pod lands on: the serving search priced its pod of this shape (pod_price.py)."""
    s, edge = plan.serving, plan.hardware.gpu_spec.edge
    pod_shape(plan, on_kubernetes)  # raises for a shape a LeaderWorkerSet cannot place
    pod = serving_pod(s.gpus_per_replica, s.tp, s.nodes_per_replica, s.weights_bytes, edge, fabric)
    return landing_node(plan.hardware.gpu_spec, pod)


def pod_resource_fields(plan: ResolvedPlan, on_kubernetes: bool, fabric: str) -> dict:
    """GPUs, /dev/shm, the catalog node and its share of CPU and memory, and a multi-node pod's RDMA devices and
    NCCL settings."""
    s = plan.serving
    edge = plan.hardware.gpu_spec.edge
    multi_node = s.nodes_per_replica > 1
    pod_gpus, shm, floor = pod_shape(plan, on_kubernetes)
    node = pod_node(plan, on_kubernetes, fabric)
    rdma_resource, rdma_count = nodes.fabric_device(fabric, node) if multi_node else ("", 0)
    nccl = [EnvVar(name=n, value=v, comment=c) for n, v, c in NCCL_ENV.get(fabric, [])] if multi_node else []
    return {
        "gpus_per_pod": pod_gpus,
        "cpu_millicores": pod_cpu_millicores(node, edge, pod_gpus),
        "memory_bytes": floor if edge or node is None else node.memory_bytes,
        "node": node,
        "qos_class": "Burstable",
        "rdma_resource": rdma_resource,
        "rdma_count": rdma_count,
        "hugepages_bytes": nodes.fabric_hugepages_bytes(fabric, node) if multi_node else 0,
        "nccl_env": nccl,
        "shm_bytes": shm,
    }


def termination_fields(unit: UnitView, spec: PlanSpec) -> dict:
    """The longest request, the engine's drain of it (TGI caps it) and the grace period around the preStop sleep."""
    longest = longest_request_seconds(unit.plan, stage_prompt_tokens(unit, spec))
    drain = min(longest, TGI_DRAIN_SECONDS) if unit.plan.serving.engine == "tgi" else longest
    return {
        "pre_stop_seconds": PRE_STOP_SECONDS,
        "longest_request_seconds": longest,
        "drain_seconds": drain,
        "termination_grace_seconds": PRE_STOP_SECONDS + drain,
    }
