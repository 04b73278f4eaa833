"""Context parallelism under framework fsdp is refused, naming what is missing and who has it (issue 15).

torch's context_parallel (torchtitan's CP) shards the sequence and routes SDPA to ring attention only through the
CUDA flash, memory-efficient and cuDNN kernels (torch 2.13, _context_parallel/_attention.py `_sdpa_handler`); on
CPU, SDPA is `_scaled_dot_product_flash_attention_for_cpu`, which has no CP sharding rule, so no CPU gloo step can
prove a CP path for fsdp/fsdp_tp.py. The real-tool test below keeps that reason honest: when torch runs it, the
test fails and CP on the FSDP2 path can be built and proven like TP and PP (tests/test_fsdp_tp_real.py).
"""

from __future__ import annotations


import pytest
import yaml

from compiler.diagnostics import InfeasiblePlan
from compiler.passes.wording import words
from compiler.pipeline import compile_plan
from compiler.sizing.training import Shape, framework_gap
from tests.test_target_torchrun import REPO
from tests.tools import realtools

PROBE = REPO / "tests" / "fsdp_cp_cpu_probe.py"


@pytest.mark.parametrize(("method", "zero", "offload", "shape", "missing", "said"), [
    ("full", 0, False, Shape(1, 8, 1, 1, 1, ()), "cp", "has no context parallelism"),
    ("full", 3, False, Shape(2, 2, 2, 1, 1, (16, 16)), "cp", "Megatron-LM has CP (--context-parallel-size"),
    ("full", 3, False, Shape(2, 1, 1, 4, 1, ()), "ep", "Megatron-LM has EP (--expert-model-parallel-size"),
    ("qlora", 3, False, Shape(2, 1, 1, 1, 1, ()), "adapters", "a 4-bit base has no DTensor TP path"),
    ("full", 3, True, Shape(2, 1, 1, 1, 1, ()), "offload", "does not offload"),
    ("full", 1, False, Shape(2, 1, 2, 1, 1, (16, 16)), "zero", "only at ZeRO-3"),
    ("full", 3, False, Shape(1, 1, 4, 1, 4, (3, 4, 4, 3)), "vp-chunks", "VP4 under framework fsdp"),
])
def test_fsdp_model_parallel_refusal_names_the_first_missing_piece(method, zero, offload, shape, missing, said):
    gap = framework_gap("fsdp", method, shape.tp, shape.pp, zero, offload, shape)
    assert (gap["layout"], gap["detail"]) == ("fsdp-model-parallel", missing)
    assert said in words(gap)


def test_context_parallelism_is_named_before_the_zero_stage():
    """torchtitan's 8B CP8 row (FSDP 1, CP 8) pins ZeRO-0: the missing capability is the reason, not the stage."""
    gap = framework_gap("fsdp", "full", 1, 1, 0, False, Shape(1, 8, 1, 1, 1, ()))
    assert gap["detail"] == "cp" and "context_parallel" in words(gap)
    assert framework_gap("megatron", "full", 1, 1, 0, False, Shape(1, 8, 1, 1, 1, ())) is None  # who has it


def test_torchtitan_cp8_row_is_refused_for_context_parallelism_not_memory(tmp_path):
    """The published row compiled as a plan (tests/test_published_layouts_compile.py) is refused with the missing
    capability; no layout was checked against memory, so the refusal does not say that one fits."""
    from tests.test_published_layouts_compile import ROWS, _gpu_catalog, _plan, layout_row

    row = layout_row(next(r for r in ROWS if r["model"] == "Llama-3.1-8B (torchtitan FSDP1 + CP8, 256K context)"))
    plan = _plan(row, "cp8")
    plan["cluster"]["catalog"] = _gpu_catalog(row, tmp_path)
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(InfeasiblePlan) as refused:
        compile_plan(tmp_path / "plan.yaml")
    said = str(refused.value)
    assert said.startswith("no framework path runs the layouts asked for") and "that fit" not in said
    assert "CP8: framework fsdp has no context parallelism" in said and "Megatron-LM has CP" in said


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_torch_context_parallel_still_has_no_cpu_attention(tmp_path, rotate):
    # --standalone: the rendezvous binds a free port itself (a port picked here may be taken before torchrun binds it)
    done = realtools.torchrun(["--standalone", "--nproc_per_node", "2", PROBE, rotate], timeout=180, cwd=tmp_path)
    lines = [path.read_text().strip() for path in sorted(tmp_path.glob("cp_cpu_rank*.txt"))]
    assert done.returncode == 0 and len(lines) == 2, (done.stdout + done.stderr)[-3000:]
    for line in lines:
        assert not line.startswith("CP_CPU ok"), (
            f"torch's context_parallel now runs on CPU ({line}): build CP on the FSDP2 path and prove it on a gloo "
            f"step, then drop the 'cp' refusal of training.fsdp_tp_missing")
        assert "_scaled_dot_product_flash_attention_for_cpu" in line and "NotImplementedError" in line, line
