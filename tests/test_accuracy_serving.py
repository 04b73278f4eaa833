"""Serving sizing against the published TensorRT-LLM throughput table (benchmarks/accuracy_serving.py).

Every case must land within ±50 % of the published output tokens/s; the constants are not fitted to
these rows (see the benchmark's docstring for the run settings taken from the rows' source).
"""

from __future__ import annotations

import pytest

from benchmarks.accuracy_serving import INFERENCE_POINTS, TOLERANCE, serving_cases

# None today. Mixtral-8x22B fp8 (+50.4% while its routed experts ran at the dense fp8 GEMM rate) is at +38% with
# DeepGEMM's grouped-GEMM rate for few rows per expert and the per-layer decode time; the 16-bit Mixtral-8x7B on A100
# is at +43%, the 70B on A100 at +35% (measured 2026-11-24): the largest errors, all optimistic. A case over the tolerance goes here as a
# strict xfail with its reason — visible, to be flipped, not hidden.
KNOWN_OVER_PREDICTED: set[str] = set()


@pytest.fixture(scope="module")
def cases():
    return serving_cases()


def test_every_row_is_a_case(cases):
    rows = sum(1 for _ in INFERENCE_POINTS.open()) - 1
    assert len(cases) == rows


CASES = {c.name: c for c in serving_cases()}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="known large-batch over-prediction"))
        if n in KNOWN_OVER_PREDICTED
        else n
        for n in sorted(CASES)
    ],
)
def test_case_within_tolerance(name):
    c = CASES[name]
    assert abs(c.error) <= TOLERANCE, (
        f"predicted {c.predicted_tokens_per_second:.0f} vs {c.published_tokens_per_second:.0f} tokens/s ({c.error:+.0%})"
    )
