"""Triton model repository: the model's backend (vLLM, onnxruntime, TensorRT on an edge device), its ONNX tensors,
the trtexec build flags and the images that fill the repository."""

from __future__ import annotations

from ...plan.deployment_serving import Tensor, TritonModel
from ...plan.resolved import ResolvedPlan

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
