"""mlinfra-compile probe (Triton LLM): the plan's own tritonserver on its own model repository (backend vllm), measured
by Triton's own benchmark, perf_analyzer, streaming over gRPC.

Starts the engine as probe_triton.py does (engine/triton/serve.sh on free ports; $MLINFRA_PROBE_ENGINE_ARGS appends
tritonserver flags), waits for the model to be ready, then per concurrency of settings.json writes perf_analyzer's
--input-data (distinct prompts of the plan's length, stream, exclude_input_in_output, return_num_input_tokens and
return_num_output_tokens, the decided sampling_parameters) and runs perf_analyzer ($MLINFRA_PROBE_PERF_ANALYZER, else on PATH; $MLINFRA_PROBE_PERF_ARGS
appends flags) --streaming with a --profile-export-file. Each export's per-response timestamps become the points
probe_serve.py writes from `vllm bench serve` (median and p99 time to first token and time per output token, output
throughput), so calibrate reads both alike. Standard library only.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_environment import environment_warnings  # noqa: E402  (beside this file)
from probe_node import arguments, checked_device, results_folder, write_results  # noqa: E402
from probe_triton import environment, measured  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def requests_at(s, concurrency):
    """vllm bench serve's --num-prompts at this concurrency (probe_serve.py's count)."""
    per = s["serving"]["prompts_per_concurrency"]
    return max(2 * per, per * concurrency)


def warmup_at(s, concurrency):
    """--warmup-request-count at this concurrency (settings.json's, aligned with the concurrencies)."""
    return s["triton_llm"]["warmup_requests"][s["serving"]["concurrencies"].index(concurrency)]


def input_data(s, concurrency, path):
    """perf_analyzer's --input-data: one distinct prompt per request (the number first: no shared prefix blocks)."""
    t, sv = s["triton_llm"], s["serving"]
    count = requests_at(s, concurrency) + warmup_at(s, concurrency)
    words = " ".join([t["prompt_word"]] * (sv["prompt_tokens"] - 1))
    data = [
        {
            "text_input": [f"{concurrency * 100000 + i} {words}"],
            "stream": [True],
            "exclude_input_in_output": [True],
            "return_num_input_tokens": [True],
            "return_num_output_tokens": [True],
            "sampling_parameters": [t["sampling_parameters"]],
        }
        for i in range(count)
    ]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"data": data}, handle)


def perf_analyzer(s, grpc, concurrency, folder):
    """perf_analyzer --streaming at one concurrency; the path of its profile export."""
    t = s["triton_llm"]
    inputs = os.path.join(folder, f"inputs-c{concurrency}.json")
    export = os.path.join(folder, f"export-c{concurrency}.json")
    input_data(s, concurrency, inputs)
    if os.path.exists(export):
        os.remove(export)  # perf_analyzer refuses an existing export
    command = [
        os.environ.get("MLINFRA_PROBE_PERF_ANALYZER", "perf_analyzer"),
        *("-m", t["model"], "-u", f"127.0.0.1:{grpc}", "-i", "grpc"),
        *("--async", "--streaming", "--service-kind", "triton", "--input-data", inputs),
        f"--concurrency-range={concurrency}:{concurrency}",
        f"--request-count={requests_at(s, concurrency)}",
        f"--warmup-request-count={warmup_at(s, concurrency)}",
        f"--stability-percentage={t['stability_percentage']}",
        f"--profile-export-file={export}",
        *os.environ.get("MLINFRA_PROBE_PERF_ARGS", "").split(),
    ]
    with open(os.path.join(folder, f"concurrency-{concurrency}.log"), "w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=s["time_limit_seconds"] / 2)
    if done.returncode != 0:
        sys.exit(f"probe: perf_analyzer at concurrency {concurrency} exited {done.returncode} (see {folder})")
    return export


def percentile(values, p):
    """numpy's default (linear) percentile, as vllm bench serve reports."""
    xs = sorted(values)
    at = (len(xs) - 1) * p / 100
    low = int(at)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (at - low)


def summary(export, concurrency, requested):
    """vllm bench serve's point from perf_analyzer's export: per request the first response's time (TTFT), the rest
    over the tokens after the first response (TPOT); each response's gap over its tokens (ITL); tokens over the run;
    the prompts' tokens as the engine counted them (num_input_tokens), as vllm bench serve's total_input_tokens."""
    with open(export, encoding="utf-8") as handle:
        (experiment,) = json.load(handle)["experiments"]
    done = [r for r in experiment["requests"] if r.get("response_timestamps")]
    if not done:
        sys.exit(f"probe: no request at concurrency {concurrency} was answered (see {export})")
    ttft, tpot, itl, tokens, prompts = [], [], [], 0, 0
    for r in done:
        times = r["response_timestamps"]
        outputs = r.get("response_outputs", [])
        prompts += int(outputs[0].get("num_input_tokens", 0) or 0) if outputs else 0  # the engine's count
        counts = [int(o.get("num_output_tokens", 0) or 0) for o in outputs]
        counts = counts if len(counts) == len(times) else [1] * len(times)
        tokens += sum(counts)
        ttft.append((times[0] - r["timestamp"]) / 1e6)
        if sum(counts) > counts[0]:
            tpot.append((times[-1] - times[0]) / 1e6 / (sum(counts) - counts[0]))
        itl += [(b - a) / 1e6 / n for a, b, n in zip(times, times[1:], counts[1:]) if n > 0]
    seconds = (max(r["response_timestamps"][-1] for r in done) - min(r["timestamp"] for r in done)) / 1e9
    tpot = tpot or [0.0]
    return {
        "concurrency": concurrency,
        "completed": len(done),
        "num_prompts": requested,
        "duration": seconds,
        "output_throughput": tokens / seconds,
        "request_throughput": len(done) / seconds,
        "median_ttft_ms": percentile(ttft, 50),
        "p99_ttft_ms": percentile(ttft, 99),
        "median_tpot_ms": percentile(tpot, 50),
        "p99_tpot_ms": percentile(tpot, 99),
        "median_itl_ms": percentile(itl or [0.0], 50),
        "mean_ttft_ms": sum(ttft) / len(ttft),
        "mean_tpot_ms": sum(tpot) / len(tpot),
        "output_tokens": tokens,
        "total_input_tokens": prompts or None,
    }


def measure(s, folder):
    """The engine started, each concurrency measured (probe_triton.measured), the engine stopped; the points."""

    def point(grpc, c):
        return summary(perf_analyzer(s, grpc, c, folder), c, requests_at(s, c))

    return measured(s, s["triton_llm"]["model"], folder, s["serving"]["concurrencies"], point)


def main():
    args, s = arguments(HERE)
    env = environment()
    expected, name = checked_device(s, env, args.allow_other_device)
    points = measure(s, results_folder(args.out))
    sv = s["serving"]
    results = {
        "version": 3,
        "kind": "serving",
        "engine": "triton-vllm",
        "plan": s["plan"],
        "gpu_id": s["gpu_id"],
        "architecture": s["architecture"],
        "precision": s["precision"],
        "model": s["triton_llm"]["model"],
        "tp": sv["tp"],
        "prompt_tokens": sv["prompt_tokens"],
        "output_tokens": sv["output_tokens"],
        "points": points,
        "plan_text": s["plan_text"],
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "device_name": name,
        "environment": env,
        "expected": expected,
        "warnings": environment_warnings(env, expected),
    }
    write_results(results, args)
    summary_line = ", ".join(
        f"c{p['concurrency']} TTFT {p['median_ttft_ms']:.1f} ms TPOT {p['median_tpot_ms']:.2f} ms" for p in points
    )
    print(f"probe: {summary_line} -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
