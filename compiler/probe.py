"""`mlinfra-compile probe PLAN -o OUT`: a one-node measurement job for a training plan (out/<plan>-probe/), and
`mlinfra-compile calibrate RESULTS.json -o FILE`: its results as a site calibration file (site_calibration.py).

What the probe measures and how its job runs is decided by the decide_probe pass (deployment/probe.py: the reduced
shape, the layouts, the limits, each with its reason) and rendered from `plan.probe` (targets/probe.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .deployment.probe import ProbeError
from .probe_environment import environment_warnings
from .resolved import ResolvedPlan
from .targets.base import with_header
from .targets.probe import job_files, render_probe
from .writer import RenderedPlan


def probe_files(plan: ResolvedPlan) -> RenderedPlan:
    """out/<plan>-probe/: the files of a plan resolved with its probe section (pipeline.resolve(probe=True)); the
    reduced jobs' files carry their own headers."""
    own = [with_header(f, plan.plan_file, plan.name) for f in render_probe(plan)]
    return RenderedPlan(plan.probe.name, tuple(sorted(own + job_files(plan.probe), key=lambda f: f.path)))


CALIBRATION_HEADER = (
    "# Written by mlinfra-compile calibrate from probe results; name it in a plan as cluster.calibration.\n"
)


def _layouts(results: dict) -> list[dict]:
    """Every layout the probe measured, each with its TP (before TP layouts: 1), and global batch (dp × micro-batch);
    version 1 results: the one at the top level."""
    return results.get("layouts") or [
        {
            "name": "chosen",
            "micro_batch": results["micro_batch"],
            "recompute": "none",
            "zero_stage": 0,
            "global_batch": results["global_batch"],
            "step_seconds": results["step_seconds"],
        }
    ]


def _serving_points(results: dict) -> list[dict]:
    return [
        {
            "gpu": results["gpu_id"],
            "architecture": dict(results["architecture"]),
            "precision": results["precision"],
            "phase": p["phase"],
            "batch": p["batch"],
            "tokens": p["tokens"] if p["phase"] == "prefill" else p["context"],
            "prefill_group": p.get("prefill_group", 1),
            "step_seconds": p["step_seconds"],
        }
        for p in results["points"]
    ]


def _memory(results: dict) -> dict | None:
    """The site's memory factor: the largest measured ÷ predicted peak reserved memory over the layouts (none when the
    results carry no predictions, version 1, or measured nothing)."""
    layouts = [l for l in _layouts(results) if l.get("predicted_reserved_bytes") and "peak_reserved_bytes" in l]
    points = [
        {
            "layout": l["name"],
            "measured_allocated_bytes": int(l["peak_allocated_bytes"]),
            "measured_reserved_bytes": int(l["peak_reserved_bytes"]),
            "predicted_allocated_bytes": int(l["predicted_allocated_bytes"]),
            "predicted_reserved_bytes": int(l["predicted_reserved_bytes"]),
        }
        for l in layouts
    ]
    factor = max((p["measured_reserved_bytes"] / p["predicted_reserved_bytes"] for p in points), default=0.0)
    if factor <= 0:
        return None
    device = results.get("environment", {}).get("device", "cuda")
    return {"gpu": results["gpu_id"], "device": device, "factor": round(factor, 4), "points": points}


def site_calibration_text(results: dict, site: str) -> str:
    """The site calibration file for one probe's results: every layout or serving step it measured as a point, with
    the provenance."""
    env = results.get("environment", {})
    if results.get("kind") == "serving":
        source = (
            f"mlinfra-compile serving probe of plan {results['plan']} on {env.get('host', '?')} ({results.get('device_name', '?')}, "
            f"torch {env.get('torch', '?')}); GEMM {results.get('gemm_tflops', 0):.3g} TFLOP/s"
        )
        data = {
            "site": site,
            "measured_at": results["measured_at"],
            "source": source,
            "serving_points": _serving_points(results),
        }
        return _with_warnings(data, results)
    points = [
        {
            "gpu": results["gpu_id"],
            "architecture": dict(results["architecture"]),
            "gpus": results["world_size"],
            "tp": int(l.get("tp", 1)),
            "pp": 1,
            "zero_stage": l["zero_stage"],
            "micro_batch": l["micro_batch"],
            "global_batch": l["global_batch"],
            "seq_len": results["seq_len"],
            "recompute": l["recompute"],
            "precision": results["precision"],
            "step_seconds": l["step_seconds"],
        }
        for l in _layouts(results)
    ]
    source = (
        f"mlinfra-compile probe of plan {results['plan']} on {env.get('host', '?')} ({results.get('device_name', '?')}, "
        f"torch {env.get('torch', '?')}); layouts {', '.join(l.get('name', '?') for l in _layouts(results))}; "
        f"GEMM {results.get('gemm_tflops', 0):.3g} TFLOP/s, copy {results.get('copy_bytes_per_second', 0):.3g} B/s"
    )
    data = {"site": site, "measured_at": results["measured_at"], "source": source, "points": points}
    memory = _memory(results)
    if memory:
        data["memory"] = memory
    fabric = _interconnect(results)
    if fabric:
        data["interconnect"] = fabric
    return _with_warnings(data, results)


def _with_warnings(data: dict, results: dict) -> str:
    warnings = results_warnings(results)
    if warnings:
        data["warnings"] = warnings
    return CALIBRATION_HEADER + yaml.safe_dump(data, sort_keys=False, width=1 << 30)


def results_warnings(results: dict) -> list[str]:
    """The environment checks (probe_environment.py) on the results' recorded environment against what the plan's GPU
    catalog entry led the probe to expect: the same checks the probe ran on the node (none without `expected`)."""
    expected, env = results.get("expected"), results.get("environment")
    if not (
        isinstance(expected, dict)
        and isinstance(expected.get("device"), str)
        and isinstance(expected.get("gpu_id"), str)
        and isinstance(expected.get("power_watts"), (int, float))
        and isinstance(env, dict)
    ):
        return []
    return environment_warnings(env, expected)


def _collective_points(points: list) -> list[dict]:
    return [
        {
            "op": p["op"],
            "bytes": int(p["bytes"]),
            "ranks": int(p["ranks"]),
            "bus_bytes_per_second": float(p["bus_bytes_per_second"]),
        }
        for p in points
    ]


def _interconnect(results: dict) -> dict | None:
    """The collectives the probe measured inside a node and, on two nodes, across them (bus bandwidth, nccl-tests'
    definition): calibrate fits the site's intra- and inter-node shares to the largest all-reduce of each."""
    intra, inter = results.get("collectives_intra_node") or [], results.get("collectives_inter_node") or []
    if not intra and not inter:
        return None
    env = results.get("environment", {})
    try:
        fabric = {
            "gpu": results["gpu_id"],
            "interconnect": results["interconnect"],
            "device": env.get("device", "cuda"),
            "ranks_per_node": int(results["processes_per_node"]),
        }
        if intra:
            fabric["intra_node"] = _collective_points(intra)
        if inter:
            fabric["inter_node"] = _collective_points(inter)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProbeError(
            f"not probe results: its collectives cannot be read ({type(exc).__name__}: {str(exc)[:100]})"
        ) from None
    return fabric


def load_results(path: Path) -> dict:
    from .diagnostics import PlanInputError
    from .source import read_regular_file

    try:
        data = json.loads(read_regular_file(path, str(path)).decode("utf-8"))
    except PlanInputError as exc:
        raise ProbeError(exc.diagnostics[0].render()) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProbeError(f"{path}: not probe results: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{path}: not probe results (a JSON object is expected)")
    needed = (
        ("gpu_id", "architecture", "precision", "points", "measured_at", "plan")
        if data.get("kind") == "serving"
        else (
            "gpu_id",
            "architecture",
            "world_size",
            "micro_batch",
            "global_batch",
            "seq_len",
            "precision",
            "step_seconds",
            "measured_at",
            "plan",
        )
    )
    missing = [k for k in needed if k not in data]
    if missing:
        raise ProbeError(f"{path}: not probe results (missing {', '.join(missing)})")
    return data
