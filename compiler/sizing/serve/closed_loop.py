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
* staggered clients (the steady state): they land during our decode — TTFT = step + prefill, TPOT = step +
  (s − 1)·occupancy/output: the p50;
* all clients starting together (a static batch, a benchmark's first wave): all s − 1 prefill before our first
  token — TTFT = step + prefill + (s − 1)·occupancy, the most a closed loop of s can make one request wait: the p99.
  TPOT's p99 is the staggered figure, its largest.
"""

from __future__ import annotations

from .decode import decode_step
from .latency import LoadPoint
from .prefill import prefill_latency_seconds, prefill_occupancy_seconds
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
    ttft_p50 = wait + step.seconds + prefill
    tpot = step.seconds + others / output_tokens
    return LoadPoint(
        arrival_rate=rate,
        utilization=running / batch,
        in_flight=running,
        ttft_p50_seconds=ttft_p50,
        ttft_p99_seconds=ttft_p50 + others,
        tpot_p50_seconds=tpot,
        tpot_p99_seconds=tpot,
        step_seconds=step.seconds,
    )
