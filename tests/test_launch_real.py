"""Proof with the real frameworks on CPU: compile a tiny plan, run the generated slurm/train.sbatch on the
fake 2-node Slurm cluster (srun → launch/torchrun.sh → torchrun or accelerate launch → a probe script: launch_probe.py
for plain DDP and DeepSpeed, hf_trainer_probe.py for the Hugging Face Trainer, fsdp_probe.py for FSDP), through one REAL
training step of the framework; the probe reports what the framework used and the test compares it with plan.json.

Real tools (tests/tools/realtools.py): the torch venv (torch, deepspeed, accelerate, transformers) and Debian's Slurm; a
missing tool skips the test with the reason, and fails it under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.resolved_plans import deployed
from tests.test_target_slurm import _sbatch, cluster_env, job_folder
from tests.test_target_torchrun import (
    REPO,
    free_port,
    realtools,
    render_training,
    small_training_plan,
    torch_env,
    write_tree,
)

PROBE = REPO / "tests" / "launch_probe.py"
HOSTILE_DIR = 'ck pt/it\'s "here"'  # a checkpoint directory with a space and both quotes


def probe_plan(tmp_path: Path, framework: str, kind: str, nodes: int, gpus_per_node: int, zero_stage: int = 0, args=()):
    plan = small_training_plan(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        framework=framework,
        zero_stage=zero_stage,
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {
                "kind": kind,
                "script": str(PROBE),
                "args": ["--framework", framework, *args],
                "env": {"DS_ACCELERATOR": "cpu"},
            },
        },
    )
    directory = str(tmp_path / HOSTILE_DIR)
    return deployed(
        plan.model_copy(update={"training": plan.training.model_copy(update={"checkpoint_dir": directory})})
    )


def probe_rows(output: str) -> list[dict]:
    return [json.loads(line) for line in re.findall(r"^LAUNCH_PROBE (\{.*\})$", output, re.M)]


def plan_json(plan) -> dict:
    """What out/<plan>/plan.json says (the same dump the writer makes)."""
    return json.loads(plan.model_dump_json())


def expected(plan) -> dict:
    data = plan_json(plan)
    par, launch = data["parallelism"], data["deployment"]["launcher"]
    return {
        "world_size": launch["world_size"],
        "micro_batch": par["micro_batch"],
        "grad_accum": par["grad_accum"],
        "global_batch": par["global_batch"],
        "zero_stage": par["zero_stage"],
        "checkpoint_dir": launch["checkpoint"]["dir"],
    }


def run_on_slurm(cluster, plan, out: Path, timeout: float = 600, **extra_env: str) -> tuple[str, str]:
    env = {
        **cluster_env(cluster),
        "PATH": torch_env()["PATH"],
        "OMP_NUM_THREADS": "1",  # the site's value (torch_env): ranks share the test machine's cores
        "MASTER_PORT": str(free_port()),
        **extra_env,
    }
    submitted = _sbatch(cluster, out, "--parsable", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=env)
            pytest.fail(f"job did not finish in {timeout} s")
        time.sleep(0.5)
    state = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    logs = "".join(
        p.read_text(errors="replace")
        for p in (job_folder(out) / f"{plan.name}-{job}.out", job_folder(out) / f"{plan.name}-{job}.err")
        if p.exists()
    )
    return state, logs


def test_ddp_plain_script_on_slurm_matches_plan(tmp_path, slurm_cluster):
    """Launch kind torchrun, plain torch DDP: 2 nodes × 2 ranks, one AdamW step of grad_accum micro-batches."""
    plan = probe_plan(tmp_path, "ddp", "torchrun", nodes=2, gpus_per_node=2)
    out = write_tree(render_training(plan), tmp_path / "out")
    state, logs = run_on_slurm(slurm_cluster, plan, out)
    assert "JobState=COMPLETED" in state, state + logs[-4000:]
    rows = probe_rows(logs)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3], logs[-4000:]
    want = expected(plan)
    for row in rows:
        assert {k: row[k] for k in want} == want
        assert row["precision"] == "torch.float32"  # plain DDP does not apply the plan's bf16: the script would
    assert want["checkpoint_dir"] == str(tmp_path / HOSTILE_DIR)
    assert (tmp_path / HOSTILE_DIR / "step-1.pt").is_file()  # the hostile path reached the job intact


def test_deepspeed_on_slurm_matches_plan(tmp_path, slurm_cluster):
    """Launch kind deepspeed: deepspeed.initialize reads the config path the launcher passed as --deepspeed_config.
    ZeRO-2, bf16."""
    plan = probe_plan(tmp_path, "deepspeed", "deepspeed", nodes=1, gpus_per_node=2, zero_stage=2)
    out = write_tree(render_training(plan), tmp_path / "out")
    state, logs = run_on_slurm(slurm_cluster, plan, out)
    assert "JobState=COMPLETED" in state, state + logs[-4000:]
    rows = probe_rows(logs)
    assert sorted(r["rank"] for r in rows) == [0, 1], logs[-4000:]
    want = expected(plan)
    for row in rows:
        assert {k: row[k] for k in want} == want
        assert row["precision"] == "torch.bfloat16" and plan.spec.precision == "bf16"
        assert row["config_flag"] == "--deepspeed_config" and row["optimizer_steps"] == 1
    assert "step-1" in rows[0]["saved"]


# ------------------------------------------------------------------------------ Hugging Face Trainer (launch kind hf-trainer)
HF_PROBE = REPO / "tests" / "hf_trainer_probe.py"
HF_USER_ARGS = ["--report_to", "none", "--logging_steps", "1"]  # the plan's own arguments, after the generated ones


def hf_plan(tmp_path: Path, framework: str, nodes: int = 1, gpus_per_node: int = 2, zero_stage: int = 0, **updates):
    """A hf-trainer plan running tests/hf_trainer_probe.py; `updates` replace parallelism fields (e.g. recompute)."""
    plan = small_training_plan(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        framework=framework,
        zero_stage=zero_stage,
        precision=updates.pop("precision", "bf16"),
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {
                "kind": "hf-trainer",
                "script": str(HF_PROBE),
                "args": HF_USER_ARGS,
                "env": {"DS_ACCELERATOR": "cpu"},
            },
        },
    )
    directory = str(tmp_path / HOSTILE_DIR)
    return deployed(
        plan.model_copy(
            update={
                "training": plan.training.model_copy(update={"checkpoint_dir": directory}),
                "parallelism": plan.parallelism.model_copy(update=updates),
            }
        )
    )


def hf_rows(output: str) -> list[dict]:
    return [json.loads(line) for line in re.findall(r"^.*HF_PROBE (\{.*\})$", output, re.M)]


def hf_expected(plan, out: Path) -> dict:
    """TrainingArguments as plan.json decides them (the framework file under the compile's folder `out`)."""
    data = plan_json(plan)
    par, launch = data["parallelism"], data["deployment"]["launcher"]
    ck, precision = launch["checkpoint"], data["spec"]["precision"]
    return {
        "per_device_train_batch_size": par["micro_batch"],
        "gradient_accumulation_steps": par["grad_accum"],
        "bf16": precision in ("bf16", "fp8"),
        "fp16": precision == "fp16",
        "deepspeed": str(out / launch["framework_config"]) if par["framework"] == "deepspeed" else None,
        "output_dir": ck["dir"],
        "save_steps": ck["interval_steps"],
        "save_total_limit": ck["keep"],
        "max_steps": data["training"]["steps"],
        "gradient_checkpointing": par["recompute"] != "none",
        **hf_recipe(data["recipe"]),
    }


def hf_recipe(recipe: dict) -> dict:
    """TrainingArguments' optimizer and schedule fields as plan.json's recipe decides them (transformers' cosine and
    linear end at 0; a minimum above 0 needs cosine_with_min_lr)."""
    schedule, kwargs = {"constant": "constant_with_warmup", "wsd": "warmup_stable_decay"}.get(recipe["schedule"]), None
    if schedule is None and recipe["lr_min"] == 0:
        schedule = recipe["schedule"]
    elif schedule is None:
        schedule, kwargs = {"cosine": "cosine_with_min_lr"}[recipe["schedule"]], {"min_lr": recipe["lr_min"]}
    return {
        "learning_rate": recipe["lr_peak"],
        "lr_scheduler_type": schedule,
        "lr_scheduler_kwargs": kwargs,
        "warmup_steps": recipe["warmup_steps"],
        "weight_decay": recipe["weight_decay"],
        "adam_beta1": recipe["betas"][0],
        "adam_beta2": recipe["betas"][1],
        "adam_epsilon": recipe["eps"],
        "max_grad_norm": recipe["grad_clip_norm"],
    }


@pytest.mark.parametrize(
    "framework, precision, recompute",
    [
        ("deepspeed", "bf16", "full"),
        ("deepspeed", "fp16", "none"),
        ("ddp", "fp32", "selective"),
        ("ddp", "fp8", "none"),
    ],
)
def test_hf_trainer_parser_takes_the_generated_arguments(tmp_path, framework, precision, recompute):
    """transformers' HfArgumentParser(TrainingArguments) parses every word the launcher gives the script (an unknown
    flag would be an error) and each parsed field equals plan.json's decision. Before: only output_dir / save_steps /
    save_total_limit were passed, so the Trainer ran its defaults (batch 8, fp32, 3 epochs) whatever the plan sized."""
    from tests.test_launch import launched

    plan = hf_plan(
        tmp_path, framework, zero_stage=2 if framework == "deepspeed" else 0, precision=precision, recompute=recompute
    )
    argv = launched(tmp_path, plan)
    words = argv[argv.index(str(HF_PROBE)) + 1 :]
    recipe = plan.recipe
    lr_steps = [0, recipe.warmup_steps // 2, recipe.warmup_steps, (recipe.warmup_steps + recipe.decay_steps) // 2]
    lr_steps.append(recipe.decay_steps)
    env = {**torch_env(), "MLINFRA_PROBE_MODE": "parse", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    env["MLINFRA_PROBE_LR_STEPS"] = ",".join(map(str, lr_steps))
    result = subprocess.run(
        [str(realtools().transformers_python()), str(HF_PROBE), *words],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = hf_rows(result.stdout)
    want = hf_expected(plan, tmp_path / "out")
    assert {k: row["parsed"][k] for k in want} == want
    # the Trainer's own scheduler from those arguments follows the decided recipe step by step
    assert {int(k): v for k, v in row["lr"].items()} == pytest.approx({s: recipe.lr_at(s) for s in lr_steps}, rel=1e-9)


def test_hf_trainer_deepspeed_step_on_slurm_matches_plan(tmp_path, slurm_cluster):
    """Launch kind hf-trainer on the fake Slurm cluster: srun → launcher → torchrun (2 ranks, gloo) → a REAL Trainer step
    of a tiny random Llama with DeepSpeed ZeRO-2 bf16 from the generated ds_config.json (transformers' DeepSpeed
    integration checks the config against TrainingArguments and refuses a mismatch), then the Trainer's own save into
    the checkpoint directory (a hostile path). DeepSpeed's engine reports batch, accumulation, stage and precision."""
    realtools().transformers_python()
    plan = hf_plan(tmp_path, "deepspeed", zero_stage=2)
    out = write_tree(render_training(plan), tmp_path / "out")
    state, logs = run_on_slurm(slurm_cluster, plan, out)
    assert "JobState=COMPLETED" in state, state + logs[-4000:]
    rows = hf_rows(logs)
    assert sorted(r["rank"] for r in rows) == [0, 1], logs[-4000:]
    want, hf = expected(plan), hf_expected(plan, out)
    for row in rows:
        assert {k: row[k] for k in want} == want
        assert {k: row["parsed"][k] for k in hf} == hf
        assert row["deepspeed"] and row["precision"] == "torch.bfloat16" and row["optimizer_steps"] == 1
    assert "checkpoint-1" in rows[0]["saved"]
    assert (tmp_path / HOSTILE_DIR / "checkpoint-1").is_dir()


def wait_for_log(out: Path, name: str, job: str, pattern: str, count: int, env: dict, timeout: float) -> str:
    """The job's log once `pattern` occurs `count` times in it (fails if the job ends or the time runs out first)."""
    log = job_folder(out) / f"{name}-{job}.out"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if len(re.findall(pattern, text, re.M)) >= count:
            return text
        if not subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
            pytest.fail(f"job {job} ended before {count} × {pattern!r}: " + text[-4000:])
        time.sleep(0.5)
    subprocess.run(["scancel", job], env=env)
    errors = job_folder(out) / f"{name}-{job}.err"
    pytest.fail(
        f"no {count} × {pattern!r} in {timeout} s: "
        + text[-3000:]
        + (errors.read_text(errors="replace")[-3000:] if errors.exists() else "")
    )


def signalled_run(
    cluster, plan, out: Path, ranks: int, marker: str = "HF_PROBE_STEP", timeout: float = 300, **extra_env: str
) -> tuple[str, str, list[dict]]:
    """Submit, wait until every rank printed `marker` (its first step done), then send SIGUSR1 to the job's steps as
    Slurm's --signal=USR1@lead does before the time limit (`scancel --signal` without --batch: the srun tasks, not the
    batch shell); return the job state, the logs and the marker rows."""
    env = {
        **cluster_env(cluster),
        "PATH": torch_env()["PATH"],
        "OMP_NUM_THREADS": "1",  # the site's value (torch_env): ranks share the test machine's cores
        "MASTER_PORT": str(free_port()),
        **extra_env,
    }
    submitted = _sbatch(cluster, out, "--parsable", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    text = wait_for_log(out, plan.name, job, rf"^.*{marker} \{{", ranks, env, timeout)
    steps = [json.loads(m) for m in re.findall(rf"^.*{marker} (\{{.*\}})$", text, re.M)]
    assert subprocess.run(["scancel", "--signal=USR1", job], env=env).returncode == 0
    deadline = time.monotonic() + timeout
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=env)
            pytest.fail(f"job did not stop in {timeout} s after the signal")
        time.sleep(0.5)
    state = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    logs = "".join(
        p.read_text(errors="replace")
        for p in (job_folder(out) / f"{plan.name}-{job}.out", job_folder(out) / f"{plan.name}-{job}.err")
        if p.exists()
    )
    return state, logs, steps


def test_hf_trainer_checkpoints_on_the_time_limit_signal_and_resumes(tmp_path, slurm_cluster):
    """Launch kind hf-trainer on 2 fake nodes × 1 rank, a run of 100,000 steps with no periodic save due: SIGUSR1 to the
    job mid-run (Slurm's warning before the limit) reaches the workers through the launcher; the generated
    launch/mlinfra_signal.py CheckpointOnSignal has every rank agree at the next step end, the Trainer saves
    checkpoint-N into the (hostile) checkpoint directory and stops, and the job ends COMPLETED. A second submit resumes
    from checkpoint-N (last_checkpoint → resume_from_checkpoint), trains on from step N+1 and checkpoints again on the
    signal. Before: the Trainer had no handler, and the workers ignored the forwarded signal (the launcher's
    `trap '' USR1` is inherited): the job ran into its limit and lost everything since the last periodic save."""
    realtools().transformers_python()
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=1,
        framework="ddp",
        steps=100_000,
        step_seconds=0.1,
        precision="fp32",
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {
                "kind": "hf-trainer",
                "script": str(HF_PROBE),
                "args": ["--report_to", "none", "--disable_tqdm", "true"],
                "env": {"DS_ACCELERATOR": "cpu", "MLINFRA_PROBE_MODE": "signal"},
            },
        },
    )
    plan = deployed(
        plan.model_copy(
            update={
                "training": plan.training.model_copy(
                    update={"checkpoint_dir": str(tmp_path / HOSTILE_DIR), "checkpoint_interval_seconds": 1e9}
                )
            }
        )
    )
    launch = plan.deployment.launcher
    assert launch.kind == "hf-trainer" and launch.checkpoint_helper == "launch/mlinfra_signal.py"
    assert launch.checkpoint.interval_steps > plan.training.steps == 100_000  # only the signal saves
    assert plan.deployment.slurm.links == 1  # one job (a chain would log to %x-%A_%a)
    out = write_tree(render_training(plan), tmp_path / "out")
    saved = []
    for run in (1, 2):
        state, logs, started = signalled_run(slurm_cluster, plan, out, ranks=2)
        assert "JobState=COMPLETED" in state, state + logs[-4000:]
        rows = hf_rows(logs)
        assert sorted(r["rank"] for r in rows) == [0, 1], logs[-4000:]
        (stopped,) = {r["optimizer_steps"] for r in rows}  # every rank stopped at the same step
        assert 1 <= stopped < plan.training.steps
        assert "mlinfra_signal: checkpoint signal" in logs
        if run == 1:
            assert {r["resumed_from"] for r in rows} == {None} and {s["global_step"] for s in started} == {1}
        else:
            assert {r["resumed_from"] for r in rows} == {f"checkpoint-{saved[0]}"}
            assert {s["global_step"] for s in started} == {saved[0] + 1} and stopped > saved[0]
        saved.append(stopped)
        assert (tmp_path / HOSTILE_DIR / f"checkpoint-{stopped}" / "trainer_state.json").is_file()
    assert sorted(p.name for p in (tmp_path / HOSTILE_DIR).iterdir()) == sorted(f"checkpoint-{n}" for n in saved)


FSDP_PROBE = REPO / "tests" / "fsdp_probe.py"


@pytest.mark.parametrize("reshard_after_forward, strategy", [(True, "FULL_SHARD"), (False, "SHARD_GRAD_OP")])
def test_fsdp_step_from_the_generated_accelerate_config_on_slurm(
    tmp_path, slurm_cluster, reshard_after_forward, strategy
):
    """Launch kind accelerate on 2 nodes × 2 ranks: `accelerate launch --config_file fsdp/accelerate_config.yaml` (machine
    rank from Slurm, rendezvous on the first node) hands every worker the FSDP settings; accelerate's own
    FullyShardedDataParallelPlugin reads them and a REAL FSDP1 step runs with them on CPU/gloo (tests/fsdp_probe.py does
    Accelerator.prepare_model's wrapping: the Accelerator refuses FSDP without a GPU), then a sharded
    torch.distributed.checkpoint save. What FSDP ran with equals plan.json."""
    realtools().transformers_python()
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=2,
        framework="fsdp",
        zero_stage=3,
        train={
            "tokens": "1M",
            "seq_len": 128,
            "reshard_after_forward": reshard_after_forward,
            "entrypoint": {"script": str(FSDP_PROBE)},
        },
    )
    plan = deployed(
        plan.model_copy(
            update={"training": plan.training.model_copy(update={"checkpoint_dir": str(tmp_path / HOSTILE_DIR)})}
        )
    )
    assert plan.deployment.launcher.kind == "accelerate" and plan.parallelism.recompute != "none"
    out = write_tree(render_training(plan), tmp_path / "out")
    # Both fake nodes share one host: accelerate checks that the rendezvous port is free on machine rank 0, and the other
    # node's torchrun agent may already hold it there (on a real cluster only the head node has that address). With
    # c10d rendezvous torchrun ignores the node rank, so every agent says 1 (the launcher's MLINFRA_NODE_RANK override).
    state, logs = run_on_slurm(slurm_cluster, plan, out, MLINFRA_NODE_RANK="1")
    assert "JobState=COMPLETED" in state, state + logs[-4000:]
    rows = [json.loads(line) for line in re.findall(r"^.*FSDP_PROBE (\{.*\})$", logs, re.M)]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3], logs[-4000:]
    want = expected(plan)
    del want["zero_stage"]
    config = plan_json(plan)["deployment"]["frameworks"]["accelerate_config"]
    fsdp = config["fsdp_config"]
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}[config["mixed_precision"]]
    for row in rows:
        assert {k: row[k] for k in want} == want
        assert (
            row["sharding_strategy"] == fsdp["fsdp_sharding_strategy"] == fsdp["fsdp_reshard_after_forward"] == strategy
        )
        assert row["mixed_precision"] == {"param_dtype": dtype, "reduce_dtype": dtype, "buffer_dtype": dtype}
        assert row["activation_checkpointing"] is fsdp["fsdp_activation_checkpointing"] is True
        assert row["state_dict_type"] == fsdp["fsdp_state_dict_type"]
        assert row["cpu_offload"] is fsdp["fsdp_offload_params"]
        assert (row["use_orig_params"], row["sync_module_states"], row["cpu_ram_efficient_loading"]) == (
            fsdp["fsdp_use_orig_params"],
            fsdp["fsdp_sync_module_states"],
            fsdp["fsdp_cpu_ram_efficient_loading"],
        )
        assert (row["backward_prefetch"], row["forward_prefetch"]) == (
            fsdp["fsdp_backward_prefetch"],
            fsdp["fsdp_forward_prefetch"],
        )
        assert row["fsdp_units"] == 3  # TRANSFORMER_BASED_WRAP: the root and each of the 2 decoder layers
        assert row[
            "weights_equal_across_ranks"
        ]  # ranks > 0 started on meta (cpu_ram_efficient_loading), rank 0's reached them
    assert [r["started_on_meta"] for r in sorted(rows, key=lambda r: r["rank"])] == [False, True, True, True]
    assert ".metadata" in next(r for r in rows if r["rank"] == 0)["saved"]
    assert (tmp_path / HOSTILE_DIR / "step-1" / ".metadata").is_file()


def test_accelerate_fsdp_checkpoints_on_the_time_limit_signal(tmp_path, slurm_cluster):
    """Launch kind accelerate on 2 fake nodes × 2 ranks (FSDP1 from the generated config, tests/fsdp_probe.py): SIGUSR1
    to the job mid-run reaches the workers through `accelerate launch`; the generated CheckpointSignal has all 4 ranks
    agree at the same step end, they save the sharded state into step-N of the (hostile) checkpoint directory and the
    job ends COMPLETED."""
    realtools().transformers_python()
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=2,
        framework="fsdp",
        zero_stage=3,
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {"script": str(FSDP_PROBE), "env": {"MLINFRA_PROBE_MODE": "signal"}},
        },
    )
    plan = deployed(
        plan.model_copy(
            update={"training": plan.training.model_copy(update={"checkpoint_dir": str(tmp_path / HOSTILE_DIR)})}
        )
    )
    assert plan.deployment.launcher.kind == "accelerate" and plan.deployment.launcher.checkpoint_helper
    out = write_tree(render_training(plan), tmp_path / "out")
    state, logs, started = signalled_run(
        slurm_cluster, plan, out, ranks=4, marker="FSDP_PROBE_STEP", MLINFRA_NODE_RANK="1"
    )
    assert "JobState=COMPLETED" in state, state + logs[-4000:]
    rows = [json.loads(line) for line in re.findall(r"^.*FSDP_PROBE (\{.*\})$", logs, re.M)]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3] == sorted(s["rank"] for s in started), logs[-4000:]
    (stopped,) = {r["optimizer_steps"] for r in rows}  # every rank stopped at the same step
    assert stopped >= 1 and {r["signal"] for r in rows} == {"SIGUSR1"}
    assert (tmp_path / HOSTILE_DIR / f"step-{stopped}" / ".metadata").is_file()


@pytest.mark.parametrize("pricing", ["spot", "on-demand"])
def test_accelerate_launch_hands_torchrun_the_planned_nodes_and_rendezvous(tmp_path, pricing):
    """accelerate's own launch code turns the generated `accelerate launch` words into torchrun's agent settings: c10d
    rendezvous at the job's MASTER_ADDR:MASTER_PORT, the node range, processes per node and restarts of plan.json.
    accelerate has no node range (it sets --nnodes to --num_machines), so a spot plan is not elastic under it. Before:
    plan.json and the launcher said 2:4 nodes for this spot plan; accelerate ran 4:4."""
    from tests.test_launch import launched

    plan = small_training_plan(
        nodes=4,
        gpus_per_node=2,
        framework="fsdp",
        zero_stage=3,
        cluster={"scheduler": "slurm", "gpus_per_node": 2, "pricing": pricing, "slurm": {"partition": "gpu"}},
    )
    launch = plan_json(plan)["deployment"]["launcher"]
    assert launch["kind"] == "accelerate" and launch["elastic"] is (pricing == "spot")
    ok, message = realtools().accelerate_launch_plan(launched(tmp_path, plan))
    assert ok, message
    agent = json.loads(message)
    assert (agent["rdzv_backend"], agent["rdzv_endpoint"]) == (
        "c10d",
        "10.0.0.1:29999",
    )  # launched()'s MASTER_ADDR/PORT
    assert (agent["min_nodes"], agent["max_nodes"]) == (launch["min_nodes"], launch["nodes"]) == (4, 4)
    assert launch["nnodes"] == "4"
    assert (agent["nproc_per_node"], agent["max_restarts"]) == (launch["nproc_per_node"], launch["max_restarts"])
    assert agent["use_fsdp"] == "true" and agent["sharding_strategy"] == "FULL_SHARD"


def test_checkpoint_signal_reaches_the_workers(tmp_path):
    """Slurm's SIGUSR1 to the launcher reaches every worker as $MLINFRA_CHECKPOINT_SIGNAL, and the job ends cleanly
    after the workers checkpoint. Before: `trap '' USR1` + exec torchrun; the workers (own session) never saw it."""
    plan = probe_plan(tmp_path, "ddp", "torchrun", nodes=1, gpus_per_node=2, args=["--wait-signal"])
    out = write_tree(render_training(plan), tmp_path / "out")
    env = {**torch_env(), "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        ["bash", str(out / "launch/torchrun.sh")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines, waiting = [], 0
        deadline = time.monotonic() + 120
        while waiting < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            waiting += line.startswith("LAUNCH_PROBE_WAITING")
        assert waiting == 2, "".join(lines)[-3000:]
        os.kill(proc.pid, signal.SIGUSR1)  # what Slurm's --signal=USR1@lead does to the step's task
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(lines) + rest
    assert proc.returncode == 0, output[-3000:]
    rows = probe_rows(output)
    assert sorted(r["rank"] for r in rows) == [0, 1]
    assert {r["signal"] for r in rows} == {"SIGUSR1"}
    assert (tmp_path / HOSTILE_DIR / "step-1.pt").is_file()


# ----------------------------------------------------------------------------------------------- Megatron-LM's parser
def megatron_example(name: str):
    from compiler.pipeline import render, resolve

    plan = resolve(REPO / "examples" / f"{name}.yaml")
    return plan, {f.path: f for f in render(plan).files}


def launcher_env(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export (CUDA_[A-Z_]+)=(\S+)", text, re.M))


@pytest.mark.parametrize("name", ["llama3-405b-pretrain"])  # the one example that emits megatron/args.sh
def test_megatron_accepts_the_generated_arguments(tmp_path, name):
    """Megatron-LM's parse_args + validate_args take every word of megatron/args.sh, with the launcher's environment."""
    plan, files = megatron_example(name)
    out = write_tree(files, tmp_path)
    env = launcher_env(files["launch/torchrun.sh"].text)
    ok, message = realtools().validate_megatron_args(out / "megatron/args.sh", plan.hardware.gpus, env=env)
    assert ok, message
    derived = json.loads(message.rsplit("MEGATRON_OK ", 1)[1].splitlines()[0])
    par = plan.parallelism
    assert (
        derived["tensor_model_parallel_size"],
        derived["pipeline_model_parallel_size"],
        derived["data_parallel_size"],
    ) == (par.tp, par.pp, par.dp)
    assert (derived["global_batch_size"], derived["micro_batch_size"]) == (par.global_batch, par.micro_batch)
    assert (
        derived["exit_signal_handler"] is True and derived["rotary_base"] == 500000 and derived["hidden_dropout"] == 0.0
    )


def test_megatron_takes_uneven_pipeline_stages_and_rejects_them_missing(tmp_path):
    """126 layers on 4 pipeline stages: Megatron accepts the first/last-stage counts and refuses the split without them."""
    from compiler.plan.spec_train import MegatronSpec
    from tests.fixtures.resolved_plans import training_plan

    plan = training_plan()
    arch = plan.model.architecture.model_copy(update={"layers": 126})
    megatron = MegatronSpec(core_version="0.16", path="/opt/megatron-lm")  # the image is NGC PyTorch's, no Megatron-LM
    spec = plan.spec.model_copy(update={"train": plan.spec.train.model_copy(update={"megatron": megatron})})
    plan = deployed(
        plan.model_copy(
            update={
                "spec": spec,
                "model": plan.model.model_copy(update={"architecture": arch}),
                "parallelism": plan.parallelism.model_copy(
                    update={"tp": 2, "pp": 4, "dp": 8, "grad_accum": 32, "framework": "megatron"}
                ),
            }
        )
    )
    files = render_training(plan)
    out = write_tree(files, tmp_path / "ok")
    env = launcher_env(files["launch/torchrun.sh"].text)
    assert env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    ok, message = realtools().validate_megatron_args(out / "megatron/args.sh", plan.hardware.gpus, env=env)
    assert ok, message
    derived = json.loads(message.rsplit("MEGATRON_OK ", 1)[1].splitlines()[0])
    assert (derived["decoder_first_pipeline_num_layers"], derived["decoder_last_pipeline_num_layers"]) == (31, 31)
    broken = (out / "megatron/args.sh").read_text()
    broken = re.sub(r"^  --decoder-(first|last)-pipeline-num-layers \d+\n", "", broken, flags=re.M)
    (tmp_path / "broken.sh").write_text(broken)
    ok, message = realtools().validate_megatron_args(tmp_path / "broken.sh", plan.hardware.gpus, env=env)
    assert not ok and "divisible by the pipeline-model-parallel size" in message


MEGATRON_PLAN = """\
name: mega-sp
workload: train
model: {{preset: llama-3.1-8b}}
train:
  tokens: 1B
  seq_len: {seq_len}
  global_batch: 64
  framework: megatron
  entrypoint: {{script: pretrain_gpt.py}}
cluster:
  gpus: [h100-sxm-80gb]
  gpus_per_node: 8
  max_gpus: 8
parallelism: {{tp: {tp}, cp: {cp}, pp: 1}}
"""


def compile_megatron(tmp_path: Path, seq_len: int, tp: int, cp: int) -> subprocess.CompletedProcess:
    tmp_path.mkdir(exist_ok=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text(MEGATRON_PLAN.format(seq_len=seq_len, tp=tp, cp=cp))
    return subprocess.run(
        [sys.executable, "-m", "compiler", str(plan), "-o", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("seq_len", "tp", "cp", "on"),
    [
        (4096, 2, 1, True),
        (4095, 2, 1, False),  # 4095 tokens do not split over 2 TP ranks
        (8200, 4, 2, True),
        (8196, 4, 2, False),  # CP2 leaves each rank 4100 (8200 → 4100 = 4 × 1025) or 4098 tokens
    ],
)
def test_megatron_sequence_parallelism_only_where_megatron_core_splits_the_sequence(seq_len, tp, cp, on):
    """megatron-core's own scatter_to_sequence_parallel_region refuses a rank's sequence (seq_len / CP) that TP does not
    divide; validate_args does not check it, so it would fail at the first forward. Before: --sequence-parallel for
    every Megatron layout with TP > 1."""
    from compiler.sizing.train.frameworks import sequence_parallel
    from compiler.sizing.train.layout import Layout

    assert sequence_parallel(Layout(tp=tp, cp=cp), "megatron", seq_len) is on
    ok, message = realtools().megatron_sp_split(seq_len // cp, tp)
    assert ok is on, message
    if not on:
        assert "divisible by tensor parallel size" in message


def test_megatron_args_without_sequence_parallelism_at_an_odd_sequence(tmp_path):
    """A Megatron plan at seq_len 4095 on TP2: no --sequence-parallel (plan.json says so), and Megatron-LM's parser and
    validate_args take the words."""
    done = compile_megatron(tmp_path, 4095, 2, 1)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out" / "mega-sp"
    plan = json.loads((out / "plan.json").read_text())
    assert plan["parallelism"]["tp"] == 2 and plan["parallelism"]["sequence_parallel"] is False
    args_sh = (out / "megatron" / "args.sh").read_text()
    assert "--sequence-parallel" not in args_sh and "--seq-length 4095" in args_sh
    env = launcher_env((out / "launch" / "torchrun.sh").read_text())
    ok, message = realtools().validate_megatron_args(out / "megatron" / "args.sh", plan["hardware"]["gpus"], env=env)
    assert ok, message


def test_a_pinned_cp_that_does_not_split_the_sequence_is_refused_where_pinned(tmp_path):
    """seq_len 8190 with CP2: 2·CP = 4 chunks do not divide it. Megatron-LM's validate_args refuses those arguments
    (shown on the words of the CP2 plan at 8192 with --seq-length 8190 after them); the compiler refuses the pin at
    parallelism.cp, exit 2. Before: the plan compiled to arguments Megatron refuses."""
    done = compile_megatron(tmp_path / "ok", 8192, 2, 2)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "ok" / "out" / "mega-sp"
    env = launcher_env((out / "launch" / "torchrun.sh").read_text())
    ok, message = realtools().validate_megatron_args(out / "megatron" / "args.sh", 8, env=env)
    assert ok, message
    ok, message = realtools().validate_megatron_args(out / "megatron" / "args.sh", 8, "--seq-length", "8190", env=env)
    assert not ok and "multiple of 2 * context-parallel-size" in message, message
    done = compile_megatron(tmp_path / "bad", 8190, 2, 2)
    assert done.returncode == 2, done.stderr
    assert re.search(
        r"plan\.yaml:14:26: error: parallelism\.cp: context parallelism 2 cuts each sequence into 2·CP = 4 "
        r"equal chunks, and train\.seq_len 8190 is not a multiple of 4 .*\[cp-sequence-split\]",
        done.stderr,
    ), done.stderr


@pytest.mark.parametrize(("global_batch", "nnodes"), [(48, "2:4"), (64, "4")])
def test_megatron_takes_every_node_count_of_a_spot_range(tmp_path, global_batch, nnodes):
    """A spot Megatron plan (TP2 on 4 nodes × 8): torchrun may restart it on any count in --nnodes, and Megatron-LM's
    validate_args takes the same arguments at each (DP re-derived from the world size, the global batch in whole
    micro-batches). Global batch 64 has no such range: at 3 nodes (DP 12) Megatron refuses it, so the plan restarts
    at 4 nodes only. Before: 2:4 for both."""
    from tests.test_target_torchrun import spot_plan

    plan = spot_plan(
        4, 8, global_batch, framework="megatron", tp=2, dp=16, micro_batch=1, grad_accum=global_batch // 16
    )
    assert plan.deployment.launcher.nnodes == nnodes
    files = render_training(plan)
    out = write_tree(files, tmp_path)
    env = launcher_env(files["launch/torchrun.sh"].text)
    low = int(nnodes.split(":")[0])
    for nodes in range(low, 5):
        ok, message = realtools().validate_megatron_args(out / "megatron/args.sh", nodes * 8, env=env)
        assert ok, message
        assert json.loads(message.split("MEGATRON_OK ", 1)[1])["data_parallel_size"] == nodes * 8 // 2
    if low == 4:
        ok, message = realtools().validate_megatron_args(out / "megatron/args.sh", 3 * 8, env=env)
        assert not ok and "divisible" in message, message


def test_partial_node_and_site_walltime_pass_sbatch(tmp_path, slurm_cluster):
    """A 1-GPU job (its own GPUs, CPUs and memory, no --exclusive) under a 20 h site limit: sbatch --test-only accepts it
    and the chain's time limit is within the site's."""
    plan = small_training_plan(
        nodes=1,
        gpus_per_node=1,
        steps=200_000,
        step_seconds=2.0,
        cluster={"scheduler": "slurm", "gpus_per_node": 1, "slurm": {"partition": "gpu", "max_time": "20h"}},
    )
    out = write_tree(render_training(plan), tmp_path)
    result = _sbatch(slurm_cluster, out, "--test-only")
    assert result.returncode == 0 and "to start at" in result.stderr, result.stderr
    job = plan.deployment.slurm
    assert not job.exclusive and job.links > 1 and job.time_limit_seconds <= 20 * 3600


# --------------------------------------------------------------------- megatron-core (PyPI): runs wherever CI runs
def test_megatron_core_accepts_the_generated_layout_and_refuses_a_broken_split(tmp_path):
    """megatron-core's TransformerConfig takes the 405B example's layout (TP, PP, CP, virtual stages, uneven split as
    Megatron states it) and refuses the same arguments with the pipeline split made inconsistent."""
    plan, files = megatron_example("llama3-405b-pretrain")
    out = write_tree(files, tmp_path)
    ok, message = realtools().validate_megatron_core(out / "megatron/args.sh", plan.hardware.gpus)
    assert ok, message
    derived = json.loads(message.split("MEGATRON_CORE_OK ", 1)[1])
    par = plan.parallelism
    assert (
        derived["tensor_model_parallel_size"],
        derived["pipeline_model_parallel_size"],
        derived["data_parallel_size"],
    ) == (par.tp, par.pp, par.dp)
    assert derived.get("context_parallel_size", 1) == par.cp
    assert derived["virtual_pipeline_model_parallel_size"] == (par.vp if par.vp > 1 else None)
    text = (out / "megatron/args.sh").read_text()
    broken = text.replace("--account-for-loss-in-pipeline-split\n", "--decoder-first-pipeline-num-layers 5\n", 1)
    assert broken != text
    (tmp_path / "broken.sh").write_text(broken)
    ok, message = realtools().validate_megatron_core(tmp_path / "broken.sh", plan.hardware.gpus)
    assert not ok and any(words in message for words in ("cannot be", "divisible", "Mismatch")), message
