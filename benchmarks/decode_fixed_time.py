"""The fixed time per layer of a decode step (serve_latency.DECODE_LAYER_FIXED_SECONDS), from published batch-1 steps.

python -m benchmarks.decode_fixed_time

Each row: a published batch-1 decode rate, its step 1 / (tokens/s), less this model's decode_step without the fixed
term, divided by the layers. Source rows: gpt-fast's README (pytorch-labs/gpt-fast @0f925b5, "Benchmarks" and "Tensor
Parallelism": batch 1, a 5-token prompt, bf16 "Base", 8×A100-80GB power-limited to 330 W; the whole step, sampling
included, is one CUDA graph: torch.compile mode="reduce-overhead"). Context: the prompt plus half of gpt-fast's
default 200 new tokens. Cross-check (not in the median): vLLM v0.19.1's single-stream ITL fit on B200 (FlashInfer,
BF16, intercept 3.93 ms at zero context; vllm-project.github.io _posts/2026-04-22-fp8-kvcache.md).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.catalog.loader import load_gpus, load_models  # noqa: E402
from compiler.catalog.params import count_params  # noqa: E402
from compiler.sizing.serve.decode import decode_step  # noqa: E402
from compiler.sizing.serve.memory import kv_bytes_per_token_per_gpu, weights_bytes_per_gpu  # noqa: E402
from compiler.sizing.serve.replica import ReplicaModel, compute_dtype  # noqa: E402

GPT_FAST_CONTEXT_TOKENS = 5 + 200 // 2


@dataclass(frozen=True)
class BatchOneStep:
    model: str  # catalog preset
    gpu: str
    tp: int
    tokens_per_second: float
    context_tokens: int
    source: str


GPT_FAST = "pytorch-labs/gpt-fast @0f925b5 README.md"
ROWS = (
    BatchOneStep("llama-2-7b", "a100-sxm-80gb", 1, 104.9, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
    BatchOneStep("llama-2-7b", "a100-sxm-80gb", 2, 168.84, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
    BatchOneStep("llama-2-7b", "a100-sxm-80gb", 4, 254.02, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
    BatchOneStep("llama-2-7b", "a100-sxm-80gb", 8, 328.43, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
    BatchOneStep("llama-2-70b", "a100-sxm-80gb", 2, 21.32, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
    BatchOneStep("llama-2-70b", "a100-sxm-80gb", 4, 38.01, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
    BatchOneStep("llama-2-70b", "a100-sxm-80gb", 8, 62.50, GPT_FAST_CONTEXT_TOKENS, GPT_FAST),
)
CROSS_CHECK = BatchOneStep(
    "llama-3.1-8b",
    "b200-sxm-180gb",
    1,
    1e3 / 3.93,
    0,
    "vllm-project.github.io _posts/2026-04-22-fp8-kvcache.md (B200, FlashInfer, BF16)",
)


def roofline_seconds(row: BatchOneStep) -> float:
    """This model's batch-1 decode step without the fixed per-layer term."""
    arch = load_models()[row.model].architecture
    params, gpu = count_params(arch), load_gpus()[row.gpu]
    m = ReplicaModel(
        gpu=gpu,
        arch=arch,
        params=params,
        precision="bf16",
        dtype=compute_dtype("bf16", gpu),
        tp=row.tp,
        pp=1,
        weights_bytes_per_gpu=weights_bytes_per_gpu(params, arch, "bf16", row.tp, 1),
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(arch, 2, row.tp, 1),
    )
    step = decode_step(m, 1, row.context_tokens)
    return step.seconds - step.fixed_seconds


def per_layer_seconds(row: BatchOneStep) -> float:
    return (1 / row.tokens_per_second - roofline_seconds(row)) / load_models()[row.model].architecture.layers


def derived_seconds() -> float:
    """The median over the gpt-fast rows: the constant serve_latency.DECODE_LAYER_FIXED_SECONDS holds."""
    return statistics.median(per_layer_seconds(r) for r in ROWS)


def main() -> None:
    for row in (*ROWS, CROSS_CHECK):
        print(
            f"{row.model:12s} {row.gpu:15s} TP{row.tp}  published {1e3 / row.tokens_per_second:6.2f} ms  "
            f"roofline {roofline_seconds(row) * 1e3:6.2f} ms  per layer {per_layer_seconds(row) * 1e6:5.1f} µs  ({row.source})"
        )
    print(f"median of the gpt-fast rows: {derived_seconds() * 1e6:.1f} µs per layer")


if __name__ == "__main__":
    main()
