"""fsdp/accelerate_config.yaml: sharding strategy from the ZeRO stage, machine and process counts,
mixed precision, and acceptance by Accelerate's own config loader when it is installed."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from compiler.targets import fsdp
from tests.fixtures.resolved_plans import deployed, training_plan
from tests.test_target_torchrun import realtools, small_training_plan


def fsdp_plan(zero_stage=3, **update):
    plan = small_training_plan(nodes=2, gpus_per_node=8, framework="fsdp", zero_stage=zero_stage)
    return (
        deployed(plan.model_copy(update={"parallelism": plan.parallelism.model_copy(update=update)}))
        if update
        else plan
    )


def config_of(plan) -> dict:
    return yaml.safe_load(fsdp.render(plan)[0].text)


def test_applies_only_to_fsdp():
    assert fsdp.applies(fsdp_plan())
    assert not fsdp.applies(training_plan())  # the fixture is deepspeed


@pytest.mark.parametrize(
    ("stage", "strategy"), [(0, "NO_SHARD"), (1, "SHARD_GRAD_OP"), (2, "SHARD_GRAD_OP"), (3, "FULL_SHARD")]
)
def test_sharding_strategy_from_zero_stage(stage, strategy):
    fsdp = config_of(fsdp_plan(zero_stage=stage))["fsdp_config"]
    assert fsdp["fsdp_sharding_strategy"] == fsdp["fsdp_reshard_after_forward"] == strategy


@pytest.mark.parametrize(
    ("hsdp", "reshard", "strategy"),
    [
        (False, True, "FULL_SHARD"),
        (False, False, "SHARD_GRAD_OP"),
        (True, True, "HYBRID_SHARD"),
        (True, False, "HYBRID_SHARD_ZERO2"),
    ],
)
def test_reshard_after_forward_false_keeps_gathered_weights(hsdp, reshard, strategy):
    """train.reshard_after_forward: false is sized with the gathered weights kept to the backward; ZeRO-3's FULL_SHARD
    frees them after the forward. Before: FULL_SHARD (or HYBRID_SHARD) whatever the plan said."""
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=8,
        framework="fsdp",
        zero_stage=3,
        train={"tokens": "1M", "seq_len": 128, "reshard_after_forward": reshard},
    )
    plan = deployed(
        plan.model_copy(
            update={"parallelism": plan.parallelism.model_copy(update={"shard_group_gpus": 8 if hsdp else 0})}
        )
    )
    fsdp = config_of(plan)["fsdp_config"]
    assert fsdp["fsdp_sharding_strategy"] == fsdp["fsdp_reshard_after_forward"] == strategy


def test_counts_and_precision():
    cfg = config_of(fsdp_plan())
    assert cfg["distributed_type"] == "FSDP"
    assert cfg["num_machines"] == 2
    assert cfg["num_processes"] == 16  # 2 nodes × 8 GPUs: Accelerate counts processes over all machines
    assert cfg["mixed_precision"] == "bf16"
    assert cfg["fsdp_config"]["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"


def test_recompute_and_offload_switches():
    assert config_of(fsdp_plan(recompute="full"))["fsdp_config"]["fsdp_activation_checkpointing"] is True
    assert config_of(fsdp_plan(recompute="none"))["fsdp_config"]["fsdp_activation_checkpointing"] is False
    assert config_of(fsdp_plan(offload_params=True))["fsdp_config"]["fsdp_offload_params"] is True


def test_accelerate_loads_it(tmp_path):
    python = str(realtools().tool_python("torch"))
    if subprocess.run([python, "-c", "import accelerate"], capture_output=True).returncode != 0:
        pytest.skip("accelerate is not installed in the torch tool venv")
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(fsdp.render(fsdp_plan())[0].text)
    code = (
        "import sys; from accelerate.commands.config.config_args import ClusterConfig; "
        "c = ClusterConfig.from_yaml_file(sys.argv[1]); "
        "print(c.distributed_type, c.num_machines, c.num_processes, c.mixed_precision)"
    )
    result = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["DistributedType.FSDP", "2", "16", "bf16"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text() + "num_machine: 3\n")  # a typo must be refused
    assert subprocess.run([python, "-c", code, str(bad)], capture_output=True, timeout=120).returncode != 0
