#!/usr/bin/env bash
# Device run 4 (one H200): the emitted Megatron-LM jobs as written, then more pinned layouts. Parts are independent.
#   1. pretrain_gpt.py from the emitted args.sh of benchmarks/gpu/megatron-llama8l-1xh200.yaml (dense), 20 steps,
#      with no argument beyond run_megatron.sh's smoke-run ones (run 3 needed an extra --eval-interval)
#   2. the same for benchmarks/gpu/megatron-moe2l-1xh200.yaml (Mixtral's MoE layer, 2 layers), 20 steps
#   3. pinned single-GPU layouts 4.. of benchmarks/gpu/pinned_layouts.py (0-3 were measured in run 1)
# Needs the compiled plans in .gpu/plans/ and Megatron-LM's source in .gpu/megatron-lm/ (both carried):
#   for p in megatron-llama8l-1xh200 megatron-moe2l-1xh200; do mlinfra-compile benchmarks/gpu/$p.yaml -o .gpu/plans; done
#   OUT=results bash benchmarks/gpu/device_run4.sh
set -u
OUT=${OUT:?set OUT to a results folder}
export PYTHONUNBUFFERED=1
started=$(date +%s)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, transformers, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)'
  python3 -c 'import transformer_engine' 2>&1 | tail -1; python3 -c 'import apex' 2>&1 | tail -1; } > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
port=29511
for plan in ${PLANS:-megatron-llama8l-1xh200 megatron-moe2l-1xh200}; do
  t0=$(date +%s)
  MASTER_PORT=$port timeout "${MEGATRON_SECONDS:-170}" bash benchmarks/gpu/run_megatron.sh ".gpu/plans/$plan" "$PWD/.gpu/megatron-lm" "$OUT/$plan.log" > /dev/null 2>&1
  echo "$plan: rc $? in $(($(date +%s) - t0)) s"
  grep -E "number of parameters on|iteration +(1|2|10|20)/|memory \(MB\)|Error|error:" "$OUT/$plan.log" | tail -8 | cut -c1-400
  rm -rf /tmp/tmp.*  # the run's scratch checkpoint, also when the timeout stopped it before its own cleanup
  port=$((port + 1))
done
t0=$(date +%s)
timeout "${PINNED_SECONDS:-200}" python3 benchmarks/gpu/pinned_layouts.py "$OUT/pinned_layouts.jsonl" --first "${PINNED_FIRST:-4}" 2>&1 | tail -12
echo "pinned: rc ${PIPESTATUS[0]} in $(($(date +%s) - t0)) s; whole run $(($(date +%s) - started)) s"
