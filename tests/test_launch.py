"""The launch contract per framework (train.entrypoint.kind), what reaches the script, the Slurm site walltime,
owned directives, partial-node jobs, container mounts and the checkpoint signal.

The launcher runs here with a recording stand-in for torchrun / accelerate (MLINFRA_TORCHRUN / MLINFRA_ACCELERATE), so
each test reads the exact words the framework's entrypoint would receive; tests/test_launch_real.py runs the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from compiler.deployment.megatron_args import pipeline_split
from compiler.diagnostics import FieldRefused, PlanInputError
from compiler.pipeline import resolve
from tests.fixtures.resolved_plans import deployed, training_plan
from tests.test_target_torchrun import render_training, small_training_plan, write_tree

RECORDER = """#!/usr/bin/env bash
python3 -c 'import json, os, sys; print(json.dumps({"argv": sys.argv[1:], "signal": os.environ.get("MLINFRA_CHECKPOINT_SIGNAL"), "pythonpath": os.environ.get("PYTHONPATH")}))' "$@" >> "$RECORD"
"""


def launched(tmp_path: Path, plan, record_row: dict | None = None) -> list[str]:
    """The words torchrun (or accelerate) receives from launch/torchrun.sh, run as Slurm would run it (`record_row`
    gets what else the agent saw: its environment's checkpoint signal and PYTHONPATH)."""
    out = write_tree(render_training(plan), tmp_path / "out")
    recorder = tmp_path / "recorder"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    record = tmp_path / "record.jsonl"
    env = {
        **os.environ,
        "MLINFRA_TORCHRUN": str(recorder),
        "MLINFRA_ACCELERATE": str(recorder),
        "RECORD": str(record),
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29999",
        "SLURM_NODEID": "1",
    }
    subprocess.run(["bash", str(out / "launch/torchrun.sh")], env=env, check=True, timeout=30, cwd=tmp_path)
    (row,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert row["signal"] == plan.deployment.launcher.checkpoint_signal
    if record_row is not None:
        record_row.update(row)
    return row["argv"]


def after_script(argv: list[str], script: str) -> list[str]:
    return argv[argv.index(script) + 1 :]


# ----------------------------------------------------------------------------------------------- launch kinds
def test_deepspeed_auto_passes_deepspeed_config(tmp_path):
    plan = small_training_plan(framework="deepspeed", zero_stage=2)
    assert plan.deployment.launcher.kind == "deepspeed"
    words = after_script(launched(tmp_path, plan), str(plan.deployment.launcher.script))
    assert words == ["--steps", "2", "--deepspeed_config", str(tmp_path / "out/deepspeed/ds_config.json")]


def test_hf_trainer_gets_deepspeed_flag(tmp_path):
    """Hugging Face Trainer / TRL parse `--deepspeed PATH` (TrainingArguments.deepspeed), not --deepspeed_config."""
    plan = small_training_plan(
        framework="deepspeed",
        zero_stage=3,
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {"kind": "hf-trainer", "script": "sft.py", "args": ["--bf16", "a b"]},
        },
    )
    words = after_script(launched(tmp_path, plan), "sft.py")
    ck = plan.deployment.launcher.checkpoint
    par = plan.parallelism
    assert words == [
        "--output_dir",
        ck.dir,
        "--save_steps",
        str(ck.interval_steps),
        "--save_total_limit",
        str(ck.keep),
        "--per_device_train_batch_size",
        str(par.micro_batch),
        "--gradient_accumulation_steps",
        str(par.grad_accum),
        "--max_steps",
        str(plan.training.steps),
        # the recipe (Llama 3 8B: Table 3's peak, 1% minimum, warmup capped at a tenth of the 100 steps)
        "--learning_rate",
        "0.0003",
        "--lr_scheduler_type",
        "cosine_with_min_lr",
        "--warmup_steps",
        "10",
        "--weight_decay",
        "0.1",
        "--adam_beta1",
        "0.9",
        "--adam_beta2",
        "0.95",
        "--adam_epsilon",
        "1e-05",
        "--max_grad_norm",
        "1.0",
        "--lr_scheduler_kwargs",
        '{"min_lr": 3e-06}',
        "--bf16",
        "--gradient_checkpointing",
        "--bf16",
        "a b",
        "--deepspeed",
        str(tmp_path / "out/deepspeed/ds_config.json"),
    ]
    assert (par.micro_batch, par.grad_accum, plan.training.steps, par.recompute) == (2, 2, 100, "selective")


def test_hf_trainer_loss_is_priced_eager_under_deepspeed(tmp_path):
    """The Trainer calls the model's own loss (transformers ForCausalLMLoss: fp32 upcast + F.cross_entropy), 12 B
    per logit, not the 8 of Megatron's fused loss that DeepSpeed's pre-training stacks call: one more fp32 copy of
    the logits in the activations, named in the memory decision. Both are compiled at the layout the Trainer's plan
    chose (the one that fits with the larger loss)."""
    text = (
        Path("examples/llama3-8b-pretrain.yaml")
        .read_text()
        .replace("framework: auto", "framework: deepspeed")
        .replace("entrypoint: {script: train.py", "entrypoint: {kind: hf-trainer, script: train.py")
        .replace("max_gpus: 512", "max_gpus: 512\n  count: 64")
        .replace("deadline: 30d", "deadline: 60d")
        .replace("gpus: [h100-sxm-80gb, a100-sxm-80gb]", "gpus: [h100-sxm-80gb]")
    )
    (tmp_path / "plan.yaml").write_text(text)
    par = resolve(tmp_path / "plan.yaml").parallelism
    pinned = text.replace(
        "optimize: cost",
        f"optimize: cost\nparallelism: {{tp: {par.tp}, pp: {par.pp}, cp: {par.cp}, "
        f"zero_stage: {par.zero_stage}, micro_batch: {par.micro_batch}, recompute: {par.recompute}}}",
    )
    plans = {}
    for kind in ("hf-trainer", "deepspeed"):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(pinned.replace("kind: hf-trainer", f"kind: {kind}"))
        plans[kind] = resolve(path)
    logits = 8192 * par.micro_batch * 128256 / par.tp * 4  # one fp32 copy of the logits on the last stage
    eager, fused = plans["hf-trainer"], plans["deepspeed"]
    difference = eager.memory_per_gpu_bytes.activations - fused.memory_per_gpu_bytes.activations
    assert difference == pytest.approx(logits, rel=1e-6)
    assert "Hugging Face Trainer's eager loss" in eager.model_dump_json()
    assert "Hugging Face Trainer's eager loss" not in fused.model_dump_json()


def test_fsdp_runs_through_accelerate_launch_with_the_generated_config(tmp_path):
    plan = small_training_plan(nodes=2, gpus_per_node=2, framework="fsdp", zero_stage=3)
    launch = plan.deployment.launcher
    assert (launch.kind, launch.program) == ("accelerate", "accelerate")
    argv = launched(tmp_path, plan)
    assert argv[0] == "launch"
    options = argv[1 : argv.index(launch.script)]
    assert options[:2] == ["--config_file", str(tmp_path / "out/fsdp/accelerate_config.yaml")]
    assert {
        "--num_machines=2",
        "--num_processes=4",
        "--machine_rank=1",
        "--main_process_ip=10.0.0.1",
        "--main_process_port=29999",
        "--rdzv_backend=c10d",
    } <= set(options)
    assert after_script(argv, launch.script) == ["--steps", "2"]


def test_megatron_arguments_reach_pretrain_gpt(tmp_path):
    """Before: pretrain_gpt.py --use-mcore-models only; megatron/args.sh was never read."""
    plan = small_training_plan(
        framework="megatron",
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {"script": "pretrain_gpt.py", "args": ["--use-mcore-models", "--lr", "3e-4"]},
        },
    )
    assert plan.deployment.launcher.kind == "megatron"
    script = plan.deployment.launcher.script  # resolved against Megatron-LM's folder in the image
    assert script.endswith("/pretrain_gpt.py") and script.startswith("/")
    words = after_script(launched(tmp_path, plan), script)
    generated = [
        w
        for a in plan.deployment.frameworks.megatron_args
        for w in ([a.flag] if a.value is None else [a.flag, a.value])
    ]
    assert words == generated + ["--use-mcore-models", "--lr", "3e-4"]  # the plan's own last: they can add to them
    assert "--exit-signal-handler" in words and "--tensor-model-parallel-size" in words


@pytest.mark.parametrize(
    "framework, kind, usage",
    [
        ("ddp", "hf-trainer", "callbacks=[CheckpointOnSignal()]"),
        ("deepspeed", "hf-trainer", "callbacks=[CheckpointOnSignal()]"),
        ("fsdp", "auto", "accelerator.save_state"),
        ("ddp", "torchrun", None),
        ("deepspeed", "deepspeed", None),
    ],
)
def test_trainer_and_accelerate_scripts_import_the_checkpoint_signal_module(
    tmp_path, monkeypatch, framework, kind, usage
):
    """hf-trainer and accelerate kinds get launch/mlinfra_signal.py, importable by the workers (the launcher puts its
    folder first on PYTHONPATH, keeping the site's), and the usage line in plan.json and the launcher; the other kinds
    keep their contract (a flag, or the plain handler) and no module. Before: only the plain-script contract, which a
    Trainer script cannot follow without writing its own callback."""
    plan = small_training_plan(
        framework=framework,
        zero_stage=3 if framework == "fsdp" else 1,
        train={"tokens": "1M", "seq_len": 128, "entrypoint": {"kind": kind, "script": "train.py"}},
    )
    launch, row = plan.deployment.launcher, {}
    assert launch.kind == (kind if kind != "auto" else "accelerate")
    monkeypatch.setenv("PYTHONPATH", "/site/lib")
    launched(tmp_path, plan, row)
    text = (tmp_path / "out/launch/torchrun.sh").read_text()
    assert f"# The script: {launch.checkpoint_usage}\n" in text
    if usage is None:
        assert launch.checkpoint_helper == "" and "mlinfra_signal" not in text and row["pythonpath"] == "/site/lib"
        assert not (tmp_path / "out/launch/mlinfra_signal.py").exists() and "signal.signal(" in launch.checkpoint_usage
        return
    assert usage in launch.checkpoint_usage and launch.checkpoint_helper in launch.reads
    assert row["pythonpath"] == f"{tmp_path / 'out/launch'}:/site/lib"
    assert (tmp_path / "out/launch/mlinfra_signal.py").is_file()
    decision = next(d for d in plan.deployment.decisions if d.topic == "checkpoint signal")
    assert launch.checkpoint_usage in decision.reason and "all-reduce" in decision.reason


def test_plain_torchrun_gets_no_config_flag(tmp_path):
    plan = small_training_plan(
        framework="deepspeed",
        zero_stage=1,
        train={"tokens": "1M", "seq_len": 128, "entrypoint": {"kind": "torchrun", "script": "t.py"}},
    )
    assert after_script(launched(tmp_path, plan), "t.py") == []


@pytest.mark.parametrize(
    "kind, framework, can",
    [
        ("accelerate", "deepspeed", "deepspeed or hf-trainer or torchrun"),
        ("megatron", "ddp", "hf-trainer or torchrun"),
        ("deepspeed", "fsdp", "accelerate or torchrun"),
        ("hf-trainer", "fsdp", "accelerate or torchrun"),
    ],
)
def test_a_kind_that_cannot_launch_the_framework_is_refused_at_the_kind(kind, framework, can):
    """Before: an infeasible plan (exit 4) with no position; the field is the user's, so it is an input error there."""
    with pytest.raises(FieldRefused) as refused:
        small_training_plan(
            framework=framework, train={"tokens": "1M", "entrypoint": {"kind": kind, "script": "pretrain_gpt.py"}}
        )
    assert (refused.value.loc, refused.value.code) == (("train", "entrypoint", "kind"), "launch-kind-mismatch")
    assert f"the {framework} layout the sizing chose (train.framework auto)" in refused.value.message
    assert f"use kind {can} (or auto)" in refused.value.message


def test_megatron_kind_needs_a_megatron_entry_point():
    with pytest.raises(FieldRefused) as refused:
        small_training_plan(
            framework="megatron",
            train={"tokens": "1M", "entrypoint": {"kind": "megatron", "script": "scripts/train.py"}},
        )
    assert (
        refused.value.loc == ("train", "entrypoint", "script")
        and "'scripts/train.py' is not a Megatron-LM" in refused.value.message
    )
    plan = small_training_plan(
        framework="megatron",
        train={"tokens": "1M", "entrypoint": {"kind": "megatron", "script": "/opt/Megatron-LM/pretrain_mamba.py"}},
    )
    assert plan.deployment.launcher.kind == "megatron"


@pytest.mark.parametrize(
    "name, where",
    [
        (
            "launch-kind-mismatch",
            ":11:22: error: train.entrypoint.kind: kind hf-trainer cannot launch train.framework fsdp",
        ),
        ("megatron-kind-plain-script", ":12:13: error: train.entrypoint.script: kind megatron passes"),
    ],
)
def test_a_launch_kind_mismatch_is_a_located_cli_error(cli, name, where):
    result = cli(f"tests/invalid_plans/{name}.yaml", "-o", "/nonexistent-never-written")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"tests/invalid_plans/{name}.yaml{where}" in result.stderr and "[launch-kind-mismatch]" in result.stderr


# ----------------------------------------------------------------------------------------------- Megatron
def test_llama_megatron_settings():
    words = {a.flag: a.value for a in training_plan().deployment.frameworks.megatron_args}
    assert words["--rotary-base"] == "500000"
    assert "--use-rope-scaling" in words and words["--rope-scaling-factor"] == "8"
    assert words["--norm-epsilon"] == "1e-05"
    assert words["--attention-dropout"] == words["--hidden-dropout"] == "0.0"
    assert "--exit-signal-handler" in words
    assert words["--tokenizer-type"] == "NullTokenizer" and words["--vocab-size"] == "128256"


@pytest.mark.parametrize(
    "layers, pp, split",
    [(32, 4, None), (126, 4, (31, 31)), (126, 8, (15, 15)), (30, 4, (7, 7)), (61, 2, (31, 30)), (10, 8, (2, 2))],
)
def test_uneven_pipeline_split(layers, pp, split):
    assert pipeline_split(layers, pp) == split
    if split:  # Megatron's rule: the rest divides over the middle stages, each end at least one layer
        first, last = split
        assert (
            first >= 1 and last >= 1 and (pp == 2 and first + last == layers or (layers - first - last) % (pp - 2) == 0)
        )


def test_uneven_pipeline_flags_in_args():
    plan = training_plan()
    plan = deployed(
        plan.model_copy(update={"parallelism": plan.parallelism.model_copy(update={"pp": 5, "tp": 2, "dp": 4})})
    )
    words = {a.flag: a.value for a in plan.deployment.frameworks.megatron_args}
    assert (words["--decoder-first-pipeline-num-layers"], words["--decoder-last-pipeline-num-layers"]) == (
        "6",
        "5",
    )  # 6 + 3 × 7 + 5


# ----------------------------------------------------------------------------------------------- Slurm
def _resolve_text(tmp_path: Path, text: str):
    path = tmp_path / "plan.yaml"
    path.write_text(textwrap.dedent(text))
    return resolve(path)


def test_site_walltime_drives_time_limit_and_chain():
    """Before: --time=20:00:00 as an extra directive gave two --time lines while the chain assumed 24 h."""
    base = small_training_plan(nodes=2, gpus_per_node=4, steps=200_000, step_seconds=2.0)
    capped = small_training_plan(
        nodes=2,
        gpus_per_node=4,
        steps=200_000,
        step_seconds=2.0,
        cluster={"scheduler": "slurm", "gpus_per_node": 4, "slurm": {"partition": "gpu", "max_time": "20h"}},
    )
    job, default = capped.deployment.slurm, base.deployment.slurm
    assert job.max_job_seconds == 20 * 3600 and job.time_limit_seconds <= 20 * 3600
    assert job.links > default.links and job.steps_per_link < default.steps_per_link
    text = render_training(capped)["slurm/train.sbatch"].text
    assert text.count("#SBATCH --time=") == 1 and f"#SBATCH --array=0-{job.links - 1}%1" in text


@pytest.mark.parametrize(
    "directive, field",
    [
        ("--time=20:00:00", "cluster.slurm.max_time"),
        ("--nodes=4", "cluster.count"),
        ("--gpus-per-node=4", "cluster.gpus_per_node"),
        ("--job-name=x", "name"),
        ("--output=log.txt", "log pattern"),
    ],
)
def test_extra_directive_repeating_a_written_one_is_refused(tmp_path, directive, field):
    text = (
        "name: x\nworkload: train\nmodel: {preset: llama-3.1-8b}\ntrain: {tokens: 10B}\ncluster:\n"
        f'  gpus: [h100-sxm-80gb]\n  slurm:\n    extra_directives: [--mail-type=END, "{directive}"]\n'
    )
    with pytest.raises(PlanInputError) as exc:
        _resolve_text(tmp_path, text)
    (diag,) = exc.value.diagnostics
    assert diag.code == "owned-directive" and diag.path == "cluster.slurm.extra_directives.1" and diag.line == 8
    assert directive.split("=")[0] in diag.message and field in diag.message


def test_partial_node_job_requests_its_share():
    """Before: a 1-GPU fine-tune was emitted with --exclusive --mem=0 and took a whole 8-GPU node."""
    plan = small_training_plan(nodes=1, gpus_per_node=1)
    job = plan.deployment.slurm
    # one GPU of p5.48xlarge's allocatable: 190,950 m / 8 -> 23 whole CPUs; 2,094,673 MiB - 10,256 MiB of EFA huge
    # pages = 2,084,417 MiB / 8 -> 260,552 MiB
    assert (job.exclusive, job.gpus_per_node, job.cpus_per_gpu, job.memory_per_gpu) == (False, 1, 23, "260552M")
    text = render_training(plan)["slurm/train.sbatch"].text
    assert "--exclusive" not in text and "#SBATCH --mem" + "=" not in text and "#SBATCH --gpus-per-node=1\n" in text
    assert "#SBATCH --cpus-per-gpu=23\n" in text and "#SBATCH --mem-per-gpu=260552M\n" in text
    whole = small_training_plan(nodes=1, gpus_per_node=8).deployment.slurm
    assert (whole.exclusive, whole.memory) == (True, "0")


# ----------------------------------------------------------------------------------------------- containers
def enroot_reads(fstab_line: str) -> tuple[str, str]:
    """(source, target) of one fstab line as enroot-mount reads it: glibc's own getmntent_r (enroot bin/enroot-mount.c)."""
    import ctypes
    import tempfile

    class Mntent(ctypes.Structure):
        _fields_ = [
            ("fsname", ctypes.c_char_p),
            ("dir", ctypes.c_char_p),
            ("type", ctypes.c_char_p),
            ("opts", ctypes.c_char_p),
            ("freq", ctypes.c_int),
            ("passno", ctypes.c_int),
        ]

    libc = ctypes.CDLL(None)
    libc.setmntent.restype = ctypes.c_void_p
    libc.setmntent.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.getmntent_r.restype = ctypes.POINTER(Mntent)
    libc.getmntent_r.argtypes = [ctypes.c_void_p, ctypes.POINTER(Mntent), ctypes.c_char_p, ctypes.c_int]
    libc.endmntent.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile("wb", suffix=".fstab") as f:
        f.write(fstab_line.encode() + b"\n")
        f.flush()
        stream = libc.setmntent(f.name.encode(), b"r")
        entry, buf = Mntent(), ctypes.create_string_buffer(4096)
        found = libc.getmntent_r(stream, ctypes.byref(entry), buf, len(buf))
        libc.endmntent(stream)
    assert found, fstab_line
    return entry.fsname.decode(), entry.dir.decode()


def pyxis_fstab_lines(container_mounts: str) -> list[str]:
    """pyxis args.c: entries split at ',', each SRC[:DST[:FLAGS]] at ':', written as "SRC DST x-create=auto,rbind"."""
    lines = []
    for entry in container_mounts.split(","):
        src, _, rest = entry.partition(":")
        dst = rest.partition(":")[0] or src
        lines.append(f"{src} {dst} x-create=auto,rbind")
    return lines


def test_hostile_job_paths_reach_the_container_intact(tmp_path):
    """The sbatch's --container-mounts, split as pyxis splits it and read as enroot reads the lines pyxis writes (glibc
    getmntent_r), mounts every job path at itself: spaces, quotes, a tab and a backslash included. Before: a path with a
    space was written raw, and enroot would have read '/data/tok' mounted at 'ens'."""
    from tests.test_target_slurm import _fake_slurm_bin

    data, ckpt = '/data/tok ens/it\'s "q"', "/lustre/ck\tpt/a\\b"
    plan = with_checkpoint_dir(
        small_training_plan(
            train={"tokens": "1M", "data": data},
            cluster={"scheduler": "slurm", "gpus_per_node": 2, "slurm": {"partition": "gpu", "container_image": "img"}},
        ),
        ckpt,
    )
    out = write_tree(render_training(plan), tmp_path / "out dir")
    log = tmp_path / "srun.log"
    env = {
        **os.environ,
        "PATH": f"{_fake_slurm_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        "SRUN_LOG": str(log),
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_JOB_ID": "7",
        "SLURM_SUBMIT_DIR": str(out),
    }
    runs = (out / plan.runs_dir).resolve()  # the job's working directory (sbatch --chdir), mounted too
    runs.mkdir(parents=True)
    env.pop("PWD", None)
    subprocess.run(["bash", str(out / "slurm/train.sbatch")], env=env, check=True, timeout=30, cwd=runs)
    (argv,) = [json.loads(line) for line in log.read_text().splitlines()]
    mounts = next(a for a in argv if a.startswith("--container-mounts=")).split("=", 1)[1]
    read = [enroot_reads(line) for line in pyxis_fstab_lines(mounts)]
    assert read == [(str(out), str(out)), (str(runs), str(runs)), (data, data), (ckpt, ckpt)]


def with_checkpoint_dir(plan, directory: str):
    return deployed(
        plan.model_copy(update={"training": plan.training.model_copy(update={"checkpoint_dir": directory})})
    )


def test_every_job_path_is_mounted_or_warned():
    """Before: only the submit directory and train.data were mounted; the checkpoint directory was not."""
    plan = with_checkpoint_dir(
        training_plan(
            train={"tokens": "1T", "seq_len": 8192, "data": "/data/tok ens"},
            model={"preset": "llama-3.1-8b", "weights": "/models/l8b"},
        ),
        "/lustre/ck pt",
    )
    assert plan.deployment.slurm.container_mounts == [
        "/data/tok\\040ens:/data/tok\\040ens",
        "/lustre/ck\\040pt:/lustre/ck\\040pt",
        "/models/l8b:/models/l8b",
    ]
    covered = with_checkpoint_dir(
        training_plan(
            cluster={
                "scheduler": "slurm",
                "gpus": ["h100-sxm-80gb"],
                "gpus_per_node": 8,
                "slurm": {"container_image": "img", "container_mounts": ["/lustre:/lustre"]},
            }
        ),
        "/lustre/ckpt/run1",
    )
    assert covered.deployment.slurm.container_mounts == ["/lustre:/lustre"]  # the plan's own mount covers it
    bad = with_checkpoint_dir(training_plan(), "/ck:pt")
    assert any(w.startswith("train.checkpoint.dir '/ck:pt'") for w in bad.warnings)


# ----------------------------------------------------------------------------------------------- checkpoint write
def test_checkpoint_write_is_bounded_by_the_filesystem():
    """Before: per-node bandwidth × nodes, so 2,048 nodes wrote at 10 TB/s (a 405B checkpoint every ~2 minutes)."""
    from compiler.catalog.fabrics import load_fabrics
    from compiler.sizing.train.candidate import checkpoint_write_bandwidth

    lustre = load_fabrics().storage["lustre"]
    assert lustre.aggregate_write_bytes_per_second == 2e12 and "Llama 3" in lustre.aggregate_source
    assert checkpoint_write_bandwidth(lustre, 8) == 8 * 5e9  # small jobs: the clients are the limit
    assert checkpoint_write_bandwidth(lustre, 2048) == 2e12  # 16,384 GPUs: the filesystem is
    assert (
        checkpoint_write_bandwidth(load_fabrics().storage["local-nvme"], 2048) == 2048 * 12e9
    )  # node-local: no ceiling


# ----------------------------------------------------------------------------------------------- Kubernetes
@pytest.mark.parametrize(
    "framework, carried",
    [
        ("fsdp", ("fsdp__accelerate_config.yaml", "launch__mlinfra_signal.py")),
        ("megatron", ("megatron__args.sh",)),
        ("deepspeed", ("deepspeed__ds_config.json",)),
    ],
)
def test_kubernetes_configmap_carries_what_the_launcher_reads(framework, carried):
    """Before: the ConfigMap carried torchrun.sh (+ ds_config.json) only; accelerate and Megatron files were missing."""
    import yaml

    from compiler.pipeline import render_files

    plan = small_training_plan(
        framework=framework,
        zero_stage=3 if framework == "fsdp" else 1,
        cluster={"scheduler": "kubernetes", "gpus_per_node": 2, "kubernetes": {"shared_storage_class": "lustre-csi"}},
    )
    text = {f.path: f.text for f in render_files(plan)}["k8s/training.yaml"]
    config_map = next(d for d in yaml.safe_load_all(text) if d["kind"] == "ConfigMap")
    assert set(config_map["data"]) == {"launch__torchrun.sh", *carried}


def test_checkpoint_interval_floor():
    plan = training_plan(train={"tokens": "1T", "seq_len": 8192, "checkpoint": {"min_interval": "2h"}})
    ck = plan.deployment.launcher.checkpoint
    assert (ck.interval_seconds, ck.source, ck.interval_steps) == (7200, "floor", round(7200 / 9.5))
    words = {a.flag: a.value for a in plan.deployment.frameworks.megatron_args}
    assert words["--save-interval"] == str(ck.interval_steps)
    assert (
        training_plan(
            train={"tokens": "1T", "seq_len": 8192, "checkpoint": {"min_interval": "1min"}}
        ).deployment.launcher.checkpoint.source
        == "young-daly"
    )  # below Young-Daly: no effect


def test_learned_positions_are_not_rope():
    plan = training_plan()
    arch = plan.model.architecture.model_copy(
        update={"learned_positions": True, "norm": "layernorm", "rope_theta": 0.0, "rope_scaling_factor": 0.0}
    )
    plan = deployed(plan.model_copy(update={"model": plan.model.model_copy(update={"architecture": arch})}))
    words = {a.flag: a.value for a in plan.deployment.frameworks.megatron_args}
    assert words["--position-embedding-type"] == "learned_absolute"
    assert words["--attention-dropout"] == "0.0" and plan.recipe.dropout == 0.0  # the recipe's, not Megatron's 0.1


@pytest.mark.parametrize(
    "framework, kind", [("ddp", "torchrun"), ("deepspeed", "hf-trainer"), ("fsdp", "auto"), ("megatron", "auto")]
)
def test_every_launcher_variant_passes_shellcheck(tmp_path, framework, kind):
    from tests.test_target_torchrun import realtools

    plan = small_training_plan(
        framework=framework,
        zero_stage=3 if framework == "fsdp" else 1,
        train={"tokens": "1M", "seq_len": 128, "entrypoint": {"kind": kind if framework != "fsdp" else "auto"}},
    )
    out = write_tree(render_training(plan), tmp_path)
    result = subprocess.run(
        [str(realtools().shellcheck_bin()), "-x", str(out / "launch/torchrun.sh"), str(out / "slurm/train.sbatch")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout
