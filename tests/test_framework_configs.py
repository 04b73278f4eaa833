"""The typed framework configs (compiler/plan/framework_configs.py): every emitted deepspeed/ds_config.json,
fsdp/accelerate_config.yaml and fsdp/fsdp_tp.json reads back into its model and dumps to the same mapping, and the
models refuse a key the files never hold."""

from __future__ import annotations

import json
from functools import cache

import pytest
from pydantic import ValidationError

from compiler.pipeline import render, resolve
from compiler.plan.framework_configs import AccelerateConfig, DeepSpeedConfig, FsdpTpSettings
from compiler.targets.base import dump_json, load_generated_yaml
from tests.conftest import EXAMPLES
from tests.fixtures.resolved_plans import deployed, training_plan

# file (a field of deployment.files) -> (its model, the field of deployment.frameworks it is written from)
CONFIGS = {
    "ds_config": (DeepSpeedConfig, "deepspeed_config"),
    "accelerate_config": (AccelerateConfig, "accelerate_config"),
    "fsdp_tp_config": (FsdpTpSettings, "fsdp_tp"),
}


@cache
def example_outputs(stem: str):
    plan = resolve(next(path for path in EXAMPLES if path.stem == stem))
    return plan, {f.path: f.text for f in render(plan).files}


def parse(path: str, text: str) -> dict:
    return load_generated_yaml(text) if path.endswith(".yaml") else json.loads(text)


def assert_round_trip(plan, texts: dict[str, str]) -> int:
    """Each framework file of the plan parses into its model, equals the decided object and dumps to the same
    mapping (and, for JSON, the same bytes); returns how many files were checked."""
    checked = 0
    for field, (model, decided_field) in CONFIGS.items():
        path = getattr(plan.deployment.files, field)
        decided = getattr(plan.deployment.frameworks, decided_field)
        assert (path in texts) == (decided is not None), path
        if path not in texts:
            continue
        written = parse(path, texts[path])
        parsed = model.model_validate(written)
        assert parsed == decided, path
        assert parsed.as_written() == written, path
        if path.endswith(".json"):
            assert dump_json(parsed.as_written()) == texts[path], path
        checked += 1
    return checked


@pytest.mark.parametrize("stem", [path.stem for path in EXAMPLES])
def test_every_examples_framework_files_read_back_into_their_models(stem):
    plan, texts = example_outputs(stem)
    if plan.workload not in ("train", "finetune"):
        assert not any(getattr(plan.deployment.files, field) in texts for field in CONFIGS)
        return
    assert_round_trip(plan, texts)


def test_the_examples_write_each_framework_file():
    """The round trip above is not vacuous: the examples emit each of the three files."""
    written = {field for path in EXAMPLES for field in CONFIGS if _emits(path.stem, field)}
    assert written == set(CONFIGS)


def _emits(stem: str, field: str) -> bool:
    plan, texts = example_outputs(stem)
    return plan.deployment is not None and getattr(plan.deployment.files, field) in texts


def _variant(precision: str = "bf16", recipe: dict | None = None, **parallelism):
    train = {
        "tokens": "1T",
        "seq_len": 8192,
        "global_batch_tokens": "4M",
        "deadline": "30d",
        "entrypoint": {"script": "train.py"},
        "recipe": recipe or {},
    }
    cluster = {
        "scheduler": "slurm",
        "gpus": ["h100-sxm-80gb"],
        "gpus_per_node": 8,
        "slurm": {"partition": "gpu", "container_image": "nvcr.io/nvidia/pytorch:25.08-py3"},
    }
    plan = training_plan(precision=precision, train=train, cluster=cluster)
    return deployed(plan.model_copy(update={"parallelism": plan.parallelism.model_copy(update=parallelism)}))


VARIANTS = {  # the optional blocks the examples leave out
    "deepspeed zero3 offload fp16 constant": _variant(
        "fp16",
        {"schedule": "constant"},
        framework="deepspeed",
        zero_stage=3,
        offload_optimizer=True,
        offload_params=True,
    ),
    "deepspeed zero0 fp32 linear to 0 no recompute": _variant(
        "fp32", {"schedule": "linear", "lr_min": 0}, framework="deepspeed", zero_stage=0, recompute="none"
    ),
    "fsdp hsdp shard group": _variant(
        framework="fsdp", zero_stage=3, tp=1, dp=64, global_batch=1024, shard_group_gpus=8, recompute="full"
    ),
    "fsdp2 pp2 vp2 tp2": _variant(
        framework="fsdp", zero_stage=3, tp=2, pp=2, vp=2, dp=16, global_batch=256, pp_stage_layers=[15, 17]
    ),
    "fsdp2 cp2 selective": _variant(
        framework="fsdp", zero_stage=3, tp=1, cp=2, dp=32, global_batch=512, recompute="selective"
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_optional_blocks_read_back_into_their_models(name):
    plan = VARIANTS[name]
    texts = {f.path: f.text for f in render(plan).files}
    assert assert_round_trip(plan, texts) == 1


def test_a_config_without_an_optional_block_leaves_its_key_out():
    plan = VARIANTS["deepspeed zero0 fp32 linear to 0 no recompute"]
    written = plan.deployment.frameworks.deepspeed_config.as_written()
    assert written["zero_optimization"] == {"stage": 0}
    assert not {"bf16", "fp16", "activation_checkpointing"} & set(written)
    assert written["scheduler"]["type"] == "WarmupDecayLR"


def _decided(field: str):
    """One decided config of each kind, as the file holds it."""
    plan = {
        "deepspeed_config": VARIANTS["deepspeed zero3 offload fp16 constant"],
        "accelerate_config": VARIANTS["fsdp hsdp shard group"],
        "fsdp_tp": example_outputs("llama3-70b-lora-k8s")[0],
    }[field]
    return getattr(plan.deployment.frameworks, field).as_written()


@pytest.mark.parametrize(
    "model, field, where",
    [
        (DeepSpeedConfig, "deepspeed_config", ()),
        (DeepSpeedConfig, "deepspeed_config", ("zero_optimization",)),
        (DeepSpeedConfig, "deepspeed_config", ("zero_optimization", "offload_param")),
        (DeepSpeedConfig, "deepspeed_config", ("scheduler", "params")),
        (DeepSpeedConfig, "deepspeed_config", ("fp16",)),
        (AccelerateConfig, "accelerate_config", ()),
        (AccelerateConfig, "accelerate_config", ("fsdp_config",)),
        (FsdpTpSettings, "fsdp_tp", ()),
        (FsdpTpSettings, "fsdp_tp", ("lora",)),
    ],
)
def test_an_unknown_key_is_refused(model, field, where):
    written = _decided(field)
    model.model_validate(written)  # the file as written is accepted
    block = written
    for key in where:
        block = block[key]
    block["zero_optimisation"] = 1  # a misspelling the framework would ignore or refuse
    with pytest.raises(ValidationError, match="zero_optimisation"):
        model.model_validate(written)
