"""GPU micro-benchmarks timed on the GPU (CUDA events), not around Python dispatch.

bf16 GEMM (8192³, and 4096×4096×14336 as a Llama-8B MLP projection) and a device-to-device copy (bytes read + written),
each the median of 20 timed repetitions after 5 warm-ups, launched back to back between two events.

    python3 benchmarks/gpu/microbench.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys

import torch


def timed_ms(fn, reps: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def gemm_tflops(m: int, n: int, k: int) -> float:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ms = timed_ms(lambda: torch.mm(a, b))
    return 2 * m * n * k / (ms / 1e3) / 1e12


def copy_bytes_per_second(size_bytes: int = 4 << 30) -> float:
    src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src))
    return 2 * size_bytes / (ms / 1e3)


def main() -> int:
    props = torch.cuda.get_device_properties(0)
    result = {
        "device": props.name,
        "memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gemm_bf16_8192_tflops": gemm_tflops(8192, 8192, 8192),
        "gemm_bf16_4096x14336x4096_tflops": gemm_tflops(4096, 14336, 4096),
        "copy_bytes_per_second": copy_bytes_per_second(),
    }
    print(json.dumps(result))
    with open(sys.argv[1], "w") as out:
        json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
