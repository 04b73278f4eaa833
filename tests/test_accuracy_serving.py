"""Serving sizing against the published TensorRT-LLM throughput table (benchmarks/accuracy_serving.py).

Every case must land within ±50 % of the published output tokens/s; the constants are not fitted to
these rows (see the benchmark's docstring for the run settings taken from the rows' source).
"""

from __future__ import annotations

import pytest

from benchmarks.accuracy_serving import INFERENCE_POINTS, TOLERANCE, serving_cases

# Cases the roofline over-predicts by more than the tolerance today (measured 2026-11-23 with the packaged
# catalog, the DeepGEMM-measured fp8 GEMM shares and the memory-bound kernels between the GEMMs): a Mixtral
# MoE run at +50.4% (expert load imbalance and grouped-GEMM efficiency are not modelled; the 16-bit
# Mixtral-8x7B on A100 passes at +49.9%, the 70B on A100 at +45%). Kept visible as a strict xfail — it must
# flip to passing, not be hidden — until the model gains a sourced term for it. See the issue note.
KNOWN_OVER_PREDICTED = {
    "Mixtral-8x22B FP8 8×H100-80GB-HBM3 2048/2048",
}


@pytest.fixture(scope="module")
def cases():
    return serving_cases()


def test_every_row_is_a_case(cases):
    rows = sum(1 for _ in INFERENCE_POINTS.open()) - 1
    assert len(cases) == rows


CASES = {c.name: c for c in serving_cases()}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="known large-batch over-prediction")) if n in KNOWN_OVER_PREDICTED else n
    for n in sorted(CASES)
])
def test_case_within_tolerance(name):
    c = CASES[name]
    assert abs(c.error) <= TOLERANCE, f"predicted {c.predicted_tokens_per_second:.0f} vs {c.published_tokens_per_second:.0f} tokens/s ({c.error:+.0%})"
