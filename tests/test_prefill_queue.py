"""The M/D/1 prefill queue (compiler/sizing/serve/prefill_queue.py) against a simulation of the queue itself: Lindley's
recursion W(n+1) = max(0, W(n) + D − A(n+1)) over Poisson arrivals."""

from __future__ import annotations

import random

import pytest

from compiler.sizing.serve.prefill_queue import (
    md1_wait_mean_seconds,
    md1_wait_probability_within,
    md1_wait_quantile_seconds,
)

SERVICE_SECONDS = 0.4


def simulated_waits(utilization: float, count: int = 200_000) -> list[float]:
    """Lindley's recursion over `count` Poisson arrivals, sorted (an M/D/1 queue's waits)."""
    rng = random.Random(7)
    wait, waits = 0.0, []
    for _ in range(count):
        wait = max(0.0, wait + SERVICE_SECONDS - rng.expovariate(utilization / SERVICE_SECONDS))
        waits.append(wait)
    return sorted(waits)


@pytest.mark.parametrize("utilization", [0.3, 0.6, 0.85])
def test_mean_and_quantiles_match_the_simulated_queue(utilization):
    waits = simulated_waits(utilization)
    assert md1_wait_mean_seconds(utilization, SERVICE_SECONDS) == pytest.approx(sum(waits) / len(waits), rel=0.06)
    for quantile in (0.5, 0.9):
        simulated = waits[int(quantile * len(waits))]
        assert md1_wait_quantile_seconds(utilization, SERVICE_SECONDS, quantile) == pytest.approx(
            simulated, rel=0.06, abs=1e-3
        )


def test_far_in_the_tail_the_wait_is_the_exponential_the_exact_sum_hands_over_to():
    """At 97% busy the 90th percentile lies ~38 prefills out, past the span the alternating sum holds in doubles: the
    Cramér–Lundberg tail takes over there, continuous with the sum, and still matches the simulated queue."""
    from compiler.sizing.serve.prefill_queue import EXACT_SPAN_SERVICES

    waits = simulated_waits(0.97, 2_000_000)
    tail = md1_wait_quantile_seconds(0.97, SERVICE_SECONDS, 0.9)
    assert tail > EXACT_SPAN_SERVICES * SERVICE_SECONDS
    assert tail == pytest.approx(waits[int(0.9 * len(waits))], rel=0.1)
    edge = 1 - md1_wait_probability_within(0.97, SERVICE_SECONDS, EXACT_SPAN_SERVICES * SERVICE_SECONDS)
    assert md1_wait_quantile_seconds(0.97, SERVICE_SECONDS, 1 - edge) == pytest.approx(
        EXACT_SPAN_SERVICES * SERVICE_SECONDS, rel=1e-6
    )


def test_the_median_prompt_waits_only_once_the_engine_is_busy_over_half_the_time():
    assert md1_wait_quantile_seconds(0.5, SERVICE_SECONDS, 0.5) == 0
    assert md1_wait_quantile_seconds(0.55, SERVICE_SECONDS, 0.5) > 0
    assert md1_wait_probability_within(0.3, SERVICE_SECONDS, 0.0) == pytest.approx(0.7)
