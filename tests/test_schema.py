"""Committed schemas match the models; examples validate against them independently (jsonschema)."""

import json

import jsonschema
import pytest
import yaml

from compiler.schema import plan_schema, resolved_schema
from tests.conftest import EXAMPLES, REPO


@pytest.mark.parametrize("name, build", [("plan.schema.json", plan_schema), ("resolved.schema.json", resolved_schema)])
def test_committed_schema_has_not_drifted(name, build):
    committed = json.loads((REPO / "schemas" / name).read_text())
    assert committed == build(), (
        f"schemas/{name} is stale: run `python -m compiler schema{' --resolved' if 'resolved' in name else ''} > schemas/{name}`"
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_validates_against_the_committed_schema(example):
    assert example.read_text().splitlines()[0] == "# yaml-language-server: $schema=../schemas/plan.schema.json"
    schema = json.loads((REPO / "schemas/plan.schema.json").read_text())
    jsonschema.validate(yaml.safe_load(example.read_text()), schema)


def test_schema_rejects_what_the_compiler_rejects():
    schema = json.loads((REPO / "schemas/plan.schema.json").read_text())
    bad = {"name": "x", "workload": "train", "model": {"preset": "llama-3.1-8b"}, "train": {"tokens": "lots"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_plan_json_of_every_example_matches_the_resolved_schema(tmp_path, cli):
    schema = json.loads((REPO / "schemas/resolved.schema.json").read_text())
    result = cli(*EXAMPLES, "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    for example in EXAMPLES:
        name = yaml.safe_load(example.read_text())["name"]
        jsonschema.validate(json.loads((tmp_path / name / "plan.json").read_text()), schema)
