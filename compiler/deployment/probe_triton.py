"""The serving probe of a Triton vision plan (a CNN, ViT or encoder on Triton's onnxruntime backend): the plan's own
model repository served by its own tritonserver launch (engine/triton/serve.sh), measured by Triton's own benchmark,
`perf_analyzer`, one batch at a time (concurrency 1) at batch 1, the plan's largest batch and their geometric middle.

What calibrate compares is the server's own compute time per batch (perf_analyzer's "Server Compute Infer", Triton's
statistics), which is what the vision sizing's batch roofline (sizing/serve/vision.py) predicts; the client's p50/p99
latency and the throughput are kept beside it.
"""

from __future__ import annotations

import math
import re

from ..catalog.params import count_params
from ..plan.deployment_fields import DeploymentDecision
from ..plan.probe import Probe, ProbeKubernetes, TritonProbe
from ..plan.resolved import ResolvedPlan
from ..sizing.serve.replica import compute_dtype
from ..sizing.serve.vision import batch_time, cnn_fusion, flops_per_item, weights_bytes
from .probe_kubernetes import extract_command, kubernetes_commands
from .serving.triton_model import TRITON_IMAGES

# perf_analyzer's own default window (5000 ms) × its three stable windows is 15 s a point at least; 2 s windows keep
# three points and the engine's start within minutes, and a batch on a GPU runs in milliseconds, so a window still
# holds hundreds of batches.
MEASUREMENT_INTERVAL_MS = 2000
CONCURRENCY = 1  # one batch in flight: the measured latency is one batch's, as the sizing's t_batch(b) is
# Triton's server images carry no perf_analyzer; NGC publishes it in the SDK image of each release, the server's tag
# with -sdk appended (nvcr.io/nvidia/tritonserver:25.10-py3 → 25.10-py3-sdk), which perf_analyzer's install guide
# names first. The same release shares the server image's OS and CUDA, so the binary copied from it loads there.
TRITON_REPOSITORY = "nvcr.io/nvidia/tritonserver:"
SDK_SUFFIX = "-sdk"


def applies(plan: ResolvedPlan) -> bool:
    """A single-stage Triton plan of a non-generative model (its repository runs on the onnxruntime backend)."""
    return (
        plan.serving is not None
        and plan.serving.engine == "triton"
        and plan.model is not None
        and plan.model.architecture.kind != "decoder"
        and not plan.stages
    )


def predicted_batch_seconds(plan: ResolvedPlan, batch: int) -> float:
    """The vision sizing's time for one batch on the plan's GPU at the catalog's shares (search_vision's own terms)."""
    arch, gpu, precision = plan.model.architecture, plan.hardware.gpu_spec, plan.serving.precision
    params = count_params(arch)
    flops = flops_per_item(arch, params, plan.spec.serve.traffic.prompt_tokens)
    dtype = compute_dtype(precision, gpu)
    fusion = cnn_fusion("triton", gpu.edge)
    return batch_time(arch, gpu, dtype, precision, flops, weights_bytes(params, precision), batch, fusion).seconds


def triton_probe(plan: ResolvedPlan, probe: Probe, plan_text: str) -> Probe:
    """The probe section `serving_probe` built for the plan, with its Triton measurement and decisions in place of
    vLLM's."""
    sv = plan.serving
    top = max(1, sv.max_concurrency)
    batches = sorted({1, max(1, round(math.sqrt(top))), top})
    model = plan.deployment.engines[0].triton.name
    predicted = [predicted_batch_seconds(plan, b) for b in batches]
    triton = TritonProbe(
        model=model,
        batches=batches,
        concurrency=CONCURRENCY,
        measurement_interval_ms=MEASUREMENT_INTERVAL_MS,
        prompt_tokens=plan.spec.serve.traffic.prompt_tokens,
        predicted_batch_seconds=predicted,
        plan_text=plan_text,
    )
    shown = ", ".join(f"{b}: {s * 1e3:.3g} ms" for b, s in zip(batches, predicted))
    decisions = [
        DeploymentDecision(
            topic="probe engine",
            choice="tritonserver from triton/serve.sh, measured by Triton's own perf_analyzer",
            reason=f"the plan's own model repository (model {model}, its config.pbtxt: dynamic batching, instance "
            "group) and launch on one GPU, so the measured batch time is the backend's; perf_analyzer (gRPC, "
            "random inputs of the model's tensors) reports the server's compute time per batch, the client's p50 "
            "and p99 latency and the throughput",
        ),
        DeploymentDecision(
            topic="probe batches",
            choice=", ".join(map(str, batches)),
            reason=f"1, the plan's largest batch {sv.max_concurrency} (max_batch_size) and their geometric middle, "
            f"each as perf_analyzer's client batch (-b) at concurrency {CONCURRENCY} (one batch in flight, as the "
            f"sizing's batch time assumes); predicted batch times at the catalog's shares {shown}",
        ),
        DeploymentDecision(
            topic="probe measurement",
            choice=f"{MEASUREMENT_INTERVAL_MS} ms windows",
            reason="perf_analyzer's time windows, until three in a row agree within its stability threshold (10%); "
            "its default 5 s window would take a minute a batch size",
        ),
    ]
    kubernetes, job_decision = triton_kubernetes(plan, probe.time_limit_seconds)
    if job_decision is not None:
        decisions.append(job_decision)
    dropped = ("probe engine", "probe concurrency", "probe on Kubernetes")
    kept = [d for d in probe.decisions if d.topic not in dropped]
    update = {
        "serving": None,
        "triton": triton,
        "decisions": decisions + kept,
        "kubernetes": kubernetes,
        "shape_words": "the plan's model repository as compiled (engine/triton/)",
    }
    return probe.model_copy(update=update)


def perf_analyzer_image(server_image: str) -> str:
    """The SDK image perf_analyzer is copied from: the server's own release when the server is NGC's full `YY.MM-py3`
    or vLLM `YY.MM-vllm-python-py3` image (the SDK is `YY.MM-py3-sdk` for both), else the release the compiler pins
    (another registry's or flavour's tag names no SDK image)."""
    found = re.fullmatch(re.escape(TRITON_REPOSITORY) + r"(\d{2}\.\d{2})-(?:vllm-python-)?py3", server_image)
    if found:
        return f"{TRITON_REPOSITORY}{found.group(1)}-py3{SDK_SUFFIX}"
    return TRITON_IMAGES["onnxruntime"] + SDK_SUFFIX


def triton_kubernetes(
    plan: ResolvedPlan, time_limit_seconds: int, script: str = "probe_triton.py"
) -> tuple[ProbeKubernetes | None, DeploymentDecision | None]:
    """→ (probe-job.yaml's images, or None; the decision saying so, None off Kubernetes). The Job is the plan's own
    pod shape: fill-repository as its Deployment runs it, then `script` in the plan's server image."""
    k8s = plan.deployment.kubernetes if plan.deployment else None
    if plan.spec.cluster.scheduler not in ("kubernetes", "both") or k8s is None or not k8s.serving:
        return None, None
    unit = k8s.serving[0]
    if plan.hardware.gpu_spec.edge:
        return None, DeploymentDecision(
            topic="probe on Kubernetes",
            choice="no probe-job.yaml",
            reason="a Jetson plan's repository needs its TensorRT plan built on the device (the Deployment's "
            "build-engine init container), which the probe Job does not run yet: run probe_triton.py on the device",
        )
    sdk = perf_analyzer_image(unit.image)
    vllm_note = (
        ", nor has its -vllm-python-py3 flavour: its SDK image is -py3-sdk" if "-vllm-python-" in unit.image else ""
    )
    fill = f"{unit.repository_init_image}" + (
        f", installs {', '.join(unit.repository_init_packages)}" if unit.repository_init_packages else ""
    )
    job = ProbeKubernetes(
        image=unit.image, commands=kubernetes_commands(plan, time_limit_seconds), perf_analyzer_image=sdk
    )
    return job, DeploymentDecision(
        topic="probe on Kubernetes",
        choice=f"probe-job.yaml with {unit.image}",
        reason=f"a one-pod Job on one node of the plan's GPU ({unit.gpus_per_pod} GPU(s), the replica's): init "
        f"container fill-repository ({fill}) copies the probe folder and runs engine/triton/serve.sh --fetch-only, "
        f"as the plan's Deployment fills its repository; init container perf-analyzer copies perf_analyzer from "
        f"{sdk} (Triton's SDK image of the server's release; the server image has none{vllm_note}); "
        f"then {script} runs in the plan's own server image; the log holds the results as one JSON line between marker lines: "
        + extract_command(plan),
    )
