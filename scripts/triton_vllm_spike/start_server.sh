#!/usr/bin/env bash
# start_server.sh WORKDIR [HTTP_PORT]
# Starts the REAL tritonserver 2.51.0 (pytriton wheel) on WORKDIR/repo with WORKDIR/backends (see
# install_backend.sh), in the background; writes WORKDIR/server.pid and WORKDIR/server.log and waits for
# /v2/health/ready (up to 15 min). Prints the seconds to READY. Stop it with stop_server.sh WORKDIR
set -euo pipefail
W="${1:?workdir}"; PORT="${2:-18300}"
TRITON_VENV="${TRITON_VENV:-$HOME/.cache/mlinfra-tools/triton}"
TS="$TRITON_VENV/lib/python3.11/site-packages/pytriton/tritonserver"
T0=$(date +%s.%N)
# VLLM_CPU_KVCACHE_SPACE: GiB of KV cache on vLLM's CPU backend. HF_HUB_OFFLINE: nothing is downloaded.
# Environment variables DO reach the stub process (os.environ); only the interpreter's own PYTHON* ones
# are ignored by the isolated embedded python.
# setsid: its own process group, so stop_server.sh also ends vLLM's EngineCore/Worker processes, which
# outlive a crashed stub (they were seen orphaned under PID 1).
VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" HF_HUB_OFFLINE=1 \
  setsid "$TS/bin/tritonserver" --model-repository="$W/repo" --backend-directory="$W/backends" \
  --http-port="$PORT" --grpc-port=$((PORT + 1)) --metrics-port=$((PORT + 2)) \
  --log-verbose=0 ${TRITON_EXTRA_ARGS:-} >"$W/server.log" 2>&1 &
echo $! >"$W/server.pid"
for _ in $(seq 1 450); do
  if curl -sf "localhost:$PORT/v2/health/ready" >/dev/null 2>&1; then
    printf 'READY after %.1fs\n' "$(echo "$(date +%s.%N) - $T0" | bc)"; exit 0
  fi
  kill -0 "$(cat "$W/server.pid")" 2>/dev/null || { echo "tritonserver exited; see $W/server.log" >&2; exit 1; }
  sleep 2
done
echo "not ready after 900s" >&2; exit 1
