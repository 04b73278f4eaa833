"""The model-parallel shapes the training search tries on a GPU count: the counts themselves, TP within a node, CP,
PP once TP fills what the model allows, the stage split, EP from the data-parallel ranks, VP (search.py's docstring
states the enumeration)."""

from __future__ import annotations

from collections.abc import Iterator

from ...catalog.types import Architecture
from ..reasons import because
from .choice import Collector, Rejection
from .layout import Layout
from .parallel import VP_CHOICES, lighter_last_splits, megatron_split, pipeline_split
from .request import TrainPins, TrainRequest

TP_CHOICES = (1, 2, 4, 8)
SUB_NODE_COUNTS = (1, 2, 4)
MAX_PP = 128  # Megatron-LM 2021 ran 1T parameters on PP 64 (Narayanan et al. 2021, Table 1)


def gpu_counts(req: TrainRequest, per_node: int) -> list[int]:
    """Candidate GPU counts: the pinned one, or sub-node counts and power-of-two numbers of whole nodes."""
    if req.gpu_count:
        return [req.gpu_count]
    counts = [c for c in SUB_NODE_COUNTS if c < per_node and c <= req.max_gpus]
    nodes = 1
    while nodes * per_node <= req.max_gpus:
        counts.append(nodes * per_node)
        nodes *= 2
    return counts


def _tp_choices(arch: Architecture, per_node: int, count: int, pinned: int | None) -> list[int]:
    if pinned:
        return [pinned] if pinned <= count else []
    heads, kv = arch.heads or 1, arch.kv_heads or arch.heads or 1
    return [t for t in TP_CHOICES if t <= min(per_node, count) and heads % t == 0 and kv % t == 0]


def _pp_choices(arch: Architecture, tp: int, tp_max: int, count: int, pinned: int | None) -> list[int]:
    """PP degrees: the pin, or (once TP fills what the model allows) every depth that divides the GPUs left and has
    a split of the layers — even, or the Llama 3 split with lighter first and last stages."""
    if pinned:
        return [pinned]
    # MoE: expert parallelism takes the place of TP inside a node (DeepSeek-V3: TP1 EP64 PP16), so PP is tried
    # at every TP degree
    if not arch.layers or (tp < tp_max and not arch.is_moe):
        return [1]
    return [
        p
        for p in range(1, min(arch.layers, MAX_PP, count // tp) + 1)
        if (count // tp) % p == 0 and pipeline_split(arch.layers, p) is not None
    ]


def _split(req: TrainRequest, pp: int) -> tuple[int, ...] | None:
    """The layers of each stage: as pinned (first/last counts or a list), else parallel.pipeline_split."""
    pins = req.pins
    if not req.arch.layers:
        return ()
    return pipeline_split(
        req.arch.layers, pp, pins.pp_first_stage_layers, pins.pp_last_stage_layers, pins.pp_stage_layers
    )


def _splits(req: TrainRequest, split: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The split, and where the architecture has multi-token-prediction modules and nothing pins the split, the
    splits with a lighter last stage (parallel.lighter_last_splits): the search keeps the fastest."""
    pins = req.pins
    pinned = pins.pp_first_stage_layers or pins.pp_last_stage_layers or pins.pp_stage_layers
    return [split] + ([] if pinned or not req.arch.mtp_layers else lighter_last_splits(split))


def _vp_choices(req: TrainRequest, split: tuple[int, ...]) -> list[int]:
    """Interleaving degrees: the pin, or VP_CHOICES where Megatron-LM can state the split with them."""
    pinned = req.pins.vp
    if pinned:
        return [pinned] if pinned == 1 or len(split) > 1 else []  # interleaving needs pipeline stages
    if len(split) <= 1:
        return [1]
    return [v for v in VP_CHOICES if v == 1 or megatron_split(split, v) is not None]


def _pinned_group(pins: TrainPins, ranks: int) -> int | None:
    """The pinned HSDP shard group; a group of all `ranks` data-parallel ranks is full sharding (no replicas), the way
    a plan states a published fully sharded layout and keeps the search from trying groups."""
    return None if pins.shard_group == ranks else pins.shard_group


def degrees(req: TrainRequest, count: int, per_node: int, cps: list[int]) -> Iterator[tuple[int, int, int, int]]:
    """(TP, CP, PP, DP) of `count` GPUs: TP within a node, CP, PP once TP fills what the model allows, DP the rest."""
    pins = req.pins
    tps = _tp_choices(req.arch, per_node, count, pins.tp)
    for tp in tps:
        for cp in cps:
            for pp in _pp_choices(req.arch, tp, max(tps), count // cp, pins.pp):
                if count % (tp * cp * pp):
                    continue
                dp = count // (tp * cp * pp)
                if (pins.dp and dp != pins.dp) or dp > req.global_batch_sequences:
                    continue
                yield tp, cp, pp, dp


def shapes(req: TrainRequest, out: Collector, count: int, per_node: int, choices: tuple) -> Iterator[Layout]:
    """Every model-parallel shape of `count` GPUs (`choices`: the CP and EP degrees to try): the degrees, the stage
    split, EP from the DP·CP ranks and VP; what has no split or no interleaving is recorded as rejected."""
    pins = req.pins
    cps, eps = choices
    for tp, cp, pp, dp in degrees(req, count, per_node, cps):
        split = _split(req, pp)
        if split is None:
            reason = because(
                "no-pipeline-split",
                pp=pp,
                layers=req.arch.layers,
                first=pins.pp_first_stage_layers,
                last=pins.pp_last_stage_layers,
            )
            out.other.setdefault(f"pp:{pp}", Rejection(f"PP{pp}", reason))
            continue
        for ep in eps:
            if (dp * cp) % ep:
                continue  # EP ranks come from the data-parallel ranks
            for stages in _splits(req, split):
                vps = _vp_choices(req, stages)
                if not vps:
                    out.other.setdefault(f"vp:{pp}", Rejection(f"PP{pp}", because("vp-needs-pp", vp=pins.vp)))
                for vp in vps:
                    yield Layout(tp, pp, dp, cp, ep, vp, stages, _pinned_group(pins, dp * cp))
