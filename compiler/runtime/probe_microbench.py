"""mlinfra-compile probe: the node's micro-benchmarks, timed on the device, not around Python's dispatch.

GEMM rate (bf16 square matmuls), HBM copy rate (device-to-device copy, read + write counted) and the all-reduce and
all-gather bus bandwidth (nccl-tests' definition, doc/PERFORMANCE.md: all-reduce algbw × 2(n−1)/n, all-gather
algbw × (n−1)/n). On a GPU each repetition is timed with CUDA events on the stream; kernels shorter than
GRAPH_BELOW_SECONDS are captured `inner` times in one CUDA graph and the graph's replay is timed, so launch overhead
cannot masquerade as a slow GPU. On a CPU the monotonic clock stands in (a test of the loop). Each measurement is
independent: one that fails is recorded with its error and the others still run.

    python3 probe_microbench.py --out microbench.json            # one process
    torchrun --nproc-per-node=8 probe_microbench.py --out m.json  # adds the collectives over the node's GPUs
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

GRAPH_BELOW_SECONDS = 200e-6  # below this a kernel's launch is a visible share of its time: time it in a graph
REPEATS = 10


def _eager_seconds(fn, repeat):
    """Median seconds of `repeat` calls, each bracketed by CUDA events (one synchronize at the end)."""
    pairs = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) / 1000 for s, e in pairs)


def _graph_seconds(fn, repeat, inner):
    """Median seconds of one call: `inner` calls captured in a CUDA graph, each replay timed with CUDA events."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up on a side stream, as torch.cuda.graphs' documentation asks before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    graph.replay()
    return _eager_seconds(graph.replay, repeat) / inner


def device_seconds(fn, device, repeat=REPEATS):
    """(seconds of one call, how it was timed)."""
    fn()
    if device.type != "cuda":
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times), "monotonic clock (CPU)"
    torch.cuda.synchronize()
    eager = _eager_seconds(fn, repeat)
    if eager >= GRAPH_BELOW_SECONDS:
        return eager, "CUDA events"
    inner = max(2, min(1000, int(GRAPH_BELOW_SECONDS * 10 / max(eager, 1e-7))))
    try:
        return _graph_seconds(fn, repeat, inner), f"CUDA graph of {inner} calls, CUDA events"
    except RuntimeError as exc:  # a kernel that cannot be captured: the eager time, said so
        return eager, f"CUDA events (graph capture failed: {str(exc)[:80]})"


def gemm(device, sizes, dtype):
    points = []
    for n in sizes:
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds, how = device_seconds(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out), device)
        points.append(
            {"n": n, "dtype": str(dtype), "seconds": seconds, "tflops": 2 * n**3 / seconds / 1e12, "timed": how}
        )
        del a, b, out
    return points


def copy(device, sizes):
    points = []
    for size in sizes:
        src = torch.empty(size // 4, device=device)
        dst = torch.empty_like(src)
        seconds, how = device_seconds(lambda src=src, dst=dst: dst.copy_(src), device)
        points.append({"bytes": size, "seconds": seconds, "bytes_per_second": 2 * size / seconds, "timed": how})
        del src, dst
    return points


def collectives(device, sizes, world):
    """All-reduce and all-gather of each size over every rank (sizes: the reduced buffer; the gathered output)."""
    points = []
    for size in sizes:
        buffer = torch.ones(size // 4, device=device)
        part = torch.ones(size // 4 // world, device=device)
        gathered = torch.empty(part.numel() * world, device=device)
        for op, run, factor in (
            ("all_reduce", lambda buffer=buffer: dist.all_reduce(buffer), 2 * (world - 1) / world),
            ("all_gather", lambda out=gathered, part=part: dist.all_gather_into_tensor(out, part), (world - 1) / world),
        ):
            run()
            dist.barrier()
            if device.type == "cuda":
                seconds, how = _eager_seconds(run, 5), "CUDA events"
            else:
                seconds, how = device_seconds(run, device, 5)
            algbw = size / seconds
            points.append(
                {
                    "op": op,
                    "bytes": size,
                    "ranks": world,
                    "seconds": seconds,
                    "alg_bytes_per_second": algbw,
                    "bus_bytes_per_second": algbw * factor,
                    "timed": how,
                }
            )
        del buffer, part, gathered
    return points


def _guarded(name, fn, errors):
    try:
        return fn()
    except Exception as exc:  # each part independent: record why and go on
        errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--gemm-sizes", default="1024,4096,8192")
    parser.add_argument("--copy-bytes", default=f"{1 << 20},{1 << 30}")
    parser.add_argument("--collective-bytes", default=f"{1 << 20},{16 << 20},{256 << 20}")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    errors = {}
    sizes = [int(x) for x in args.gemm_sizes.split(",")]
    dtype = torch.bfloat16 if cuda else torch.float32
    results = {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gemm": _guarded("gemm", lambda: gemm(device, sizes, dtype), errors),
        "copy": _guarded("copy", lambda: copy(device, [int(x) for x in args.copy_bytes.split(",")]), errors),
        "collectives": _guarded(
            "collectives",
            lambda: collectives(device, [int(x) for x in args.collective_bytes.split(",")], world) if world > 1 else [],
            errors,
        ),
        "errors": errors,
    }
    if not dist.is_initialized() or dist.get_rank() == 0:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, sort_keys=True)
        best = max((p["tflops"] for p in results["gemm"]), default=0)
        print(f"microbench: GEMM {best:.1f} TFLOP/s; errors: {sorted(errors) or 'none'} -> {args.out}", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
