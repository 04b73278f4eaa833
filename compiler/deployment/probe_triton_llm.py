"""The serving probe of a Triton LLM plan (backend vllm): the plan's own model repository served by its own tritonserver
launch (engine/triton/serve.sh), measured by Triton's own benchmark, `perf_analyzer --streaming`, at the concurrencies,
prompt and output lengths the vLLM serving probe decides (deployment/probe.py serving_probe). Its results have the vLLM
probe's shape (time to first token, time per output token, output throughput per concurrency), so calibrate fits them
the same way.
"""

from __future__ import annotations

import json

from ..plan.deployment_fields import DeploymentDecision
from ..plan.probe import Probe, TritonLlmProbe
from ..plan.resolved import ResolvedPlan
from .probe_triton import triton_kubernetes

# A common English word: one token per repetition in Llama's, GPT's and most BPE vocabularies, so the prompt's length
# in tokens is about the plan's prompt_tokens without a tokenizer on the node; the backend returns its own count of
# each prompt (return_num_input_tokens), which calibrate prices the prefill at. The node puts the request's number
# first, so no two prompts share a prefix-cache block (vllm bench serve's random prompts do not either).
PROMPT_WORD = "hello"
# The engine's first-call costs outside the measurement: one warm-up request per slot. perf_analyzer 2.51 --streaming
# hung with fewer warm-up requests than the concurrency (2 at concurrency 3: no request ever sent after them).
WARMUP_PER_SLOT = 1
# --request-count fixes the measurement; a threshold no run misses keeps perf_analyzer from repeating it.
STABILITY_PERCENTAGE = 999


def applies(plan: ResolvedPlan) -> bool:
    """A single-stage Triton plan of a decoder model (its repository runs on the vllm backend)."""
    return (
        plan.serving is not None
        and plan.serving.engine == "triton"
        and plan.model is not None
        and plan.model.architecture.kind == "decoder"
        and not plan.stages
    )


def triton_llm_probe(plan: ResolvedPlan, probe: Probe) -> Probe:
    """The vLLM serving probe's section with Triton's launch and benchmark in place of `vllm serve` and `vllm bench
    serve`: the same concurrencies, lengths and request counts (`serving`), perf_analyzer's settings beside them."""
    sv = probe.serving
    model = plan.deployment.engines[0].triton.name
    sampling = json.dumps({"max_tokens": sv.output_tokens, "min_tokens": sv.output_tokens}, sort_keys=True)
    llm = TritonLlmProbe(
        model=model,
        prompt_word=PROMPT_WORD,
        sampling_parameters=sampling,
        warmup_requests=[WARMUP_PER_SLOT * c for c in sv.concurrencies],
        stability_percentage=STABILITY_PERCENTAGE,
    )
    decisions = [
        DeploymentDecision(
            topic="probe engine",
            choice="tritonserver from triton/serve.sh (backend vllm), measured by Triton's own perf_analyzer "
            "--streaming",
            reason=f"the plan's own model repository (model {model}: config.pbtxt, model.json's engine arguments) and "
            f"launch on one replica ({sv.gpus} GPU(s), TP {sv.tp}), so the measured time to first token and time "
            "per output token are the vLLM engine's behind Triton; perf_analyzer streams over gRPC and exports each "
            "response's time, which probe_triton_llm.py summarizes as `vllm bench serve` does",
        ),
        DeploymentDecision(
            topic="probe requests",
            choice=f"{sv.prompt_tokens} × '{PROMPT_WORD}' after the request's number, sampling_parameters {sampling}",
            reason=f"the plan's traffic: prompts of {sv.prompt_tokens} tokens ('{PROMPT_WORD}' is one token in "
            f"common BPE vocabularies; the number first keeps prompts from sharing prefix-cache blocks) and "
            f"{sv.output_tokens} output tokens (max_tokens = min_tokens, as --ignore-eos); stream true, "
            "exclude_input_in_output, return_num_input_tokens (the engine's own count of each prompt: calibrate "
            "prices the prefill at it, not at the length asked for), return_num_output_tokens (vLLM merges tokens "
            "into one streamed response under load: each response's count, not the responses, is summed)",
        ),
        DeploymentDecision(
            topic="probe measurement",
            choice=f"--request-count as vllm bench's --num-prompts, {WARMUP_PER_SLOT} warm-up request per slot",
            reason=f"the vLLM probe's {sv.prompts_per_concurrency} × the concurrency requests (at least "
            f"{2 * sv.prompts_per_concurrency}) at --concurrency-range C:C, after C warm-up requests (perf_analyzer "
            f"2.51 --streaming hung with fewer than C); --stability-percentage {STABILITY_PERCENTAGE}: the one "
            "fixed-count measurement is kept",
        ),
    ]
    kubernetes, job_decision = triton_kubernetes(plan, probe.time_limit_seconds, "probe_triton_llm.py")
    if job_decision is not None:
        decisions.append(job_decision)
    dropped = ("probe engine", "probe on Kubernetes")
    kept = [d for d in probe.decisions if d.topic not in dropped]
    update = {
        "triton_llm": llm,
        "decisions": decisions + kept,
        "kubernetes": kubernetes,
        "shape_words": "the plan's own model and weights, as its Triton repository serves them (engine/triton/)",
    }
    return probe.model_copy(update=update)
