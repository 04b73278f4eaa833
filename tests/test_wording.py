"""Sizing returns reasons as data and passes/wording.py words them: every code sizing and the passes use has one
sentence taking exactly the facts given, no sentence is left unused, and sizing builds no sentences of its own."""

from __future__ import annotations

import ast
import inspect
import re

from compiler.passes.wording import SENTENCES, words
from compiler.sizing.reasons import because
from tests.conftest import REPO

SIZING = sorted((REPO / "compiler/sizing").rglob("*.py"))  # with its train/, serve/ and cnn/ packages
CALLERS = SIZING + sorted((REPO / "compiler/passes").rglob("*.py"))  # who may give a reason
# Words an f-string in sizing may hold outside its fields: the compact labels of a configuration
# ("8 × h100 TP8 PP1 DP1 ZeRO-1 mb1 none offload", "2 × (8 × h100) bf16 TP8 PP1 batch 64") and the keys of
# the search's own tables.
LABEL_WORDS = {"batch", "host", "dtype", "price", "nodes", "offload", "link"}


def _rule_reason(node: ast.Call) -> tuple[str, frozenset[str]]:
    """A row of frameworks.AUTO_RULES: AutoRule(framework, reason code, applies, facts), `facts` a lambda returning the
    dict of the facts its `because(rule.reason, **rule.facts(layout))` passes."""
    code, facts = node.args[1], node.args[3]
    assert isinstance(code, ast.Constant) and isinstance(facts, ast.Lambda) and isinstance(facts.body, ast.Dict)
    return code.value, frozenset(k.value for k in facts.body.keys)


def _because_calls() -> list[tuple[str, str, frozenset[str]]]:
    calls = []
    for path in CALLERS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node.func, "id", None) if isinstance(node, ast.Call) else None
            if name == "AutoRule":
                calls.append((f"{path.name}:{node.lineno}", *_rule_reason(node)))
            elif name == "because":
                code = node.args[0]
                if isinstance(code, ast.Attribute) and ast.unparse(code) == "rule.reason":  # an AutoRule row's
                    continue
                assert isinstance(code, ast.Constant), f"{path.name}:{node.lineno}: a reason code is a literal"
                calls.append((f"{path.name}:{node.lineno}", code.value, frozenset(k.arg for k in node.keywords)))
    return calls


def test_every_reason_code_in_sizing_is_worded_with_the_facts_it_is_given():
    calls = _because_calls()
    assert calls
    for where, code, facts in calls:
        assert code in SENTENCES, f"{where}: reason '{code}' has no wording in compiler/passes/wording.py"
        expected = set(inspect.signature(SENTENCES[code]).parameters)
        assert facts == expected, f"{where}: '{code}' is given {sorted(facts)}, its sentence takes {sorted(expected)}"
    assert set(SENTENCES) == {code for _, code, _ in calls}, "wording for codes nothing uses"


def test_sizing_builds_no_sentences():
    for path in SIZING:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        raised = {id(n) for r in ast.walk(tree) if isinstance(r, ast.Raise) for n in ast.walk(r)}  # a bug's message
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and id(node) not in raised:
                text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
                prose = set(re.findall(r"[a-z]{3,}", text)) - LABEL_WORDS
                assert not prose, f"{path.name}:{node.lineno}: sizing formats text ({sorted(prose)}): return a Reason"


def test_a_reason_is_data_and_its_words_come_from_one_place():
    reason = because("nodes-not-filled", per_node=8, gpus=12)
    assert reason == because("nodes-not-filled", gpus=12, per_node=8) and reason["gpus"] == 12
    assert words(reason) == "12 GPUs do not fill nodes of 8"
