#!/usr/bin/env bash
# One device session's measurements, each part independent (a failure in one does not stop the next):
#   1. Megatron-LM pretrain_gpt.py from the emitted args.sh of benchmarks/gpu/megatron-llama8l-1xh200.yaml, 20 steps
#   2. pinned single-GPU layouts, transformers + torch AdamW (benchmarks/gpu/pinned_layouts.py)
#   3. GEMM and HBM copy micro-benchmarks with CUDA events (benchmarks/gpu/microbench.py)
# Needs: the compiled plan under .gpu/plans/ and Megatron-LM's source under .gpu/megatron-lm (both carried).
#   OUT=results bash benchmarks/gpu/device_run.sh
set -u
OUT=${OUT:?set OUT to a results folder}
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c 'import torch, transformers, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)'; } > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
timeout 60 python3 benchmarks/gpu/microbench.py "$OUT/microbench.json"; echo "microbench rc $?"
timeout "${MEGATRON_SECONDS:-240}" bash benchmarks/gpu/run_megatron.sh .gpu/plans/megatron-llama8l-1xh200 "$PWD/.gpu/megatron-lm" "$OUT/megatron.log" > /dev/null 2>&1
echo "megatron rc $?"; grep -E "iteration +(1|2|5|10|20)/|memory \(MB\)|Error|error:" "$OUT/megatron.log" | tail -20
timeout "${PINNED_SECONDS:-200}" python3 benchmarks/gpu/pinned_layouts.py "$OUT/pinned_layouts.jsonl"; echo "pinned rc $?"
