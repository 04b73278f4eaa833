"""Random in-range user GPU catalogs: every figure drawn log-uniformly from its FIGURE_RANGES bounds (or zero where
zero means none), a random subset of dtypes and prices. A valid catalog must compile or be refused with exit 2 or 4,
never exit 3. Catalog i uses `random.Random(f"{seed}:{i}")`."""

from __future__ import annotations

import math
import random
from typing import Any

import yaml

from compiler.catalog.types import FIGURE_RANGES, ZERO_MEANS_NONE

DTYPES = ["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]
PRICINGS = ["on-demand", "spot", "reserved"]
GPU_ID = "fuzz-gpu"
# Plans small enough to size in a few milliseconds, one per workload the sizing treats differently.
PLANS: list[dict[str, Any]] = [
    {
        "name": "fuzz-train",
        "workload": "finetune",
        "model": {"preset": "llama-3.1-8b"},
        "train": {"dataset_tokens": "10M", "epochs": 1, "seq_len": 2048, "global_batch": 16, "method": "lora"},
        "cluster": {"gpu": GPU_ID, "count": 8},
        "parallelism": {"tp": 1, "pp": 1},
    },
    {
        "name": "fuzz-pretrain",
        "workload": "train",
        "precision": "fp8",
        "model": {"preset": "llama-3.1-8b"},
        "train": {"tokens": "1B", "seq_len": 2048, "global_batch": 64},
        "cluster": {"gpu": GPU_ID, "count": 16},
        "parallelism": {"tp": 2, "pp": 1},
    },
    {
        "name": "fuzz-serve",
        "workload": "serve",
        "model": {"preset": "llama-3.1-8b"},
        "serve": {"traffic": {"requests_per_second": 2, "prompt_tokens": 512, "output_tokens": 128}},
        "cluster": {"gpu": GPU_ID},
    },
]


# An H100's figures: half the draws stay within 100x of them, so most catalogs reach the sizing's arithmetic.
NEAR = {
    "memory_bytes": 80 * 2**30,
    "memory_bandwidth_bytes_per_second": 3.35e12,
    "intra_node_bandwidth_bytes_per_second": 450e9,
    "gpus_per_node": 8,
    "tdp_watts": 700,
    "achievable_matmul_fraction": 0.8,
    "achievable_memory_bandwidth_fraction": 0.9,
    "dense_tflops": 989,
    "price_usd_per_gpu_hour": 4,
}


def _figure(rng: random.Random, field: str) -> float:
    low, high = FIGURE_RANGES[field]
    if field in ZERO_MEANS_NONE and rng.random() < 0.2:
        return 0
    if rng.random() < 0.5:
        low, high = max(low, NEAR[field] / 100), min(high, NEAR[field] * 100)
    value = math.exp(rng.uniform(math.log(low), math.log(high)))
    return max(1, round(value)) if field in ("memory_bytes", "gpus_per_node") else float(f"{value:.4g}")


def random_gpu(rng: random.Random) -> dict[str, Any]:
    figures = {f: _figure(rng, f) for f in FIGURE_RANGES if f not in ("dense_tflops", "price_usd_per_gpu_hour")}
    dtypes = rng.sample(DTYPES, rng.randint(1, len(DTYPES)))
    pricings = rng.sample(PRICINGS, rng.randint(1, len(PRICINGS)))
    prices = {p: _figure(rng, "price_usd_per_gpu_hour") for p in pricings}
    return {
        "id": GPU_ID,
        "name": "Fuzz GPU",
        **figures,
        "dense_tflops": {d: _figure(rng, "dense_tflops") for d in dtypes},
        "price_usd_per_gpu_hour": prices,
        "k8s_product_label": "Fuzz-GPU",
        "slurm_gres_type": "fuzz",
        "edge": rng.random() < 0.1,
        "source": "random catalog",
        "as_of": "2026-01-01",
    }


def catalog_case(seed: int, i: int) -> tuple[dict[str, Any], str]:
    """(the plan, the catalog file's text) of case i."""
    rng = random.Random(f"{seed}:{i}")
    plan = {**rng.choice(PLANS)}
    plan["cluster"] = {**plan["cluster"], "catalog": "gpus.yaml"}
    return plan, yaml.safe_dump({"entries": [random_gpu(rng)]}, sort_keys=True)


def compile_case(seed: int, i: int, workdir) -> str:
    """'compiled', 'refused' (a located error or an infeasible plan) or the crash's exception, for case i."""
    from compiler.diagnostics import InfeasiblePlan, PlanInputError
    from compiler.pipeline import compile_plan

    plan, catalog = catalog_case(seed, i)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "gpus.yaml").write_text(catalog)
    (workdir / "plan.yaml").write_text(yaml.safe_dump(plan))
    try:
        compile_plan(workdir / "plan.yaml")
    except (PlanInputError, InfeasiblePlan):
        return "refused"
    except Exception as exc:  # noqa: BLE001 - what the CLI would report as exit 3
        return f"{type(exc).__name__}: {exc}"
    return "compiled"
