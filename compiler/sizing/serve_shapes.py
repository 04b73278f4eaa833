"""The TP × PP shapes a serving replica may take on a GPU type, and why the others are refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .serve_types import ServeRejection, ServeRequest

if TYPE_CHECKING:
    from ..catalog.types import GpuSpec

TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)


def parallel_shapes(req: ServeRequest, gpu: GpuSpec) -> tuple[list[tuple[int, int]], list[ServeRejection]]:
    """TP × PP pairs to try, PP 1 first. TP stays within a node; PP is only added once TP fills a node, and
    (in the search) only when no PP-1 shape holds the model (Megatron's guideline, formulas.md §7), unless
    pinned. vLLM needs the attention heads divisible by TP."""
    per_node = req.gpus_per_node or gpu.gpus_per_node
    shapes, rejected = [], []
    for tp in (req.tp,) if req.tp else TP_DEGREES:
        for pp in (req.pp,) if req.pp else PP_DEGREES:
            if req.gpu_count and tp * pp != req.gpu_count:
                continue
            if pp > 1 and not req.pp and tp < per_node:
                continue
            where = f"{gpu.id} TP{tp} PP{pp}"
            if tp > per_node:
                rejected.append(ServeRejection(where, f"TP{tp} spans nodes of {per_node} GPUs (TP stays within NVLink)"))
            elif req.arch.heads % tp:
                rejected.append(ServeRejection(where, f"{req.arch.heads} attention heads do not split over TP{tp}"))
            elif pp > req.arch.layers:
                rejected.append(ServeRejection(where, f"PP{pp} exceeds {req.arch.layers} layers"))
            elif tp > 1 and gpu.intra_node_bandwidth_bytes_per_second <= 0:
                rejected.append(ServeRejection(where, f"{gpu.name} has no GPU-to-GPU link for TP"))
            elif tp * pp > per_node and tp < per_node:
                rejected.append(ServeRejection(where, f"a replica over nodes runs one PP stage of TP{per_node} per node"))
            elif req.engine == "tgi" and pp > 1:
                rejected.append(ServeRejection(where, "TGI shards a replica with TP on one node (no PP)"))
            elif req.engine == "triton" and tp * pp > per_node:
                rejected.append(ServeRejection(where, "Triton's vLLM backend runs a replica on one node"))
            else:
                shapes.append((tp, pp))
    return shapes, rejected
