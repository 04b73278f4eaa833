"""Mutate example plans and classify what the compiler makes of them. Shared by tests/test_fuzz.py
(hypothesis drives the choices through `st.randoms()`) and benchmarks/fuzz.py (a seeded `random.Random`
per plan, so any plan can be reproduced from its seed).

Most mutations keep the plan valid, so sizing and rendering get exercised: another GPU id from the
catalog, another preset of the same kind, other precisions/engines/frameworks, numbers scaled ×0.5..×4,
the same quantity in other units ('2T' / '2000B', '30d' / '720h'), tp/pp/dp pins, an inline architecture,
a user GPU catalog, values at the edges of what the spec accepts. At a lower rate (DESTRUCTIVE_RATE) they
are destructive: wrong types, missing and extra keys, huge and negative numbers, NaN/inf, unicode, deep
nesting, broken user catalogs, broken YAML text.

Every outcome must be a compile (exit 0), an infeasible plan (exit 1) or located diagnostics (exit 2, one
line each); anything else is a crash, i.e. a bug: exit 3, an exception escaping `main`, a diagnostic without
a line, a compiled file holding nan/inf/None, or (one plan in ten) `--check` finding the fresh output stale.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import random
import re
import shutil
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from compiler.catalog.catalog import load_catalog
from compiler.cli import main as cli_main

PLAN_NAME = "fuzz-plan.yaml"
CATALOG_NAME = "fuzz-catalog.yaml"
DESTRUCTIVE_RATE = 0.25  # share of single mutations that are meant to break the plan
PRECISIONS = ["fp32", "fp16", "bf16", "fp8", "int8", "int4"]


@cache
def catalog_names() -> dict[str, Any]:
    catalog = load_catalog(None)
    by_kind: dict[str, list[str]] = {}
    for ident, preset in sorted(catalog.models.items()):
        by_kind.setdefault(preset.architecture.kind, []).append(ident)
    return {
        "gpus": sorted(catalog.gpus),
        "presets": sorted(catalog.models),
        "presets_by_kind": by_kind,
        "kind_of": {i: p.architecture.kind for i, p in catalog.models.items()},
        "architectures": {i: p.architecture.model_dump() for i, p in sorted(catalog.models.items())},
        "gpu_entries": {i: g.model_dump() for i, g in sorted(catalog.gpus.items())},
        "interconnects": sorted(catalog.interconnects),
        "storage": sorted(catalog.storage),
    }


# ---------------------------------------------------------------------------------------------- values

TRICKY_TEXT = [
    "",
    " ",
    "ñame",
    "名前",
    "🚀",
    "e\u0301",
    "\u202eevil",
    "\u200b",
    "a\tb",
    "a\nb",
    "$(reboot)",
    "'; rm -rf /",
    "`id`",
    "{{ x }}",
    "${HOME}",
    "../../etc/passwd",
    "/",
    "~",
    "on",
    "yes",
    "null",
    "0x10",
    "١٢٣",
    "Ⅻ",
    "½",
    "∞",
    "x" * 5000,
    "-",
    "--flag",
    "a b",
    "\\",
    '"',
    "#",
    "%s",
    "\x7f",
    "\x1b[31m",
]
TRICKY_QUANTITIES = [
    "-1",
    "0",
    "1e999",
    "-1e999",
    "1e-999",
    "nan",
    "inf",
    "7 B",
    "7b",
    "7Bn",
    "1.5.3T",
    "1_000_000",
    "1,5T",
    "$",
    "$$5",
    "5$",
    "7B7",
    "∞",
    "½T",
    "1e308T",
    "9" * 400,
    "0.0000001ms",
    "1e-12s",
    "1e20w",
    "3e9d",
    ".5",
    "5.",
    "NaNB",
    "0d",
    "0s",
    "-0",
    "+5",
    "5 GiB",
    "5gib",
    "2TiB",
    "1PiB",
]


def weird_value(rng: random.Random) -> Any:
    pick = rng.randrange(12)
    if pick == 0:
        return rng.choice([None, True, False, [], {}, 0, -0.0])
    if pick == 1:
        return rng.choice([10**30, -(10**30), 2**63, -(2**63), 2**64 + 1, 10**400, -1, -7])
    if pick == 2:
        return rng.choice([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 1e-300])
    if pick == 3:
        return rng.randint(-(10**12), 10**12)
    if pick == 4:
        return rng.uniform(-1e6, 1e6)
    if pick in (5, 6):
        return rng.choice(TRICKY_TEXT)
    if pick == 7:
        return rng.choice(TRICKY_QUANTITIES)
    if pick == 8:
        return random_text(rng)
    if pick == 9:
        return [weird_value(rng) for _ in range(rng.randint(0, 3))] if rng.random() < 0.5 else [rng.randint(-5, 5)]
    if pick == 10:
        return {random_text(rng, 6) or "k": rng.randint(-5, 5) for _ in range(rng.randint(0, 2))}
    return rng.choice(["7B", "80GiB", "30d", "$400k", "2h", "150ms", "4M", "h100-sxm-80gb", "llama-3.1-8b", "auto"])


def random_text(rng: random.Random, max_size: int = 40) -> str:
    """Random unicode text without surrogates (which no UTF-8 file can hold)."""
    alphabets = [(0x20, 0x7E), (0xA0, 0x2FF), (0x370, 0x52F), (0x4E00, 0x4FFF), (0x1F300, 0x1F64F), (0x0, 0x1F)]
    chars = []
    for _ in range(rng.randint(0, max_size)):
        lo, hi = rng.choice(alphabets)
        chars.append(chr(rng.randint(lo, hi)))
    return "".join(chars)


_QUANTITY = re.compile(r"^(?P<pre>\$?)(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?P<sp>\s*)(?P<unit>[A-Za-z]*)$")
COUNT_UNITS = {"": 1, "k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
SECOND_UNITS = {"ms": 1e-3, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
USD_UNITS = {"": 1, "k": 1e3, "M": 1e6}
BYTE_UNITS = {"GiB": 2**30, "GB": 1e9, "MiB": 2**20, "TB": 1e12}
QUANTITY_FIELDS = {  # last key -> unit table
    "tokens": COUNT_UNITS,
    "dataset_tokens": COUNT_UNITS,
    "global_batch_tokens": COUNT_UNITS,
    "params": COUNT_UNITS,
    "deadline": SECOND_UNITS,
    "every": SECOND_UNITS,
    "ttft_p99": SECOND_UNITS,
    "tpot_p99": SECOND_UNITS,
    "latency_p99": SECOND_UNITS,
    "usd": USD_UNITS,
    "usd_per_month": USD_UNITS,
    "memory_per_node": BYTE_UNITS,
}


def _num(value: float) -> str:
    return f"{value:.6g}"


def scale(value: Any, factor: float) -> Any:
    """A number or a unit string ('1T', '$400k', '30d') scaled, written the same way."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(1, round(value * factor)) if 0 < value < 1e300 else value
    if isinstance(value, float):
        return value * factor
    if isinstance(value, str) and (m := _QUANTITY.match(value.strip())):
        return f"{m['pre']}{_num(float(m['num']) * factor)}{m['sp']}{m['unit']}"
    return value


def respell(value: Any, units: dict[str, float], rng: random.Random) -> Any:
    """The same quantity in another unit of the table (or as a bare number), when the value parses."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        base = float(value)
        pre = ""
    elif isinstance(value, str) and (m := _QUANTITY.match(value.strip())):
        all_units = {**units, **({"": 1} if units is SECOND_UNITS else {})}
        if m["unit"] not in all_units:
            return value
        base, pre = float(m["num"]) * all_units[m["unit"]], m["pre"]
    else:
        return value
    unit = rng.choice(sorted(units))
    if rng.random() < 0.2:
        return base if units is not SECOND_UNITS else _num(base)
    return f"{pre}{_num(base / units[unit])}{rng.choice(['', '', ' '])}{unit}"


# ------------------------------------------------------------------------------------------ doc paths


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += paths(value, prefix + (i,))
    return found


def get(doc: Any, path: tuple, default: Any = None) -> Any:
    for part in path:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and isinstance(part, int) and 0 <= part < len(doc):
            doc = doc[part]
        else:
            return default
    return doc


def put(doc: dict, path: tuple, value: Any) -> bool:
    """Set doc[path] = value, creating missing mappings on the way; False when a non-mapping is in the way."""
    node = doc
    for part in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(part, {})
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return False
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(path[-1], int) and 0 <= path[-1] < len(node)):
        node[path[-1]] = value
        return True
    return False


def drop(doc: Any, path: tuple) -> bool:
    parent = get(doc, path[:-1])
    if isinstance(parent, dict) and path[-1] in parent:
        del parent[path[-1]]
        return True
    if isinstance(parent, list) and isinstance(path[-1], int) and 0 <= path[-1] < len(parent):
        del parent[path[-1]]
        return True
    return False


def _stage_paths(doc: dict, rest: tuple) -> list[tuple]:
    stages = get(doc, ("serve", "stages"))
    return [("serve", "stages", i) + rest for i in range(len(stages))] if isinstance(stages, list) else []


# ---------------------------------------------------------------------------------- benign mutations


@dataclass
class Mutation:
    doc: Any
    notes: list[str] = field(default_factory=list)
    text_edits: list[Callable[[str], str]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # extra files beside the plan


def _choices(rng: random.Random) -> dict[tuple, Callable[[Any], Any]]:
    """Field -> a value in range for it (given the current value)."""
    names = catalog_names()
    pick = rng.choice
    training_precisions = ["fp32", "fp16", "bf16", "bf16", "fp8"]
    return {
        ("precision",): lambda cur: pick(
            training_precisions if cur in training_precisions and rng.random() < 0.8 else PRECISIONS
        ),
        ("optimize",): lambda cur: pick(["cost", "time", "latency"]),
        ("cluster", "gpu"): lambda cur: pick(names["gpus"]),
        ("cluster", "gpus"): lambda cur: rng.sample(names["gpus"], rng.randint(1, 4)),
        ("cluster", "count"): lambda cur: pick([1, 2, 4, 8, 16, 32, 64, 128, 256, 1024]),
        ("cluster", "gpus_per_node"): lambda cur: pick([1, 2, 4, 8, 8, 16]),
        ("cluster", "max_gpus"): lambda cur: pick([8, 64, 512, 4096, 16384]),
        ("cluster", "scheduler"): lambda cur: pick(["slurm", "kubernetes", "both"]),
        ("cluster", "pricing"): lambda cur: pick(["on-demand", "spot", "reserved"]),
        ("cluster", "interconnect"): lambda cur: pick(names["interconnects"]),
        ("cluster", "storage"): lambda cur: pick(names["storage"]),
        ("cluster", "kubernetes", "job_api"): lambda cur: pick(["jobset", "pytorchjob"]),
        ("cluster", "kubernetes", "autoscaler"): lambda cur: pick(["hpa", "keda"]),
        ("cluster", "slurm", "cpus_per_node"): lambda cur: pick([16, 64, 128, 224]),
        ("cluster", "slurm", "memory_per_node"): lambda cur: pick(["512GiB", "1TB", "2000GB", 10**12]),
        ("parallelism", "tp"): lambda cur: pick([1, 2, 4, 8, 8, 16]),
        ("parallelism", "pp"): lambda cur: pick([1, 2, 4, 8, 16]),
        ("parallelism", "dp"): lambda cur: pick([1, 2, 4, 8, 32]),
        ("parallelism", "zero_stage"): lambda cur: pick([0, 1, 2, 3]),
        ("parallelism", "micro_batch"): lambda cur: pick([1, 2, 4, 8]),
        ("parallelism", "recompute"): lambda cur: pick(["none", "selective", "full"]),
        ("parallelism", "offload"): lambda cur: pick([True, False]),
        ("budget", "usd"): lambda cur: pick(["$400k", "1.2M", 50000, "$5k", "$40M", "10k"]),
        ("budget", "usd_per_month"): lambda cur: pick(["$20k", "150k", 3000, "$1M"]),
        ("budget", "alert_at"): lambda cur: pick([0.5, 0.8, 0.9, 1]),
        ("train", "tokens"): lambda cur: pick(["2T", "500B", "800M", "1.5T", 3e11, "20B", "15T"]),
        ("train", "seq_len"): lambda cur: pick([512, 1024, 2048, 4096, 8192, 32768, 131072]),
        ("train", "global_batch"): lambda cur: pick([8, 64, 256, 1024, 4096]),
        ("train", "global_batch_tokens"): lambda cur: pick(["1M", "4M", "16M", "512k"]),
        ("train", "optimizer"): lambda cur: pick(["adamw", "adamw-8bit", "sgd", "adafactor"]),
        ("train", "framework"): lambda cur: pick(["auto", "deepspeed", "fsdp", "megatron", "ddp"]),
        ("train", "deadline"): lambda cur: pick(["30d", "12h", "90d", "2w", "36h", "720h", "4d", "90m"]),
        ("train", "flash_attention"): lambda cur: pick([True, False]),
        ("train", "mtbf_gpu_hours"): lambda cur: pick([1000, 50000, 1e6]),
        ("train", "bytes_per_token"): lambda cur: pick([2, 4, 1.5]),
        ("train", "checkpoint", "every"): lambda cur: pick(["auto", "6h", "30m", "1d", 3600]),
        ("train", "checkpoint", "keep"): lambda cur: pick([1, 2, 5]),
        ("train", "lora", "rank"): lambda cur: pick([4, 8, 16, 64, 256]),
        ("train", "lora", "targets"): lambda cur: rng.sample(
            ["q", "k", "v", "o", "gate", "up", "down"], rng.randint(1, 7)
        ),
        ("serve", "engine"): lambda cur: pick(["vllm", "triton", "tgi"]),
        ("serve", "context_len"): lambda cur: pick([2048, 4096, 8192, 32768, 131072]),
        ("serve", "kv_cache_dtype"): lambda cur: pick(["auto", "fp8"]),
        ("serve", "prefix_caching"): lambda cur: pick([True, False]),
        ("serve", "precisions"): lambda cur: rng.sample(PRECISIONS, rng.randint(1, 3)),
        ("serve", "traffic", "requests_per_second"): lambda cur: pick([0.5, 2, 20, 200, 5000]),
        ("serve", "traffic", "prompt_tokens"): lambda cur: pick([1, 128, 1000, 4000, 30000]),
        ("serve", "traffic", "output_tokens"): lambda cur: pick([1, 64, 256, 2000]),
        ("serve", "traffic", "peak_factor"): lambda cur: pick([1, 1.5, 3, 10]),
        ("serve", "slo", "ttft_p99"): lambda cur: pick(["200ms", "1s", "2s", "10s", 0.5]),
        ("serve", "slo", "tpot_p99"): lambda cur: pick(["20ms", "50ms", "100ms", "0.2s"]),
        ("serve", "slo", "latency_p99"): lambda cur: pick(["10ms", "50ms", "200ms", "1s"]),
    }


def _stage_choices(rng: random.Random) -> dict[tuple, Callable[[Any], Any]]:
    names = catalog_names()
    return {
        ("engine",): lambda cur: rng.choice(["vllm", "triton", "tgi"]),
        ("precision",): lambda cur: rng.choice(PRECISIONS),
        ("gpus",): lambda cur: rng.sample(names["gpus"], rng.randint(1, 3)),
        ("items_per_request",): lambda cur: rng.choice([0.5, 1, 4, 16]),
        ("prompt_tokens",): lambda cur: rng.choice([16, 600, 4000]),
        ("output_tokens",): lambda cur: rng.choice([1, 40, 400]),
        ("slo", "latency_p99"): lambda cur: rng.choice(["50ms", "200ms", "1s"]),
        ("slo", "ttft_p99"): lambda cur: rng.choice(["500ms", "1s", "3s"]),
        ("slo", "tpot_p99"): lambda cur: rng.choice(["30ms", "50ms", "150ms"]),
    }


def _applicable(doc: dict, path: tuple) -> bool:
    section = path[0]
    if section in ("train", "serve"):
        return isinstance(doc.get(section), dict) and (path[:2] != ("serve", "stages"))
    return section in ("precision", "optimize", "cluster", "parallelism", "budget")


def set_field(m: Mutation, rng: random.Random) -> None:
    doc = m.doc
    table = _choices(rng)
    options = [p for p in table if _applicable(doc, p)]
    stage_table = _stage_choices(rng)
    options += [s + p for p in stage_table for s in _stage_paths(doc, ())]
    path = rng.choice(options)
    current = get(doc, path)
    value = (stage_table[path[3:]] if path[:2] == ("serve", "stages") else table[path])(current)
    if path == ("cluster", "gpu") and isinstance(doc.get("cluster"), dict):
        doc["cluster"].pop("gpus", None)
    if path == ("cluster", "gpus") and isinstance(doc.get("cluster"), dict):
        doc["cluster"].pop("gpu", None)
    if path[-1] == "tokens" and isinstance(doc.get("train"), dict):
        doc["train"].pop("dataset_tokens", None)
        doc["train"].pop("epochs", None)
    if path[-1] in ("global_batch", "global_batch_tokens") and isinstance(doc.get("train"), dict):
        doc["train"].pop("global_batch_tokens" if path[-1] == "global_batch" else "global_batch", None)
    put(doc, path, value)
    m.notes.append(f"set {'.'.join(map(str, path))} = {value!r}")


def scale_number(m: Mutation, rng: random.Random) -> None:
    candidates = [p for p in paths(m.doc) if scale(get(m.doc, p), 2.0) != get(m.doc, p)]
    if not candidates:
        return set_field(m, rng)
    path = rng.choice(candidates)
    factor = rng.choice([0.5, 0.75, 1.25, 1.5, 2, 3, 4]) if rng.random() < 0.8 else rng.uniform(0.5, 4)
    value = scale(get(m.doc, path), factor)
    put(m.doc, path, value)
    m.notes.append(f"scale {'.'.join(map(str, path))} x{factor:.3g} -> {value!r}")


def respell_unit(m: Mutation, rng: random.Random) -> None:
    candidates = [
        p for p in paths(m.doc) if p and p[-1] in QUANTITY_FIELDS and not isinstance(get(m.doc, p), (dict, list))
    ]
    if not candidates:
        return scale_number(m, rng)
    path = rng.choice(candidates)
    value = respell(get(m.doc, path), QUANTITY_FIELDS[path[-1]], rng)
    put(m.doc, path, value)
    m.notes.append(f"respell {'.'.join(map(str, path))} -> {value!r}")


def swap_preset(m: Mutation, rng: random.Random) -> None:
    names = catalog_names()
    spots = [p for p in [("model",)] + _stage_paths(m.doc, ("model",)) if isinstance(get(m.doc, p), dict)]
    if not spots:
        return set_field(m, rng)
    path = rng.choice(spots)
    model = get(m.doc, path)
    preset = model.get("preset")
    kind = names["kind_of"].get(preset, "decoder") if isinstance(preset, str) else "decoder"
    choice = rng.random()
    new = {k: v for k, v in model.items() if k in ("weights", "hf_id")} if rng.random() < 0.5 else {}
    if choice < 0.6:
        same_kind = names["presets_by_kind"][kind] if rng.random() < 0.85 else names["presets"]
        new["preset"] = rng.choice(same_kind)
    elif choice < 0.8:
        new["params"] = rng.choice(["1B", "7B", "13B", "70B", "175B", 3e9, "500M"])
    else:
        base = rng.choice(names["presets_by_kind"][kind] if rng.random() < 0.85 else names["presets"])
        arch = dict(names["architectures"][base])
        for _ in range(rng.choice([0, 0, 1, 2])):
            key = rng.choice([k for k, v in arch.items() if isinstance(v, (int, float)) and not isinstance(v, bool)])
            arch[key] = scale(arch[key], rng.choice([0.5, 2, 4])) if rng.random() < 0.7 else rng.choice([0, 1, -1, 3])
        new["architecture"] = {k: v for k, v in arch.items() if rng.random() < 0.9 or k == "kind"}
    put(m.doc, path, new)
    m.notes.append(
        f"model at {'.'.join(map(str, path))} -> {sorted(new)} {new.get('preset') or new.get('params') or ''}"
    )


def toggle_gpu_pin(m: Mutation, rng: random.Random) -> None:
    cluster = m.doc.get("cluster")
    if not isinstance(cluster, dict):
        return set_field(m, rng)
    gpus = cluster.pop("gpus", None)
    if isinstance(gpus, list) and gpus:
        cluster["gpu"] = rng.choice(gpus)
    elif (gpu := cluster.pop("gpu", None)) is not None:
        cluster["gpus"] = [gpu] + rng.sample(catalog_names()["gpus"], rng.randint(0, 2))
    else:
        cluster["gpu"] = rng.choice(catalog_names()["gpus"])
    cluster.pop("count", None) if rng.random() < 0.5 else None
    m.notes.append(f"gpu pin toggled: gpu={cluster.get('gpu')!r} gpus={cluster.get('gpus')!r}")


OPTIONAL = [
    ("budget",),
    ("parallelism",),
    ("cluster", "count"),
    ("cluster", "gpus_per_node"),
    ("cluster", "gpu"),
    ("cluster", "gpus"),
    ("cluster", "slurm"),
    ("cluster", "kubernetes"),
    ("cluster", "max_gpus"),
    ("train", "deadline"),
    ("train", "framework"),
    ("train", "checkpoint"),
    ("train", "entrypoint"),
    ("train", "global_batch"),
    ("train", "global_batch_tokens"),
    ("train", "lora"),
    ("train", "data"),
    ("serve", "slo"),
    ("serve", "slo", "ttft_p99"),
    ("serve", "slo", "tpot_p99"),
    ("serve", "context_len"),
    ("serve", "engine"),
    ("model", "hf_id"),
    ("model", "weights"),
    ("precision",),
    ("optimize",),
    ("budget", "usd"),
    ("budget", "usd_per_month"),
]


def drop_optional(m: Mutation, rng: random.Random) -> None:
    present = [p for p in OPTIONAL if get(m.doc, p) is not None] + [
        p for p in _stage_paths(m.doc, ("slo",)) + _stage_paths(m.doc, ("gpus",)) if get(m.doc, p) is not None
    ]
    if not present:
        return set_field(m, rng)
    path = rng.choice(present)
    drop(m.doc, path)
    m.notes.append(f"drop {'.'.join(map(str, path))}")


def user_catalog(m: Mutation, rng: random.Random) -> None:
    """A GPU catalog file beside the plan: a new entry derived from a packaged one, or a price override."""
    names = catalog_names()
    base_id = rng.choice(names["gpus"])
    if rng.random() < 0.5:
        entry = dict(names["gpu_entries"][base_id])
        entry["id"] = "fuzz-gpu"
        for key in ("memory_bytes", "memory_bandwidth_bytes_per_second", "intra_node_bandwidth_bytes_per_second"):
            entry[key] = scale(entry[key], rng.choice([0.5, 1, 2]))
        entry["dense_tflops"] = {k: v * rng.choice([0.5, 1, 2]) for k, v in entry["dense_tflops"].items()}
    else:
        entry = {"id": base_id, "price_usd_per_gpu_hour": {"spot": round(rng.uniform(0.1, 9), 2)}}
    if not isinstance(m.doc.get("cluster"), dict):
        m.doc["cluster"] = {}
    cluster = m.doc["cluster"]
    cluster["catalog"] = CATALOG_NAME
    if entry["id"] == "fuzz-gpu":
        cluster.pop("gpus", None)
        cluster["gpu"] = "fuzz-gpu"
    m.files[CATALOG_NAME] = yaml.safe_dump({"entries": [entry]}, sort_keys=True).encode()
    m.notes.append(f"user catalog entry {entry['id']} from {base_id}")


EXTREMES = {  # values at the edges of what the spec accepts: valid plans that stress the sizing arithmetic
    ("train", "tokens"): [1, "1e18", "1k"],
    ("train", "seq_len"): [1, 3, 10_000_000],
    ("train", "global_batch"): [1, 3, 10_000_000],
    ("train", "global_batch_tokens"): [1, "1e15"],
    ("train", "epochs"): [1e-6, 1e6],
    ("train", "bytes_per_token"): [1e-9, 1e6],
    ("train", "mtbf_gpu_hours"): [1e-9, 1e12],
    ("train", "deadline"): ["1ms", "1s", 1e10],
    ("train", "checkpoint", "every"): ["1ms", 1e10],
    ("train", "checkpoint", "keep"): [1000],
    ("train", "lora", "rank"): [1, 4096],
    ("train", "lora", "alpha"): [1e-9],
    ("serve", "context_len"): [1, 2, 10_000_000],
    ("serve", "traffic", "requests_per_second"): [1e-9, 1e9],
    ("serve", "traffic", "prompt_tokens"): [1, 10_000_000],
    ("serve", "traffic", "output_tokens"): [1, 10_000_000],
    ("serve", "traffic", "peak_factor"): [1000],
    ("serve", "slo", "ttft_p99"): ["1ms", 1e-9, 1e10],
    ("serve", "slo", "tpot_p99"): ["1ms", 1e-9],
    ("serve", "slo", "latency_p99"): [1e-9, 1e10],
    ("cluster", "count"): [1, 3, 1_000_000],
    ("cluster", "max_gpus"): [1, 1_000_000],
    ("cluster", "gpus_per_node"): [1, 3, 64],
    ("cluster", "slurm", "cpus_per_node"): [1, 100_000],
    ("cluster", "slurm", "memory_per_node"): [0, 1, "1e18"],
    ("parallelism", "tp"): [3, 1024],
    ("parallelism", "pp"): [3, 1024],
    ("parallelism", "dp"): [3, 1_000_000],
    ("parallelism", "micro_batch"): [100_000],
    ("budget", "usd"): [0.01, "1e15"],
    ("budget", "usd_per_month"): [0.01, "1e15"],
    ("budget", "alert_at"): [1e-9],
    ("model", "params"): [1, "1e18", "1T"],
}


def extreme_value(m: Mutation, rng: random.Random) -> None:
    options = [
        p for p in EXTREMES if _applicable(m.doc, p) or (p[0] == "model" and isinstance(m.doc.get("model"), dict))
    ]
    path = rng.choice(options)
    value = rng.choice(EXTREMES[path])
    if path == ("model", "params"):
        m.doc["model"] = {k: v for k, v in m.doc["model"].items() if k in ("weights", "hf_id")}
    if path[-1] == "tokens":
        m.doc["train"].pop("dataset_tokens", None)
        m.doc["train"].pop("epochs", None)
    if path[-1] in ("global_batch", "global_batch_tokens"):
        m.doc["train"].pop("global_batch_tokens" if path[-1] == "global_batch" else "global_batch", None)
    put(m.doc, path, value)
    m.notes.append(f"extreme {'.'.join(map(str, path))} = {value!r}")


BENIGN = [
    (set_field, 10),
    (scale_number, 5),
    (respell_unit, 3),
    (swap_preset, 3),
    (toggle_gpu_pin, 1),
    (drop_optional, 2),
    (user_catalog, 1),
    (extreme_value, 4),
]


# ----------------------------------------------------------------------------- destructive mutations


def replace_weird(m: Mutation, rng: random.Random) -> None:
    path = rng.choice(paths(m.doc))
    value = weird_value(rng)
    put(m.doc, path, value)
    m.notes.append(f"replace {'.'.join(map(str, path))} = {value!r:.80}")


def retype(m: Mutation, rng: random.Random) -> None:
    """A scalar in another type: number <-> string, string -> list, bool -> string ..."""
    leaves = [p for p in paths(m.doc) if not isinstance(get(m.doc, p), (dict, list))]
    path = rng.choice(leaves)
    value = get(m.doc, path)
    options = [str(value), [value], {"value": value}, None]
    if isinstance(value, str):
        try:
            options.append(float(value.lstrip("$")))
        except ValueError:
            options.append(len(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        options += [-value, value * 10 ** rng.randint(6, 40), float(value) + 0.5, bool(value)]
    new = rng.choice(options)
    put(m.doc, path, new)
    m.notes.append(f"retype {'.'.join(map(str, path))} = {new!r:.80}")


def delete_any(m: Mutation, rng: random.Random) -> None:
    path = rng.choice(paths(m.doc))
    drop(m.doc, path)
    m.notes.append(f"delete {'.'.join(map(str, path))}")


def extra_key(m: Mutation, rng: random.Random) -> None:
    mappings = [()] + [p for p in paths(m.doc) if isinstance(get(m.doc, p), dict)]
    path = rng.choice(mappings)
    target = get(m.doc, path) if path else m.doc
    if rng.random() < 0.5 and target:  # a near-miss of a real key
        real = rng.choice(sorted(map(str, target)))
        key = rng.choice([real + "s", real[:-1], real.upper(), real.replace("_", "-"), real + " ", "x-" + real])
    else:
        key = random_text(rng, 12) or "k"
    target[key] = weird_value(rng)
    m.notes.append(f"extra key {key!r} at {'.'.join(map(str, path)) or '<root>'}")


def nest_deep(m: Mutation, rng: random.Random) -> None:
    path = rng.choice(paths(m.doc))
    value: Any = weird_value(rng)
    for _ in range(rng.choice([1, 2, 10, 40, 63, 70, 200])):
        value = {"x": value} if rng.random() < 0.5 else [value]
    put(m.doc, path, value)
    m.notes.append(f"nest at {'.'.join(map(str, path))}")


def wrong_workload(m: Mutation, rng: random.Random) -> None:
    m.doc["workload"] = rng.choice(["train", "finetune", "serve", "Train", "inference", ""])
    m.notes.append(f"workload = {m.doc['workload']!r}")


def bad_catalog(m: Mutation, rng: random.Random) -> None:
    """cluster.catalog naming a missing, binary, hostile or malformed file."""
    if not isinstance(m.doc.get("cluster"), dict):
        m.doc["cluster"] = {}
    name = rng.choice(
        [CATALOG_NAME, CATALOG_NAME, "missing.yaml", ".", PLAN_NAME, "/dev/null", "sub/../" + CATALOG_NAME]
    )
    m.doc["cluster"]["catalog"] = name
    names = catalog_names()
    gpu = dict(names["gpu_entries"][rng.choice(names["gpus"])])
    key = rng.choice(sorted(gpu))
    gpu[key] = weird_value(rng)
    if rng.random() < 0.6:  # a figure the sizing divides by, at an edge, on the GPU the plan then uses
        key = rng.choice(
            [k for k, v in sorted(gpu.items()) if isinstance(v, (int, float, dict)) and not isinstance(v, bool)]
        )
        edge = rng.choice([0, -1, math.nan, math.inf, 1e-300, 1e300, 2])
        gpu[key] = {k: edge for k in gpu[key]} if isinstance(gpu[key], dict) else edge
        m.doc["cluster"].pop("gpus", None)
        m.doc["cluster"]["gpu"] = gpu["id"]
    contents = [
        b"\xff\xfe\x00binary",
        b"",
        b"entries: 5\n",
        b"entries: [1, 2]\n",
        b"[unclosed\n",
        b"entries:\n  - {id: x}\n",
        b"entries:\n" + b"  - " * 1 + b"[" * 300 + b"]" * 300 + b"\n",
        yaml.safe_dump({"entries": [gpu]}, allow_unicode=True).encode("utf-8", "surrogatepass"),
        yaml.safe_dump(
            {"entries": [{"id": rng.choice(names["gpus"]), key: weird_value(rng)}]}, allow_unicode=True
        ).encode("utf-8", "surrogatepass"),
    ]
    m.files[CATALOG_NAME] = contents[7] if m.doc["cluster"].get("gpu") == gpu["id"] else rng.choice(contents)
    m.notes.append(f"bad catalog {name!r}: {m.files[CATALOG_NAME][:60]!r}")


def _edit_text(rng: random.Random) -> Callable[[str], str]:
    kind = rng.randrange(6)
    seed = rng.random()

    def edit(text: str) -> str:
        lines = text.splitlines(keepends=True)
        i = int(seed * len(lines)) if lines else 0
        if kind == 0 and lines:  # duplicate a line: usually a duplicate key
            return "".join(lines[: i + 1] + lines[i:])
        if kind == 1 and lines:
            return "".join(lines[:i] + lines[i + 1 :])
        if kind == 2:
            return text[: int(seed * len(text))]
        if kind == 3 and lines:  # a tab where YAML wants spaces
            return "".join(lines[:i] + ["\t" + lines[i]] + lines[i + 1 :])
        if kind == 4:
            return text.replace(": ", ": &a ", 1) + "extra: *a\n" + "bad: *nope\n" * (seed < 0.5)
        return text + TEXT_TAILS[int(seed * len(TEXT_TAILS))]

    return edit


TEXT_TAILS = [
    "%TAG ! tag:x\n",
    "---\nname: second\n",
    "!!python/object:os.system x: 1\n",
    "? [a]\n: b\n",
    "\x00",
    "key: !!binary Zm9v\n",
    "when: 2024-13-45\n",
    "'\n",
    "yes: 1\n",
    "retry: 1:30\n",
    "\ufeffb: 1\n",
]

HOSTILE_FIELDS = [  # refused, located: credentials, names bash owns, Kubernetes shapes, a huge MoE
    (("train", "entrypoint", "env"), {"HFTOKEN": "x"}),
    (("train", "entrypoint", "env"), {"DATABASE_URL": "postgres://app:s3cret@db/x"}),
    (("train", "entrypoint", "env"), {"UID": "1"}),
    (("train", "entrypoint", "args"), ["--hub-token", "hf_" + "a1" * 17]),
    (("cluster", "kubernetes", "tolerations"), [{"key": "a", "effect": "NoExecute", "tolerationSeconds": "sixty"}]),
    (("cluster", "kubernetes", "node_selector"), {"a b": "x"}),
    (("serve", "stages"), []),
    (
        ("model",),
        {
            "architecture": {
                "layers": 10**12,
                "hidden": 64,
                "heads": 1,
                "kv_heads": 1,
                "ffn_hidden": 64,
                "vocab": 8,
                "experts": 8,
                "experts_per_token": 2,
            }
        },
    ),
]


def hostile_field(m: Mutation, rng: random.Random) -> None:
    path, value = HOSTILE_FIELDS[rng.randrange(len(HOSTILE_FIELDS))]
    put(m.doc, path, value)
    m.notes.append(f"hostile {'.'.join(path)} = {value!r}")


def text_edit(m: Mutation, rng: random.Random) -> None:
    m.text_edits.append(_edit_text(rng))
    m.notes.append("text edit")


DESTRUCTIVE = [
    (replace_weird, 5),
    (retype, 4),
    (delete_any, 3),
    (extra_key, 3),
    (nest_deep, 1),
    (wrong_workload, 1),
    (bad_catalog, 1),
    (text_edit, 2),
    (hostile_field, 1),
]


def _weighted(rng: random.Random, table: list) -> Callable:
    total = sum(w for _, w in table)
    x = rng.random() * total
    for fn, weight in table:
        x -= weight
        if x < 0:
            return fn
    return table[-1][0]


def mutate(doc: dict, rng: random.Random, destructive_rate: float = DESTRUCTIVE_RATE) -> Mutation:
    """One mutation most of the time (70%), sometimes two or three."""
    m = Mutation(copy.deepcopy(doc))
    count = 1 if rng.random() < 0.7 else rng.choice([2, 2, 3])
    for _ in range(count):
        if not isinstance(m.doc, dict) or not m.doc:
            break
        table = DESTRUCTIVE if rng.random() < destructive_rate else BENIGN
        _weighted(rng, table)(m, rng)
    return m


def plan_text(m: Mutation) -> str | None:
    """The mutated plan as YAML text; None when it cannot be written as UTF-8 YAML."""
    try:
        text = yaml.safe_dump(m.doc, allow_unicode=True, sort_keys=False, width=1 << 16)
        text.encode("utf-8")
    except (ValueError, yaml.YAMLError, RecursionError, UnicodeEncodeError):
        return None
    for edit in m.text_edits:
        text = edit(text)
    return text


@cache
def example_doc(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# -------------------------------------------------------------------------------------- classifying


@dataclass(frozen=True)
class Outcome:
    kind: str  # compiled | infeasible | invalid | crash | unrepresentable
    code: int | None = None
    signature: str = ""  # crashes: what went wrong and where; invalid: the diagnostic codes
    stderr: str = ""


def _crash_signature(trace: str) -> str:
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', trace)
    last_line = [l for l in trace.strip().splitlines() if l and not l.startswith(" ")][-1:] or ["?"]
    exc = last_line[0].split(":", 1)[0]
    ours = [(f, fn) for f, fn in frames if "/compiler/" in f] or frames or [("?", "?")]
    file, func = ours[-1]
    return f"{exc} in {file.split('/compiler/')[-1]}:{func}"


def classify(code: int, stderr: str, plan: str, lines: int = 1 << 30) -> Outcome:
    if code == 0:
        return Outcome("compiled", 0)
    if code == 4 and "infeasible:" in stderr and "Traceback" not in stderr:
        return Outcome("infeasible", 4)
    if code == 2 and "Traceback" not in stderr:
        # each diagnostic is one line: the file's path (the plan's, or a file it names beside it: a catalog, a site
        # file), line and column, the message and its [code]; a file that is not text has no line to point at
        folder = plan.rsplit("/", 1)[0] + "/" if "/" in plan else ""
        heads = list(re.finditer(re.escape(folder) + r"([^:\s]+)(?::(\d+):(\d+))?: error: ", stderr))
        codes = re.findall(r"  \[([a-z0-9-]+)\]$", stderr, re.M)
        bad = [
            h
            for h in heads
            if (h[2] is None and folder + h[1] == plan)
            or (h[2] is not None and folder + h[1] == plan and not 1 <= int(h[2]) <= lines + 1)  # past the end
            or not re.search(r"  \[[a-z0-9-]+\]$", stderr[h.start() :].split("\n", 1)[0])
        ]  # one line each
        if heads and not bad and len(codes) >= len(heads):
            return Outcome("invalid", 2, ",".join(sorted(set(codes))))
        reason = (
            stderr[bad[0].start() :].splitlines()[0] if bad else (stderr.strip().splitlines() or ["no diagnostic"])[0]
        )
        generic = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", reason.replace(plan, "PLAN"))[:120]
        return Outcome("crash", code, f"unlocated or malformed diagnostic: {generic}", stderr)
    if "Traceback" in stderr:
        return Outcome("crash", code, _crash_signature(stderr), stderr)
    return Outcome("crash", code, f"exit {code}: {stderr.strip()[:120]}", stderr)


def run_plan(text: str, workdir: Path, files: dict[str, bytes] | None = None) -> Outcome:
    """Compile one plan text in-process through the CLI's main(), as `mlinfra-compile PLAN -o OUT` would."""
    for stale in workdir.iterdir() if workdir.exists() else []:
        if stale.name != "out":
            shutil.rmtree(stale) if stale.is_dir() and not stale.is_symlink() else stale.unlink()
    workdir.mkdir(parents=True, exist_ok=True)
    plan = workdir / PLAN_NAME
    plan.write_text(text, encoding="utf-8")
    for name, data in (files or {}).items():
        (workdir / name).write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main([str(plan), "-o", str(workdir / "out")])
    except BaseException as exc:  # noqa: BLE001 - main() must never let anything escape
        if isinstance(exc, KeyboardInterrupt):
            raise
        trace = traceback.format_exc()
        return Outcome("crash", None, "escaped main: " + _crash_signature(trace), trace)
    outcome = classify(code, err.getvalue(), str(plan), len(text.splitlines()))
    if outcome.kind == "compiled":
        return _check_output(out.getvalue(), text) or _check_fresh(plan, workdir / "out", text) or outcome
    return outcome


def _check_fresh(plan: Path, out_dir: Path, text: str) -> Outcome | None:
    """For one compiled plan in ten (by its text, so reproducible): `--check` right after the compile finds
    nothing stale — the compile is deterministic within a process and the writer and the check agree."""
    if zlib.crc32(text.encode("utf-8")) % 10:
        return None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(plan), "-o", str(out_dir), "--check"])
    if code == 0 and "up to date" in out.getvalue() and len(out.getvalue().splitlines()) == 1:  # its one line
        return None
    return Outcome("crash", code, f"--check after compile: exit {code}", err.getvalue() + out.getvalue()[:4000])


_UNDECIDED = re.compile(
    r"\b(nan|NaN|inf|Infinity(?! Fabric)|None)\b"
)  # a number the sizing never decided ('+Inf' buckets are fine)


def _shipped_code_line(body: str, at: int, code: set[str]) -> bool:
    """Whether the text around `at` is a line of a module we ship: a line of the file, or (a ConfigMap value written as
    one double-quoted YAML string) the escaped line inside it."""
    start, end = body.rfind("\n", 0, at) + 1, body.find("\n", at)
    line = body[start:] if end < 0 else body[start:end]
    if line.strip() in code:
        return True
    offset = at - start
    left, right = line.rfind("\\n", 0, offset), line.find("\\n", offset)
    segment = line[left + 2 if left >= 0 else 0 : right if right >= 0 else len(line)]
    return segment.replace('\\"', '"').replace("\\\\", "\\").strip() in code


def _check_output(stdout: str, plan_text: str) -> Outcome | None:
    """A compiled plan whose files hold NaN, infinity or None (not written in the plan itself) is a bug too."""
    for folder in re.findall(r"^\S+: \d+ files in (.+)$", stdout, re.M):
        # modules we ship as code (None is Python's; their values come from the JSON and environment beside them),
        # also where a ConfigMap carries them
        code = {line.strip() for p in Path(folder).rglob("*.py") for line in p.read_text(encoding="utf-8").splitlines()}
        for path in sorted(Path(folder).rglob("*")):
            if not path.is_file() or path.suffix == ".py":
                continue
            body = path.read_text(encoding="utf-8", errors="replace")
            for match in _UNDECIDED.finditer(body):
                if match[0] in plan_text or body[max(0, match.start() - 1)] == "+":
                    continue
                line = body[: match.start()].count("\n") + 1
                if _shipped_code_line(body, match.start(), code):
                    continue
                where = f"{path.relative_to(folder)}:{line}"
                return Outcome(
                    "crash",
                    0,
                    f"undecided value {match[0]!r} in {re.sub(r'[0-9]+', '_', str(path.relative_to(folder)))}",
                    f"{where}: {body.splitlines()[line - 1]}",
                )
    return None


def mutated_outcome(example: Path, rng: random.Random, workdir: Path) -> tuple[Mutation, str | None, Outcome]:
    m = mutate(example_doc(example), rng)
    text = plan_text(m)
    if text is None:
        return m, None, Outcome("unrepresentable")
    return m, text, run_plan(text, workdir, m.files)
