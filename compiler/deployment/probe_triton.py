"""The serving probe of a Triton vision plan (a CNN, ViT or encoder on Triton's onnxruntime backend): the plan's own
model repository served by its own tritonserver launch (engine/triton/serve.sh), measured by Triton's own benchmark,
`perf_analyzer`, one batch at a time (concurrency 1) at batch 1, the plan's largest batch and their geometric middle.

What calibrate compares is the server's own compute time per batch (perf_analyzer's "Server Compute Infer", Triton's
statistics), which is what the vision sizing's batch roofline (sizing/serve/vision.py) predicts; the client's p50/p99
latency and the throughput are kept beside it.
"""

from __future__ import annotations

import math

from ..catalog.params import count_params
from ..plan.deployment_fields import DeploymentDecision
from ..plan.probe import Probe, TritonProbe
from ..plan.resolved import ResolvedPlan
from ..sizing.serve.replica import compute_dtype
from ..sizing.serve.vision import batch_time, cnn_fusion, flops_per_item, weights_bytes

# perf_analyzer's own default window (5000 ms) × its three stable windows is 15 s a point at least; 2 s windows keep
# three points and the engine's start within minutes, and a batch on a GPU runs in milliseconds, so a window still
# holds hundreds of batches.
MEASUREMENT_INTERVAL_MS = 2000
CONCURRENCY = 1  # one batch in flight: the measured latency is one batch's, as the sizing's t_batch(b) is


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
    if any(d.topic == "probe on Kubernetes" for d in probe.decisions):
        decisions.append(
            DeploymentDecision(
                topic="probe on Kubernetes",
                choice="no probe-job.yaml",
                reason="the Triton probe runs from probe.sbatch (or probe_triton.py by hand) on a GPU node with the "
                "plan's tritonserver and perf_analyzer; a Kubernetes Job for it is not built yet",
            )
        )
    dropped = ("probe engine", "probe concurrency", "probe on Kubernetes")
    kept = [d for d in probe.decisions if d.topic not in dropped]
    update = {
        "serving": None,
        "triton": triton,
        "decisions": decisions + kept,
        "kubernetes": None,  # no probe-job.yaml (the decision above)
        "shape_words": "the plan's model repository as compiled (engine/triton/)",
    }
    return probe.model_copy(update=update)
