"""Mutated plans compile or give located diagnostics (exit 2/1) — never a traceback."""

import pytest
from hypothesis import HealthCheck, given, settings

from compiler.source import load_yaml_text
from tests.conftest import EXAMPLES
from tests.fuzzing.mutations import mutated_plan, outcome


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=mutated_plan(EXAMPLES))
def test_mutated_examples_never_crash(doc, tmp_path):
    assert outcome(doc, tmp_path) in {"compiled", "invalid", "infeasible", "unrepresentable"}


@pytest.mark.parametrize("text", [
    "name: x\n" + "a: " + "[" * 200 + "]" * 200 + "\n",
    "a: &a [1]\n" + "".join(f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i-1}'}, *{'a' if i == 0 else f'b{i-1}'}]\n" for i in range(40)),
    "name: !!python/name:os.system x\n",
    "\x00\x01 binary",
    "name: [unclosed\n",
    "? [complex, key]\n: value\n",
    "<<: {name: x}\n",
])
def test_hostile_yaml_is_refused_with_a_diagnostic(text):
    from compiler.diagnostics import PlanInputError

    with pytest.raises(PlanInputError) as err:
        load_yaml_text(text, "plan.yaml")
    assert err.value.diagnostics[0].code.startswith(("yaml", "file"))
