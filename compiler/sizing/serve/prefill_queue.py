"""A new prompt waiting for the prefills ahead of it: one engine prefills one chunk stream at a time, so the prompts
that arrive while it is busy queue. Prefills of a fixed length take a fixed time D, and the prompts of many independent
clients arrive as a Poisson stream of rate λ: an M/D/1 queue at utilisation ρ = λ·D.

* mean wait (Pollaczek–Khinchine, deterministic service): W = ρ·D / (2(1 − ρ));
* its distribution (Erlang 1909; Franx 2001, "A simple solution for the M/D/c waiting time distribution", Operations
  Research Letters 29(5), c = 1): P(W ≤ t) = (1 − ρ) · Σ_{k=0}^{⌊t/D⌋} (λ(kD − t))^k / k! · e^(−λ(kD − t)); a fraction
  1 − ρ of prompts find the engine free, so the median wait is 0 while ρ ≤ 1/2. The sum alternates in sign and loses
  every digit in floating point beyond t ≈ 40·D, so it is summed up to EXACT_SPAN_SERVICES · D only; beyond, the tail
  is exponential (Cramér–Lundberg: P(W > t) ∝ e^(−θt), θ > 0 the root of λ(e^(θD) − 1) = θ; Asmussen 2003, Applied
  Probability and Queues, XIII.5), matched to the exact value at that span.
"""

from __future__ import annotations

import math

BISECTIONS = 60
EXACT_SPAN_SERVICES = 20  # the Erlang sum's terms stay below e^20 there: ~1e-7 absolute error in doubles


def md1_wait_mean_seconds(utilization: float, service_seconds: float) -> float:
    """Pollaczek–Khinchine mean wait of M/D/1."""
    if utilization <= 0:
        return 0.0
    return utilization * service_seconds / (2 * (1 - utilization))


def md1_wait_probability_within(utilization: float, service_seconds: float, seconds: float) -> float:
    """P(W ≤ seconds) in M/D/1 (Erlang's formula), for seconds ≤ EXACT_SPAN_SERVICES · service_seconds."""
    rate = utilization / service_seconds
    total = 0.0
    for k in range(math.floor(seconds / service_seconds) + 1):
        x = rate * (k * service_seconds - seconds)  # ≤ 0
        total += x**k / math.factorial(k) * math.exp(-x)
    return (1 - utilization) * total


def md1_tail_decay_per_second(utilization: float, service_seconds: float) -> float:
    """θ > 0 with ρ(e^(θD) − 1) = θD: the rate at which P(W > t) decays far out."""
    low, high = 1e-12, 1.0
    while utilization * math.expm1(high) <= high:
        high *= 2
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if utilization * math.expm1(middle) > middle:
            high = middle
        else:
            low = middle
    return high / service_seconds


def md1_wait_quantile_seconds(utilization: float, service_seconds: float, quantile: float) -> float:
    """The wait that a fraction `quantile` of prompts do not exceed (0 where that many find the engine free)."""
    if utilization <= 0 or 1 - utilization >= quantile:
        return 0.0
    span = EXACT_SPAN_SERVICES * service_seconds
    beyond = 1 - md1_wait_probability_within(utilization, service_seconds, span)
    if beyond > 1 - quantile:  # in the exponential tail
        return span + math.log(beyond / (1 - quantile)) / md1_tail_decay_per_second(utilization, service_seconds)
    low, high = 0.0, span
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if md1_wait_probability_within(utilization, service_seconds, middle) < quantile:
            low = middle
        else:
            high = middle
    return high
