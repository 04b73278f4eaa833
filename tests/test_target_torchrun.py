"""launch/torchrun.sh: the numbers it carries, its quoting, and real torchrun runs on CPU (gloo).

Also home of the helpers the other training-target tests share (small plans, rendering, realtools access).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from compiler import training_consistency
from compiler.targets import deepspeed, fsdp, megatron, slurm, torchrun
from compiler.targets.base import OutputFile, with_header
from tests.fixtures.resolved_plans import deployed, training_plan
from tests.tools import realtools as tools_realtools

REPO = Path(__file__).resolve().parent.parent
TINY_TRAIN = REPO / "tests" / "tiny_train.py"
TRAINING_TARGETS = (torchrun, slurm, deepspeed, fsdp, megatron)
HOSTILE = ["$(touch {m})", "`touch {m}`", "a'b\"c", "; touch {m} #", "x y", "*", "--flag=$HOME"]


def realtools():
    """The real-tool helpers (tests/tools/realtools.py): they skip on a laptop without a tool, fail under CI."""
    return tools_realtools


def small_training_plan(
    nodes: int = 1,
    gpus_per_node: int = 2,
    framework: str = "ddp",
    zero_stage: int = 0,
    steps: int = 100,
    step_seconds: float = 1.0,
    **spec_overrides,
):
    """The fixture plan pinned to a small CPU-runnable layout: pure data parallelism over nodes × GPUs."""
    raw = {
        "train": {"tokens": "1M", "seq_len": 128, "entrypoint": {"script": str(TINY_TRAIN), "args": ["--steps", "2"]}},
        "cluster": {"scheduler": "slurm", "gpus_per_node": gpus_per_node, "slurm": {"partition": "gpu"}},
    }
    raw.update(spec_overrides)
    plan = training_plan(**raw)
    world = nodes * gpus_per_node
    # the fixture's selective recompute is Megatron's; on 1-D FSDP "selective" is torchtitan's op-level SAC, which runs
    # on the FSDP2 script, not Accelerate's config: these plans keep Accelerate's whole-block checkpointing
    recompute = (
        "full" if framework == "fsdp" and plan.parallelism.recompute == "selective" else plan.parallelism.recompute
    )
    return deployed(
        plan.model_copy(
            update={
                "hardware": plan.hardware.model_copy(
                    update={"nodes": nodes, "gpus_per_node": gpus_per_node, "gpus": world}
                ),
                "parallelism": plan.parallelism.model_copy(
                    update={
                        "tp": 1,
                        "pp": 1,
                        "dp": world,
                        "micro_batch": 2,
                        "grad_accum": 2,
                        "global_batch": 4 * world,
                        "zero_stage": zero_stage,
                        "sequence_parallel": False,
                        "framework": framework,
                        "recompute": recompute,
                    }
                ),
                "training": plan.training.model_copy(
                    update={"steps": steps, "step_seconds": step_seconds, "seq_len": 128}
                ),
            }
        )
    )


def render_training(plan) -> dict[str, OutputFile]:
    """Every training file the plan gets, with the pipeline's header, after the consistency check."""
    files = [
        with_header(f, plan.plan_file, plan.name) for t in TRAINING_TARGETS if t.applies(plan) for f in t.render(plan)
    ]
    training_consistency.check(files, plan)
    return {f.path: f for f in files}


def write_tree(files: dict[str, OutputFile], out: Path) -> Path:
    for f in files.values():
        path = out / f.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.text)
        path.chmod(f.mode)
    return out


def torch_env(omp_threads: str | None = "1") -> dict[str, str]:
    """The torch venv first on PATH, and the site's OMP_NUM_THREADS (the launcher keeps a value the site exported): one
    thread per CPU rank, as a test runs up to 8 ranks on a 2-core machine where the plan's 12 per GPU would oversubscribe
    it many times over; None leaves the plan's own default to reach the ranks."""
    bin_dir = Path(realtools().tool_python("torch")).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("OMP_NUM_THREADS", None)
    return env if omp_threads is None else {**env, "OMP_NUM_THREADS": omp_threads}


def tiny_lines(output: str) -> list[dict]:
    """The TINY_TRAIN lines (one whole line per rank) as dicts."""
    rows = []
    for line in re.findall(r"^TINY_TRAIN .*$", output, re.M):
        head, _, args = line.partition(" args=")
        row = dict(kv.split("=", 1) for kv in head.split()[1:])
        row["args"] = json.loads(args)
        rows.append(row)
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_text(plan) -> str:
    return torchrun.render(plan)[0].text


# --- numbers in the right places -------------------------------------------------------------------


def test_fixture_plan_layout():
    text = launcher_text(training_plan())
    assert "  --nnodes=8 \\\n" in text
    assert "  --nproc-per-node=8 \\\n" in text
    assert "  --max-restarts=0 \\\n" in text
    assert "export MLINFRA_WORLD_SIZE=64\n" in text
    assert "export MLINFRA_GLOBAL_BATCH=512\n" in text
    # no cpus_per_node in the plan: 12 cores per GPU (p4d: 96 vCPUs / 8 GPUs) → OMP_NUM_THREADS 12
    assert "default_env OMP_NUM_THREADS 12\n" in text
    assert '  train.py --config cfg.yaml --deepspeed_config "$OUT_DIR/deepspeed/ds_config.json" &\n' in text


def test_omp_threads_from_cpus_per_node():
    plan = training_plan(cluster={"gpus_per_node": 8, "slurm": {"cpus_per_node": 112}})
    assert "default_env OMP_NUM_THREADS 14\n" in launcher_text(plan)  # 112 cores / 8 GPUs (DGX H100)


def spot_plan(nodes: int, gpus_per_node: int, global_batch: int, framework: str = "ddp", **parallelism):
    plan = small_training_plan(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        framework=framework,
        cluster={"gpus_per_node": gpus_per_node, "pricing": "spot"},
    )
    update = {"global_batch": global_batch, **parallelism}
    return deployed(plan.model_copy(update={"parallelism": plan.parallelism.model_copy(update=update)}))


def test_spot_deepspeed_restarts_at_full_size():
    """ds_config.json's train_batch_size = micro × accumulation × DP is asserted by DeepSpeed at start, so a restart on
    fewer nodes would stop. Before: --nnodes=4:8."""
    plan = training_plan(cluster={"gpus_per_node": 8, "pricing": "spot"})
    text = launcher_text(plan)
    assert plan.parallelism.framework == "deepspeed" and plan.deployment.launcher.node_range is False
    assert "  --nnodes=8 \\\n" in text and "  --max-restarts=10 \\\n" in text
    assert "DeepSpeedConfig._batch_assertion" in plan.deployment.launcher.restart_reason
    assert "DeepSpeedConfig._batch_assertion" in text  # the launcher's comment says why


@pytest.mark.parametrize(
    ("nodes", "global_batch", "nnodes"),
    [
        (2, 16, "1:2"),  # DP 2 or 4 ranks × micro 2 divide 16
        (4, 32, "4"),  # at 3 nodes DP 6 × micro 2 = 12 does not divide 32: torchrun could restart there and stop
        (4, 48, "2:4"),  # 8, 12 and 16 divide 48
    ],
)
def test_spot_range_only_where_every_count_keeps_the_global_batch(nodes, global_batch, nnodes):
    launch = spot_plan(nodes, 2, global_batch).deployment.launcher
    assert (launch.kind, launch.nnodes, launch.node_range) == ("torchrun", nnodes, ":" in nnodes)
    assert launch.min_nodes == int(nnodes.split(":")[0])
    assert ("restarts on" if launch.node_range else "restarts at its full size") in launch.restart_reason


def test_spot_megatron_rederives_dp_over_the_range():
    plan = spot_plan(
        4, 8, 48, framework="megatron", tp=2, dp=16, micro_batch=1, grad_accum=3
    )  # DP 8, 12, 16 at 2, 3, 4 nodes: 48 = 6, 4, 3 micro-batches per rank
    launch = plan.deployment.launcher
    assert launch.nnodes == "2:4" and "Megatron-LM re-derives DP" in launch.restart_reason


def test_spot_replica_across_nodes_restarts_at_full_size():
    # one replica = TP8 × PP2 = 16 GPUs = 2 nodes: at 5 of 6 nodes (40 GPUs) no whole replicas, so no range.
    # Before: 4:6, which torchrun could restart at 5 nodes
    plan = spot_plan(6, 8, 12, tp=8, pp=2, dp=3)
    assert plan.deployment.launcher.nnodes == "6" and "whole model replicas" in plan.deployment.launcher.restart_reason


@pytest.mark.parametrize(
    ("interconnect", "present", "absent"),
    [
        ("ib-400g", ["NCCL_IB_HCA mlx5", "NCCL_IB_DISABLE 0"], ["NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE 1"]),
        ("roce-400g", ["NCCL_IB_GID_INDEX 3", "NCCL_IB_HCA mlx5"], ["NCCL_IB_DISABLE 1"]),
        ("eth-100g", ["NCCL_IB_DISABLE 1", "NCCL_SOCKET_IFNAME '^lo,docker'"], ["NCCL_IB_HCA"]),
        ("efa-3200g", ["FI_PROVIDER efa"], ["NCCL_IB_DISABLE"]),
    ],
)
def test_collective_env_follows_interconnect(interconnect, present, absent):
    plan = training_plan()
    plan = deployed(
        plan.model_copy(update={"hardware": plan.hardware.model_copy(update={"interconnect": interconnect})})
    )
    text = launcher_text(plan)
    for item in present:
        assert f"default_env {item}" in text
    for item in absent:
        assert f"default_env {item}" not in text
    assert "default_env TORCH_NCCL_ASYNC_ERROR_HANDLING 1" in text
    assert "default_env NCCL_ASYNC_ERROR_HANDLING 1" in text


def test_deepspeed_config_only_for_deepspeed():
    assert "--deepspeed_config" not in launcher_text(small_training_plan(framework="ddp"))
    assert "--deepspeed_config" in launcher_text(small_training_plan(framework="deepspeed", zero_stage=2))


def test_user_env_is_exported_quoted():
    plan = training_plan(
        train={"tokens": "1T", "entrypoint": {"script": "train.py", "env": {"HF_HOME": "/data/hf cache", "B": "$(id)"}}}
    )
    text = launcher_text(plan)
    assert "export B='$(id)'\nexport HF_HOME='/data/hf cache'\n" in text


def test_bash_syntax_and_shellcheck(tmp_path):
    path = tmp_path / "torchrun.sh"
    plan = training_plan()
    path.write_text(with_header(torchrun.render(plan)[0], plan.plan_file, plan.name).text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run([str(realtools().shellcheck_bin()), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# --- real torchrun on CPU ---------------------------------------------------------------------------


def _run_launcher(out: Path, env: dict, *args: str, timeout_s: int = 120) -> subprocess.Popen:
    return subprocess.Popen(
        ["timeout", "-k", "10", str(timeout_s), "bash", str(out / "launch/torchrun.sh"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_one_node_two_processes(tmp_path):
    plan = small_training_plan(nodes=1, gpus_per_node=2)
    out = write_tree(render_training(plan), tmp_path)
    env = {**torch_env(omp_threads=None), "MASTER_PORT": str(free_port())}
    proc = _run_launcher(out, env)
    output, _ = proc.communicate()
    assert proc.returncode == 0, output
    rows = tiny_lines(output)
    assert sorted(int(r["rank"]) for r in rows) == [0, 1]
    assert {r["world"] for r in rows} == {"2"}
    assert sorted(r["local_rank"] for r in rows) == ["0", "1"]
    # a job below a node gets its GPUs' share of the node's CPUs, one OpenMP thread per CPU (not torchrun's 1)
    assert {r["omp"] for r in rows} == {str(plan.deployment.launcher.omp_threads)} != {"1"}
    assert all(r["args"] == ["--steps", "2"] for r in rows)


def test_two_nodes_rendezvous_on_localhost(tmp_path):
    out = write_tree(render_training(small_training_plan(nodes=2, gpus_per_node=2)), tmp_path)
    env = {
        **torch_env(),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "MLINFRA_RDZV_ID": "two-node-test",
    }
    agents = [_run_launcher(out, env) for _ in range(2)]
    outputs = [a.communicate()[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outputs
    rows = tiny_lines("".join(outputs))
    assert sorted(int(r["rank"]) for r in rows) == [0, 1, 2, 3]
    assert {r["world"] for r in rows} == {"4"}
    assert all(len(tiny_lines(o)) == 2 for o in outputs)  # two processes per "node"


def test_endpoint_argument_overrides_env(tmp_path):
    out = write_tree(render_training(small_training_plan(nodes=1, gpus_per_node=1)), tmp_path)
    env = {**torch_env(), "MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "1"}  # unreachable: must not be used
    proc = _run_launcher(out, env, f"127.0.0.1:{free_port()}")
    output, _ = proc.communicate()
    assert proc.returncode == 0, output
    assert [r["world"] for r in tiny_lines(output)] == ["1"]


def test_hostile_strings_reach_the_script_verbatim(tmp_path):
    marker = tmp_path / "pwned"
    hostile = [h.format(m=marker) for h in HOSTILE]
    plan = small_training_plan(
        nodes=1,
        gpus_per_node=1,
        train={
            "tokens": "1M",
            "seq_len": 128,
            "entrypoint": {
                "script": str(TINY_TRAIN),
                "args": hostile,
                "env": {"EVIL": f"$(touch {marker})`touch {marker}`"},
            },
        },
    )
    out = write_tree(render_training(plan), tmp_path / "out")
    proc = _run_launcher(out, {**torch_env(), "MASTER_PORT": str(free_port())})
    output, _ = proc.communicate()
    assert proc.returncode == 0, output
    assert [r["args"] for r in tiny_lines(output)] == [hostile]
    assert not marker.exists()
