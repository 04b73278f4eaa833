#!/usr/bin/env bash
# pa_direct.sh WORKDIR [GRPC_PORT] -- perf_analyzer ALONE (no genai-perf, no tokenizer) against the running
# server of start_server.sh: writes its --input-data JSON by hand (the same shape genai-perf writes for
# --endpoint-type kserve --backend vllm), streams over gRPC at concurrency 1 and 2, and summarizes its
# --profile-export-file with summarize_pa_export.py (TTFT, ITL, output tokens/s from raw timestamps).
set -euo pipefail
W="$(readlink -f "${1:?workdir}")"; GRPC="${2:-18301}"; HERE="$(cd "$(dirname "$0")" && pwd)"
T="$HOME/.cache/mlinfra-tools"; OSL="${OSL:-16}"; NREQ="${NREQ:-20}"
MODEL="$(basename "$(dirname "$(ls "$W"/repo/*/config.pbtxt)")")"
mkdir -p "$W/pa"
# 8 prompts of ~30 words; max_tokens = min_tokens = OSL fixes the output length (like --ignore-eos).
# return_num_output_tokens: each response says how many tokens it carries (under load vLLM merges several
# tokens into one streamed response, so counting responses undercounts tokens).
python3 - "$W/pa/inputs.json" "$OSL" <<'EOF'
import json, random, sys
random.seed(0)
words = "hello world this is a tiny test corpus for a tokenizer".split()
sp = json.dumps({"max_tokens": int(sys.argv[2]), "min_tokens": int(sys.argv[2])})
data = [{"text_input": [" ".join(random.choice(words) for _ in range(30))], "stream": [True],
         "exclude_input_in_output": [True], "return_num_output_tokens": [True],
         "sampling_parameters": [sp]} for _ in range(8)]
json.dump({"data": data}, open(sys.argv[1], "w"))
EOF
export LD_LIBRARY_PATH="$T/perf/lib/python3.11/site-packages/nvidia/cuda_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for C in 1 2; do
  # perf_analyzer refuses an existing export: "Failed to parse --profile-export-file. Path must not already exist."
  rm -f "$W/pa/profile_export_c$C.json"
  "$T/perf/bin/perf_analyzer" -m "$MODEL" -i grpc -u "localhost:$GRPC" --async --streaming \
    --service-kind triton --input-data "$W/pa/inputs.json" --concurrency-range "$C:$C" \
    --request-count "$NREQ" --warmup-request-count 2 --stability-percentage 999 \
    --profile-export-file "$W/pa/profile_export_c$C.json" >"$W/pa/perf_analyzer_c$C.log" 2>&1
  grep -E "Request count|Throughput|latency" "$W/pa/perf_analyzer_c$C.log" | head -6
  python3 "$HERE/summarize_pa_export.py" "$W/pa/profile_export_c$C.json"
done
