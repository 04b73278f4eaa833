"""The generated YAML is the same bytes whichever emitter writes it (compiler/targets/base.py).

libyaml's emitter is used only for documents `plain_yaml_data` accepts; for those it must agree with PyYAML's
own emitter byte for byte, or the output would depend on how PyYAML was built.
"""

from __future__ import annotations

import string

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.targets.base import _dump_yaml, dump_yaml_documents, plain_yaml_data
from tests.tools.realtools import require_tool

# What YAML treats specially, so that the generated text exercises quoting and styles.
TRICKY = [
    "on",
    "yes",
    "no",
    "null",
    "~",
    "true",
    "1e3",
    "0x1f",
    "12:30",
    "- ",
    ": ",
    " #",
    "---",
    "...",
    "'",
    '"',
    "\n",
    "  ",
    "\\",
    "&a",
    "*a",
    "!t",
    "%",
    "@",
    "`",
    "|",
    ">",
    "?",
    "{",
    "}",
    "[",
    "]",
    ",",
    "$(X)",
    "×",
    "—",
]
PRINTABLE_ASCII = string.ascii_letters + string.digits + string.punctuation + " "
keys = st.text(st.sampled_from(PRINTABLE_ASCII), min_size=1, max_size=99)
bmp = st.characters(
    min_codepoint=0xA0, max_codepoint=0xFFFD, exclude_characters="\u2028\u2029\ufeff", exclude_categories=("Cs",)
)
texts = st.lists(st.one_of(st.sampled_from(TRICKY), st.sampled_from(PRINTABLE_ASCII + "\n"), bmp), max_size=20).map(
    "".join
)
scalars = st.one_of(
    texts, st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text("x", min_size=200, max_size=400)
)
documents = st.dictionaries(
    keys,
    st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
        max_leaves=12,
    ),
    min_size=1,
    max_size=4,
)


def _libyaml():
    require_tool("libyaml", yaml.__with_libyaml__, "PyYAML built without libyaml: only its own emitter is used")
    return yaml.CSafeDumper


@settings(max_examples=400, deadline=None)
@given(documents)
def test_both_emitters_agree_on_plain_documents(document):
    assert plain_yaml_data(document)
    assert _dump_yaml(document, _libyaml()) == _dump_yaml(document, yaml.SafeDumper)


@pytest.mark.parametrize(
    "document",
    [
        {"": 1},  # libyaml writes an empty key as a simple key, PyYAML as '? '
        {"k" * 100: 1},  # PyYAML makes keys of 128+ characters complex; no key near that length is plain
        {"clé": 1},  # libyaml counts a key's length in bytes
        {"k": "emoji \U0001f600"},  # libyaml escapes characters outside the BMP
        {"k": "tab\there"},
        {"k": "nul\x00"},
        {"k": "next line\x85"},
        {"k": "bom\ufeff"},
        {"k": "cr\r"},
        {"k": ["nested", {"deep": "\x1b[31m"}]},
        {1: "non-string key"},
    ],
)
def test_documents_the_emitters_may_style_differently_are_not_plain(document):
    assert not plain_yaml_data(document)


def test_a_non_plain_document_is_written_by_pyyaml_itself():
    document = {"": "\U0001f600"}
    assert dump_yaml_documents([{"a": 1}, document]) == "a: 1\n---\n" + yaml.safe_dump(
        document, sort_keys=False, default_flow_style=False, width=1 << 30, allow_unicode=True
    )
