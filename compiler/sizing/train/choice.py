"""The training search's outcome: the fitting candidates collected with a bounded sample of rejections, and the
choice among them (the cheapest that meets the deadline and budget, or the fastest within the budget)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..reasons import Reason, because
from .candidate import NETWORK_SHARE_OF_STEP, TrainCandidate
from .layout import Layout, describe
from .memory import MemoryBreakdown
from .request import TrainRequest

MAX_REJECTIONS = 20
FSDP_PP_GAP = "fsdp-pp"  # the gap key of a pipelined FSDP layout with too few micro-batches
FSDP_SELECTIVE_GAP = "fsdp-sac"  # the key of a pinned selective recompute the FSDP layout cannot run


@dataclass(frozen=True)
class Rejection:
    description: str
    reason: Reason


@dataclass(frozen=True)
class TrainSearchResult:
    chosen: TrainCandidate | None
    pareto: tuple[TrainCandidate, ...]
    rejected: tuple[Rejection, ...]
    evaluated: int
    infeasible_reason: Reason | None
    nearest: TrainCandidate | None
    warnings: tuple[Reason, ...]


def _key_cost(c: TrainCandidate) -> tuple:
    return (round(c.cost_usd, 2), round(c.wall_seconds, 1), c.gpus, c.description)


def _key_time(c: TrainCandidate) -> tuple:
    return (round(c.wall_seconds, 1), round(c.cost_usd, 2), c.gpus, c.description)


def pareto_front(candidates: Sequence[TrainCandidate]) -> tuple[TrainCandidate, ...]:
    """Cost vs wall time: sorted by cost, each entry strictly faster than every cheaper one."""
    front: list[TrainCandidate] = []
    for c in sorted(candidates, key=_key_cost):
        if not front or c.wall_seconds < front[-1].wall_seconds:
            front.append(c)
    return tuple(front)


class Collector:
    """Feasible candidates and a bounded, deterministic sample of rejections (the closest per reason)."""

    def __init__(self) -> None:
        self.feasible: list[TrainCandidate] = []
        self.memory: dict[tuple, tuple[int, Rejection]] = {}
        self.other: dict[str, Rejection] = {}
        self.gaps: dict[str, tuple[Rejection, bool]] = {}  # layouts no framework runs, and whether they fit memory
        self.evaluated = 0

    def gap(self, key: str, description: str, reason: Reason, fits: bool) -> None:
        if key not in self.gaps or (fits and not self.gaps[key][1]):
            self.gaps[key] = (Rejection(description, reason), fits)

    def too_big(self, gpu_id: str, layout: Layout, mem: MemoryBreakdown, usable: int) -> None:
        """The smallest layout that did not fit, per GPU type and count; described only when it is kept."""
        key = (gpu_id, layout.gpus)
        if key not in self.memory or mem.total < self.memory[key][0]:
            reason = because(
                "too-big",
                total=mem.total,
                usable=usable,
                weights=mem.weights,
                gradients=mem.gradients,
                optimizer=mem.optimizer,
                activations=mem.activations,
                other=mem.other,
            )
            self.memory[key] = (mem.total, Rejection(describe(gpu_id, layout), reason))

    def rejections(self, fitting_counts: set[tuple[str, int]], extra: list[Rejection]) -> tuple[Rejection, ...]:
        # memory rejections only where nothing of that GPU and count fit, smallest counts first
        memory = [
            r
            for key, (_, r) in sorted(self.memory.items(), key=lambda kv: (kv[0][0], kv[0][1]))
            if key not in fitting_counts
        ]
        # layouts without a framework path are listed when nothing was chosen (else every plan would list them)
        gaps = [r for _, (r, _) in sorted(self.gaps.items())] if not self.feasible else []
        return tuple((list(self.other.values()) + gaps + extra + memory)[:MAX_REJECTIONS])

    def refusal(self) -> Reason:
        """Why nothing fits: a pinned option no layout can take, layouts that fit but no framework runs, memory,
        or every GPU type refused."""
        closest = min((entry for entry in self.memory.values()), key=lambda e: e[0], default=None)
        fitting_gap = next((r for r, fits in self.gaps.values() if fits), None)
        overlap = next((r for key, r in self.other.items() if key.startswith("a2a:")), None)
        selective = next((r for key, r in self.other.items() if key.startswith(FSDP_SELECTIVE_GAP)), None)
        if overlap is not None and not self.memory:  # the plan pinned an overlap no layout it allows can take
            return overlap.reason
        if selective is not None and not self.memory:  # the plan pinned a selective its framework cannot run
            return selective.reason
        if fitting_gap is not None:
            return because("only-unrunnable-fit", rejection=fitting_gap)
        if self.gaps and not self.memory:  # no layout asked for has a framework path (none checked to fit)
            return because("no-runnable-layout", rejection=next(iter(self.gaps.values()))[0])
        if self.memory or not self.other:
            return because("no-fit-memory", closest=closest[1] if closest else None)
        return because("every-gpu-refused", reasons=tuple(r.reason for r in self.other.values()))


def _gated_seconds(req: TrainRequest, c: TrainCandidate) -> float:
    """The wall time the deadline checks: the prediction × the gate factor on the candidate's GPU."""
    return c.wall_seconds * req.gate_factor(c.gpu_id)


def _gated_usd(req: TrainRequest, c: TrainCandidate) -> float:
    return c.cost_usd * req.gate_factor(c.gpu_id)


def _missed(req: TrainRequest, feasible: list[TrainCandidate], meets_deadline: list[TrainCandidate]):
    """The closest few that miss the deadline, and that are over the budget, as rejections."""
    q = req.gate_quantile
    extra: list[Rejection] = []
    if req.deadline_seconds:
        late = (c for c in feasible if _gated_seconds(req, c) > req.deadline_seconds)
        for c in sorted(late, key=_key_cost)[:3]:
            reason = because(
                "misses-deadline",
                wall=c.wall_seconds,
                gated=_gated_seconds(req, c),
                quantile=q,
                deadline=req.deadline_seconds,
            )
            extra.append(Rejection(c.description, reason))
    if req.budget_usd:
        for c in sorted((c for c in meets_deadline if _gated_usd(req, c) > req.budget_usd), key=_key_time)[:3]:
            reason = because(
                "over-budget", cost=c.cost_usd, gated=_gated_usd(req, c), quantile=q, budget=req.budget_usd
            )
            extra.append(Rejection(c.description, reason))
    return extra


def _unreachable(req: TrainRequest, feasible: list[TrainCandidate], meets_deadline: list[TrainCandidate]):
    """(reason, nearest candidate) where none meets both the deadline and the budget."""
    q = req.gate_quantile
    if not meets_deadline:
        fastest = min(feasible, key=_key_time)
        reason = because(
            "deadline-unreachable",
            wall=fastest.wall_seconds,
            gated=_gated_seconds(req, fastest),
            quantile=q,
            gpus=fastest.gpus,
            gpu_id=fastest.gpu_id,
            pricing=req.pricing,
            cost=fastest.cost_usd,
            deadline=req.deadline_seconds,
        )
        return reason, fastest
    cheapest = min(meets_deadline, key=_key_cost)
    reason = because(
        "over-budget-cheapest",
        cost=cheapest.cost_usd,
        gated=_gated_usd(req, cheapest),
        quantile=q,
        budget=req.budget_usd,
        deadline=req.deadline_seconds,
        gpus=cheapest.gpus,
        gpu_id=cheapest.gpu_id,
        pricing=req.pricing,
    )
    return reason, cheapest


def _warnings(req: TrainRequest, chosen: TrainCandidate) -> list[Reason]:
    warnings = []
    if chosen.network_bound:
        warnings.append(
            because(
                "network-bound",
                share=chosen.step.dp_comm_exposed / chosen.step.total,
                interconnect=req.interconnect.id,
                limit=NETWORK_SHARE_OF_STEP,
                needed=chosen.network_bytes_per_second_needed,
            )
        )
    if chosen.dataset_read_bytes_per_second > req.storage.read_bytes_per_second * chosen.nodes:
        warnings.append(
            because(
                "storage-too-slow",
                read=chosen.dataset_read_bytes_per_second,
                storage=req.storage.id,
                nodes=chosen.nodes,
            )
        )
    return warnings


def choose(req: TrainRequest, out: Collector, warnings: list[Reason]) -> TrainSearchResult:
    feasible = out.feasible
    fitting = {(c.gpu_id, c.gpus) for c in feasible}
    if not feasible:
        return TrainSearchResult(None, (), out.rejections(fitting, []), out.evaluated, out.refusal(), None, ())
    pareto = pareto_front(feasible)
    meets_deadline = [c for c in feasible if not req.deadline_seconds or _gated_seconds(req, c) <= req.deadline_seconds]
    within = [c for c in meets_deadline if not req.budget_usd or _gated_usd(req, c) <= req.budget_usd]
    rejected = out.rejections(fitting, _missed(req, feasible, meets_deadline))
    if not within:
        reason, nearest = _unreachable(req, feasible, meets_deadline)
        return TrainSearchResult(None, pareto, rejected, out.evaluated, reason, nearest, ())
    chosen = min(within, key=_key_cost if req.optimize == "cost" else _key_time)
    warnings = warnings + _warnings(req, chosen)
    return TrainSearchResult(chosen, pareto, rejected, out.evaluated, None, None, tuple(warnings))
