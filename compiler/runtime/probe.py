"""mlinfra-compile probe: a minutes-long measurement on one node of the user's cluster.

Training: probe.sbatch (or the Kubernetes Job) first runs each layout's reduced job (job*/: the plan's own launcher and
framework configuration, with probe_train.py as the training script), which leaves its measured steps and peak memory
in probe-results.d/. Run under torchrun, this script then measures the GEMM and HBM-copy rates and the all-reduce and
all-gather bus bandwidth inside the node (probe_microbench.py: CUDA events, CUDA graphs for short kernels) and writes
one JSON file: the layouts (measured, and what the compiler predicted for exactly that job), the rates, the
environment recorded and checked (probe_environment.py). `--phase inter-node` (probe.sbatch's second step, on two
nodes) measures the collectives again across both and adds them to the results.
(A serving plan's probe is probe_serve.py: the engine's own benchmark.) SIGALRM stops it at its time limit. It refuses to run on another device than the plan's (exit 3) unless
--allow-other-device (CI on CPU).
"""

import argparse
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_environment import environment_warnings  # noqa: E402  (beside this file: the same checks calibrate runs)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def environment(device):
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "device": device.type,
    }
    if device.type == "cuda":
        env.update(
            gpu_name=torch.cuda.get_device_name(0),
            cuda=torch.version.cuda,
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
        try:  # one line of the first GPU: probe_environment.parse_nvidia_smi reads it
            query = "name,driver_version,power.limit"
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            env["nvidia_smi"] = out.strip().splitlines()[0] if out.strip() else ""
        except (OSError, subprocess.TimeoutExpired):
            env["nvidia_smi"] = ""
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


def measured_layouts(s, results_folder):
    """Each layout's job result (probe-results.d/<folder>.json beside the results, written by probe_train.py under
    the job's own launcher) joined with what the compiler predicted for that job and the reduced plan it compiled."""
    layouts, failed, here = [], [], os.path.dirname(os.path.abspath(__file__))
    for layout in s["layouts"]:
        try:
            with open(
                os.path.join(results_folder, "probe-results.d", layout["folder"] + ".json"), encoding="utf-8"
            ) as handle:
                run = json.load(handle)
            with open(os.path.join(here, layout["folder"], "probe-plan.yaml"), encoding="utf-8") as handle:
                plan_text = handle.read()
        except (OSError, ValueError):
            failed.append(layout["name"])
            continue
        layouts.append(
            {
                **layout,
                "plan_text": plan_text,
                "step_seconds": run["step_seconds"],
                "steps_seconds": run["steps_seconds"],
                "peak_allocated_bytes": run["peak_allocated_bytes"],
                "peak_reserved_bytes": run["peak_reserved_bytes"],
                "framework_reported": run["framework_reported"],
            }
        )
    return layouts, failed


MARK_BEGIN, MARK_END = (
    "----- mlinfra-compile probe results begin -----",
    "----- mlinfra-compile probe results end -----",
)


def write_results(results, out, print_results):
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
    if print_results:  # the Kubernetes Job's log: the JSON between two marker lines (docs: sed extracts it)
        print(MARK_BEGIN + "\n" + json.dumps(results, sort_keys=True) + "\n" + MARK_END, flush=True)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "settings.json"))
    parser.add_argument("--out", default="probe-results.json")
    parser.add_argument("--allow-other-device", action="store_true")
    parser.add_argument("--print-results", action="store_true", help="also print the results between marker lines")
    parser.add_argument(
        "--phase",
        choices=("node", "inter-node"),
        default="node",
        help="inter-node: only the collectives, over two nodes, added to the results of the node phase",
    )
    return parser.parse_args()


def start_ranks(s, args):
    """The process group and this rank's device; exit 3 on a node whose GPU is not the one the plan assumed."""
    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    expected = s["expected_device"].replace("-", " ").lower()
    if expected not in name.replace("-", " ").lower() and not args.allow_other_device:
        print(f"probe: this node has {name!r}, the plan assumed {s['expected_device']!r}", file=sys.stderr)
        sys.exit(3)
    return device, name


def node_results(s, args, device, name, world):
    """The node phase on every rank: the layouts' results (rank 0 reads them), the GEMM, copy and collective rates;
    the results dict on rank 0, None elsewhere."""
    cuda = device.type == "cuda"
    dtype = DTYPES.get(s["precision"], torch.bfloat16)  # fp8: the GEMM test in bf16
    scale = 1 if cuda else 64  # CPU: smaller buffers, the same measurements (CI runs the probe on CPU)
    rank = dist.get_rank()
    expected = {"device": s["expected_device"], "power_watts": s["expected_power_watts"], "gpu_id": s["gpu_id"]}
    env = environment(device) if rank == 0 else {}
    warnings = environment_warnings(env, expected) if rank == 0 else []
    for warning in warnings:
        print(f"probe: warning: {warning}", file=sys.stderr, flush=True)
    import probe_microbench as bench  # beside this file

    layouts, failed = measured_layouts(s, os.path.dirname(os.path.abspath(args.out)))
    n = s["gemm_size"] // (1 if cuda else 8)  # CPU: smaller kernels, the same measurements
    gemm = bench.gemm(device, [n], dtype if cuda else torch.float32)
    copy = bench.copy(device, [s["copy_bytes"] // scale])
    intra = bench.collectives(device, [size // scale for size in s["collective_bytes"]], world) if world > 1 else []
    if rank != 0:
        return None
    return {
        "version": 3,
        "kind": "training",
        "plan": s["plan"],
        "gpu_id": s["gpu_id"],
        "world_size": world,
        "seq_len": s["seq_len"],
        "precision": s["precision"],
        "layouts": layouts,
        "layouts_failed": failed,
        "gemm_tflops": gemm[0]["tflops"],
        "copy_bytes_per_second": copy[0]["bytes_per_second"],
        "gemm": gemm,
        "copy": copy,
        "interconnect": s["interconnect"],
        "processes_per_node": world,
        "collectives_intra_node": intra,
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime()),
        "device_name": name,
        "environment": env,
        "expected": expected,
        "warnings": warnings,
    }


def main():
    args = parse_args()
    with open(args.settings, encoding="utf-8") as handle:
        s = json.load(handle)
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("probe: time limit reached"))
    signal.alarm(int(s["time_limit_seconds"]))
    device, name = start_ranks(s, args)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.phase == "inter-node":
        inter_node(s, args, device, rank, world, 1 if device.type == "cuda" else 64)
        return
    results = node_results(s, args, device, name, world)
    if results is not None:
        write_results(results, args.out, args.print_results)
        layouts = results["layouts"]
        steps = ", ".join(f"{l['name']} {l['step_seconds']:.4f} s" for l in layouts) or "no layout finished"
        print(f"probe: {steps}; {results['gemm_tflops']:.2f} TFLOP/s GEMM -> {args.out}", flush=True)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def inter_node(s, args, device, rank, world, scale):
    """The collectives over both nodes' ranks, added to the node phase's results (rank 0 of the first node, which
    wrote them: the submit directory)."""
    import probe_microbench as bench  # beside this file

    points = bench.collectives(device, [size // scale for size in s["collective_bytes"]], world)
    if rank == 0:
        with open(args.out, encoding="utf-8") as handle:
            results = json.load(handle)
        results.update(collectives_inter_node=points, nodes=int(os.environ.get("GROUP_WORLD_SIZE", "2")))
        with open(args.out + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, sort_keys=True)
        os.replace(args.out + ".tmp", args.out)
        largest = points[-1] if points else {}
        print(
            f"probe: inter-node {largest.get('op')} {largest.get('bus_bytes_per_second', 0):.3g} B/s bus -> {args.out}",
            flush=True,
        )
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
