#!/usr/bin/env bash
# stop_server.sh WORKDIR -- SIGTERM tritonserver's process group (server, python stub, vLLM EngineCore and
# Worker), wait up to 60 s (Triton waits up to --exit-timeout-secs for in-flight work), then SIGKILL it.
W="${1:?workdir}"; PID="$(cat "$W/server.pid")"
kill -TERM -- "-$PID" 2>/dev/null || exit 0
for _ in $(seq 1 60); do pgrep -g "$PID" >/dev/null || { echo stopped; exit 0; }; sleep 1; done
kill -KILL -- "-$PID" 2>/dev/null; echo killed
