"""What every term of a training step reads besides the layout: the traffic its memory breakdown and framework
decide (StepTraffic), the achievable rates of one GPU and its links, a micro-batch's tokens on one GPU and the
recompute the framework runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ...catalog.types import GpuSpec
from .activations import (
    recompute_kind,
)
from .flops import ATTENTION_DTYPE, compute_dtype, matmul_flops_per_second
from .layout import Layout, Links, Workload

GRADIENT_BYTES = 2  # 16-bit gradients reduced across DP (formulas.md §8)


@dataclass(frozen=True)
class StepTraffic:
    """What a layout's memory breakdown and framework say one step moves and updates, beyond the layout itself
    (candidate.layout_step_time derives it): the states the optimizer reads on the GPU and on the host, the
    parameters trained, and the bytes one replica reduces, at what width and how often."""

    state_bytes_on_gpu: float = 0.0
    offloaded_bytes: float = 0.0
    trainable_params_per_gpu: float | None = None
    trainable_params_per_replica: float | None = None
    gradient_bytes_per_replica: float | None = None
    reduce_bytes_per_gradient: float = GRADIENT_BYTES
    reduce_once_per_step: bool = False  # FSDP2 stages under pipelining (memory.pipeline_without_sync)


class Rates(NamedTuple):
    """The achievable rates a step runs at on one GPU and its links (bytes/s, FLOP/s)."""

    matmul: float
    attention_dtype: str
    hbm: float
    optimizer_hbm: float  # the once-per-step optimizer pass (a site's fitted share, else hbm)
    nvlink: float
    nic: float


def achievable_rates(work: Workload, gpu: GpuSpec, links: Links) -> Rates:
    return Rates(
        matmul_flops_per_second(gpu, compute_dtype(work.precision, gpu)),
        ATTENTION_DTYPE[work.precision],
        gpu.memory_bandwidth_bytes_per_second * gpu.achievable_memory_bandwidth_fraction,
        gpu.memory_bandwidth_bytes_per_second
        * (gpu.achievable_optimizer_bandwidth_fraction or gpu.achievable_memory_bandwidth_fraction),
        gpu.intra_node_bandwidth_bytes_per_second * links.nvlink_fraction,
        links.inter_node_bytes_per_second * links.nic_fraction,
    )


def microbatch_tokens(work: Workload, layout: Layout) -> float:
    """Tokens one GPU computes per micro-batch: its sequences' s/CP."""
    return work.seq_len * layout.micro_batch / layout.cp


def layout_recompute(layout: Layout) -> str:
    return recompute_kind(layout.recompute, layout.framework)
