"""Context parallelism under framework fsdp: what the FSDP2 path refuses, naming what is missing and who has it
and why fsdp/fsdp_tp.py builds its own CP rather than torch's.

torch's context_parallel (torchtitan's CP) shards the sequence and routes SDPA to ring attention only through the
CUDA flash, memory-efficient and cuDNN kernels (torch 2.13, _context_parallel/_attention.py `_sdpa_handler`); on
CPU, SDPA is `_scaled_dot_product_flash_attention_for_cpu`, which has no CP sharding rule, so no CPU gloo step can
prove it. fsdp/fsdp_tp.py therefore runs the Llama 3 paper's all-gather CP itself (tests/test_fsdp_cp_real.py); the
real-tool test below keeps the reason for that honest. CP × TP, CP × PP and adapters with CP are not built.
"""

from __future__ import annotations

import pytest

from compiler.passes.wording import words
from compiler.sizing.train.frameworks import framework_gap
from compiler.sizing.train.layout import Layout
from tests.test_target_torchrun import REPO
from tests.tools import realtools

PROBE = REPO / "tests" / "fsdp_cp_cpu_probe.py"


@pytest.mark.parametrize(
    ("method", "zero", "offload", "shape", "missing", "said"),
    [
        ("full", 0, False, Layout(cp=8), "zero", "runs TP/PP/CP only at ZeRO-3"),
        (
            "full",
            3,
            False,
            Layout(tp=2, cp=2, pp=2, stage_layers=(16, 16)),
            "cp",
            "Megatron-LM has CP with TP and PP (--context-parallel-size",
        ),
        ("full", 3, False, Layout(tp=2, cp=2), "cp", "CP × TP, CP × PP and CP × HSDP are not built"),
        ("lora", 3, False, Layout(cp=2), "cp", "without TP, PP, adapters or an HSDP group"),
        ("full", 3, False, Layout(cp=2, shard_group=4), "cp", "without TP, PP, adapters or an HSDP group"),
        ("full", 3, False, Layout(tp=2, ep=4), "ep", "Megatron-LM has EP (--expert-model-parallel-size"),
        ("qlora", 3, False, Layout(tp=2), "adapters", "a 4-bit base has no DTensor TP path"),
        ("full", 3, True, Layout(tp=2), "offload", "does not offload"),
        ("full", 1, False, Layout(tp=2, pp=2, stage_layers=(16, 16)), "zero", "only at ZeRO-3"),
        ("full", 3, False, Layout(pp=4, vp=4, stage_layers=(3, 4, 4, 3)), "vp-chunks", "VP4 under framework fsdp"),
    ],
)
def test_fsdp_model_parallel_refusal_names_the_first_missing_piece(method, zero, offload, shape, missing, said):
    gap = framework_gap("fsdp", method, shape.with_changes(zero=zero, offload=offload))
    assert (gap["layout"], gap["detail"]) == ("fsdp-model-parallel", missing)
    assert said in words(gap)


def test_context_parallelism_alone_runs_at_zero3_only():
    """torchtitan's 8B CP8 row (FSDP 1, CP 8) is ZeRO-3 over the 8 CP ranks: that runs; at ZeRO-0 the stage is what
    is missing, and Megatron-LM runs it there."""
    assert framework_gap("fsdp", "full", Layout(cp=8, zero=3)) is None
    gap = framework_gap("fsdp", "full", Layout(cp=8))
    assert gap["detail"] == "zero" and "ZeRO-3" in words(gap)
    assert framework_gap("megatron", "full", Layout(cp=8)) is None


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_torch_context_parallel_still_has_no_cpu_attention(tmp_path, rotate):
    # --standalone: the rendezvous binds a free port itself (a port picked here may be taken before torchrun binds it)
    done = realtools.torchrun(["--standalone", "--nproc_per_node", "2", PROBE, rotate], timeout=180, cwd=tmp_path)
    lines = [path.read_text().strip() for path in sorted(tmp_path.glob("cp_cpu_rank*.txt"))]
    assert done.returncode == 0 and len(lines) == 2, (done.stdout + done.stderr)[-3000:]
    for line in lines:
        assert not line.startswith("CP_CPU ok"), (
            f"torch's context_parallel now runs on CPU ({line}): build CP on the FSDP2 path and prove it on a gloo "
            f"step, then drop the 'cp' refusal of training.fsdp_tp_missing"
        )
        assert "_scaled_dot_product_flash_attention_for_cpu" in line and "NotImplementedError" in line, line
