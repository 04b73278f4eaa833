"""Every published layout of train_steps_2.csv, written as a plan and compiled end to end.

benchmarks/accuracy.py prices each row by calling the sizing directly; here the same row (read by its `layout_row`)
becomes a plan.yaml with the published layout pinned under `parallelism:` and goes through compile_plan: the
deployment pass and every target (Megatron args, FSDP×TP×PP settings, sbatch, k8s ...) must accept what the sizing
accepts, and plan.json must carry the pinned layout."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from benchmarks.accuracy import LAYOUTS, layout_row
from compiler.catalog.loader import load_gpus
from compiler.diagnostics import InfeasiblePlan
from compiler.pipeline import compile_plan
from compiler.sizing.train.parallel import pipeline_split

ROWS = list(csv.DictReader(LAYOUTS.open()))
# Rows the compiler cannot express yet, each with the refusal compile_plan gives (exit 4) and what is missing. The last
# one, torchtitan's "FSDP 1, CP 8", compiles since the FSDP2 script runs CP (tests/test_fsdp_cp_real.py).
# NeMo 24.07 ran apex's DistributedFusedAdam on bf16 gradient shards (grad_sync_dtype=bf16) with 16-bit parameter
# remainders; the plan launches Megatron-LM's optimizer, which holds 4 B of gradients per parameter at DP <= 2 (an fp32
# main_grad, or a bf16 buffer plus the fp32 copy of the owned shard: model_states.fp32_gradient_copy_bytes).
APEX_DFA = (
    "NeMo 24.07's apex DistributedFusedAdam (bf16 gradient shards, parameter remainders) is not Megatron-LM's "
    "optimizer: with Megatron's gradients the published layout does not fit"
)
NOT_EXPRESSIBLE: dict[str, str] = {
    "Nemotron-4-340B (NeMo 24.07 'Nemotron-340B')": APEX_DFA + " (80.9 of 79.6 GiB usable at DP2)",
    "Llama-2-70B SFT (NeMo 24.07 finetuning table)": APEX_DFA + " (DP1: every gradient's fp32 copy)",
}
STEPS = 1000  # tokens to train: a thousand optimizer steps (no deadline or budget: only the layout is checked)


def _row_id(index: int, row: dict) -> str:
    r = layout_row(row)
    return f"{index:02d} {row['model']} x{r['gpus']} s{r['seq']}"


def _plan(r: dict, name: str) -> dict:
    """The row as a plan: the model's shape, precision, cluster and the published layout pinned."""
    split = pipeline_split(r["arch"].layers, r["pp"])
    pins = {
        "tp": r["tp"],
        "pp": r["pp"],
        "dp": r["dp"],
        "cp": r["cp"],
        "ep": r["ep"],
        "vp": r["vp"],
        "zero_stage": r["zero"],
        "micro_batch": r["mb"],
        "offload": False,
    }
    if split and len(set(split)) > 1:
        pins["pp_stage_layers"] = list(split)
    if (
        r["framework"] == "fsdp" and r["zero"] == 3
    ):  # published fully sharded: a group of all DP·CP ranks, no HSDP searched
        pins["shard_group_gpus"] = r["dp"] * r["cp"]
    if r["recompute"]:
        pins["recompute"] = r["recompute"]
    train = {
        "tokens": STEPS * r["batch"] * r["seq"],
        "seq_len": r["seq"],
        "global_batch": r["batch"],
        "framework": r["framework"],
        "memory_quantile": "none",
    }  # accuracy.py's fit test: the prediction itself
    if r["expandable_segments"]:  # torchtitan's launcher (accuracy.layout_row)
        train["expandable_segments"] = True
    if r["bf16_gradients"]:  # NeMo's grad_sync_dtype=bf16 (accuracy.layout_row)
        train["megatron"] = {"grad_reduce": "bf16"}
    if r["method"] != "full":
        train |= {"method": r["method"], "lora": {"rank": 16, "targets": ["q", "k", "v", "o"]}}
    arch = r["arch"].model_dump(mode="json", exclude_defaults=True)
    return {
        "name": name,
        "workload": "finetune" if r["method"] != "full" else "train",
        "model": {"architecture": arch},
        "precision": r["precision"],
        "train": train,
        "parallelism": pins,
        "optimize": "time",
        "cluster": {
            "scheduler": "both",
            "gpu": r["gpu"].id,
            "count": r["gpus"],
            "max_gpus": r["gpus"],
            "gpus_per_node": 8,
            "interconnect": "ib-400g",
            "storage": "lustre",
            "kubernetes": {"shared_storage_class": "lustre-csi"},
        },
    }


def _gpu_catalog(r: dict, folder: Path) -> str | None:
    """A GPU the packaged catalog lacks (torchtitan's 96 GB H100) as a user catalog beside the plan."""
    if r["gpu"].id in load_gpus():
        return None
    (folder / "gpus.yaml").write_text(yaml.safe_dump({"entries": [r["gpu"].model_dump(mode="json")]}, sort_keys=False))
    return "gpus.yaml"


def _param(index: int, row: dict):
    reason = NOT_EXPRESSIBLE.get(row["model"])
    marks = [pytest.mark.xfail(strict=True, raises=InfeasiblePlan, reason=reason)] if reason else []
    return pytest.param(index, id=_row_id(index, row), marks=marks)


def test_every_unexpressible_row_is_a_row():
    assert set(NOT_EXPRESSIBLE) <= {row["model"] for row in ROWS}


@pytest.mark.parametrize("index", [_param(i, row) for i, row in enumerate(ROWS)])
def test_published_layout_compiles(index, tmp_path):
    r = layout_row(ROWS[index])
    plan = _plan(r, f"layout-{index:02d}")
    catalog = _gpu_catalog(r, tmp_path)
    if catalog:
        plan["cluster"]["catalog"] = catalog
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    files = {f.path: f.text for f in compile_plan(path).files}
    resolved = json.loads(files["plan.json"])
    chosen = resolved["parallelism"]
    for key in ("tp", "pp", "dp", "cp", "ep", "vp", "zero_stage", "micro_batch"):
        assert chosen[key] == plan["parallelism"][key], key
    assert chosen["framework"] == r["framework"] and chosen["global_batch"] == r["batch"]
    assert chosen["shard_group_gpus"] is None
    if r["recompute"]:
        assert chosen["recompute"] == r["recompute"]
    assert tuple(chosen["pp_stage_layers"]) == pipeline_split(r["arch"].layers, r["pp"])
    assert "slurm/train.sbatch" in files and "k8s/training.yaml" in files
    _assert_framework_files(r, files, chosen)


def _assert_framework_files(r: dict, files: dict[str, str], chosen: dict) -> None:
    """The layout reaches the framework's own settings, not only plan.json."""
    if r["framework"] == "megatron":
        args = files["megatron/args.sh"].split()
        flags = {
            "--tensor-model-parallel-size": r["tp"],
            "--pipeline-model-parallel-size": r["pp"],
            "--context-parallel-size": r["cp"],
            "--micro-batch-size": r["mb"],
            "--global-batch-size": r["batch"],
        }
        for flag, value in flags.items():  # a size of 1 may be left to Megatron's default, 1
            assert (flag in args and args[args.index(flag) + 1] == str(value)) or (value == 1 and flag not in args), (
                flag
            )
        if r["vp"] > 1:
            per_chunk = r["arch"].layers // (r["pp"] * r["vp"])
            assert args[args.index("--num-layers-per-virtual-pipeline-stage") + 1] == str(per_chunk)
    elif r["tp"] > 1 or r["pp"] > 1 or r["cp"] > 1 or chosen["recompute"] == "selective":  # FSDP2 on a DeviceMesh
        settings = json.loads(files["fsdp/fsdp_tp.json"])
        mesh = dict(zip(settings["mesh_dim_names"], settings["mesh_shape"]))
        assert mesh == {
            **({"pp": r["pp"]} if r["pp"] > 1 else {}),
            "dp_shard": r["dp"],
            **({"cp": r["cp"]} if r["cp"] > 1 else {}),
            "tp": r["tp"],
        }
        if r["cp"] > 1:  # torchtitan's "FSDP 1, CP 8": ZeRO-3 over dp_shard × cp, K/V all-gathered
            assert settings["fsdp_mesh_dims"] == ["dp_shard_cp"] and settings["context_parallel"] == "allgather-kv"
            assert settings["flatten_mesh_dims"] == {"dp_shard_cp": ["dp_shard", "cp"]}
            assert len(settings["cp_rank_chunks"]) == r["cp"]
        # torchtitan runs SP with TP; the plan was sized with it and fsdp_tp.py applies it (LoRA adapters too: the
        # row-parallel adapters' outputs reduce-scattered over the sequence as their bases')
        assert settings["sequence_parallel"] == chosen["sequence_parallel"] == (r["tp"] > 1)
        if r["pp"] > 1:
            assert settings["pp_stage_layers"] == chosen["pp_stage_layers"]
            assert len(settings["stage_layers"]) == r["pp"] * r["vp"]
        # torchtitan's "selective" (its llama3 configs' default) is its op-level SAC, which the script applies
        sac = {"selective": "selective-op"}.get(chosen["recompute"], chosen["recompute"])
        assert settings["activation_checkpoint"] == sac
        if r["method"] == "lora":  # the adapters, sharded as their base layers, in fsdp/lora_tp.py
            assert settings["lora"]["rank"] == 16 and "self_attn.q_proj.base_layer" in settings["block_tp_plan"]
            assert "fsdp/lora_tp.py" in files
    else:
        assert "fsdp/accelerate_config.yaml" in files
