"""A replica under a closed loop: n clients, each sending its next request when the previous one completes (vLLM's
`vllm bench serve --max-concurrency`, genai-perf `--concurrency`, trtllm-bench's static batches).

The interactive response-time law with no think time (Denning & Buzen 1978, "The operational analysis of queueing
network models", §5): throughput X = n / R, R the time one request spends in the system. A replica runs
s = min(n, B) of them at once (B its max concurrency); the other n − s wait for a slot, so their wait is
(n − s) / X (Little's law on the queue). In a slot, one request's life is its own prefill, one decode step to admit it,
`output` decode steps at batch s, and the prefills of the other s − 1 clients in the slots: each of them issues one
request per life, so exactly s − 1 land during ours (the engine does one kind of work at a time, serve_latency.py):

    R_slot = prefill + step(s) · (output + 1) + (s − 1) · occupancy,   X = s / R_slot.

Where the other prefills land splits R_slot between TTFT and TPOT, and bounds both:
* staggered clients (the steady state): the others' prompts arrive at rate λ = (s − 1) / R_slot, so ours finds the
  engine prefilling one of them a fraction ρ = λ·occupancy of the time and waits in an M/D/1 queue (prefill_queue.py;
  the others' requests are independent enough for Poisson arrivals — an arriving request sees the system as the
  other s − 1 clients leave it, the arrival theorem of Sevcik & Mitrani 1981): TTFT = step + prefill + W, its median
  with the queue's median wait (0 while ρ ≤ 1/2), its mean with Pollaczek–Khinchine's mean; the others' prefills that
  did not delay our first token land during our decode: TPOT = step + ((s − 1)·occupancy − mean W)/output, the mean
  gap (a request's mean over its output tokens varies little from request to request: also its p50);
* all clients starting together (a static batch, a benchmark's first wave): all s − 1 prefill before our first
  token — TTFT = step + prefill + (s − 1)·occupancy, the most a closed loop of s can make one request wait: the p99.
  TPOT's p99 is the staggered figure with no wait, its largest.
Little's law holds on the means: X · (TTFT mean + output · TPOT) = s.
"""

from __future__ import annotations

from .decode import decode_step
from .latency import LoadPoint
from .prefill import prefill_latency_seconds, prefill_occupancy_seconds
from .prefill_queue import md1_wait_mean_seconds, md1_wait_quantile_seconds
from .replica import ReplicaModel


def closed_loop_point(
    m: ReplicaModel, batch: int, *, prompt_tokens: int, output_tokens: int, chunk_tokens: int, clients: float
) -> LoadPoint:
    """The replica's latencies and request rate under `clients` closed-loop clients (at most `batch` run at once)."""
    running = max(1.0, min(float(batch), clients))
    step = decode_step(m, max(1, round(running)), prompt_tokens + output_tokens / 2)
    prefill = prefill_latency_seconds(m, prompt_tokens, chunk_tokens)
    occupancy = prefill_occupancy_seconds(m, prompt_tokens, chunk_tokens)
    others = (running - 1) * occupancy
    in_slot = prefill + step.seconds * (output_tokens + 1) + others
    rate = running / in_slot
    wait = max(0.0, clients - running) / rate
    busy = others / in_slot  # the share of a request's life the engine spends on the others' prefills
    queued_mean = min(others, md1_wait_mean_seconds(busy, occupancy))
    queued_p50 = min(others, md1_wait_quantile_seconds(busy, occupancy, 0.5))
    first_token = wait + step.seconds + prefill
    return LoadPoint(
        arrival_rate=rate,
        utilization=running / batch,
        in_flight=running,
        ttft_p50_seconds=first_token + queued_p50,
        ttft_p99_seconds=first_token + others,
        tpot_p50_seconds=step.seconds + (others - queued_mean) / output_tokens,
        tpot_p99_seconds=step.seconds + others / output_tokens,
        step_seconds=step.seconds,
        ttft_mean_seconds=first_token + queued_mean,
    )
