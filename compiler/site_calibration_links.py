"""A site's measured collectives as link shares: the largest all-reduce's bus bandwidth inside a node and across
two, divided by the catalog's link rates, for the training sizing's collectives."""

from __future__ import annotations

from .catalog.catalog import Catalog, SiteLinks
from .plan.resolved import Decision
from .site_calibration_file import CalibrationError, CollectivePoint, SiteCalibration
from .sizing.train.communication import INTER_NODE_ACHIEVABLE_FRACTION, NVLINK_ACHIEVABLE_FRACTION
from .units import format_bytes

# a link share: a CPU's gloo over loopback reaches ~1e-3 of NVLink; below 1e-5 nothing was measured
LINK_SHARE_BOUNDS = (1e-5, 1.0)


def _plateau(points: list[CollectivePoint]) -> CollectivePoint | None:
    """The largest all-reduce: nccl-tests' plateau bus bandwidth, the rate the sizing's all-reduce formula uses."""
    return max((p for p in points if p.op == "all_reduce"), key=lambda p: p.bytes, default=None)


def _share(measured: float, link: float) -> float:
    return float(f"{min(LINK_SHARE_BOUNDS[1], max(LINK_SHARE_BOUNDS[0], measured / link)):.4g}")


def _listed(points: list[CollectivePoint]) -> str:
    return ", ".join(
        f"{p.op.replace('_', '-')} {format_bytes(p.bytes)} {p.bus_bytes_per_second / 1e9:.3g} GB/s" for p in points
    )


def fit_links(catalog: Catalog, site: SiteCalibration) -> tuple[SiteLinks, Decision]:
    """The site's link shares: the largest all-reduce's bus bandwidth ÷ the catalog's link rate inside a node (the
    GPU's intra-node bandwidth) and across two (the fabric's per-GPU NIC rate × the node's ranks, as
    train_time.dp_collective_bandwidth prices a ring that crosses nodes)."""
    fabric = site.interconnect
    if fabric.interconnect not in catalog.interconnects:
        raise CalibrationError(f"interconnect names what the catalog lacks: {fabric.interconnect}")
    gpu, nic = catalog.gpus[fabric.gpu], catalog.interconnects[fabric.interconnect]
    intra, inter = _plateau(fabric.intra_node), _plateau(fabric.inter_node)
    intra_share = (
        _share(intra.bus_bytes_per_second, gpu.intra_node_bandwidth_bytes_per_second)
        if (intra and gpu.intra_node_bandwidth_bytes_per_second > 0)
        else None
    )
    node_rate = nic.bytes_per_second_per_gpu * fabric.ranks_per_node
    inter_share = _share(inter.bus_bytes_per_second, node_rate) if inter else None
    changes, parts = [], []
    if intra_share is not None:
        changes.append(f"intra-node share {NVLINK_ACHIEVABLE_FRACTION:.3g} → {intra_share:.4g}")
        parts.append(
            f"inside a node ({intra.ranks} ranks): {_listed(fabric.intra_node)}; predicted "
            f"{gpu.intra_node_bandwidth_bytes_per_second * NVLINK_ACHIEVABLE_FRACTION / 1e9:.3g} GB/s "
            f"({gpu.id}'s {gpu.intra_node_bandwidth_bytes_per_second / 1e9:.3g} GB/s link × {NVLINK_ACHIEVABLE_FRACTION:.3g})"
        )
    if inter_share is not None:
        changes.append(f"inter-node share {INTER_NODE_ACHIEVABLE_FRACTION:.3g} → {inter_share:.4g}")
        parts.append(
            f"across two nodes ({inter.ranks} ranks, {fabric.interconnect}): {_listed(fabric.inter_node)}; predicted "
            f"{node_rate * INTER_NODE_ACHIEVABLE_FRACTION / 1e9:.3g} GB/s ({fabric.ranks_per_node} × "
            f"{nic.bytes_per_second_per_gpu / 1e9:.3g} GB/s NICs × {INTER_NODE_ACHIEVABLE_FRACTION:.3g})"
        )
    bounded = [s for s in (intra_share, inter_share) if s is not None and s in LINK_SHARE_BOUNDS]
    reason = (
        f"bus bandwidth (nccl-tests doc/PERFORMANCE.md) measured at {site.site} on {site.measured_at} ({site.source}); "
        + "; ".join(parts)
        + f"; the largest all-reduce gives each share, which the training sizing's collectives use "
        f"on {gpu.id} over {fabric.interconnect}"
        + (" (a share at its bound: check the measurement)" if bounded else "")
        + (" — measured with gloo on a CPU: a test of the loop, not a GPU's links" if fabric.device == "cpu" else "")
    )
    decision = Decision(
        topic="site calibration (interconnect)",
        choice="; ".join(changes) or "no share (no all-reduce measured)",
        reason=reason,
    )
    return SiteLinks(gpu.id, fabric.interconnect, intra_share, inter_share), decision
