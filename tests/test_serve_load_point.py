"""Serving latency at the load the plan states: the operating point at peak traffic, one request
alone, and the capacity limit; a pinned max_num_seqs; the Pareto front as shown."""

from __future__ import annotations

import pytest
import yaml

from compiler.pipeline import compile_plan, resolve
from tests.conftest import REPO

CHAT = yaml.safe_load((REPO / "examples" / "llama3-8b-chat.yaml").read_text())


def _serve(tmp_path, rate: float, model: str = "llama-3.1-8b", **serve):
    plan = {
        **CHAT,
        "model": {"preset": model},
        "budget": {},
        "serve": {
            **CHAT["serve"],
            "slo": {},
            "traffic": {**CHAT["serve"]["traffic"], "requests_per_second": rate},
            **serve,
        },
        "cluster": {**CHAT.get("cluster", {}), "gpus": ["h100-sxm-80gb"]},
    }
    path = tmp_path / f"plan-{rate}.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-72b"])
def test_as_load_goes_to_zero_latency_is_one_prefill_and_one_step(tmp_path, model):
    s = resolve(_serve(tmp_path, 0.001, model)).serving
    assert s.ttft_seconds == pytest.approx(s.ttft_batch1_seconds, rel=0.02)
    assert s.tpot_seconds == pytest.approx(s.tpot_batch1_seconds, rel=0.02)
    assert s.ttft_seconds < 0.5 and s.utilization_at_peak < 0.01  # not the 49 s - 8 min a fixed 60% design load gave


def test_a_light_load_reports_what_a_user_sees_not_the_max_batch(tmp_path):
    """8B on one H100 at 2 req/s: TPOT at its operating point is far below TPOT at max concurrency (about 4x
    what a user sees, in the issue)."""
    s = resolve(_serve(tmp_path, 2)).serving
    assert s.replicas_needed == 1 and s.tpot_at_capacity_seconds > 3 * s.tpot_seconds
    assert s.tpot_batch1_seconds <= s.tpot_p50_seconds <= s.tpot_seconds <= s.tpot_at_capacity_seconds
    assert s.ttft_batch1_seconds <= s.ttft_p50_seconds <= s.ttft_seconds


def test_latency_grows_with_load(tmp_path):
    tpots = [resolve(_serve(tmp_path, rate)).serving for rate in (0.1, 1, 4)]
    assert [s.in_flight_at_peak for s in tpots] == sorted(s.in_flight_at_peak for s in tpots)
    assert tpots[0].tpot_seconds < tpots[-1].tpot_seconds


def test_a_pinned_max_num_seqs_is_the_batch_the_engine_gets(tmp_path):
    rendered = compile_plan(_serve(tmp_path, 2, max_num_seqs=48))
    files = {f.path: f.text for f in rendered.files}
    assert '"max_concurrency": 48' in files["plan.json"]
    assert "--max-num-seqs=48" in files["vllm/serve.sh"] or "max-num-seqs: 48" in files["vllm/config.yaml"]


def test_serving_alternatives_are_a_front_on_the_axes_shown(tmp_path):
    plan = resolve(REPO / "examples" / "llama3-70b-fp8-slo.yaml")
    points = [(a.usd, a.seconds) for a in plan.alternatives]
    dominated = [p for p in points if any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in points)]
    assert len(points) > 1 and dominated == []
