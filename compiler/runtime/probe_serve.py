"""mlinfra-compile probe (serving): the plan's own engine, measured by the engine's own benchmark.

Starts the engine from the plan's emitted launch (engine/vllm/serve.sh: `vllm serve` with the plan's settings, here
on 127.0.0.1 and a free port; $MLINFRA_PROBE_ENGINE_ARGS appends flags, e.g. a CPU run's), waits for /health, then
runs vLLM's own serving benchmark (`vllm bench serve`: vllm.benchmarks.serve, random prompts of the plan's prompt and
output lengths, --ignore-eos) once per concurrency of settings.json, and writes one JSON file: per concurrency the
engine's median and p99 time to first token and time per output token and its output throughput, with the
environment recorded and checked (probe_environment.py). Stops the engine at the end.
"""

import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_environment import environment_warnings  # noqa: E402  (beside this file: the same checks calibrate runs)
from probe_node import arguments, checked_device, results_folder, write_results  # noqa: E402  (beside this file too)

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_engine(port, log_path):
    extra = os.environ.get("MLINFRA_PROBE_ENGINE_ARGS", "").split()
    command = ["bash", os.path.join(HERE, "engine", "vllm", "serve.sh"), "--host=127.0.0.1", f"--port={port}", *extra]
    log = open(log_path, "w", encoding="utf-8")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(port, engine, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if engine.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(2)
    return False


def bench(s, port, concurrency, folder):
    """vLLM's own `vllm bench serve` at one concurrency; its result dictionary."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    sv = s["serving"]
    args = parser.parse_args(
        [
            "--backend",
            "vllm",
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            s["served_model_name"],
            "--tokenizer",
            s["model"],
            "--dataset-name",
            "random",
            "--random-input-len",
            str(sv["prompt_tokens"]),
            "--random-output-len",
            str(sv["output_tokens"]),
            "--num-prompts",
            str(max(2 * sv["prompts_per_concurrency"], sv["prompts_per_concurrency"] * concurrency)),
            "--max-concurrency",
            str(concurrency),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--disable-tqdm",
            "--percentile-metrics",
            "ttft,tpot,itl",
            "--metric-percentiles",
            "50,99",
            "--save-result",
            "--result-dir",
            folder,
            "--result-filename",
            f"concurrency-{concurrency}.json",
        ]
    )
    return serve.main(args)


def environment():
    env = {"python": platform.python_version(), "host": platform.node(), "device": "cpu"}
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env.update(device="cuda", gpu_name=torch.cuda.get_device_name(0), cuda=torch.version.cuda or "")
            query = "name,driver_version,power.limit"
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            env["nvidia_smi"] = out.strip().splitlines()[0] if out.strip() else ""
    except (ImportError, OSError, subprocess.TimeoutExpired):
        pass
    return env


KEPT = (
    "completed",
    "num_prompts",
    "duration",
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "total_input_tokens",
)


def main():
    args, s = arguments(HERE)
    env = environment()
    expected, name = checked_device(s, env, args.allow_other_device)
    folder = results_folder(args.out)
    port = free_port()
    engine = start_engine(port, os.path.join(folder, "engine.log"))
    points = []
    try:
        if not wait_healthy(port, engine, s["time_limit_seconds"] / 2):
            sys.exit(f"probe: the engine did not become healthy (see {folder}/engine.log)")
        for concurrency in s["serving"]["concurrencies"]:
            result = bench(s, port, concurrency, folder)
            points.append({"concurrency": concurrency, **{k: result.get(k) for k in KEPT}})
    finally:
        os.killpg(engine.pid, signal.SIGTERM)
        engine.wait(timeout=120)
    results = {
        "version": 3,
        "kind": "serving",
        "engine": "vllm",
        "plan": s["plan"],
        "gpu_id": s["gpu_id"],
        "architecture": s["architecture"],
        "precision": s["precision"],
        "tp": s["serving"]["tp"],
        "prompt_tokens": s["serving"]["prompt_tokens"],
        "output_tokens": s["serving"]["output_tokens"],
        "points": points,
        "plan_text": s["plan_text"],
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "device_name": name,
        "environment": env,
        "expected": expected,
        "warnings": environment_warnings(env, expected),
    }
    write_results(results, args)
    summary = ", ".join(
        f"c{p['concurrency']} TTFT {p['median_ttft_ms']:.1f} ms TPOT {p['median_tpot_ms']:.2f} ms" for p in points
    )
    print(f"probe: {summary} -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
