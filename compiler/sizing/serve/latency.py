"""LLM serving latency and throughput of one replica — a roofline model, stated as such.

Pure functions; seconds, bytes, FLOPs. Every time is a floor that real kernels approach, at the
catalog's achievable fractions of peak (`GpuSpec.achievable_matmul_fraction`,
`achievable_memory_bandwidth_fraction`).

The replica model is replica.py; a decode step is decode.py; a prefill is prefill.py. Here, a replica's capacity and
latencies at a batch and a load:

* Capacity at concurrency B (engine full, continuous batching): a "cycle" in which B requests are
  prefilled and decoded takes B · prefill + O · step(B). Prefill and decode are added, not overlapped:
  prefill is compute-bound and decode memory-bound, and one engine step does one kind of work at a time
  at this level of detail — a conservative bound.
* Queueing: each of the B slots is a server holding a request for one cycle; arrivals are Poisson, so
  the slot wait is M/M/c (Erlang C) with c = B at utilisation ρ; its p99 is exact for M/M/c:
  P(W > t) = C(c, a)·e^(−c(1−ρ)t/S)  ⇒  W99 = S·ln(C/0.01) / (c(1−ρ)).
  TTFT p99 = W99 + one decode step (admission waits for the running step) + prefill latency.
  TPOT p99 = step(B) + (prefills of requests arriving during this one's decode)/O, the count taken as
  Poisson at its mean + z99·√mean (normal approximation, z99 = 2.326).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .decode import StepTime, decode_step
from .prefill import prefill_latency_seconds, prefill_occupancy_seconds
from .replica import ReplicaModel

# Standard normal 99th percentile (p99 of a Poisson count by the normal approximation).
P99_Z = 2.326
P99_TAIL = 0.01


@lru_cache(maxsize=4096)
def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c (Erlang C), via the stable Erlang B recursion."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    rho = offered_load / servers
    return blocking / (1 - rho * (1 - blocking))


def mmc_wait_p99_seconds(servers: int, utilization: float, service_seconds: float) -> float:
    """p99 of the M/M/c waiting time: S·ln(C/0.01)/(c(1−ρ)), 0 when fewer than 1% of arrivals wait."""
    waiting = erlang_c(servers, round(utilization * servers, 9))
    if waiting <= P99_TAIL:
        return 0.0
    return service_seconds * math.log(waiting / P99_TAIL) / (servers * (1 - utilization))


@dataclass(frozen=True)
class BatchPoint:
    """A replica at max concurrency `batch`: capacity at full load and p99 latencies at utilisation ρ."""

    batch: int
    step: StepTime
    prefill_latency_seconds: float
    prefill_occupancy_seconds: float
    cycle_seconds: float  # B requests through B slots at full load
    tokens_per_second: float  # output tokens/s at full load (capacity)
    requests_per_second: float  # capacity
    wait_p99_seconds: float
    ttft_p99_seconds: float
    tpot_p99_seconds: float


def evaluate_batch(
    m: ReplicaModel,
    batch: int,
    *,
    prompt_tokens: int,
    output_tokens: int,
    chunk_tokens: int,
    utilization: float,
) -> BatchPoint:
    context = prompt_tokens + output_tokens / 2  # average context a decode step attends to
    step = decode_step(m, batch, context)
    prefill = prefill_latency_seconds(m, prompt_tokens, chunk_tokens)
    occupancy = prefill_occupancy_seconds(m, prompt_tokens, chunk_tokens)
    cycle = batch * occupancy + output_tokens * step.seconds
    capacity = batch / cycle
    wait = mmc_wait_p99_seconds(batch, utilization, cycle)
    ttft = wait + step.seconds + prefill
    arrivals = utilization * capacity * output_tokens * step.seconds  # mean prefills during one decode
    arrivals_p99 = arrivals + P99_Z * math.sqrt(arrivals)
    tpot = step.seconds + arrivals_p99 * occupancy / output_tokens
    return BatchPoint(
        batch=batch,
        step=step,
        prefill_latency_seconds=prefill,
        prefill_occupancy_seconds=occupancy,
        cycle_seconds=cycle,
        tokens_per_second=capacity * output_tokens,
        requests_per_second=capacity,
        wait_p99_seconds=wait,
        ttft_p99_seconds=ttft,
        tpot_p99_seconds=tpot,
    )


# The operating point: what a user sees at the traffic the plan states, not at the capacity limit. A replica of
# max concurrency B serves λ requests/s; Little's law gives the sequences in flight N = λ × (TTFT + output × TPOT),
# and a decode step runs the N in flight (not B), so the point is the fixed point of N (Little 1961; vLLM's
# scheduler batches every running sequence each step). As λ → 0, TTFT → one prefill and one step, TPOT → one step.
LOAD_POINT_ITERATIONS = 30


@dataclass(frozen=True)
class LoadPoint:
    """Latencies of a replica at arrival rate λ: p50 and p99, with the utilisation and sequences in flight."""

    arrival_rate: float
    utilization: float
    in_flight: float
    ttft_p50_seconds: float
    ttft_p99_seconds: float
    tpot_p50_seconds: float
    tpot_p99_seconds: float
    step_seconds: float = 0.0  # one decode step at the sequences in flight: the inter-token latency most tokens see
    ttft_mean_seconds: float = 0.0  # what load generators print first (vllm bench serve, AIPerf's avg)


def mmc_wait_mean_seconds(servers: int, utilization: float, service_seconds: float) -> float:
    """Mean M/M/c wait: C·S/(c(1−ρ)) (Erlang C)."""
    waiting = erlang_c(servers, round(utilization * servers, 9))
    return waiting * service_seconds / (servers * (1 - utilization))


def mmc_wait_quantile_seconds(servers: int, utilization: float, service_seconds: float, tail: float) -> float:
    """The (1 − tail) quantile of the M/M/c waiting time, P(W > t) = C·exp(−c(1−ρ)t/S) (Erlang C)."""
    waiting = erlang_c(servers, round(utilization * servers, 9))
    if waiting <= tail:
        return 0.0
    return service_seconds * math.log(waiting / tail) / (servers * (1 - utilization))


def operating_point(
    m: ReplicaModel, batch: int, *, prompt_tokens: int, output_tokens: int, chunk_tokens: int, arrival_rate: float
) -> LoadPoint:
    """The replica's latencies at λ = arrival_rate (below its capacity at max concurrency `batch`)."""
    context = prompt_tokens + output_tokens / 2
    full = decode_step(m, batch, context)
    prefill = prefill_latency_seconds(m, prompt_tokens, chunk_tokens)
    occupancy = prefill_occupancy_seconds(m, prompt_tokens, chunk_tokens)
    cycle = batch * occupancy + output_tokens * full.seconds
    utilization = min(arrival_rate * cycle / batch, 0.999)
    in_flight = 1.0
    for _ in range(LOAD_POINT_ITERATIONS):
        step = decode_step(m, max(1, min(batch, math.ceil(in_flight - 1e-9))), context)
        arrivals = arrival_rate * output_tokens * step.seconds  # prefills that land during one request's decode
        tpot_p50 = step.seconds + arrivals * occupancy / output_tokens
        ttft_p50 = mmc_wait_quantile_seconds(batch, utilization, cycle, 0.5) + step.seconds + prefill
        in_flight = min(float(batch), max(1.0, arrival_rate * (ttft_p50 + output_tokens * tpot_p50)))
    tpot_p99 = step.seconds + (arrivals + P99_Z * math.sqrt(arrivals)) * occupancy / output_tokens
    ttft_p99 = mmc_wait_quantile_seconds(batch, utilization, cycle, P99_TAIL) + step.seconds + prefill
    return LoadPoint(
        arrival_rate=arrival_rate,
        utilization=utilization,
        in_flight=in_flight,
        ttft_p50_seconds=ttft_p50,
        ttft_p99_seconds=ttft_p99,
        tpot_p50_seconds=tpot_p50,
        tpot_p99_seconds=tpot_p99,
        step_seconds=step.seconds,
        ttft_mean_seconds=mmc_wait_mean_seconds(batch, utilization, cycle) + step.seconds + prefill,
    )
