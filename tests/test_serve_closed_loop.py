"""Load stated as closed-loop clients (serve.traffic.concurrency; compiler/sizing/serve_closed_loop.py): the operating
point obeys the interactive response-time law X = N / (TTFT + output × TPOT), the field excludes a request rate, and
the sizing spreads the clients over replicas of one slot each."""

from __future__ import annotations

import math

import pytest
import yaml

from compiler.diagnostics import PlanInputError
from compiler.pipeline import resolve
from compiler.sizing.serve.closed_loop import closed_loop_point
from compiler.sizing.serve.decode import decode_step
from compiler.sizing.serve.prefill import prefill_latency_seconds, prefill_occupancy_seconds
from tests.conftest import REPO
from tests.test_serve_latency import llama_8b_on_h100

LENGTHS = {"prompt_tokens": 1000, "output_tokens": 250, "chunk_tokens": 8192}
CHAT = yaml.safe_load((REPO / "examples" / "llama3-8b-chat.yaml").read_text())


def test_one_client_sees_one_prefill_and_single_stream_decode_steps():
    m = llama_8b_on_h100()
    p = closed_loop_point(m, 64, clients=1, **LENGTHS)
    step = decode_step(m, 1, 1000 + 125).seconds
    prefill = prefill_latency_seconds(m, 1000, 8192)
    assert p.ttft_p50_seconds == p.ttft_p99_seconds == pytest.approx(step + prefill)
    assert p.tpot_p50_seconds == p.tpot_p99_seconds == p.step_seconds == pytest.approx(step)
    assert p.arrival_rate == pytest.approx(1 / (prefill + 251 * step))


@pytest.mark.parametrize("clients", [1, 7, 64])
def test_the_rate_is_clients_over_the_time_each_request_takes(clients):
    p = closed_loop_point(llama_8b_on_h100(), 64, clients=clients, **LENGTHS)
    assert p.arrival_rate * (p.ttft_mean_seconds + 250 * p.tpot_p50_seconds) == pytest.approx(clients)
    assert p.in_flight == clients and p.utilization == pytest.approx(clients / 64)


def test_a_static_batch_waits_for_every_prompt_before_its_first_token():
    """64 clients starting together: TTFT p99 = one step + one prefill + the other 63 prompts' prefill occupancy."""
    m = llama_8b_on_h100()
    p = closed_loop_point(m, 64, clients=64, **LENGTHS)
    occupancy = prefill_occupancy_seconds(m, 1000, 8192)
    alone = decode_step(m, 64, 1125).seconds + prefill_latency_seconds(m, 1000, 8192)
    assert p.ttft_p99_seconds - alone == pytest.approx(63 * occupancy)
    assert p.tpot_p99_seconds == pytest.approx(decode_step(m, 64, 1125).seconds + 63 * occupancy / 250)


def test_a_prompt_queues_behind_the_other_clients_prefills():
    """Long prompts, short outputs: the others' prefills keep the engine busy, so a new prompt often waits for one
    (NIM's 70B at 5000/500 tokens: TTFT 407 ms at 1 client, 835 ms at 50). The wait moves prefill time from TPOT to
    TTFT; the mean sits above the median, both below the all-start-together p99."""
    m = llama_8b_on_h100()
    lengths = {"prompt_tokens": 8000, "output_tokens": 100, "chunk_tokens": 8192}
    floor = decode_step(m, 1, 8050).seconds + prefill_latency_seconds(m, 8000, 8192)
    points = [closed_loop_point(m, 64, clients=n, **lengths) for n in (2, 16, 64)]
    assert points[0].ttft_p50_seconds < points[1].ttft_p50_seconds < points[2].ttft_p50_seconds
    for p in points[1:]:
        assert floor < p.ttft_p50_seconds < p.ttft_mean_seconds < p.ttft_p99_seconds
        assert p.tpot_p50_seconds < p.tpot_p99_seconds
    busiest = points[2]
    assert busiest.ttft_mean_seconds - floor > 2 * prefill_occupancy_seconds(m, 8000, 8192)


def test_clients_beyond_the_batch_queue_and_add_no_throughput():
    m = llama_8b_on_h100()
    full, over = (closed_loop_point(m, 32, clients=n, **LENGTHS) for n in (32, 96))
    assert over.arrival_rate == pytest.approx(full.arrival_rate)
    assert over.ttft_p50_seconds - full.ttft_p50_seconds == pytest.approx(
        64 / full.arrival_rate
    )  # Little's law on the queue


def _plan(tmp_path, traffic: dict, name: str = "plan", **serve):
    plan = {
        **CHAT,
        "budget": {},
        "cluster": {**CHAT["cluster"], "gpus": ["h100-sxm-80gb"]},
        "serve": {
            **CHAT["serve"],
            "slo": {},
            "traffic": {"prompt_tokens": 1000, "output_tokens": 250, **traffic},
            **serve,
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def test_a_closed_loop_plan_is_sized_and_reported_at_its_clients(tmp_path):
    plan = resolve(_plan(tmp_path, {"concurrency": 40, "peak_factor": 2}, max_num_seqs=32))
    s = plan.serving
    assert s.concurrency == 40 and s.max_concurrency == 32
    assert (s.min_replicas, s.max_replicas) == (math.ceil(40 / 32), math.ceil(80 / 32))  # each client holds a slot
    clients = 80 / s.max_replicas
    assert s.in_flight_at_peak == pytest.approx(clients)
    # Little's law holds on the roofline's means the load point was sized with (the headlines are its P50s); the
    # median TTFT leaves out the mean prefill queue, a few ms at these 1000-token prompts
    median = {r.quantity: r.p50 / r.roofline for r in plan.ranges}
    ttft = s.ttft_p50_seconds / median["serving.ttft_seconds"]
    tpot = s.tpot_p50_seconds / median["serving.tpot_seconds"]
    assert 0.99 * clients < s.requests_per_second_at_peak * (ttft + 250 * tpot) <= clients
    assert s.ttft_seconds > s.ttft_p50_seconds and s.itl_p50_seconds < s.tpot_p50_seconds
    assert (
        0 < s.requests_per_second < s.requests_per_second_at_peak * s.max_replicas
    )  # 40 clients on average, 80 at peak


def test_one_client_gets_the_single_stream_latencies(tmp_path):
    s = resolve(_plan(tmp_path, {"concurrency": 1})).serving
    assert s.ttft_seconds == pytest.approx(s.ttft_batch1_seconds, rel=1e-6)
    assert s.tpot_seconds == pytest.approx(s.tpot_batch1_seconds, rel=1e-6)
    assert s.replicas_needed == 1 and s.replicas == max(1, s.replica_floor)  # the floor adds replicas, not latency


def test_a_rate_and_clients_together_are_refused_at_the_traffic(tmp_path):
    with pytest.raises(PlanInputError) as exc:
        resolve(_plan(tmp_path, {"concurrency": 8, "requests_per_second": 2}))
    (diag,) = exc.value.diagnostics
    assert (diag.code, diag.path) == ("conflicting-fields", "serve.traffic") and "not both" in diag.message


def test_no_load_at_all_is_refused(tmp_path):
    with pytest.raises(PlanInputError) as exc:
        resolve(_plan(tmp_path, {}))
    assert [d.code for d in exc.value.diagnostics] == ["missing-field"]


@pytest.mark.parametrize("example", ["image-captioning", "resnet50-triton"])
def test_clients_are_refused_where_no_closed_loop_is_modelled(tmp_path, example):
    plan = yaml.safe_load((REPO / "examples" / f"{example}.yaml").read_text())
    traffic = {k: v for k, v in plan["serve"]["traffic"].items() if k != "requests_per_second"}
    plan["serve"]["traffic"] = {**traffic, "concurrency": 4}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(PlanInputError) as exc:
        resolve(path)
    (diag,) = exc.value.diagnostics
    assert (diag.code, diag.path) == ("closed-loop-unsupported", "serve.traffic.concurrency") and diag.line > 1


@pytest.mark.parametrize("clients", [2, 64, 512, 4096])
def test_an_engine_busy_with_prefills_almost_all_the_time_still_gives_ordered_finite_latencies(clients):
    """100k-token prompts and 4-token answers: the others' prefills fill nearly every second of a request's life (the
    prefill queue's far tail)."""
    lengths = {"prompt_tokens": 100_000, "output_tokens": 4, "chunk_tokens": 8192}
    p = closed_loop_point(llama_8b_on_h100(), 4096, clients=clients, **lengths)
    values = (p.ttft_p50_seconds, p.ttft_mean_seconds, p.ttft_p99_seconds, p.tpot_p50_seconds)
    assert all(math.isfinite(v) and v > 0 for v in values)
    assert p.ttft_p50_seconds <= p.ttft_mean_seconds <= p.ttft_p99_seconds
