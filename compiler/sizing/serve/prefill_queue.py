"""A new prompt waiting for the prefills ahead of it: one engine prefills one chunk stream at a time, so the prompts
that arrive while it is busy queue. Prefills of a fixed length take a fixed time D, and the prompts of many independent
clients arrive as a Poisson stream of rate λ: an M/D/1 queue at utilisation ρ = λ·D.

* mean wait (Pollaczek–Khinchine, deterministic service): W = ρ·D / (2(1 − ρ));
* its distribution (Erlang 1909; Franx 2001, "A simple solution for the M/D/c waiting time distribution", Operations
  Research Letters 29(5), c = 1): P(W ≤ t) = (1 − ρ) · Σ_{k=0}^{⌊t/D⌋} (λ(kD − t))^k / k! · e^(−λ(kD − t)); a fraction
  1 − ρ of prompts find the engine free, so the median wait is 0 while ρ ≤ 1/2.
"""

from __future__ import annotations

import math

BISECTIONS = 60


def md1_wait_mean_seconds(utilization: float, service_seconds: float) -> float:
    """Pollaczek–Khinchine mean wait of M/D/1."""
    if utilization <= 0:
        return 0.0
    return utilization * service_seconds / (2 * (1 - utilization))


def md1_wait_probability_within(utilization: float, service_seconds: float, seconds: float) -> float:
    """P(W ≤ seconds) in M/D/1 (Erlang's formula)."""
    rate = utilization / service_seconds
    total = 0.0
    for k in range(math.floor(seconds / service_seconds) + 1):
        x = rate * (k * service_seconds - seconds)  # ≤ 0
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1 - utilization) * total


def md1_wait_quantile_seconds(utilization: float, service_seconds: float, quantile: float) -> float:
    """The wait that a fraction `quantile` of prompts do not exceed (0 where that many find the engine free)."""
    if utilization <= 0 or 1 - utilization >= quantile:
        return 0.0
    low, high = 0.0, service_seconds
    while md1_wait_probability_within(utilization, service_seconds, high) < quantile:
        low, high = high, 2 * high
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if md1_wait_probability_within(utilization, service_seconds, middle) < quantile:
            low = middle
        else:
            high = middle
    return high
