"""The TP × PP shapes a serving replica may take on a GPU type, and why the others are refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..reasons import because
from .types import ServeRejection, ServeRequest

if TYPE_CHECKING:
    from ...catalog.types import GpuSpec

TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)


def parallel_shapes(req: ServeRequest, gpu: GpuSpec) -> tuple[list[tuple[int, int]], list[ServeRejection]]:
    """TP × PP pairs to try, PP 1 first. TP stays within a node; PP is only added once TP fills a node, and
    (in the search) only when no PP-1 shape holds the model (Megatron's guideline, formulas.md §7), unless
    pinned. vLLM needs the attention heads divisible by TP. With attention DP (serve_attention_dp.py) a replica is
    dp ranks of TP GPUs on one node, without PP."""
    per_node = req.gpus_per_node or gpu.gpus_per_node
    dp = req.attention_dp
    shapes, rejected = [], []
    for tp in (req.tp,) if req.tp else TP_DEGREES:
        for pp in (req.pp,) if req.pp else PP_DEGREES:
            if req.gpu_count and dp * tp * pp != req.gpu_count:
                continue
            if pp > 1 and not req.pp and (tp < per_node or dp > 1):
                continue
            where = f"{gpu.id} TP{tp} PP{pp}" + (f" DP{dp}" if dp > 1 else "")
            if dp > 1 and dp * tp > per_node:
                rejected.append(
                    ServeRejection(where, because("attention-dp-spans-nodes", dp=dp, tp=tp, per_node=per_node))
                )
            elif tp > per_node:
                rejected.append(ServeRejection(where, because("tp-spans-nodes", tp=tp, per_node=per_node)))
            elif req.arch.heads % tp:
                rejected.append(ServeRejection(where, because("heads-do-not-split", heads=req.arch.heads, tp=tp)))
            elif pp > req.arch.layers:
                rejected.append(ServeRejection(where, because("pp-exceeds-layers", pp=pp, layers=req.arch.layers)))
            elif tp > 1 and gpu.intra_node_bandwidth_bytes_per_second <= 0:
                rejected.append(ServeRejection(where, because("no-gpu-link", gpu_name=gpu.name)))
            elif tp * pp > per_node and tp < per_node:
                rejected.append(ServeRejection(where, because("one-stage-per-node", per_node=per_node)))
            elif req.engine == "tgi" and pp > 1:
                rejected.append(ServeRejection(where, because("tgi-no-pp")))
            elif req.engine == "triton" and tp * pp > per_node:
                rejected.append(ServeRejection(where, because("triton-one-node")))
            else:
                shapes.append((tp, pp))
    return shapes, rejected
