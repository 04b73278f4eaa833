"""Serving sizing against published throughput: python -m benchmarks.accuracy_serving
(then the serving rows at stated load points: benchmarks/accuracy_serve_points.py)

For each row of benchmarks/calibration/inference_points.csv (TensorRT-LLM 0.17 `trtllm-bench`
max-throughput tables) this sizes the same model, GPU, precision and TP with `search_serving` — no
SLO, so the batch that maximises throughput — and compares output tokens/s (and TTFT / TPOT where a
row gives them). The run settings follow the rows' source, nothing is fitted to them:

* engine 'triton' (TensorRT-LLM): `kv_cache_free_gpu_mem_fraction 0.95` as the rows state, batch cap
  4096 (trtllm-bench), KV reserved per whole request (GUARANTEED_NO_EVICT, its default scheduler);
* FP8 rows use an FP8 KV cache: trtllm-bench sets one for an FP8 or NVFP4 checkpoint whose `kv_cache_quant_algo` is
  null, as NVIDIA's FP8 checkpoints' is, and keeps a checkpoint's FP8 (NVIDIA/TensorRT-LLM
  docs/source/performance/perf-benchmarking.md, "Quantization in the PyTorch Flow", its mapping table); FP16 rows a
  16-bit one;
* requests of exactly input_len + output_len tokens, as trtllm-bench's synthetic datasets.
"""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script or as python -m benchmarks.…

from benchmarks.accuracy_serve_points import main as serve_points_main  # noqa: E402
from compiler.catalog.fabrics import load_fabrics  # noqa: E402
from compiler.passes.wording import words  # noqa: E402
from compiler.sizing.serve.search import search_serving  # noqa: E402
from compiler.sizing.serve.types import ServeRequest  # noqa: E402

FABRICS = load_fabrics()  # one node per case: the fabric carries nothing
INFERENCE_POINTS = Path(__file__).resolve().parent / "calibration" / "inference_points.csv"
TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION = 0.95  # the rows' own setting (inference_points.csv `source`)
TOLERANCE = 0.5  # tests fail beyond ±50 %

# Words each row's GPU name must match in a catalog id (lowercase), and the model preset id prefixes.
GPU_WORDS = {
    "H100-80GB-HBM3": ("h100", "sxm"),
    "H200-141GB-HBM3e": ("h200",),
    "A100-SXM4-80GB": ("a100", "sxm", "80"),
    "L40S": ("l40s",),
}
MODEL_PREFIXES = {
    "Llama-3.1-8B": "llama-3.1-8b",
    "Llama-3.1-70B": "llama-3.1-70b",
    "Llama-3.1-405B": "llama-3.1-405b",
    "Mistral-7B": "mistral-7b",
    "Mixtral-8x7B": "mixtral-8x7b",
    "Mixtral-8x22B": "mixtral-8x22b",
}


@dataclass(frozen=True)
class ServingCase:
    name: str
    model_id: str
    gpu_id: str
    precision: str
    tp: int
    prompt_tokens: int
    output_tokens: int
    published_tokens_per_second: float
    predicted_tokens_per_second: float
    published_ttft_seconds: float | None
    predicted_ttft_seconds: float
    published_tpot_seconds: float | None
    predicted_tpot_seconds: float
    batch: int
    note: str
    active_params: int | None = None  # the model's active parameters (count_params)

    @property
    def error(self) -> float:
        """Relative error of tokens/s: predicted / published − 1."""
        return self.predicted_tokens_per_second / self.published_tokens_per_second - 1


def match_gpu(name: str, gpu_ids) -> str:
    words = GPU_WORDS[name]
    hits = sorted(g for g in gpu_ids if all(w in g.lower() for w in words))
    if not hits:
        raise KeyError(f"no catalog GPU matches {name} ({words})")
    return hits[0]


def match_model(name: str, model_ids) -> str:
    prefix = MODEL_PREFIXES[name]
    hits = sorted((m for m in model_ids if m.lower().startswith(prefix)), key=lambda m: (len(m), m))
    if not hits:
        raise KeyError(f"no catalog model matches {name} ({prefix})")
    return hits[0]


def optional_seconds(text: str) -> float | None:
    return float(text) / 1e3 if text.strip() else None


def _request(preset, params, precision: str, gpu_id: str, tp: int, prompt: int, output: int) -> ServeRequest:
    """A max-throughput row as a search request: the row's model, GPU, precision and TP, TensorRT-LLM's KV share."""
    return ServeRequest(
        arch=preset.architecture,
        params=params,
        model_id=preset.id,
        precisions=(precision,),
        kv_cache_dtype="fp8" if precision == "fp8" else "auto",
        engine="triton",
        context_len=prompt + output,
        requests_per_second=1.0,
        prompt_tokens=prompt,
        output_tokens=output,
        peak_factor=1.0,
        ttft_p99_seconds=None,
        tpot_p99_seconds=None,
        latency_p99_seconds=None,
        gpu_ids=(gpu_id,),
        gpu_count=tp,
        tp=tp,
        pp=1,
        gpus_per_node=None,
        interconnect=FABRICS.interconnects["ib-400g"],
        pricing="on-demand",
        optimize="cost",
        budget_usd_per_month=None,
        gpu_memory_utilization=TRTLLM_KV_CACHE_FREE_GPU_MEM_FRACTION,
    )


def serving_cases(gpus=None, models=None, count=None) -> list[ServingCase]:
    """One case per CSV row; catalogs default to the packaged ones (compiler.catalog.loader)."""
    if gpus is None or models is None or count is None:
        from compiler.catalog.loader import load_gpus, load_models
        from compiler.catalog.params import count_params

        gpus, models, count = gpus or load_gpus(), models or load_models(), count or count_params
    cases = []
    with INFERENCE_POINTS.open() as f:
        for row in csv.DictReader(f):
            gpu_id = match_gpu(row["gpu_type"], gpus)
            preset = models[match_model(row["model"], models)]
            precision = row["precision"].lower()
            tp = int(row["gpu_count"])
            prompt, output = int(row["input_len"]), int(row["output_len"])
            params = count(preset.architecture)
            req = _request(preset, params, precision, gpu_id, tp, prompt, output)
            result = search_serving(req, gpus)
            c = result.chosen
            if c is None:
                raise RuntimeError(f"{row['model']} on {tp} × {gpu_id}: {words(result.infeasible_reason)}")
            cases.append(
                ServingCase(
                    name=f"{row['model']} {row['precision']} {tp}×{row['gpu_type']} {prompt}/{output}",
                    model_id=preset.id,
                    gpu_id=gpu_id,
                    precision=precision,
                    tp=tp,
                    prompt_tokens=prompt,
                    output_tokens=output,
                    published_tokens_per_second=float(row["throughput_tokens_per_s"]),
                    predicted_tokens_per_second=c.tokens_per_second_per_replica,
                    published_ttft_seconds=optional_seconds(row["ttft_ms"]),
                    predicted_ttft_seconds=c.ttft_seconds,
                    published_tpot_seconds=optional_seconds(row["tpot_ms"]),
                    predicted_tpot_seconds=c.tpot_seconds,
                    batch=c.max_concurrency,
                    note=row["notes"],
                    active_params=params.active,
                )
            )
    return cases


def main() -> None:
    cases = serving_cases()
    print(f"{'case':58} {'pred tok/s':>11} {'published':>10} {'error':>7} {'batch':>6}")
    for c in cases:
        extra = ""
        if c.published_ttft_seconds is not None:
            extra += f"  TTFT {c.predicted_ttft_seconds * 1e3:.0f}/{c.published_ttft_seconds * 1e3:.0f} ms"
        if c.published_tpot_seconds is not None:
            extra += f"  TPOT {c.predicted_tpot_seconds * 1e3:.1f}/{c.published_tpot_seconds * 1e3:.1f} ms"
        print(
            f"{c.name:58} {c.predicted_tokens_per_second:11.0f} {c.published_tokens_per_second:10.0f} "
            f"{c.error:+7.0%} {c.batch:6d}{extra}"
        )
    errors = [abs(c.error) for c in cases]
    print(f"median |error| {statistics.median(errors):.0%}, worst {max(errors):.0%} over {len(cases)} cases\n")
    serve_points_main()  # serve_points_2.csv: throughput, TTFT and TPOT at each row's own load point


if __name__ == "__main__":
    main()
