"""The compiler's final cross-file check passes on real output and catches a file that disagrees."""

import json

import pytest

from compiler.consistency import InconsistentOutput, check_consistency
from compiler.pipeline import render
from compiler.targets.base import OutputFile
from tests.fixtures.resolved_plans import serving_plan, training_plan


def tampered(files, path, edit):
    return [OutputFile(f.path, edit(f.text) if f.path == path else f.text, f.mode) for f in files]


def test_real_output_is_consistent():
    for plan in (training_plan(), serving_plan()):
        check_consistency(plan, list(render(plan).files))


def test_a_wrong_batch_in_ds_config_is_caught():
    plan = training_plan()

    def wrong_batch(text):
        data = json.loads(text)
        data["train_batch_size"] += 1
        return json.dumps(data)

    with pytest.raises(AssertionError):
        check_consistency(plan, tampered(list(render(plan).files), "deepspeed/ds_config.json", wrong_batch))


def test_replicas_outside_the_autoscaler_bounds_are_caught():
    plan = serving_plan()
    bad = plan.model_copy(update={"serving": plan.serving.model_copy(update={"replicas": 99})})
    with pytest.raises(InconsistentOutput):
        check_consistency(bad, [])
