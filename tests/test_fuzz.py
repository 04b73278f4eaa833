"""Mutated plans compile or give located diagnostics (exit 2/1) — never a traceback.

The long run is benchmarks/fuzz.py; every crash it found is a plan in tests/fuzzing/regressions/ whose
first line says the outcome it must have now (`# expect: compiled|infeasible|invalid`).
"""

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.source import load_yaml_text
from compiler.units import parse_count, parse_seconds
from tests.conftest import EXAMPLES
from tests.fuzzing.mutations import (
    CATALOG_NAME,
    COUNT_UNITS,
    SECOND_UNITS,
    classify,
    mutate,
    mutated_outcome,
    plan_text,
    respell,
    run_plan,
    scale,
)

REGRESSIONS = sorted((Path(__file__).parent / "fuzzing" / "regressions").glob("*.yaml"))
NOT_CRASHES = {"compiled", "invalid", "infeasible", "unrepresentable"}


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(example=st.sampled_from(EXAMPLES), rng=st.randoms(use_true_random=False))
def test_mutated_examples_never_crash(example, rng, tmp_path):
    mutation, text, outcome = mutated_outcome(example, rng, tmp_path / "plan")
    assert outcome.kind in NOT_CRASHES, f"{outcome.signature}\nmutations: {mutation.notes}\n{text}\n{outcome.stderr}"


def test_most_mutated_plans_stay_valid(tmp_path):
    """The mutations exercise sizing and rendering, not only validation: most plans still compile."""
    outcomes = [
        mutated_outcome(EXAMPLES[i % len(EXAMPLES)], random.Random(i), tmp_path / "plan")[2].kind for i in range(60)
    ]
    reached_sizing = sum(kind in ("compiled", "infeasible") for kind in outcomes)
    assert reached_sizing >= 0.4 * len(outcomes), outcomes
    assert "invalid" in outcomes


@pytest.mark.parametrize("plan", REGRESSIONS, ids=lambda p: p.stem)
def test_fuzz_regression(plan, tmp_path):
    """A plan that once crashed the compiler now has the outcome its first line names."""
    text = plan.read_text(encoding="utf-8")
    expected = re.match(r"# expect: (\w+)", text)[1]
    catalog = plan.with_suffix(".catalog")  # written beside the plan as the file its cluster.catalog names
    files = {CATALOG_NAME: catalog.read_bytes()} if catalog.exists() else {}
    outcome = run_plan(text, tmp_path / "plan", files)
    assert outcome.kind == expected, outcome.stderr


def test_mutations_are_reproducible():
    first = plan_text(mutate({"name": "x", "train": {"tokens": "1T"}, "cluster": {"count": 8}}, random.Random(7)))
    again = plan_text(mutate({"name": "x", "train": {"tokens": "1T"}, "cluster": {"count": 8}}, random.Random(7)))
    assert first == again


def test_value_mutations_keep_units():
    assert scale("1T", 2) == "2T"
    assert scale("$400k", 0.5) == "$200k"
    assert scale("1.5s", 4) == "6s"
    assert scale(64, 0.5) == 32
    assert scale(10**400, 2) == 10**400  # beyond floats: left alone
    for seed in range(20):  # the same quantity in another unit
        rng = random.Random(seed)
        assert parse_seconds(respell("30d", SECOND_UNITS, rng)) == pytest.approx(30 * 86400, rel=1e-5)
        assert parse_count(respell("2T", COUNT_UNITS, rng)) == pytest.approx(2e12, rel=1e-5)


def test_classifier_calls_an_unlocated_diagnostic_a_crash():
    plan = "/tmp/p.yaml"
    located = f"{plan}:3:5: error: train.tokens: expected a count  [invalid-quantity]\n    tokens: x\n        ^\n"
    assert classify(2, located, plan).kind == "invalid"
    assert classify(2, f"{plan}: error: something  [oops]\n", plan).kind == "crash"
    assert classify(2, "usage: mlinfra-compile\n", plan).kind == "crash"
    assert classify(2, f"{plan}:3:5: error: train.x\ny: unknown key 'x\ny'  [unknown-key]\n", plan).kind == "crash"
    assert (
        classify(
            3,
            "internal error\nTraceback (most recent call last):\n  File \"/x/compiler/a.py\", line 1, in f\nKeyError: 'fp32'\n",
            plan,
        ).signature
        == "KeyError in a.py:f"
    )
    assert classify(4, f"{plan}: error: infeasible: too big  [infeasible]\n", plan).kind == "infeasible"


@pytest.mark.parametrize(
    "text",
    [
        "name: x\n" + "a: " + "[" * 200 + "]" * 200 + "\n",
        "a: &a [1]\n"
        + "".join(
            f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i - 1}'}, *{'a' if i == 0 else f'b{i - 1}'}]\n" for i in range(40)
        ),
        "name: !!python/name:os.system x\n",
        "\x00\x01 binary",
        "name: [unclosed\n",
        "? [complex, key]\n: value\n",
        "<<: {name: x}\n",
    ],
)
def test_hostile_yaml_is_refused_with_a_diagnostic(text):
    from compiler.diagnostics import PlanInputError

    with pytest.raises(PlanInputError) as err:
        load_yaml_text(text, "plan.yaml")
    assert err.value.diagnostics[0].code.startswith(("yaml", "file"))


def test_a_forbidden_character_is_located_where_it_is():
    from compiler.diagnostics import PlanInputError

    with pytest.raises(PlanInputError) as err:
        load_yaml_text("name: x\r\nworkload: \x00serve\n", "plan.yaml")
    d = err.value.diagnostics[0]
    assert (d.line, d.column, d.code) == (2, 11, "yaml-syntax")
    assert "'\\x00'" in d.message


def test_a_shipped_module_inside_a_quoted_configmap_value_is_code_not_an_undecided_value():
    from tests.fuzzing.mutations import _shipped_code_line

    code = {"self.sequence_mesh = None  # the TP mesh", 'x = {"a": None}'}
    body = 'data:\n  m.py: "import os\\nself.sequence_mesh = None  # the TP mesh\\nx = {\\"a\\": None}\\n"\n  n: None\n'
    first, second, third = (m.start() for m in re.finditer("None", body))
    assert _shipped_code_line(body, first, code) and _shipped_code_line(body, second, code)
    assert not _shipped_code_line(body, third, code)  # a value outside the module is still caught
