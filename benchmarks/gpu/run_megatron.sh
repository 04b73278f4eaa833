#!/usr/bin/env bash
# Megatron-LM's pretrain_gpt.py from a compiled plan's emitted megatron/args.sh, on one GPU, to step 20.
#   benchmarks/gpu/run_megatron.sh PLAN_OUT_DIR MEGATRON_LM_DIR LOG_FILE
# The emitted arguments are used as written; the run appends only what a smoke run needs, each named below
# (argparse keeps the last value of a repeated flag), and prints the full command first.
set -uo pipefail
plan_dir=$1 mlm=$2 log=$3
# shellcheck source=/dev/null
source "$plan_dir/megatron/args.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT  # a full checkpoint of the 8-layer model is ~45 GB: the next run needs the disk
read -r -a extra <<< "${EXTRA_MEGATRON_ARGS:-}"  # words appended after the smoke arguments, said in the log
SMOKE_ARGS=(
  --train-iters 20                      # the step budget, not the plan's run length
  --mock-data                           # synthetic tokens (the plan names no dataset on this machine)
  --save "$scratch" --load "$scratch" --save-interval 100000   # no checkpoint written in 20 steps
  --eval-iters 0 --log-interval 1 --log-throughput
  --transformer-impl local              # Transformer Engine is not installed on the GPU machine
  --no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-rope-fusion --no-persist-layer-norm  # apex's kernels are absent
  "${extra[@]}"
)
export CUDA_DEVICE_MAX_CONNECTIONS=1 PYTHONPATH="$mlm${PYTHONPATH:+:$PYTHONPATH}"
# the dataset index helpers, built with the interpreter's own extension suffix (a venv may lack python3-config)
make -s -C "$mlm/megatron/core/datasets" LIBEXT="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" >> "${TMPDIR:-/tmp}/megatron-datasets-build.log" 2>&1
cmd=(torchrun --nnodes=1 --nproc-per-node=1 --master-port="${MASTER_PORT:-29511}" "$mlm/pretrain_gpt.py" "${MEGATRON_ARGS[@]}" "${SMOKE_ARGS[@]}")
{ printf '%q ' "${cmd[@]}"; echo; } | tee "$log"
"${cmd[@]}" 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
