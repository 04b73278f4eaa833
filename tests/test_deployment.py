"""The deployment decisions (passes/resolve_deployment.py) and the plan fields that used to be ignored:
train.checkpoint.every, train.lora.alpha and train.data now reach the job; fields that change no output are refused."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path

import pytest
import yaml

from compiler.diagnostics import PlanInputError
from compiler.diffing import decision_changes
from compiler.pipeline import render_files, resolve, resolve_text
from compiler.schema import resolved_schema
from tests.conftest import REPO
from tests.fixtures.resolved_plans import deployed, training_plan

BASE_TRAIN = {
    "tokens": "1T",
    "seq_len": 8192,
    "global_batch_tokens": "4M",
    "deadline": "30d",
    "checkpoint": {"keep": 3, "dir": "/lustre/ckpt"},
    "entrypoint": {"script": "train.py", "args": ["--config", "cfg.yaml"]},
}


def files(plan, *targets) -> dict[str, str]:
    return {f.path: f.text for f in render_files(plan, only=targets)}


def exports(text: str) -> dict[str, str]:
    """The launcher's `export NAME=VALUE` lines, VALUE as the shell reads it."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export ") :].partition("=")
            out[name] = shlex.split(value)[0] if value else ""
    return out


def megatron_value(text: str, flag: str) -> str:
    words = shlex.split(" ".join(line for line in text.splitlines() if line.startswith("  --")))
    return words[words.index(flag) + 1]


# ----------------------------------------------------------------------------------------------- checkpoint.every
def test_checkpoint_every_reaches_the_launch_environment_and_megatron():
    """every: 2h on a 9.5 s step = 758 steps; without it the sizing's 3600 s Young-Daly interval = 379 steps."""
    given = training_plan(train={**BASE_TRAIN, "checkpoint": {"every": "2h", "keep": 3, "dir": "/lustre/ckpt"}})
    auto = training_plan(train=BASE_TRAIN)
    assert given.deployment.launcher.checkpoint.source == "plan"
    assert auto.deployment.launcher.checkpoint.source == "young-daly"
    env = exports(files(given, "torchrun")["launch/torchrun.sh"])
    assert env["MLINFRA_CHECKPOINT_INTERVAL_SECONDS"] == "7200"
    assert env["MLINFRA_CHECKPOINT_INTERVAL_STEPS"] == "758"
    assert env["MLINFRA_CHECKPOINT_KEEP"] == "3"
    assert exports(files(auto, "torchrun")["launch/torchrun.sh"])["MLINFRA_CHECKPOINT_INTERVAL_STEPS"] == "379"
    assert megatron_value(files(given, "megatron")["megatron/args.sh"], "--save-interval") == "758"
    assert megatron_value(files(auto, "megatron")["megatron/args.sh"], "--save-interval") == "379"


# ----------------------------------------------------------------------------------------------- lora.alpha
@pytest.mark.parametrize("alpha", [8, 64, 12.5])
def test_lora_alpha_reaches_the_fine_tune_launch(alpha):
    plan = training_plan(
        workload="finetune",
        train={**BASE_TRAIN, "method": "lora", "lora": {"rank": 32, "alpha": alpha, "targets": ["q", "v"]}},
    )
    env = exports(files(plan, "torchrun")["launch/torchrun.sh"])
    assert float(env["MLINFRA_LORA_ALPHA"]) == alpha
    assert env["MLINFRA_LORA_RANK"] == "32" and env["MLINFRA_LORA_TARGETS"] == "q,v"
    assert env["MLINFRA_LORA_METHOD"] == "lora"
    assert plan.deployment.launcher.lora.alpha == alpha


def test_a_qlora_launch_says_its_base_is_quantised():
    """The script cannot tell QLoRA from LoRA by rank, alpha and targets: the method is exported too."""
    plan = training_plan(
        workload="finetune", train={**BASE_TRAIN, "method": "qlora", "lora": {"rank": 8, "targets": ["q", "v"]}}
    )
    assert exports(files(plan, "torchrun")["launch/torchrun.sh"])["MLINFRA_LORA_METHOD"] == "qlora"


QLORA_PLAN = """name: tiny-qlora
workload: finetune
precision: %s
model:
  architecture: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, max_position: 512}
train:
  tokens: 10M
  seq_len: 64
  global_batch: 8
  framework: %s
  method: qlora
  lora: {rank: 4, alpha: 8, targets: [q, v, down]}
cluster: {gpu: h100-sxm-80gb, count: 2, gpus_per_node: 2, scheduler: slurm, slurm: {partition: gpu}}
"""


@pytest.mark.parametrize(("precision", "storage"), [("bf16", "bfloat16"), ("fp16", "float16")])
def test_qlora_under_fsdp_packs_nf4_in_the_dtype_fsdp_casts_to(precision, storage):
    """FSDP-QLoRA: the NF4 storage is accelerate's mixed-precision dtype, exported for the script; the accelerate config
    turns use_orig_params off (PEFT's guide); DDP keeps bitsandbytes' uint8 and exports none."""
    plan = resolve_text(QLORA_PLAN % (precision, "fsdp"))
    out = files(plan, "torchrun", "fsdp")
    assert exports(out["launch/torchrun.sh"])["MLINFRA_LORA_QUANT_STORAGE"] == storage
    accelerate = yaml.safe_load(out["fsdp/accelerate_config.yaml"])
    assert accelerate["fsdp_config"]["fsdp_use_orig_params"] is False and accelerate["mixed_precision"] == precision
    (decision,) = [d for d in plan.deployment.decisions if d.topic == "QLoRA under FSDP"]
    assert storage in decision.choice and "quant_storage" in decision.reason
    ddp = resolve_text(QLORA_PLAN % (precision, "ddp"))
    assert ddp.deployment.launcher.lora.quant_storage is None
    assert "MLINFRA_LORA_QUANT_STORAGE" not in files(ddp, "torchrun")["launch/torchrun.sh"]


def test_full_training_exports_no_lora_settings():
    assert "MLINFRA_LORA" not in files(training_plan(), "torchrun")["launch/torchrun.sh"]


# ----------------------------------------------------------------------------------------------- train.data
HOSTILE_DATA = '/lustre/data sets/it\'s "fine"'


def test_train_data_path_reaches_the_job_and_is_mounted():
    plan = training_plan(train={**BASE_TRAIN, "data": HOSTILE_DATA})
    out = files(plan, "torchrun", "slurm", "k8s_training")
    assert exports(out["launch/torchrun.sh"])["MLINFRA_DATA"] == HOSTILE_DATA
    # pyxis: the dataset at the same path inside the container, after the submit directory
    mounts_line = next(
        line
        for line in out["slurm/train.sbatch"].splitlines()
        if line.startswith('container_mounts="$container_mounts,"')
    )
    # (the space in fstab's spelling, \\040: pyxis hands enroot "SRC DST FLAGS" lines; tests/test_launch.py reads them back)
    escaped = HOSTILE_DATA.replace(" ", "\\040")
    assert (
        shlex.split(mounts_line.split("=", 1)[1])[0]
        == f"$container_mounts,{escaped}:{escaped},/lustre/ckpt:/lustre/ckpt"
    )
    # Kubernetes: read-only at the same path
    docs = list(yaml.safe_load_all(out["k8s/training.yaml"]))
    pod = docs[2]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert {"name": "data", "hostPath": {"path": HOSTILE_DATA, "type": "Directory"}} in pod["volumes"]
    assert {"name": "data", "mountPath": HOSTILE_DATA, "readOnly": True} in pod["containers"][0]["volumeMounts"]


def test_train_data_path_pyxis_cannot_mount_is_a_warning():
    plan = training_plan(train={**BASE_TRAIN, "data": "/lustre/a,b"})
    assert plan.deployment.slurm.container_mounts == ["/lustre/ckpt:/lustre/ckpt"]  # the checkpoint directory still is
    assert any("/lustre/a,b" in w and "container_mounts" in w for w in plan.warnings)


def test_fp8_outside_megatron_warns_that_the_script_must_convert_its_model():
    """fp8 is sized with fp8 GEMMs; only Megatron's arguments switch it on (--fp8-format). DeepSpeed's config carries
    bf16, so a plan that says fp8 and runs DeepSpeed is told the script has to convert its model."""
    fp8 = training_plan(precision="fp8", train={**BASE_TRAIN, "framework": "deepspeed"})
    assert fp8.deployment.launcher.framework == "deepspeed"
    assert any("precision fp8" in w and "convert_to_float8_training" in w for w in fp8.warnings)
    assert not any("precision fp8" in w for w in training_plan(train={**BASE_TRAIN, "framework": "deepspeed"}).warnings)
    from compiler.plan.spec_train import MegatronSpec

    given = MegatronSpec(core_version="0.13", path="/opt/megatron-lm")  # the fixture's image is NGC PyTorch's
    spec = fp8.spec.model_copy(update={"train": fp8.spec.train.model_copy(update={"megatron": given})})
    megatron = deployed(
        fp8.model_copy(
            update={
                "spec": spec,
                "parallelism": fp8.parallelism.model_copy(update={"framework": "megatron"}),
                "warnings": [],
            }
        )
    )
    assert megatron.deployment.launcher.framework == "megatron"
    assert not any("precision fp8" in w for w in megatron.warnings)  # --fp8-format hybrid switches it on


def test_train_data_uri_is_exported_not_mounted():
    plan = training_plan(train={**BASE_TRAIN, "data": "s3://bucket/tokens"})
    out = files(plan, "torchrun", "slurm", "k8s_training")
    assert exports(out["launch/torchrun.sh"])["MLINFRA_DATA"] == "s3://bucket/tokens"
    assert "s3://bucket/tokens" not in out["slurm/train.sbatch"]
    assert "hostPath" not in out["k8s/training.yaml"].split("kind: JobSet", 1)[1]


# ----------------------------------------------------------------------------------------------- unused fields
def _resolve_text(tmp_path: Path, text: str):
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(text))
    return resolve(path)


@pytest.mark.parametrize(
    "extra, where",
    [
        ("  lora: {rank: 8, alpha: 16}\n", "train.lora"),
        ("  epochs: 3\n", "train.epochs"),
    ],
)
def test_a_field_that_changes_nothing_is_refused_with_its_location(tmp_path, extra, where):
    text = (
        "name: x\nworkload: train\nmodel: {preset: llama-3.1-8b}\ntrain:\n  tokens: 10B\n"
        + extra
        + "cluster: {gpus: [h100-sxm-80gb]}\n"
    )
    with pytest.raises(PlanInputError) as exc:
        _resolve_text(tmp_path, text)
    (diag,) = exc.value.diagnostics
    assert diag.code == "unused-field" and diag.path == where and diag.line == 6


def test_slurm_settings_on_a_kubernetes_only_plan_are_refused(tmp_path):
    text = (
        "name: x\nworkload: train\nmodel: {preset: llama-3.1-8b}\ntrain: {tokens: 10B}\n"
        "cluster:\n  scheduler: kubernetes\n  gpus: [h100-sxm-80gb]\n  slurm: {partition: gpu}\n"
    )
    with pytest.raises(PlanInputError) as exc:
        _resolve_text(tmp_path, text)
    assert [(d.path, d.line) for d in exc.value.diagnostics] == [("cluster.slurm.partition", 8)]


# ----------------------------------------------------------------------------------------------- the section itself
def test_every_example_carries_the_deployment_decisions():
    for example in sorted((REPO / "examples").glob("*.yaml")):
        plan = resolve(example)
        assert plan.deployment is not None and plan.deployment.decisions, example.name
        if plan.training:
            assert plan.deployment.launcher.world_size == plan.hardware.gpus
        else:
            assert [e.stage for e in plan.deployment.engines] == ([s.name for s in plan.stages] or [""])


def test_schema_describes_the_deployment_section():
    assert "deployment" in resolved_schema()["properties"]


def test_diff_shows_deployment_decisions(tmp_path):
    base = (REPO / "examples/llama3-8b-pretrain.yaml").read_text()
    old = tmp_path / "old.yaml"
    new = tmp_path / "new.yaml"
    old.write_text(base)
    new.write_text(base.replace("checkpoint: {every: auto,", "checkpoint: {every: 2h,"))
    changes = {c["what"]: c for c in decision_changes(resolve(old), resolve(new))}
    assert "checkpoint interval" in changes and "every 7200 s" in changes["checkpoint interval"]["new"]


def test_model_weights_and_id_reach_the_training_job():
    """model.weights / model.hf_id on a training plan used to reach plan.json only."""
    plan = training_plan(
        workload="finetune",
        model={"preset": "llama-3.1-8b", "weights": "s3://m/llama 8b", "hf_id": "org/x"},
        train=BASE_TRAIN,
    )
    env = exports(files(plan, "torchrun")["launch/torchrun.sh"])
    assert env["MLINFRA_WEIGHTS"] == "s3://m/llama 8b" and env["MLINFRA_MODEL_ID"] == "org/x"
    assert "MLINFRA_WEIGHTS" not in files(training_plan(), "torchrun")["launch/torchrun.sh"]


def test_report_and_explain_show_the_deployment_decisions():
    from compiler.explain import explain
    from compiler.targets.base import markdown_text

    plan = resolve(REPO / "examples/llama3-8b-pretrain.yaml")
    text = explain(plan)
    assert "## Deployment" in text
    for decision in plan.deployment.decisions:  # as Markdown shows them: escaped, so `<plan>` stays text
        assert f"**{markdown_text(decision.topic)}**: {markdown_text(decision.choice)}" in text


@pytest.mark.parametrize(
    "extra, where",
    [
        ("budget: {usd: 10k}\n", "budget.usd"),
        ("parallelism: {zero_stage: 3}\n", "parallelism.zero_stage"),
        ("cluster: {scheduler: kubernetes, slurm: {partition: gpu}}\n", "cluster.slurm"),
    ],
)
def test_serve_plan_fields_that_change_nothing_are_refused(tmp_path, extra, where):
    text = (
        "name: x\nworkload: serve\nmodel: {preset: llama-3.1-8b}\nserve: {traffic: {requests_per_second: 1}}\n" + extra
    )
    with pytest.raises(PlanInputError) as exc:
        _resolve_text(tmp_path, text)
    assert [(d.code, d.path) for d in exc.value.diagnostics] == [("unused-field", where)]
