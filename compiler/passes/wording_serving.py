"""The decisions the serving sizing pass records, in words: hardware, batch, latency at peak, attention data
parallelism, speculative decoding and cost, each with its reason; a stage ratio and an infeasible service."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..plan.resolved import Decision
from ..units import format_count, format_seconds, format_usd
from .wording import words

if TYPE_CHECKING:
    from ..plan.resolved import Hardware
    from ..plan.spec import PlanSpec
    from ..sizing.serve.types import ServeCandidate, ServeSearchResult


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _load(spec: PlanSpec, c: ServeCandidate) -> tuple[str, str]:
    """(the load as the plan states it, how a replica takes it at peak)."""
    traffic = spec.serve.traffic
    sized = c.replicas_needed or c.max_replicas  # the capacity-sized count; a higher floor only lowers latency
    if traffic.concurrency is None:
        return (
            f"{traffic.requests_per_second:g} req/s × peak factor {traffic.peak_factor:g}",
            f"{sized} replicas (the capacity-sized count; a higher floor only lowers latency) at {traffic.requests_per_second * traffic.peak_factor:g} req/s: utilisation "
            f"{c.utilization_at_peak:.2f} of capacity, {c.in_flight_at_peak:.1f} sequences in flight per replica "
            f"(Little's law, decode steps at that batch)",
        )
    clients = traffic.concurrency * traffic.peak_factor / sized
    return (
        f"{traffic.concurrency} closed-loop clients × peak factor {traffic.peak_factor:g} "
        f"({c.requests_per_second:.3g} req/s on average)",
        f"{sized} replicas, {clients:.1f} clients each (closed loop: each sends its next request when the "
        f"previous completes), {c.in_flight_at_peak:.1f} sequences in flight, {c.requests_per_second_at_peak:.3g} req/s per "
        f"replica = clients ÷ (TTFT + output × TPOT) (interactive response-time law); p99 TTFT: all clients starting together",
    )


def serving_decisions(
    spec: PlanSpec, c: ServeCandidate, evaluated: int, hardware: Hardware, prefix: str = "", vision: bool = False
) -> list[Decision]:
    load, at_peak = _load(spec, c)
    if vision:  # images (or items) per batch and request latency: no decode, no tokens
        batch = Decision(
            topic=f"{prefix}batch",
            choice=f"{c.max_concurrency} items per batch",
            reason=f"the largest batch whose p99 request latency ({format_seconds(c.ttft_seconds)}) meets the SLO; "
            f"capacity {format_count(c.tokens_per_second_per_replica)} items/s per replica",
        )
    else:
        batch = Decision(
            topic=f"{prefix}batch",
            choice=f"{c.max_concurrency} concurrent sequences ({c.step_bound}-bound decode)",
            reason=f"{'pinned by serve.max_num_seqs' if spec.serve.max_num_seqs else 'the most requests/s per replica whose latency at peak traffic meets the SLO'}; "
            f"capacity {format_count(c.tokens_per_second_per_replica)} tokens/s per replica at max concurrency",
        )
    return [
        Decision(
            topic=f"{prefix}hardware",
            choice=f"{_plural(c.replicas, 'replica')} × {c.gpus_per_replica} × {c.gpu_id} ({c.precision}, TP={c.tp}, PP={c.pp})",
            reason=f"{'cheapest' if spec.optimize == 'cost' else 'lowest latency'} of {evaluated} configurations meeting the SLO "
            f"at {load}; {words(c.queueing)}" + _floor_words(c),
        ),
        batch,
        *(
            [
                Decision(
                    topic=f"{prefix}latency",
                    choice=f"TTFT p50/p99 {format_seconds(c.ttft_p50_seconds)}/{format_seconds(c.ttft_seconds)}, "
                    f"TPOT p50/p99 {format_seconds(c.tpot_p50_seconds)}/{format_seconds(c.tpot_seconds)} at peak traffic",
                    reason=f"{at_peak}; inter-token latency p50 {format_seconds(c.itl_p50_seconds)} (one decode step); "
                    f"one request alone: TTFT {format_seconds(c.ttft_batch1_seconds)}, TPOT {format_seconds(c.tpot_batch1_seconds)}; "
                    f"at max concurrency and utilisation {c.target_utilization:g}: TTFT {format_seconds(c.ttft_at_capacity_seconds)}, "
                    f"TPOT {format_seconds(c.tpot_at_capacity_seconds)}",
                )
            ]
            if c.ttft_batch1_seconds
            else []
        ),
        *_attention_dp_decisions(c, prefix),
        *_speculation_decisions(c, prefix),
        Decision(
            topic=f"{prefix}cost",
            choice=f"{format_usd(c.usd_per_month)}/month",
            reason=f"{_plural(c.gpus, 'GPU')} × {format_usd(hardware.usd_per_gpu_hour)}/h ({spec.cluster.pricing}) × 730 h",
        ),
    ]


def _speculation_decisions(c: ServeCandidate, prefix: str) -> list[Decision]:
    s = c.speculation
    if s is None:
        return []
    low, high = s.acceptance_range
    expected = [(1 - a ** (s.draft_tokens + 1)) / (1 - a) for a in (low, high)]  # serve_speculative.tokens_per_round
    spread = (
        f"{expected[0]:.2f} at the plan's acceptance {low:g}"
        if low == high
        else f"{expected[0]:.2f}-{expected[1]:.2f} over the published acceptance {low:g}-{high:g} (DeepSeek-V3 report §5.4.3), "
        f"sized at {low:g}"
    )
    return [
        Decision(
            topic=f"{prefix}speculative decoding",
            choice=f"MTP draft, {s.draft_tokens} tokens per step; {expected[0]:.2f} output tokens per verify pass",
            reason=(
                f"serve.speculative: expected tokens per pass (1 − α^(k+1))/(1 − α) (Leviathan et al. 2023): {spread}; decode "
                f"time per output token = (verify pass of k + 1 tokens + k MTP-module steps) ÷ that, so TPOT and ITL are per "
                f"output token (compiler/sizing/serve_speculative.py)"
            ),
        )
    ]


def _attention_dp_decisions(c: ServeCandidate, prefix: str) -> list[Decision]:
    if c.attention_dp <= 1:
        return []
    dp, gpus = c.attention_dp, c.gpus_per_replica
    return [
        Decision(
            topic=f"{prefix}attention data parallelism",
            choice=f"{dp} DP ranks × TP{c.tp} per replica, experts split over {gpus} GPUs; {c.max_concurrency // dp} sequences per rank",
            reason=(
                f"serve.attention_dp: each rank holds the attention and dense layers whole (÷ its TP) with its own KV cache and "
                f"batch, the routed experts ÷ {gpus}: {c.memory.weights / 2**30:.1f} GiB of weights per GPU; every decode step "
                f"all-gathers the {dp} ranks' tokens before the experts and reduce-scatters after (vLLM docs, Data Parallel and "
                f"Expert Parallel Deployment; compiler/sizing/serve_attention_dp.py)"
            ),
        )
    ]


def _floor_words(c: ServeCandidate) -> str:
    if c.replica_floor <= c.replicas_needed:
        return ""
    return (
        f"; capacity needs {_plural(c.replicas_needed, 'replica')} at peak, the availability floor deploys {c.replica_floor} "
        f"(serve.min_replicas or the default policy), which cost and GPU counts include"
    )


def stage_ratio_decision(ratios: list[tuple[str, float]]) -> Decision:
    return Decision(
        topic="stage ratio",
        choice=" : ".join(f"{ratio:.2f} {name}" for name, ratio in ratios),
        reason="each stage sized for the rate it receives; GPUs per GPU of the last stage",
    )


def serving_infeasible(result: ServeSearchResult, where: str) -> str:
    near = (
        f"; nearest: {result.nearest.description}, {format_usd(result.nearest.usd_per_month)}/month"
        if result.nearest
        else ""
    )
    why = words(result.infeasible_reason) if result.infeasible_reason else "no configuration serves this model"
    return f"{where}{why}{near}"
