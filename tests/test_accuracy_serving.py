"""Serving sizing against the published TensorRT-LLM throughput table (benchmarks/accuracy_serving.py).

Every case must land within ±50 % of the published output tokens/s; the constants are not fitted to
these rows (see the benchmark's docstring for the run settings taken from the rows' source).
"""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("compiler.catalog.loader", reason="the packaged catalog loader is not in this tree yet")
pytest.importorskip("compiler.catalog.params", reason="parameter counting is not in this tree yet")

from benchmarks.accuracy_serving import INFERENCE_POINTS, TOLERANCE, serving_cases  # noqa: E402

pytestmark = pytest.mark.skipif(not INFERENCE_POINTS.exists(), reason="calibration data not mounted")


@pytest.fixture(scope="module")
def cases():
    return serving_cases()


def test_every_row_is_a_case(cases):
    rows = sum(1 for _ in INFERENCE_POINTS.open()) - 1
    assert len(cases) == rows


def test_each_case_within_tolerance(cases):
    outside = [f"{c.name}: predicted {c.predicted_tokens_per_second:.0f} vs {c.published_tokens_per_second:.0f} "
               f"tokens/s ({c.error:+.0%})" for c in cases if abs(c.error) > TOLERANCE]
    assert not outside, "\n".join(outside)


def test_median_error_is_reported(cases):
    median = statistics.median(abs(c.error) for c in cases)
    assert median <= TOLERANCE
