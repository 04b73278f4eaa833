#!/usr/bin/env bash
# Vendored unchanged from the workplace recipe shared/validators/triton/triton_server_check.sh (2026-11-22): see its README there.
# triton_server_check.sh MODEL_REPO [MODEL_REPO...]
#
# Loads a model repository into a REAL tritonserver (2.51.0, CPU only) taken from the
# PyPI wheel nvidia-pytriton==0.7.0 (55 MB wheel; it bundles bin/tritonserver, the
# python backend and libcudart; no GPU/driver needed) and prints Triton's own verdict
# for every model (READY / UNAVAILABLE + reason / poll errors from the log).
# Exit 0 only if every model in the repo is READY.
#
# Backends other than python are not in the wheel. For vllm, tensorrtllm (and any name
# in $FAKE_BACKENDS) a python-based stand-in backend (backends/<name>/model.py) is
# installed, so Triton runs its generic validation (IO dims, batching, instance groups,
# decoupled policy, ensembles ...) on those configs; backend-specific parameters are
# only checked as far as the stubs below check them.
#
# Python-backend models need their 1/model.py; the embedded interpreter is Debian's
# libpython3.11 (not the venv), so their imports come from Debian packages
# (python3-numpy) -- PYTHONPATH is ignored by the stub.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 MODEL_REPO..." >&2; exit 2; }
VENV="${TRITON_VENV:-/tmp/venv-pytriton}"
PORT="${TRITON_HTTP_PORT:-18000}"
FAKE_BACKENDS="${FAKE_BACKENDS:-vllm tensorrtllm}"
WORK="$(mktemp -d /tmp/triton-check.XXXXXX)"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'nvidia-pytriton==0.7.0'
fi
if ! dpkg -s libpython3.11 python3-numpy >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit)" ] || apt-get update -qq
  apt-get install -y -qq --no-install-recommends libpython3.11 python3-numpy >/dev/null
fi
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
TS="$SITE/pytriton/tritonserver"
PYV="$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null || echo 3.11)"
# the python backend wants its stub next to libtriton_python.so (pytriton does this copy at runtime)
[ -x "$TS/backends/python/triton_python_backend_stub" ] || \
  cp "$TS/python_backend_stubs/$PYV/triton_python_backend_stub" "$TS/backends/python/"

mkdir -p "$WORK/backends"
ln -s "$TS/backends/python" "$WORK/backends/python"
for b in $FAKE_BACKENDS; do
  mkdir -p "$WORK/backends/$b"
  cat >"$WORK/backends/$b/model.py" <<'EOF'
import json, os
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        backend = cfg.get("backend")
        if backend == "vllm":
            if not pb_utils.using_decoupled_model_transaction_policy(cfg):
                raise pb_utils.TritonModelException("vllm backend needs model_transaction_policy { decoupled: true }")
            p = os.path.join(args["model_repository"], args["model_version"], "model.json")
            eng = json.load(open(p))  # raises if missing / not JSON
            if "model" not in eng:
                raise pb_utils.TritonModelException(f"{p}: no 'model' key")
        if backend == "tensorrtllm":
            params = cfg.get("parameters", {})
            for k in ("gpt_model_type", "gpt_model_path"):
                if k not in params:
                    raise pb_utils.TritonModelException(f"tensorrtllm parameter '{k}' missing")
    def execute(self, requests):
        raise pb_utils.TritonModelException("stand-in backend: no inference")
EOF
done

ARGS=()
for r in "$@"; do ARGS+=("--model-repository=$(readlink -f "$r")"); done
T0=$(date +%s.%N)
"$TS/bin/tritonserver" "${ARGS[@]}" --backend-directory="$WORK/backends" \
  --http-port="$PORT" --grpc-port=$((PORT + 1)) --metrics-port=$((PORT + 2)) \
  --exit-on-error=false --strict-readiness=false --log-verbose=0 >"$WORK/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT
# wait for live, then until no model is still LOADING
for _ in $(seq 1 300); do
  curl -sf "localhost:$PORT/v2/health/live" >/dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.2
done
for _ in $(seq 1 300); do
  idx="$(curl -s -X POST "localhost:$PORT/v2/repository/index")"
  echo "$idx" | grep -q '"LOADING"' || break
  sleep 0.2
done
printf 'tritonserver up + models settled in %.1fs\n' "$(echo "$(date +%s.%N) - $T0" | bc)"
echo "$idx" | python3 -c '
import json, re, sys
log = open(sys.argv[1]).read()
bad = 0
for m in json.load(sys.stdin):
    st = m.get("state")
    if st is None:   # rejected while polling the repository: reason only in the log
        r = re.findall(r"Poll failed for model directory .%s.: ([^\"]*)" % re.escape(m["name"]), log) \
            or re.findall(r"Invalid argument: ensemble %s ([^\"]*)" % re.escape(m["name"]), log)
        st, reason = "REJECTED", (r[0] if r else "see log")
    else:
        reason = m.get("reason", "")
    bad += st != "READY"
    print("%-12s %s  %s" % (st, m["name"], reason))
sys.exit(1 if bad else 0)
' "$WORK/server.log"
