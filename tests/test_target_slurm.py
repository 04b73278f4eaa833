"""slurm/train.sbatch: directives and time limits (hand-checked), quoting, sbatch --test-only on the fake
Slurm cluster, and a real 2-node job whose torchrun agents start tests/tiny_train.py on CPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from compiler import training_consistency
from compiler.deployment.training.slurm import directive_value, slurm_time
from compiler.targets import slurm
from tests.fixtures.resolved_plans import training_plan
from tests.test_target_torchrun import (
    HOSTILE,
    TINY_TRAIN,
    realtools,
    render_training,
    small_training_plan,
    tiny_lines,
    torch_env,
    write_tree,
)

try:  # the fake-cluster fixture lives with the other real-tool helpers
    from tests.tools.realtools import slurm_cluster  # noqa: F401
except ImportError:
    if os.environ.get("CI") == "true":
        raise

    @pytest.fixture
    def slurm_cluster():
        pytest.skip("tests/tools/realtools.py not available")


def sbatch_text(plan) -> str:
    return slurm.render(plan)[0].text


def directives(text: str) -> list[str]:
    return re.findall(r"^#SBATCH (.*)$", text, re.M)


# --- numbers in the right places -------------------------------------------------------------------


def test_fixture_plan_directives():
    d = directives(sbatch_text(training_plan()))
    assert d[:7] == [
        "--job-name=llama3-8b-pretrain",
        "--nodes=8",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--cpus-per-task=96",
        "--mem=0",
        "--time=1-00:00:00",
    ]
    assert {"--exclusive", "--requeue", "--partition=gpu", "--account=ml", "--signal=USR1@90"} <= set(d)


def test_long_run_becomes_a_chain():
    """238,419 steps × 9.5 s: effective step 9.5 × (1 + 40/3600) × 1.10 = 10.5661 s; per-job overhead
    600 launch + 40 restore + 90 lead = 730 s; steps per 24 h job = floor((86,400 − 730) / 10.5661) = 8,107;
    links = ceil(238,419 / 8,107) = 30; limit = 8,107 × 10.5661 + 730 = 86,389 s → 1440 min."""
    plan = training_plan()
    job = plan.deployment.slurm
    links, per_link, limit = job.links, job.steps_per_link, job.time_limit_seconds
    assert (links, per_link) == (30, 8107)
    assert limit == pytest.approx(86_389, abs=1)
    d = directives(sbatch_text(plan))
    assert "--array=0-29%1" in d
    assert "--output=%x-%A_%a.out" in d


def test_a_chain_completes_a_run_as_slow_as_the_step_range_p90():
    """Published steps run up to 1.35 × the headline at P90: the links are sized at that step, so a run that slow
    still gets every step (at the headline's 10 % margin, 30 links would stop about a fifth short)."""
    from compiler.deployment.training.slurm import job_chain
    from compiler.plan.resolved import Range

    plan = training_plan()
    spread = Range(
        quantity="training.step_seconds",
        roofline=9.5,
        p10=9.5,
        p50=9.5,
        p90=9.5 * 1.35,
        family="train-step-time",
        rows=30,
    )
    links, per_link, limit = job_chain(plan.model_copy(update={"ranges": [spread]}), 3600, 86_400)
    slow_step = 9.5 * 1.35 * (1 + 40 / 3600)
    assert links * per_link >= plan.training.steps and links > 30
    assert per_link * slow_step + 730 == pytest.approx(limit) and limit <= 86_400


def test_short_run_is_one_job():
    """100 steps × 1 s: 100 × 1 × (1 + 40/3600) × 1.10 = 111.2 s + 600 + 40 + lead ceil(1 + 2 × 40) = 81
    → 832.2 s → 14 min."""
    plan = small_training_plan(nodes=2, gpus_per_node=2)
    assert plan.deployment.slurm.signal_lead_seconds == 81
    d = directives(sbatch_text(plan))
    assert "--time=0-00:14:00" in d
    assert "--signal=USR1@81" in d
    assert not any(x.startswith("--array") for x in d)
    assert "--output=%x-%j.out" in d


def test_signal_lead_covers_step_and_checkpoint_write():
    plan = training_plan()
    # one 9.5 s step + 2 × 40 s checkpoint write = 89.5 → 90 s
    assert plan.deployment.slurm.signal_lead_seconds == 90


def test_slurm_time_format():
    assert slurm_time(59) == "0-00:01:00"
    assert slurm_time(90_061) == "1-01:02:00"  # 25 h 1 min 1 s → rounded up to 1-01:02


def test_cpus_and_memory_from_plan():
    plan = small_training_plan(
        nodes=1,
        gpus_per_node=8,
        cluster={"scheduler": "slurm", "gpus_per_node": 8, "slurm": {"cpus_per_node": 64, "memory_per_node": "512GiB"}},
    )
    text = sbatch_text(plan)
    assert "#SBATCH --cpus-per-task=64\n" in text and "--cpus-per-task=64 --kill-on-bad-exit=1" in text
    assert "#SBATCH --mem=524288M\n" in text  # 512 GiB = 524,288 MiB


def test_all_directives_before_first_command():
    plan = training_plan(
        cluster={
            "scheduler": "slurm",
            "gpus_per_node": 8,
            "slurm": {
                "partition": "gpu",
                "qos": "high",
                "reservation": "big",
                "constraint": "h100&ib",
                "extra_directives": ["--mail-type=END", "--comment=two words"],
            },
        }
    )
    text = sbatch_text(plan)
    lines = text.splitlines()
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    d = directives(text)
    assert {
        "--qos=high",
        "--reservation=big",
        "--constraint=h100&ib",
        "--mail-type=END",
        '--comment="two words"',
    } <= set(d)


def test_directive_quoting():
    assert directive_value("gpu") == "gpu"
    assert directive_value('a "b" c\\') == '"a \\"b\\" c\\\\"'


def test_container_on_srun_line():
    text = sbatch_text(
        training_plan(
            cluster={
                "scheduler": "slurm",
                "gpus_per_node": 8,
                "slurm": {
                    "container_image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "container_mounts": ["/lustre:/lustre", "/data:/data"],
                },
            }
        )
    )
    assert 'container_mounts="$container_mounts,"/lustre:/lustre,/data:/data\n' in text
    assert "--container-image=nvcr.io/nvidia/pytorch:24.05-py3" in text


def test_consistency_check_catches_a_wrong_node_count():
    plan = training_plan()
    files = {path: f.text for path, f in render_training(plan).items()}
    files["slurm/train.sbatch"] = files["slurm/train.sbatch"].replace("#SBATCH --nodes=8", "#SBATCH --nodes=4")
    with pytest.raises(AssertionError, match="--nodes"):
        training_consistency.check(files, plan)


def test_bash_syntax_and_shellcheck(tmp_path):
    plan = training_plan(
        cluster={
            "scheduler": "slurm",
            "gpus_per_node": 8,
            "slurm": {"container_image": "img", "container_mounts": ["/a:/b"], "extra_directives": ["--comment=x"]},
        }
    )
    for path in (write_tree(render_training(plan), tmp_path) / "slurm/train.sbatch",):
        subprocess.run(["bash", "-n", str(path)], check=True)
        result = subprocess.run([str(realtools().shellcheck_bin()), str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


# --- hostile strings: no command runs ------------------------------------------------------------------


def _fake_slurm_bin(tmp_path: Path) -> Path:
    """scontrol and srun stand-ins: srun writes its argv as JSON so a test can see what arrived."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\necho n1\necho n2\n")
    (bin_dir / "srun").write_text(
        "#!/usr/bin/env bash\n"
        'if [ "${*: -2}" = "hostname --ip-address" ]; then echo 127.0.0.1; exit 0; fi\n'
        'python3 -c \'import json,sys; print(json.dumps(sys.argv[1:]))\' "$@" >> "$SRUN_LOG"\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def test_hostile_plan_strings_stay_data(tmp_path):
    marker = tmp_path / "pwned"
    hostile = [h.format(m=marker) for h in HOSTILE]
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=2,
        cluster={
            "scheduler": "slurm",
            "gpus_per_node": 2,
            "slurm": {
                "partition": "gpu",
                "container_image": f"img$(touch {marker})`touch {marker}`'\"",
                "container_mounts": [f"/a:/b$(touch {marker})", "/c d:/e"],
                "extra_directives": [f'--comment=$(touch {marker}) "q" `touch {marker}`'],
            },
        },
        train={"tokens": "1M", "entrypoint": {"script": "x.py", "args": hostile}},
    )
    out = write_tree(render_training(plan), tmp_path / "out")
    log = tmp_path / "srun.log"
    env = {
        **os.environ,
        "PATH": f"{_fake_slurm_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        "SRUN_LOG": str(log),
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_ID": "7",
        "SLURM_SUBMIT_DIR": str(out),
    }
    runs = out / plan.runs_dir  # the job's working directory (--chdir)
    runs.mkdir(parents=True)
    subprocess.run(["bash", str(out / "slurm/train.sbatch")], env=env, check=True, timeout=30, cwd=runs)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 1
    assert f"--container-image=img$(touch {marker})`touch {marker}`'\"" in calls[0]
    # the submit and working directories, the plan's mounts, then the checkpoint directory the job writes
    mounts = f"{out}:{out},{runs.resolve()}:{runs.resolve()},/a:/b$(touch {marker}),/c d:/e,/lustre/ckpt:/lustre/ckpt"
    assert f"--container-mounts={mounts}" in calls[0] and f"--container-workdir={runs.resolve()}" in calls[0]
    assert calls[0][-2:] == ["bash", str(out / "launch/torchrun.sh")]
    assert not marker.exists()


def test_hostile_plan_passes_sbatch_test_only(tmp_path, slurm_cluster):
    marker = tmp_path / "pwned"
    plan = small_training_plan(
        nodes=2,
        gpus_per_node=2,
        cluster={
            "scheduler": "slurm",
            "gpus_per_node": 2,
            "slurm": {
                "partition": "gpu",
                "container_image": f"img$(touch {marker})",
                "extra_directives": [f'--comment=$(touch {marker}) "q" `touch {marker}`'],
            },
        },
    )
    out = write_tree(render_training(plan), tmp_path / "out")
    result = _sbatch(slurm_cluster, out, "--test-only")
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


# --- the fake Slurm cluster --------------------------------------------------------------------------


def cluster_env(cluster) -> dict[str, str]:
    return {**os.environ, **cluster.env}


def job_folder(out: Path) -> Path:
    """Where the job works and logs: its sbatch's --chdir (out/runs/<plan>/), relative to the plan folder."""
    chdir = re.search(r"^#SBATCH --chdir=(.+)$", (out / "slurm/train.sbatch").read_text(), re.M).group(1)
    return out / chdir


def _sbatch(cluster, out: Path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    job_folder(out).mkdir(parents=True, exist_ok=True)  # as the writer makes it
    return subprocess.run(
        ["sbatch", *flags, "slurm/train.sbatch"],
        cwd=out,
        env=env or cluster_env(cluster),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "layout",
    [
        {"nodes": 1, "gpus_per_node": 2},
        {"nodes": 2, "gpus_per_node": 8},
        {"nodes": 2, "gpus_per_node": 4, "steps": 200_000, "step_seconds": 2.0},  # a chained job array
        {"nodes": 1, "gpus_per_node": 8, "framework": "deepspeed", "zero_stage": 3},
    ],
)
def test_sbatch_test_only_accepts(tmp_path, slurm_cluster, layout):
    gpn = layout["gpus_per_node"]
    plan = small_training_plan(
        **layout,
        cluster={
            "scheduler": "slurm",
            "gpus_per_node": gpn,
            "slurm": {
                "partition": "gpu",
                "account": "ml",
                "extra_directives": ["--mail-type=END", "--comment=two words"],
            },
        },
    )
    result = _sbatch(slurm_cluster, write_tree(render_training(plan), tmp_path), "--test-only")
    assert result.returncode == 0, result.stderr
    assert "to start at" in result.stderr


def test_sbatch_test_only_rejects_too_many_nodes(tmp_path, slurm_cluster):
    """The check can fail: 3 nodes do not exist on the 2-node cluster."""
    plan = small_training_plan(nodes=3, gpus_per_node=2)
    result = _sbatch(slurm_cluster, write_tree(render_training(plan), tmp_path), "--test-only")
    assert result.returncode != 0
    assert "Requested node configuration is not available" in result.stderr


def test_two_node_job_runs_tiny_train(tmp_path, slurm_cluster):
    plan = small_training_plan(nodes=2, gpus_per_node=2)
    out = write_tree(render_training(plan), tmp_path)
    env = {**cluster_env(slurm_cluster), "PATH": torch_env()["PATH"], "MASTER_PORT": "29731"}
    submitted = _sbatch(slurm_cluster, out, "--parsable", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job_id], env=env, capture_output=True, text=True)
        if not queued.stdout.strip():
            break
        time.sleep(0.3)
    else:
        subprocess.run(["scancel", job_id], env=env)
        pytest.fail("job did not finish in 150 s")
    state = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    output = (job_folder(out) / f"{plan.name}-{job_id}.out").read_text()
    errors = (job_folder(out) / f"{plan.name}-{job_id}.err").read_text()
    assert "JobState=COMPLETED" in state, state + errors[-3000:]
    rows = tiny_lines(output)
    assert sorted(int(r["rank"]) for r in rows) == [0, 1, 2, 3]
    assert {r["world"] for r in rows} == {"4"}
    assert sorted(r["local_rank"] for r in rows) == ["0", "0", "1", "1"]


# --- jobs below a node share it ------------------------------------------------------------------------


def one_gpu_plan(script: str = str(TINY_TRAIN), **slurm_fields):
    return small_training_plan(
        nodes=1,
        gpus_per_node=1,
        train={"tokens": "1M", "seq_len": 128, "entrypoint": {"script": script}},
        cluster={"scheduler": "slurm", "gpus_per_node": 1, "slurm": {"partition": "gpu", **slurm_fields}},
    )


def test_one_gpu_job_takes_its_share_of_the_node_not_the_node():
    """A 1-GPU job on an 8-GPU H100 node (p5.48xlarge: 192 vCPU, 2048 GiB, EKS maxPods 100): allocatable CPU =
    192,000 m - reserve (60 + 10 + 10 + 0.25% x 188,000 = 550 m) - 500 m daemonsets = 190,950 m, / 8 = 23,868 m
    -> 23 whole CPUs per GPU; memory = 2048 GiB - (11 MiB x 100 + 255 MiB) - 100 MiB - 1 GiB - 5,128 x 2 MiB of EFA huge
    pages, / 8, in MiB."""
    plan = one_gpu_plan()
    d = directives(sbatch_text(plan))
    assert "--exclusive" not in d and not any(x.startswith(("--mem=", "--cpus-per-task")) for x in d)
    memory_mib = (2048 * 1024 - (11 * 100 + 255) - 100 - 1024 - 5128 * 2) // 8
    assert {"--gpus-per-node=1", "--cpus-per-gpu=23", f"--mem-per-gpu={memory_mib}M"} <= set(d)
    assert plan.deployment.launcher.cpus_per_node == 23  # OMP threads and srun's CPUs follow the share


def test_one_gpu_job_share_from_the_site_node():
    """cluster.slurm.cpus_per_node / memory_per_node describe the site's node: the job gets 1/8 of each."""
    d = directives(sbatch_text(one_gpu_plan(cpus_per_node=96, memory_per_node="1024GiB")))
    assert {"--cpus-per-gpu=12", "--mem-per-gpu=131072M"} <= set(d)


def test_two_one_gpu_jobs_run_at_once_on_one_node(tmp_path, slurm_cluster):
    """Real Slurm (fake 8-GPU nodes, 96 CPUs, 1,000,000 MB): two 1-GPU jobs pinned to node n1 both run at the same
    time. A whole-node job (--exclusive) would keep the second pending until the first ends."""
    release = tmp_path / "release"
    hold = tmp_path / "hold.py"
    hold.write_text(
        "import os, pathlib, time\n"
        f"deadline = time.time() + 90\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.time() < deadline:\n"
        "    time.sleep(0.2)\n"
        "print('HELD', os.environ.get('SLURM_JOB_ID'), flush=True)\n"
    )
    plan = one_gpu_plan(str(hold), cpus_per_node=96, memory_per_node="400GB")
    env = {**cluster_env(slurm_cluster), "PATH": torch_env()["PATH"]}
    jobs = []
    for i, port in ((0, "29741"), (1, "29743")):
        out = write_tree(render_training(plan), tmp_path / f"job{i}")
        (out / plan.runs_dir).mkdir(parents=True, exist_ok=True)  # the job's --chdir, which the writer makes
        submitted = _sbatch(slurm_cluster, out, "--parsable", "--nodelist=n1", env={**env, "MASTER_PORT": port})
        assert submitted.returncode == 0, submitted.stderr
        jobs.append(submitted.stdout.strip().split(";")[0])
    try:
        both_running = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not both_running:
            rows = subprocess.run(
                ["squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T %N"], env=env, capture_output=True, text=True
            ).stdout.split("\n")
            states = {r.split()[0]: r.split()[1:] for r in rows if r.strip()}
            both_running = all(states.get(j, [None])[0] == "RUNNING" for j in jobs)
            time.sleep(0.3)
        assert both_running, f"not both running on n1: {states}"
        assert all(states[j][1] == "n1" for j in jobs)
    finally:
        release.touch()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if not subprocess.run(
            ["squeue", "-h", "-j", ",".join(jobs)], env=env, capture_output=True, text=True
        ).stdout.strip():
            break
        time.sleep(0.3)
    for i, job in enumerate(jobs):
        state = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
        runs = tmp_path / f"job{i}" / plan.runs_dir
        errors = (runs / f"{plan.name}-{job}.err").read_text()
        assert "JobState=COMPLETED" in state, state + errors[-3000:]
        assert f"HELD {job}" in (runs / f"{plan.name}-{job}.out").read_text()
