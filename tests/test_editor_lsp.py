"""The plan schema as an editor reads it: a real yaml-language-server over LSP completes catalog ids and reports
a bad quantity in the compiler's words, at the compiler's position."""

from __future__ import annotations

import pytest

from compiler.diagnostics import PlanInputError
from compiler.pipeline import resolve
from tests.conftest import REPO
from tests.tools.lsp import LanguageServer
from tests.tools.realtools import yaml_language_server

pytestmark = pytest.mark.realtool

PLAN = (REPO / "examples" / "llama3-8b-pretrain.yaml").read_text()


@pytest.fixture
def server(tmp_path):
    ls = LanguageServer(yaml_language_server(), tmp_path)
    yield ls
    ls.close()


def _with_modeline(text: str) -> str:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("# yaml-language-server:"))
    return f"# yaml-language-server: $schema={(REPO / 'schemas' / 'plan.schema.json').as_uri()}\n{body}\n"


def test_a_valid_plan_has_no_diagnostics(server, tmp_path):
    assert server.open(tmp_path / "plan.yaml", _with_modeline(PLAN)) == []


def test_a_bad_quantity_reads_as_the_compiler_says_it(server, tmp_path):
    text = _with_modeline(PLAN.replace("  tokens: 1T", "  tokens: lots"))
    diagnostics = server.open(tmp_path / "plan.yaml", text)
    line = text.splitlines().index("  tokens: lots")
    messages = [d["message"] for d in diagnostics if d["range"]["start"]["line"] == line]
    assert messages and all("expected a count like '7B', '2T' or '2e12'" in m for m in messages), diagnostics
    assert not any("Incorrect type" in m for m in messages)
    (tmp_path / "plan.yaml").write_text(text)
    with pytest.raises(PlanInputError) as refused:
        resolve(tmp_path / "plan.yaml")
    ours = refused.value.diagnostics[0]
    theirs = next(d["range"]["start"] for d in diagnostics if d["range"]["start"]["line"] == line)
    assert (ours.line, ours.column) == (theirs["line"] + 1, theirs["character"] + 1)  # the same place, 1- vs 0-based


def test_gpu_ids_interconnects_and_presets_complete(server, tmp_path):
    text = _with_modeline("name: x\nworkload: train\nmodel:\n  preset: \ncluster:\n  gpu: \n  interconnect: \n")
    path = tmp_path / "plan.yaml"
    server.open(path, text)
    lines = text.splitlines()
    at = lambda prefix: (lines.index(prefix), len(prefix))  # noqa: E731
    assert "h100-sxm-80gb" in server.complete(path, *at("  gpu: "))
    assert "ib-400g" in server.complete(path, *at("  interconnect: "))
    assert "llama-3.1-8b" in server.complete(path, *at("  preset: "))
