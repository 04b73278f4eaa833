"""Megatron-LM as a versioned target: the release a plan's image runs decides which flags megatron/args.sh may use
(compiler/catalog/megatron_flags.yaml), older spellings replace missing flags where one exists, and the plan is
refused at the field that chose the release otherwise; the entry point is resolved in the image's Megatron-LM."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.catalog.catalog import load_catalog
from compiler.deployment import megatron_arch, megatron_version
from tests.conftest import REPO

PLANS = REPO / "tests" / "data" / "megatron"
LLAMA_405B = (REPO / "examples" / "llama3-405b-pretrain.yaml").read_text()
LLAMA_8B = """\
name: llama-8b-megatron
workload: train
model: {{preset: llama-3.1-8b}}
train:
  tokens: 10B
  seq_len: 4096
  global_batch: 256
  framework: megatron
{megatron}cluster:
  gpu: h100-sxm-80gb
  gpus_per_node: 8
  max_gpus: 8
  slurm: {{container_image: {image}}}
parallelism: {{tp: 2, pp: 1}}
"""


def compile_plan(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "compiler", str(plan), "-o", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, tmp_path / "out" / re.search(r"^name: (\S+)", text, re.M).group(1)


def words(folder: Path) -> list[str]:
    text = (folder / "megatron" / "args.sh").read_text()
    return subprocess.run(
        ["bash", "-c", 'source /dev/stdin; printf "%s\\0" "${MEGATRON_ARGS[@]}"'],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]


def megatron_json(folder: Path) -> dict:
    return json.loads((folder / "plan.json").read_text())["deployment"]["frameworks"]["megatron"]


def test_flag_table_matches_the_tags():
    """First releases checked by hand against `git show core_vX.Y.0:megatron/training/arguments.py` (the research
    notes' table): a generator that shifted a column would move these."""
    since = megatron_version.flag_table()["since"]
    assert since["--multi-latent-attention"] == since["--moe-layer-freq"] == "0.10"
    assert since["--moe-router-score-function"] == since["--account-for-loss-in-pipeline-split"] == "0.11"
    assert (since["--mtp-num-layers"], since["--save-retain-interval"]) == ("0.12", "0.14")
    assert since["--decoder-first-pipeline-num-layers"] == "0.9"
    assert megatron_version.has_flag("0.17", "--use-legacy-models")
    assert not megatron_version.has_flag("0.18", "--use-legacy-models")  # removed in core_v0.18.0
    assert not megatron_version.has_flag("0.17", "--moe-router-score-function", "sqrtsoftplus")
    assert megatron_version.has_flag("0.18", "--moe-router-score-function", "sqrtsoftplus")


def test_image_rows():
    assert megatron_version.image_row("nvcr.io/nvidia/nemo:24.07")["core_version"] == "0.8"
    assert megatron_version.image_row("nvcr.io/nvidia/nemo:25.04.01")["core_version"] == "0.12"
    assert megatron_version.image_row("nvcr.io/nvidia/pytorch:24.05-py3") is None


def test_flags_newer_than_the_image_are_refused_at_the_image(tmp_path):
    """Llama 3.1 405B's interleaved uneven split needs --account-for-*-in-pipeline-split (megatron-core 0.11); NeMo 24.07
    runs 0.8: exit 2 at cluster.slurm.container_image, naming the flag, the release and the image that has it."""
    text = LLAMA_405B.replace(
        "slurm: {partition: gpu,", "slurm: {container_image: nvcr.io/nvidia/nemo:24.07, partition: gpu,"
    )
    done, _ = compile_plan(tmp_path, text)
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stdout + done.stderr
    assert "cluster.slurm.container_image" in message and "megatron-core 0.8" in message
    assert re.search(
        r"no --account-for-embedding-in-pipeline-split.*first in megatron-core 0\.11 \(nvcr\.io/nvidia/nemo:25\.02",
        message,
    )


def test_rope_scaling_in_its_older_spelling(tmp_path):
    """megatron-core 0.10 (NeMo 24.12) has --use-rope-scaling but not --rope-scaling-factor; its scaling is Llama 3.1's
    factor 8, the catalog's: the factor is left out and plan.json says why. 0.11 takes the factor."""
    done, out = compile_plan(tmp_path / "a", LLAMA_8B.format(megatron="", image="nvcr.io/nvidia/nemo:24.12"))
    assert done.returncode == 0, done.stdout + done.stderr
    args = words(out)
    assert "--use-rope-scaling" in args and "--rope-scaling-factor" not in args
    target = megatron_json(out)
    assert target["core_version"] == "0.10"
    assert any("--rope-scaling-factor 8 left out" in note for note in target["older_spellings"])
    done, out = compile_plan(tmp_path / "b", LLAMA_8B.format(megatron="", image="nvcr.io/nvidia/nemo:25.02"))
    assert dict(zip(words(out), words(out)[1:]))["--rope-scaling-factor"] == "8"
    assert megatron_json(out)["older_spellings"] == []


def test_expert_width_in_its_older_spelling(tmp_path):
    """Mixtral on NeMo 24.09 (0.9, no --moe-ffn-hidden-size): every layer has experts, so --ffn-hidden-size carries
    their width."""
    done, out = compile_plan(tmp_path, (PLANS / "mixtral-8x7b.yaml").read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    pairs = dict(zip(words(out), words(out)[1:]))
    assert "--moe-ffn-hidden-size" not in pairs and pairs["--ffn-hidden-size"] == "14336"
    assert "--overlap-moe-expert-parallel-comm" not in pairs  # 0.9 has none: the sizing priced no overlap
    assert json.loads((out / "plan.json").read_text())["parallelism"]["ep_overlap"] is False


def test_deepseek_v3_arguments_build_its_architecture(tmp_path):
    done, out = compile_plan(tmp_path, (PLANS / "deepseek-v3.yaml").read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    args = words(out)
    pairs = dict(zip(args, args[1:]))
    assert (pairs["--num-experts"], pairs["--moe-router-topk"], pairs["--moe-ffn-hidden-size"]) == ("256", "8", "2048")
    assert pairs["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert pairs["--moe-shared-expert-intermediate-size"] == "2048"
    assert (pairs["--moe-router-score-function"], pairs["--moe-router-topk-scaling-factor"]) == ("sigmoid", "2.5")
    assert (pairs["--moe-router-num-groups"], pairs["--moe-router-group-topk"]) == ("8", "4")
    assert "--moe-router-enable-expert-bias" in args and "--multi-latent-attention" in args
    assert (pairs["--q-lora-rank"], pairs["--kv-lora-rank"]) == ("1536", "512")
    assert (pairs["--qk-head-dim"], pairs["--qk-pos-emb-head-dim"], pairs["--v-head-dim"]) == ("128", "64", "128")
    assert pairs["--mtp-num-layers"] == "1" and "--group-query-attention" not in args
    target = megatron_json(out)
    assert target["launched_params"] == target["sized_params"] + target["mtp_params"]
    assert 11.0e9 < target["mtp_params"] < 12.0e9  # one MoE layer + eh_proj 2·7168² + norms
    assert target["script"] == "/opt/megatron-lm/pretrain_gpt.py"


def test_deepseek_v3_on_an_older_image_names_every_missing_flag(tmp_path):
    text = (PLANS / "deepseek-v3.yaml").read_text().replace("nemo:25.07", "nemo:24.07")
    done, _ = compile_plan(tmp_path, text)
    assert done.returncode == 2
    message = done.stdout + done.stderr
    assert "cluster.slurm.container_image" in message
    assert "megatron-core 0.8 (the image nvcr.io/nvidia/nemo:24.07) has no " in message
    for flag, first in (
        ("--decoder-first-pipeline-num-layers", "0.9"),
        ("--moe-layer-freq", "0.10"),
        ("--multi-latent-attention", "0.10"),
        ("--moe-router-score-function", "0.11"),
        ("--mtp-num-layers", "0.12"),
    ):
        assert re.search(re.escape(flag) + r" \([^;]*; first in megatron-core " + re.escape(first) + r" ", message), (
            flag
        )


def test_alibi_is_refused_for_megatron(tmp_path):
    done, _ = compile_plan(tmp_path, (PLANS / "bloom-alibi.yaml").read_text())
    assert done.returncode == 2
    assert "train.framework" in done.stdout + done.stderr and "has no ALiBi" in done.stdout + done.stderr


def test_unknown_image_needs_a_version_and_a_given_version_is_used(tmp_path):
    base = (PLANS / "mixtral-8x7b.yaml").read_text().replace("nemo:24.09", "example.com/train:1.0")
    done, _ = compile_plan(tmp_path / "a", base)
    assert done.returncode == 2 and "train.megatron.core_version" in done.stdout + done.stderr
    given = base.replace("  framework: megatron\n", "  framework: megatron\n  megatron: {core_version: '0.12'}\n")
    done, _ = compile_plan(tmp_path / "b", given)
    assert done.returncode == 2 and "train.entrypoint.script" in done.stdout + done.stderr  # path unknown
    located = given.replace("core_version: '0.12'}", "core_version: '0.12', path: /workspace/Megatron-LM}")
    done, out = compile_plan(tmp_path / "c", located)
    assert done.returncode == 0, done.stdout + done.stderr
    target = megatron_json(out)
    assert (target["core_version"], target["script"]) == ("0.12", "/workspace/Megatron-LM/pretrain_gpt.py")
    assert "--moe-ffn-hidden-size" in words(out)  # 0.12 has it
    assert "/workspace/Megatron-LM/pretrain_gpt.py" in (out / "launch" / "torchrun.sh").read_text()


def test_plan_arguments_the_release_lacks_are_refused(tmp_path):
    text = LLAMA_405B.replace('args: ["--use-mcore-models"]', 'args: ["--use-legacy-models"]').replace(
        "  framework: megatron\n", "  framework: megatron\n  megatron: {core_version: '0.19'}\n"
    )
    done, _ = compile_plan(tmp_path, text)
    assert done.returncode == 2
    assert "train.entrypoint.args.0" in done.stdout + done.stderr and "--use-legacy-models" in done.stdout + done.stderr


def test_keep_one_uses_megatrons_retention_where_the_release_has_it(tmp_path):
    """keep 1 on megatron-core 0.14+: --save-retain-interval past the last step (a multiple of --save-interval), so
    Megatron deletes each previous checkpoint; on 0.13 the launcher prunes instead."""
    text = (
        (PLANS / "deepseek-v3.yaml")
        .read_text()
        .replace(
            "  framework: megatron\n",
            "  framework: megatron\n  megatron: {core_version: '0.14', path: /opt/megatron-lm}\n",
        )
    )
    done, out = compile_plan(tmp_path / "new", text)
    assert done.returncode == 0, done.stdout + done.stderr
    pairs = dict(zip(words(out), words(out)[1:]))
    retain, interval, steps = (int(pairs[k]) for k in ("--save-retain-interval", "--save-interval", "--train-iters"))
    assert retain % interval == 0 and retain > steps
    assert "prune_checkpoints" not in (out / "launch" / "torchrun.sh").read_text()
    done, out = compile_plan(tmp_path / "old", (PLANS / "deepseek-v3.yaml").read_text())
    assert "--save-retain-interval" not in words(out)
    assert "prune_checkpoints" in (out / "launch" / "torchrun.sh").read_text()


def prune_function(launcher: str) -> str:
    return re.search(r"^prune_checkpoints\(\) \{.*?^\}$", launcher, re.M | re.S).group(0)


def test_the_launcher_prunes_all_but_the_newest_complete_checkpoints(tmp_path):
    """keep 2, iterations 100..500 on disk, the tracker at 400 (500 still being written by an async save), a
    symlinked iter_0000050: 300 and 400 (newest complete), 500 (in flight) and the symlink stay."""
    done, out = compile_plan(tmp_path, LLAMA_405B)
    assert done.returncode == 0
    ckpt = tmp_path / "ckpt"
    for it in (100, 200, 300, 400, 500):
        (ckpt / f"iter_{it:07d}").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (ckpt / "iter_0000050").symlink_to(tmp_path / "elsewhere")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("400")
    script = (
        "set -euo pipefail\n" + prune_function((out / "launch" / "torchrun.sh").read_text()) + "\nprune_checkpoints\n"
    )
    subprocess.run(
        ["bash", "-c", script], env={"MLINFRA_CHECKPOINT_DIR": str(ckpt), "PATH": "/usr/bin:/bin"}, check=True
    )
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "iter_0000050", "iter_0000300", "iter_0000400", "iter_0000500", "latest_checkpointed_iteration.txt",
    ]  # fmt: skip
    (ckpt / "latest_checkpointed_iteration.txt").write_text("release")  # not an iteration: nothing is touched
    subprocess.run(
        ["bash", "-c", script], env={"MLINFRA_CHECKPOINT_DIR": str(ckpt), "PATH": "/usr/bin:/bin"}, check=True
    )
    assert len(list(ckpt.iterdir())) == 5


def test_data_prefix_is_mounted_by_its_folder(tmp_path):
    text = LLAMA_405B.replace(
        "  framework: megatron\n", "  framework: megatron\n  data: /lustre/data/pile_text_document\n"
    )
    text = text.replace(
        "slurm: {partition: gpu,", "slurm: {container_image: nvcr.io/nvidia/nemo:25.07, partition: gpu,"
    )
    done, out = compile_plan(tmp_path, text)
    assert done.returncode == 0, done.stdout + done.stderr
    sbatch = (out / "slurm" / "train.sbatch").read_text()
    assert "/lustre/data:/lustre/data" in sbatch and "pile_text_document:" not in sbatch
    assert "mkdir -p -- /lustre/ckpt/llama3-405b" in sbatch.split('srun "${srun_args[@]}"')[0]
    assert "path: /lustre/data\n" in (out / "k8s" / "training.yaml").read_text()
    assert dict(zip(words(out), words(out)[1:]))["--data-path"] == "/lustre/data/pile_text_document"


def test_layer_pattern_expressions():
    presets = load_catalog().models
    assert megatron_arch.layer_pattern(presets["deepseek-v3"].architecture) == "([0]*3+[1]*58)"
    maverick = presets["llama-4-maverick"].architecture
    pattern = megatron_arch.layer_pattern(maverick)
    assert pattern == "(([0]+[1])*24)"
    assert eval(pattern, {"__builtins__": {}}) == [i % 2 for i in range(48)]  # layers 1, 3, ..., 47: experts
    odd = maverick.model_copy(update={"dense_layers": 3})
    assert eval(megatron_arch.layer_pattern(odd)) == [0, 0, 0] + [i % 2 for i in range(3, 48)]


@pytest.mark.parametrize("version", ["0.8", "0.10", "0.13", "0.19"])
def test_every_emitted_flag_exists_in_the_release(tmp_path, version):
    given = f"  megatron: {{core_version: '{version}', path: /m}}\n"
    done, out = compile_plan(tmp_path, LLAMA_8B.format(megatron=given, image="example.com/megatron:1"))
    if version == "0.8":  # no --use-rope-scaling before 0.10: Llama 3.1's RoPE scaling cannot be asked for
        assert done.returncode == 2 and "has no --use-rope-scaling" in done.stdout + done.stderr
        return
    assert done.returncode == 0, done.stdout + done.stderr
    flags = [w for w in words(out) if w.startswith("--")]
    assert [f for f in flags if not megatron_version.has_flag(version, f)] == []


def test_rope_base_is_written_as_the_integer_megatron_parses(tmp_path):
    """--rotary-base is type=int in Megatron-LM's parser: Mixtral's 1e6 base must be digits (1e+06 is an argparse
    error), and a fractional base, which no integer can launch, is refused at the field."""
    done, out = compile_plan(tmp_path / "a", (PLANS / "mixtral-8x7b.yaml").read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    argv = words(out)
    assert argv[argv.index("--rotary-base") + 1] == "1000000"
    assert argv[argv.index("--norm-epsilon") + 1] == "1e-05"
    text = LLAMA_8B.format(megatron="", image="nvcr.io/nvidia/nemo:24.09").replace(
        "model: {preset: llama-3.1-8b}",
        "model:\n  architecture: {layers: 4, hidden: 1024, heads: 8, kv_heads: 8, ffn_hidden: 4096, vocab: 32000, "
        "max_position: 4096, rope_theta: 10000.5}",
    )
    done, _ = compile_plan(tmp_path / "b", text)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "rope_theta" in done.stdout + done.stderr and "--rotary-base takes an integer" in done.stdout + done.stderr


def test_gradients_are_sized_as_megatron_holds_them(tmp_path):
    """Megatron-LM keeps a bf16 model's gradients in an fp32 main_grad buffer (4 B per parameter; measured on an H200,
    benchmarks/calibration/h200-megatron-run4): the default plan counts 4 B and emits no switch; train.megatron.
    grad_reduce bf16 counts a 2-B buffer plus the fp32 copy of the shard its distributed optimizer owns (measured the
    same way: +2 B per parameter at ZeRO-0) and emits --grad-reduce-in-bf16, refused by name for a release without it
    (< 0.12)."""
    image = "nvcr.io/nvidia/nemo:25.04"
    done, out = compile_plan(tmp_path / "fp32", LLAMA_8B.format(megatron="", image=image))
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((out / "plan.json").read_text())
    params = plan["model"]["params_total"]
    fp32 = plan["memory_per_gpu_bytes"]["gradients"]
    assert fp32 == pytest.approx(4 * params / 2, rel=0.02)  # TP2: half the parameters per GPU
    assert "--grad-reduce-in-bf16" not in words(out)
    bf16 = LLAMA_8B.format(megatron="  megatron: {grad_reduce: bf16}\n", image=image)
    done, out = compile_plan(tmp_path / "bf16", bf16)
    assert done.returncode == 0, done.stdout + done.stderr
    bf16_plan = json.loads((out / "plan.json").read_text())
    dp, zero = bf16_plan["parallelism"]["dp"], bf16_plan["parallelism"]["zero_stage"]
    assert zero == 1 and dp == 4  # 8 GPUs over TP2: the distributed optimizer owns a quarter of the gradients
    assert bf16_plan["memory_per_gpu_bytes"]["gradients"] == pytest.approx(fp32 / 2 + fp32 / dp)
    assert "--grad-reduce-in-bf16" in words(out)
    done, _ = compile_plan(tmp_path / "old", bf16.replace("nemo:25.04", "nemo:24.07"))
    assert done.returncode == 2 and "--grad-reduce-in-bf16" in done.stdout + done.stderr
