"""Serve plans an engine would refuse to start, refused at compile time with the field's location.

- `serve.context_len` above the model's longest context (architecture.max_position): vLLM refuses to start when
  max_model_len exceeds the model's max_position_embeddings (vllm/config: "User-specified max_model_len ... is
  greater than the derived max_model_len"), TGI likewise for --max-total-tokens.
- the plan's precision against the checkpoint's own quantization (`model.quantization`, else what the preset's
  repository ships: compiler/checkpoint.py; a precision left out is the checkpoint's own): a pre-quantized checkpoint
  serves only in the precision it was quantized to, and vLLM 0.32 cannot quantize a 16-bit checkpoint to int8/int4
  at load time (compiler/deployment/serving/engine_args.py, QUANTIZATION), so an int4 plan on a 16-bit repository
  would start nothing on vLLM.
- `serve.traffic.concurrency` (a closed loop of clients) where the sizing has no closed-loop model: a staged service
  (each stage receives a rate from the one before) and non-generative models (their dynamic batcher is sized for a
  request rate).

- `cluster.kubernetes.object_store` against the weights' URI scheme: the workload identity's form (IAM role ARN for
  s3://, Google service-account email for gs://, Azure client id for az://), and a Secret's environment only for s3://.

- `serve.attention_dp` > 1 other than on one vLLM MoE service without PP: vLLM's --data-parallel-size with
  --enable-expert-parallel is what is emitted (TensorRT-LLM's enable_attention_dp and TGI have no such output here),
  the sizing splits routed experts over the ranks (a dense model has none) and places the ranks on one node.

- `serve.speculative` (method mtp) other than on one vLLM service whose model ships an MTP module
  (`architecture.mtp_layers`): vLLM's --speculative-config is what is emitted, and the draft is that module.

- an Ultralytics detector (YOLO11, `Architecture.is_ultralytics_detector`) on any engine: the generated Triton repository
  serves vision models as optimum exports them (classifiers: pixel_values → logits; DETR-style detectors: logits and
  pred_boxes; deployment/serving/triton_model.py); a YOLO11 ONNX file
  comes from Ultralytics' own exporter with other tensors (images → output0, 4 box coordinates + the classes per
  anchor), which the repository does not describe yet. Sizing it is benchmarks/accuracy_vision.py's business.

Runs after `check_references` (presets exist), before the passes.
"""

from __future__ import annotations

import re

from .catalog.catalog import Catalog
from .catalog.types import Architecture
from .checkpoint import SERVES_AS, checkpoint, serving_precision
from .plan.spec import PlanSpec, weights_locations
from .plan.spec_cluster import AZURE_CLIENT_ID, GCP_SERVICE_ACCOUNT, IAM_ROLE_ARN
from .plan.spec_model import ModelSpec
from .source import LoadedYaml, refuse_at

# Precisions vLLM 0.32 cannot reach from a 16-bit checkpoint at load time (no dense int8/int4 online method; its
# bitsandbytes path was removed). TGI can: eetq (int8), bitsandbytes-nf4 (int4).
VLLM_NEEDS_PREQUANTIZED = (
    "fp4",
    "int8",
    "int4",
)  # fp4: NVFP4 needs ModelOpt's calibrated checkpoint (or compressed-tensors)


Problem = tuple[tuple, str, str]  # (location, message, code)


def _architecture(model: ModelSpec, catalog: Catalog) -> Architecture | None:
    if model.preset:
        return catalog.models[model.preset].architecture
    return model.architecture  # a parameter count alone: the assumed shape's context is not the model's own


def _repository(model: ModelSpec, catalog: Catalog) -> str:
    return model.hf_id or (catalog.models[model.preset].hf_repo if model.preset else "") or "this model"


def _source(model: ModelSpec, catalog: Catalog) -> str:
    return (
        f"preset {model.preset} ({catalog.models[model.preset].source})"
        if model.preset
        else "model.architecture.max_position"
    )


def serve_problems(spec: PlanSpec, catalog: Catalog) -> list[Problem]:
    """(location, message, code) of every serving setting an engine would refuse."""
    if spec.serve is None:
        return []
    problems = closed_loop_problems(spec, catalog)
    problems += attention_dp_problems(spec, catalog) + speculative_problems(spec, catalog)
    for model_loc, model, engine, precisions in _served_units(spec):
        problems += _unit_problems(spec, catalog, model_loc, model, engine, precisions)
    return problems


def closed_loop_problems(spec: PlanSpec, catalog: Catalog) -> list[Problem]:
    """serve.traffic.concurrency on what the closed-loop model does not cover (stages, a non-decoder model)."""
    if spec.serve.traffic.concurrency is None:
        return []
    arch = _architecture(spec.model, catalog) if spec.model else None
    if not (spec.serve.stages or (arch is not None and arch.kind != "decoder")):
        return []
    what = "a staged service" if spec.serve.stages else f"a {arch.kind} model"
    return [
        (
            ("serve", "traffic", "concurrency"),
            f"serve.traffic.concurrency (a closed loop of clients) is modelled for one LLM service, not "
            f"{what}: give serve.traffic.requests_per_second",
            "closed-loop-unsupported",
        )
    ]


def _served_units(spec: PlanSpec) -> list[tuple[tuple, ModelSpec, str, list[tuple[tuple, str, bool]]]]:
    """(model location, model, engine, [(precision location, precision, given in the plan)]) of each stage, or of the
    one service."""
    if spec.serve.stages:
        return [
            (
                ("serve", "stages", i, "model"),
                st.model,
                st.engine,
                [(("serve", "precisions", j), p, True) for j, p in enumerate(spec.serve.precisions)]
                if spec.serve.precisions
                else [(("serve", "stages", i, "precision"), st.precision, "precision" in st.model_fields_set)],
            )
            for i, st in enumerate(spec.serve.stages)
        ]
    precisions = (
        [(("serve", "precisions", j), p, True) for j, p in enumerate(spec.serve.precisions)]
        if spec.serve.precisions
        else [(("precision",), spec.precision, "precision" in spec.model_fields_set)]
    )
    return [(("model",), spec.model, spec.serve.engine, precisions)]


def _unit_problems(
    spec: PlanSpec,
    catalog: Catalog,
    model_loc: tuple,
    model: ModelSpec,
    engine: str,
    precisions: list[tuple[tuple, str, bool]],
) -> list[Problem]:
    """One served model: an undeployable detector, or (an LLM) a context beyond the model's and precisions its
    checkpoint or engine cannot serve."""
    arch = _architecture(model, catalog)
    if arch is not None and arch.is_ultralytics_detector:
        return [_detector_problem(model_loc, model, arch, engine)]
    if arch is None or arch.kind != "decoder":
        return []
    problems = []
    if arch.max_position and spec.serve.context_len > arch.max_position:
        problems.append(
            (
                ("serve", "context_len"),
                f"serve.context_len {spec.serve.context_len} is above the model's longest context, "
                f"{arch.max_position} tokens (max_position of {_source(model, catalog)}); {engine} refuses to start "
                f"with a longer max_model_len: give serve.context_len ≤ {arch.max_position}",
                "context-too-long",
            )
        )
    for loc, given, explicit in precisions:
        if (message := _precision_message(given, explicit, model, engine, catalog)) is not None:
            problems.append((loc, message, "checkpoint-mismatch"))
    return problems


def _detector_problem(model_loc: tuple, model: ModelSpec, arch: Architecture, engine: str) -> Problem:
    """An Ultralytics detector: sized, but its ONNX file's I/O is not described for a serving repository."""
    where = model_loc + (("preset",) if model.preset else ("architecture", "layer_table"))
    return (
        where,
        f"{model.preset or arch.layer_table} is an Ultralytics detector: the generated {engine} repository serves "
        f"vision models as optimum exports them (classifiers: pixel_values to logits; DETR-style "
        f"detectors such as YOLOS: logits and pred_boxes), and a YOLO11 ONNX file "
        f"(Ultralytics' exporter: images to output0) is not described yet; serve a classifier, "
        f"or size the detector with benchmarks/accuracy_vision.py",
        "no-detector-deployment",
    )


def _precision_message(given: str, explicit: bool, model: ModelSpec, engine: str, catalog: Catalog) -> str | None:
    """Why `engine` cannot serve the precision (`given`, or the checkpoint's own where the plan left it out) from the
    model's checkpoint, or None when it can."""
    ckpt = checkpoint(model, catalog)
    quant = ckpt.quantization
    precision = serving_precision(given, explicit, quant)
    if precision not in SERVES_AS[quant] and ckpt.shipped is not None:
        return (
            f"precision {precision}: {ckpt.repository} (preset {model.preset}) ships {quant.upper()} "
            f"weights, which vLLM keeps whatever --dtype says (--dtype sets the activations); give "
            f"precision {' or '.join(SERVES_AS[quant])} or leave it out, or point model.hf_id at a 16-bit "
            f"conversion and set model.quantization none"
        )
    if precision not in SERVES_AS[quant]:
        return (
            f"precision {precision} cannot be served from a {quant}-quantized checkpoint "
            f"(model.quantization {quant} serves as {', '.join(SERVES_AS[quant])}): point model.hf_id "
            f"at a checkpoint in {precision} and set model.quantization to its method"
        )
    if precision == "fp4" and engine == "tgi":
        return (
            "precision fp4 (NVFP4) is served by vLLM here (a ModelOpt NVFP4 checkpoint); TGI 3.3 has "
            "no NVFP4 method: use engine vllm"
        )
    if quant == "none" and precision in VLLM_NEEDS_PREQUANTIZED and engine in ("vllm", "triton"):
        return (
            f"precision {precision} on {engine} needs a pre-quantized checkpoint: vLLM cannot quantize "
            f"the 16-bit weights of {_repository(model, catalog)} to {precision} at load time; "
            f"point model.hf_id at {'an NVFP4 (ModelOpt or compressed-tensors)' if precision == 'fp4' else 'an AWQ, GPTQ or compressed-tensors'} checkpoint and set "
            f"model.quantization (or use engine tgi, which quantizes at load time)"
        )
    return None


def attention_dp_problems(spec: PlanSpec, catalog: Catalog) -> list[Problem]:
    dp = spec.serve.attention_dp
    if dp <= 1:
        return []
    where, code = ("serve", "attention_dp"), "attention-dp-unsupported"
    if spec.serve.stages:
        return [(where, "serve.attention_dp is sized for one LLM service, not a staged one", code)]
    arch = _architecture(spec.model, catalog)
    if arch is None or not arch.is_moe:
        what = "a parameter count alone" if arch is None else f"a dense model ({arch.experts} expert)"
        return [
            (
                where,
                f"serve.attention_dp splits the routed experts of an MoE model over the DP ranks; {what} has none: "
                f"drop serve.attention_dp (replicas already run data-parallel)",
                code,
            )
        ]
    if spec.serve.engine != "vllm":
        return [
            (
                where,
                f"serve.attention_dp is emitted as vLLM's --data-parallel-size with --enable-expert-parallel; engine "
                f"{spec.serve.engine} gets no such setting here: use engine vllm",
                code,
            )
        ]
    if (spec.parallelism.pp or 1) > 1:
        return [
            (
                where,
                f"serve.attention_dp places its {dp} ranks on one node without pipeline stages; parallelism.pp is "
                f"{spec.parallelism.pp}",
                code,
            )
        ]
    return []


def speculative_problems(spec: PlanSpec, catalog: Catalog) -> list[Problem]:
    if spec.serve.speculative is None:
        return []
    where, code = ("serve", "speculative"), "speculative-unsupported"
    if spec.serve.stages:
        return [(where, "serve.speculative is sized for one LLM service, not a staged one", code)]
    arch = _architecture(spec.model, catalog)
    if arch is None or arch.mtp_layers < 1:
        return [
            (
                where,
                f"method mtp drafts with the checkpoint's multi-token-prediction module, and "
                f"{spec.model.preset or 'this architecture'} has none (architecture.mtp_layers 0; DeepSeek-V3's "
                f"config.json num_nextn_predict_layers is 1)",
                code,
            )
        ]
    if spec.serve.engine != "vllm":
        return [
            (
                where,
                f"serve.speculative is emitted as vLLM's --speculative-config; engine {spec.serve.engine} gets no "
                f"such setting here: use engine vllm",
                code,
            )
        ]
    return []


# Which workload-identity form each object store takes (plan/spec_cluster.py: IAM_ROLE_ARN, GCP_SERVICE_ACCOUNT,
# AZURE_CLIENT_ID), and which stores a Secret's environment can reach: the AWS SDK reads AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY from the environment; gs:// and az:// clients want a key file or a federated identity, so they
# take workload_identity only.
IDENTITY_FORMS = {
    "s3://": (IAM_ROLE_ARN, "an IAM role ARN (EKS IAM roles for service accounts)"),
    "gs://": (GCP_SERVICE_ACCOUNT, "a Google service-account email (GKE Workload Identity)"),
    "az://": (AZURE_CLIENT_ID, "an Azure client id (Azure Workload Identity)"),
}
SECRET_ENV_SCHEMES = ("s3://",)


def credential_problems(spec: PlanSpec) -> list[Problem]:
    """cluster.kubernetes.object_store against the schemes of the plan's weights."""
    store = spec.cluster.kubernetes.object_store
    if store is None:
        return []
    weights = weights_locations(spec)
    schemes = sorted({s for w in weights for s in IDENTITY_FORMS if w.lower().startswith(s)})
    where = ("cluster", "kubernetes", "object_store")
    problems = []
    if len(schemes) > 1:
        problems.append(
            (
                where,
                f"the weights come from {' and '.join(schemes)}: one object_store credential cannot reach both",
                "object-store-credentials",
            )
        )
    for scheme in schemes:
        pattern, form = IDENTITY_FORMS[scheme]
        if store.workload_identity is not None and not re.fullmatch(pattern, store.workload_identity):
            problems.append(
                ((*where, "workload_identity"), f"{scheme} weights need {form}", "object-store-credentials")
            )
        if store.secret is not None and scheme not in SECRET_ENV_SCHEMES:
            problems.append(
                (
                    (*where, "secret"),
                    f"a Secret's environment reaches s3:// only (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY); "
                    f"{scheme} weights need workload_identity: {form}",
                    "object-store-credentials",
                )
            )
    return problems


def check_serving(spec: PlanSpec, catalog: Catalog, loaded: LoadedYaml) -> None:
    problems = serve_problems(spec, catalog) + credential_problems(spec)
    refuse_at(problems, loaded)
