"""Random site calibration files (cluster.calibration): in-range figures drawn log-uniformly, a preset or a random
inline architecture (zero or huge dimensions included), training, serving, memory and collective points. A plan that
names one must compile or be refused (exit 2 or 4), never exit 3. Case i uses `random.Random(f"{seed}:{i}")`."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import yaml

GPU = "h100-sxm-80gb"
PLAN: dict[str, Any] = {
    "name": "fuzz-site",
    "workload": "finetune",
    "model": {"preset": "llama-3.1-8b"},
    "train": {"dataset_tokens": "10M", "epochs": 1, "seq_len": 2048, "global_batch": 16, "method": "lora"},
    "cluster": {"gpu": GPU, "count": 8, "calibration": "site.yaml", "interconnect": "ib-400g"},
    "parallelism": {"tp": 2, "pp": 1},
}
SHAPE = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256}


def _log(rng: random.Random, low: float, high: float) -> float:
    return float(f"{math.exp(rng.uniform(math.log(low), math.log(high))):.4g}")


def _shape(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.5:
        return {"model": "llama-3.1-8b"}
    shape = {k: max(1, round(v * _log(rng, 0.01, 4))) for k, v in SHAPE.items()}
    shape["kv_heads"] = shape["heads"] if rng.random() < 0.5 else 1
    if rng.random() < 0.2:
        shape[rng.choice(list(SHAPE))] = rng.choice([0, 10**9, 10**12])
    if rng.random() < 0.3:
        shape |= {"experts": rng.choice([2, 8, 64]), "experts_per_token": rng.choice([1, 2]), "layers": shape["layers"]}
    return {"architecture": shape}


def _training_point(rng: random.Random) -> dict[str, Any]:
    tp, pp = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2])
    micro = rng.choice([1, 2, 4])
    return {
        "gpu": GPU,
        **_shape(rng),
        "gpus": tp * pp * rng.choice([1, 2]),
        "tp": tp,
        "pp": pp,
        "zero_stage": rng.choice([0, 1, 2, 3]),
        "micro_batch": micro,
        "global_batch": micro * rng.choice([1, 8, 64]),
        "seq_len": rng.choice([128, 2048, 8192]),
        "recompute": rng.choice(["none", "selective", "full"]),
        "step_seconds": _log(rng, 1e-5, 1e5),
    }


def _serving_point(rng: random.Random) -> dict[str, Any]:
    phase = rng.choice(["prefill", "decode"])
    return {
        "gpu": GPU,
        **_shape(rng),
        "phase": phase,
        "batch": rng.choice([1, 8, 64]),
        "tokens": rng.choice([16, 512, 4096]),
        "step_seconds": _log(rng, 1e-8, 1e3),
    }


def _memory(rng: random.Random) -> dict[str, Any]:
    points = []
    for i in range(rng.randint(1, 3)):
        predicted = int(_log(rng, 2**20, 2**40))
        measured = int(predicted * _log(rng, 0.1, 10))
        points.append(
            {
                "layout": f"layout {i}",
                "measured_allocated_bytes": measured,
                "measured_reserved_bytes": measured,
                "predicted_allocated_bytes": predicted,
                "predicted_reserved_bytes": predicted,
            }
        )
    factor = max(p["measured_reserved_bytes"] / p["predicted_reserved_bytes"] for p in points)
    return {"gpu": GPU, "device": "cuda", "factor": factor, "points": points}


def _collectives(rng: random.Random, ranks: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "op": rng.choice(["all_reduce", "all_gather"]),
            "bytes": int(_log(rng, 1, 2**30)),
            "ranks": rng.choice(ranks),
            "bus_bytes_per_second": _log(rng, 1e3, 1e13),
        }
        for _ in range(rng.randint(0, 3))
    ]


def random_site(rng: random.Random) -> dict[str, Any]:
    site: dict[str, Any] = {"site": "fuzz", "measured_at": "2026-11-20", "source": "random site file"}
    site["points"] = [_training_point(rng) for _ in range(rng.randint(0, 3))]
    site["serving_points"] = [_serving_point(rng) for _ in range(rng.randint(0 if site["points"] else 1, 2))]
    if rng.random() < 0.4:
        site["memory"] = _memory(rng)
    if rng.random() < 0.4:
        site["interconnect"] = {
            "gpu": GPU,
            "interconnect": "ib-400g",
            "device": "cuda",
            "ranks_per_node": rng.choice([1, 2, 8]),
            "intra_node": _collectives(rng, [2, 8]),
            "inter_node": _collectives(rng, [2, 16]),
        }
    return site


def compile_case(seed: int, i: int, workdir: Path) -> str:
    """'compiled', 'refused' (a located error or an infeasible plan) or the crash's exception, for case i."""
    from compiler.diagnostics import InfeasiblePlan, PlanInputError
    from compiler.pipeline import compile_plan

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "site.yaml").write_text(yaml.safe_dump(random_site(random.Random(f"{seed}:{i}"))))
    (workdir / "plan.yaml").write_text(yaml.safe_dump(PLAN))
    try:
        compile_plan(workdir / "plan.yaml")
    except (PlanInputError, InfeasiblePlan):
        return "refused"
    except Exception as exc:  # noqa: BLE001 - what the CLI would report as exit 3
        return f"{type(exc).__name__}: {exc}"
    return "compiled"
