"""The serving deployment's decisions and warnings, each with its reason, as the report shows them."""

from __future__ import annotations

from ...plan.deployment_fields import DeploymentDecision
from ...plan.deployment_serving import Engine, ServingUnit, TritonModel
from ...plan.resolved import Serving
from ...units import format_bytes
from ..training.node_share import DEFAULT_CPUS_PER_GPU
from .engine_args import TGI_DRAIN_SECONDS
from .pods import (
    DEFAULT_SCALE_DOWN_WINDOW_SECONDS,
    HUB_DOWNLOAD_SOURCE,
    MODEL_CACHE_HEADROOM_FRACTION,
    PROGRESS_DEADLINE_DEFAULT_SECONDS,
    RDMA_SOURCE,
    STARTUP_BUDGET_FACTOR,
)
from .triton_model import TRITON_DEFAULT_EXIT_TIMEOUT_SECONDS


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
        out += engine_decisions(e, checkpoint_by_stage[e.stage])
    for u in units:
        out += unit_decisions(u, serving_by_stage[u.stage], min_given, fabric)
    if units:
        out.append(rollout_decision(units[0]))
    return out


def _where(stage: str) -> str:
    """The suffix naming a stage in a decision's topic ('' for a single service)."""
    return f" ({stage})" if stage else ""


def engine_decisions(e: Engine, checkpoint: str) -> list[DeploymentDecision]:
    """The engine and its release; a Triton model's backend and outputs; Triton's drain after SIGTERM."""
    where = _where(e.stage)
    out = [
        DeploymentDecision(
            topic=f"engine{where}",
            choice=engine_choice(e, checkpoint),
            reason="plan precision, model.quantization (the checkpoint's own) and the GPU's tensor-core types; "
            "pinned release whose flags were checked",
        )
    ]
    if e.triton and e.triton.backend != "vllm":
        out.append(triton_model_decision(e.triton, where))
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
    return out


def engine_choice(e: Engine, checkpoint: str) -> str:
    """Engine and release, with the dtype and quantization its arguments set and the checkpoint's own quantization."""
    flags = {a.key: a.value for a in e.args}
    dtype = flags.get("dtype", flags.get("--dtype"))
    quant = flags.get("quantization", flags.get("--quantize"))
    return (
        f"{e.engine} {e.version}"
        + (f", dtype {dtype}" if dtype else "")
        + (f", quantization {quant}" if quant else "")
        + (f", {checkpoint}-quantized checkpoint (method read from its config.json)" if checkpoint != "none" else "")
    )


def triton_model_decision(m: TritonModel, where: str) -> DeploymentDecision:
    """An exported (onnxruntime or TensorRT) Triton model: its file, optimum task and outputs."""
    io = "; ".join(f"{x.name} [{', '.join(str(d) for d in x.dims)}]" for x in m.outputs)
    return DeploymentDecision(
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


def unit_decisions(u: ServingUnit, s: Serving, min_given: bool, fabric: tuple[str, str]) -> list[DeploymentDecision]:
    """One serving unit's decisions, in the report's order: weights, startup, cache, pod, repository, termination,
    replicas, RDMA, scale-down."""
    where = _where(u.stage)
    out = [
        DeploymentDecision(topic=f"weights{where}", choice=weights_choice(u), reason=weights_reason(u)),
        startup_probe_decision(u, where),
        model_cache_decision(u, where),
        pod_resources_decision(u, where),
    ]
    if u.repository_init_image:
        out.append(model_repository_decision(u, where))
    out.append(termination_decision(u, where))
    out.append(replicas_decision(u, s, min_given, where))
    if u.rdma_resource:
        out.append(
            DeploymentDecision(
                topic=f"RDMA{where}",
                choice=f"{u.rdma_resource}: {u.rdma_count} per pod, IPC_LOCK, "
                + (f"hugepages-2Mi: {u.hugepages_bytes // 2**20}Mi, " if u.hugepages_bytes else "")
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
    return out


def startup_probe_decision(u: ServingUnit, where: str) -> DeploymentDecision:
    """The startup probe's budget: weight load and warm-up, with a factor; the rollout's progress deadline."""
    return DeploymentDecision(
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


def model_cache_decision(u: ServingUnit, where: str) -> DeploymentDecision:
    """The model cache volume: the checkpoint with headroom, shared or per pod."""
    return DeploymentDecision(
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


def pod_resources_decision(u: ServingUnit, where: str) -> DeploymentDecision:
    """CPU, memory and GPUs of a pod, its QoS class and the node it is sized on."""
    return DeploymentDecision(
        topic=f"pod resources{where}",
        choice=(
            f"{u.cpu_millicores / 1000:g} CPU requested (no limit), {format_bytes(u.memory_bytes)} memory request = limit, "
            f"{u.gpus_per_pod} GPU; QoS {u.qos_class}" + (f"; node {u.node.node_type}" if u.node else "")
        ),
        reason=pod_resources_reason(u),
    )


def model_repository_decision(u: ServingUnit, where: str) -> DeploymentDecision:
    """Triton: the server image and the init containers that fill the model repository (and build a TensorRT plan)."""
    return DeploymentDecision(
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


def termination_decision(u: ServingUnit, where: str) -> DeploymentDecision:
    """The grace period: preStop sleep, then the engine's drain of its longest request."""
    return DeploymentDecision(
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


def replicas_decision(u: ServingUnit, s: Serving, min_given: bool, where: str) -> DeploymentDecision:
    """minReplicas (the plan's, or the availability floor) and maxReplicas (the peak the sizing needs)."""
    floor_reason = (
        "serve.min_replicas as given"
        if min_given
        else f"availability floor {s.replica_floor} (policy: one replica is a single point of failure — a drain or a crash, "
        f"which the PodDisruptionBudget allows one pod at a time, would take the service down; 1 on an edge device)"
        if s.replica_floor > 1 or u.node_arch
        else "no floor"
    )
    return DeploymentDecision(
        topic=f"replicas{where}",
        choice=f"minReplicas {u.min_replicas}, maxReplicas {u.max_replicas}",
        reason=(
            f"{floor_reason}; capacity needs {s.replicas_needed} at peak; cost and GPU counts use the "
            f"{s.replicas} deployed at peak = max({s.replicas_needed} needed, floor {s.replica_floor})"
        ),
    )


def rollout_decision(u: ServingUnit) -> DeploymentDecision:
    """Surge, unavailability and the PodDisruptionBudget, the same for every unit."""
    return DeploymentDecision(
        topic="rollout and disruption",
        choice=f"surge {u.rollout_max_surge}, {u.rollout_max_unavailable} unavailable; drains evict {u.disruption_max_unavailable} pod at a time",
        reason="a new replica comes up before an old one leaves, so capacity never drops below the SLO-sized level; "
        "a PodDisruptionBudget keeps node drains to one replica (one LWS group)",
    )


def warnings(units: list[ServingUnit]) -> list[str]:
    return [
        f"{u.name}: TGI drains for at most {TGI_DRAIN_SECONDS} s after SIGTERM (its launcher's hard limit), but a request may run "
        f"{u.longest_request_seconds} s: a rollout or drain cuts the longest generations (lower serve.context_len, or use vLLM, "
        f"whose --shutdown-timeout is set from it)"
        for u in units
        if u.drain_seconds < u.longest_request_seconds
    ] + [node_warning(u) for u in units if u.node is not None and not u.node.fits]


def node_warning(u: ServingUnit) -> str:
    """A pod on no node that holds it (a pod on a larger node than the priced one is re-priced there: passes/
    price_on_node.py)."""
    return (
        f"{u.name}: no catalog node's share of {u.gpus_per_pod} GPU(s) holds the pod's {format_bytes(u.node.floor_bytes)} "
        f"of host memory; it requests the largest, {u.node.node_type} ({format_bytes(u.memory_bytes)}), and may be "
        "killed for memory while loading the weights"
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
