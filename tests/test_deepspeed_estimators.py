"""Model-state bytes agree with DeepSpeed's own estimators (run in the torch venv: real DeepSpeed 0.19.8)."""

from __future__ import annotations

import json
import subprocess

import pytest

from compiler.catalog.loader import load_models
from compiler.catalog.params import count_params
from compiler.sizing.fit_memory import memory_per_gpu
from tests.tools.realtools import tool_python

ARCH = load_models()["llama-2-7b"].architecture
PARAMS = count_params(ARCH)

DEEPSPEED_SCRIPT = """
import json, sys
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
total, largest, gpus = (int(x) for x in sys.argv[1:4])
out = {
    "z2": estimate_zero2_model_states_mem_needs(total, gpus, 1, cpu_offload=False)[1],
    "z2-offload": estimate_zero2_model_states_mem_needs(total, gpus, 1, cpu_offload=True)[1],
    "z3": estimate_zero3_model_states_mem_needs(total, largest, gpus, 1, cpu_offload=False)[1],
    "z3-offload": estimate_zero3_model_states_mem_needs(total, largest, gpus, 1, cpu_offload=True, cpu_offload_params=False)[1],
    "z3-offload-params": estimate_zero3_model_states_mem_needs(total, largest, gpus, 1, cpu_offload=True, cpu_offload_params=True)[1],
}
print(json.dumps(out))
"""

CASES = {"z2": (2, False, False), "z2-offload": (2, True, False), "z3": (3, False, False),
         "z3-offload": (3, True, False), "z3-offload-params": (3, True, True)}


@pytest.fixture(scope="module")
def deepspeed_figures():
    run = subprocess.run([str(tool_python("torch")), "-c", DEEPSPEED_SCRIPT, str(PARAMS.total), str(PARAMS.largest_layer), "8"],
                         capture_output=True, text=True, timeout=300, env={"DS_ACCELERATOR": "cpu", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_model_states_match_deepspeed(case, deepspeed_figures):
    stage, offload, offload_params = CASES[case]
    mem = memory_per_gpu(ARCH, PARAMS, precision="bf16", optimizer="adamw", method="full", lora_rank=0, lora_targets=(),
                         tp=1, pp=1, dp=8, zero_stage=stage, offload_optimizer=offload, offload_params=offload_params,
                         seq_len=4096, micro_batch=1, microbatches=1, recompute="none", sequence_parallel=False,
                         flash_attention=True, framework="deepspeed")
    states = mem.weights + mem.gradients + mem.optimizer
    assert states == pytest.approx(deepspeed_figures[case], rel=0.001)


def test_zero_paper_accounting_for_other_frameworks():
    """FSDP/Megatron keep no fp32 gradient copy: ZeRO paper's (2 + 2 + 12)Ψ/N at stage 3 (Fig. 1)."""
    mem = memory_per_gpu(ARCH, PARAMS, precision="bf16", optimizer="adamw", method="full", lora_rank=0, lora_targets=(),
                         tp=1, pp=1, dp=8, zero_stage=3, offload_optimizer=False, offload_params=False, seq_len=4096,
                         micro_batch=1, microbatches=1, recompute="none", sequence_parallel=False, flash_attention=True,
                         framework="fsdp")
    assert mem.weights + mem.gradients + mem.optimizer == pytest.approx(16 * PARAMS.total / 8, rel=1e-6)
