"""mlinfra-compile probe (Triton): the plan's own tritonserver on its own model repository, measured by Triton's own
benchmark, perf_analyzer.

Starts the engine from the plan's emitted launch (engine/triton/serve.sh: tritonserver on the repository beside it,
which it fills first; here on free ports, the later flags overriding the launch's; $MLINFRA_PROBE_ENGINE_ARGS appends
flags, e.g. a CPU run's --backend-directory), waits for /v2/health/ready, then runs perf_analyzer
($MLINFRA_PROBE_PERF_ANALYZER, else perf_analyzer on PATH; $MLINFRA_PROBE_PERF_ARGS appends flags) once per batch of
settings.json: gRPC, client batch -b B, --concurrency-range C:C, its CSV report. Writes one JSON file: per batch the
server's compute time per batch, the client's p50/p99 latency and the throughput, with the environment recorded and
checked (probe_environment.py). Stops the engine at the end.
"""

import csv
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_environment import environment_warnings  # noqa: E402  (beside this file: the same checks calibrate runs)
from probe_node import arguments, checked_device, results_folder, write_results  # noqa: E402  (beside this file too)

HERE = os.path.dirname(os.path.abspath(__file__))
# perf_analyzer's CSV columns (microseconds, but Inferences/Second) and the results' names (milliseconds)
COLUMNS = {
    "p50 latency": "p50_latency_ms",
    "p90 latency": "p90_latency_ms",
    "p99 latency": "p99_latency_ms",
    "Server Queue": "server_queue_ms",
    "Server Compute Input": "server_compute_input_ms",
    "Server Compute Infer": "server_compute_infer_ms",
    "Server Compute Output": "server_compute_output_ms",
}


def measured(s, model, folder, settings, measure):
    """The engine started and ready, measure(grpc port, setting) for each setting, the engine stopped; the points."""
    http, grpc, metrics = free_ports(3)
    engine = start_engine(http, grpc, metrics, os.path.join(folder, "engine.log"))
    try:
        if not wait_ready(http, model, engine, s["time_limit_seconds"] / 2):
            sys.exit(f"probe: the model did not become ready (see {folder}/engine.log)")
        return [measure(grpc, setting) for setting in settings]
    finally:
        stop_engine(engine)


def stop_engine(engine):
    """tritonserver's group stopped, then killed: the python backend's stub can outlive tritonserver in its group."""
    os.killpg(engine.pid, signal.SIGTERM)
    engine.wait(timeout=120)
    time.sleep(5)
    try:
        os.killpg(engine.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def start_engine(http, grpc, metrics, log_path):
    extra = os.environ.get("MLINFRA_PROBE_ENGINE_ARGS", "").split()
    command = [
        "bash",
        os.path.join(HERE, "engine", "triton", "serve.sh"),
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        *extra,
    ]
    log = open(log_path, "w", encoding="utf-8")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(port, model, engine, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if engine.poll() is not None:
            return False
        try:
            url = f"http://127.0.0.1:{port}/v2/models/{urllib.parse.quote(model, safe='')}/ready"
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def perf_analyzer(s, grpc, batch, folder):
    """perf_analyzer at one client batch; its CSV row as the results' point."""
    t = s["triton"]
    report = os.path.join(folder, f"batch-{batch}.csv")
    command = [
        os.environ.get("MLINFRA_PROBE_PERF_ANALYZER", "perf_analyzer"),
        "-m",
        t["model"],
        "-u",
        f"127.0.0.1:{grpc}",
        "-i",
        "grpc",
        "-b",
        str(batch),
        f"--concurrency-range={t['concurrency']}:{t['concurrency']}",
        f"--measurement-interval={t['measurement_interval_ms']}",
        "-f",
        report,
        *os.environ.get("MLINFRA_PROBE_PERF_ARGS", "").split(),
    ]
    with open(os.path.join(folder, f"batch-{batch}.log"), "w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=s["time_limit_seconds"] / 2)
    if done.returncode != 0:
        sys.exit(f"probe: perf_analyzer at batch {batch} exited {done.returncode} (see {folder}/batch-{batch}.log)")
    with open(report, encoding="utf-8", newline="") as handle:
        row = next(csv.DictReader(handle))
    point = {"batch": batch, "concurrency": t["concurrency"]}
    point["throughput_items_per_second"] = float(row["Inferences/Second"])
    point.update((name, float(row[column]) / 1e3) for column, name in COLUMNS.items())
    return point


def environment():
    env = {"python": platform.python_version(), "host": platform.node(), "device": "cpu"}
    try:
        query = "name,driver_version,power.limit"
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
        if out:
            line = out.splitlines()[0]
            env.update(device="cuda", gpu_name=line.split(",")[0].strip(), nvidia_smi=line)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return env


def main():
    args, s = arguments(HERE)
    env = environment()
    expected, name = checked_device(s, env, args.allow_other_device)
    folder = results_folder(args.out)
    batches = s["triton"]["batches"]
    points = measured(s, s["triton"]["model"], folder, batches, lambda grpc, b: perf_analyzer(s, grpc, b, folder))
    results = {
        "version": 3,
        "kind": "serving",
        "engine": "triton",
        "plan": s["plan"],
        "gpu_id": s["gpu_id"],
        "architecture": s["architecture"],
        "precision": s["precision"],
        "model": s["triton"]["model"],
        "prompt_tokens": s["triton"]["prompt_tokens"],
        "points": points,
        "plan_text": s["triton"]["plan_text"],
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "device_name": name,
        "environment": env,
        "expected": expected,
        "warnings": environment_warnings(env, expected),
    }
    write_results(results, args)
    summary = ", ".join(
        f"b{p['batch']} server {p['server_compute_infer_ms']:.3g} ms, p99 {p['p99_latency_ms']:.3g} ms, "
        f"{p['throughput_items_per_second']:.4g}/s"
        for p in points
    )
    print(f"probe: {summary} -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
