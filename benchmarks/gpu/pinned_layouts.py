"""Step time and peak memory of pinned single-GPU layouts, as a plain transformers + torch AdamW script runs them.

Llama-3.1-8B's shape (random weights) with fewer layers; mixed precision (fp32 weights and AdamW states, bf16
autocast) or pure bf16 (weights, gradients and AdamW states in bf16); no or full recompute (transformers'
gradient checkpointing). Step time: CUDA events around whole steps after warm-up; memory:
torch.cuda.max_memory_allocated over the timed steps. Writes one JSON line per layout.

    python3 benchmarks/gpu/pinned_layouts.py OUT.jsonl [--steps 6] [--first N]   (N: skip the layouts before it)
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LAYOUTS = (  # (layers, seq_len, micro_batch, precision, recompute)
    (8, 4096, 1, "mixed", "none"),
    (8, 4096, 2, "mixed", "none"),
    (8, 8192, 1, "mixed", "full"),
    (16, 4096, 1, "pure", "none"),
    (16, 4096, 4, "pure", "full"),
    (16, 8192, 2, "pure", "full"),
    # device run 4: the range (8-32 layers, 4k-8k, both precisions) filled in
    (32, 4096, 1, "pure", "full"),
    (8, 4096, 4, "mixed", "full"),
    (20, 8192, 1, "mixed", "full"),
    (8, 8192, 1, "mixed", "none"),
)


def llama(layers: int) -> LlamaConfig:
    return LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=14336,
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


def measure(layers: int, seq_len: int, micro_batch: int, precision: str, recompute: str, steps: int) -> dict:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    dtype = torch.bfloat16 if precision == "pure" else torch.float32
    with torch.device("cuda"):  # built on the GPU: a CPU init of 8B fp32 weights took most of a layout's wall time
        model = LlamaForCausalLM(llama(layers)).to(dtype=dtype)
    if recompute == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    tokens = torch.randint(0, 128256, (micro_batch, seq_len), device="cuda")
    times_ms = []
    for step in range(steps):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "mixed"):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        times_ms.append(start.elapsed_time(end))
    params = sum(p.numel() for p in model.parameters())
    peak = torch.cuda.max_memory_allocated()
    del model, optimizer, loss
    timed = sorted(times_ms[2:])
    return {
        "layers": layers,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "precision": precision,
        "recompute": recompute,
        "params": params,
        "step_seconds_median": timed[len(timed) // 2] / 1e3,
        "step_seconds_all": [t / 1e3 for t in times_ms],
        "peak_allocated_bytes": peak,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--first", type=int, default=0, help="index in LAYOUTS of the first layout to measure")
    args = parser.parse_args()
    with open(args.out, "w") as out:
        for layout in LAYOUTS[args.first :]:
            t0 = time.time()
            try:
                row = measure(*layout, steps=args.steps)
            except torch.OutOfMemoryError as err:
                row = dict(zip(("layers", "seq_len", "micro_batch", "precision", "recompute"), layout, strict=True))
                row["error"] = f"OOM: {str(err).splitlines()[0]}"
            row["wall_seconds"] = round(time.time() - t0, 1)
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
            out.flush()
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
