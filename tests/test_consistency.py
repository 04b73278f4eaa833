"""The compiler's final cross-file check passes on real output and catches a file that disagrees."""

import pytest

from compiler.consistency import InconsistentOutput, check_consistency
from compiler.pipeline import render
from compiler.targets.base import OutputFile
from tests.fixtures.resolved_plans import serving_plan, training_plan, with_framework_config


def tampered(files, path, edit):
    return [OutputFile(f.path, edit(f.text) if f.path == path else f.text, f.mode) for f in files]


def test_real_output_is_consistent():
    for plan in (training_plan(), serving_plan()):
        check_consistency(plan, list(render(plan).files))


def test_a_wrong_batch_in_the_deepspeed_config_is_caught():
    plan = training_plan()
    ds = plan.deployment.frameworks.deepspeed_config
    wrong = with_framework_config(plan, "deepspeed_config", train_batch_size=ds.train_batch_size + 1)
    with pytest.raises(AssertionError, match="train_batch_size"):
        check_consistency(wrong, list(render(plan).files))


def test_a_wrong_node_count_in_the_sbatch_is_caught():
    plan = training_plan()

    def fewer_nodes(text):
        return text.replace("#SBATCH --nodes=8\n", "#SBATCH --nodes=4\n")

    with pytest.raises(AssertionError, match="--nodes"):
        check_consistency(plan, tampered(list(render(plan).files), "slurm/train.sbatch", fewer_nodes))


def test_replicas_outside_the_autoscaler_bounds_are_caught():
    plan = serving_plan()
    bad = plan.model_copy(update={"serving": plan.serving.model_copy(update={"replicas": 99})})
    with pytest.raises(InconsistentOutput):
        check_consistency(bad, [])
