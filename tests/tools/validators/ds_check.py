#!/usr/bin/env python3
# Vendored unchanged from the workplace recipe shared/validators/deepspeed/ds_check.py (2026-11-22): see its README there.
"""Validate DeepSpeed config JSON with DeepSpeed's own code (no GPU, no process group).

usage: ds_check.py CONFIG.json [--world-size N]     exit 1 on error
       ds_check.py --selftest                        bad cases + memory estimator table

What runs: deepspeed.runtime.config.DeepSpeedConfig(dict), i.e. the same parser
deepspeed.initialize() uses: pydantic models for zero_optimization / bf16 / fp16 /
offload ... (extra keys forbidden *inside* those sections), the batch-size identity
train_batch_size == micro_batch * grad_accum * world_size, and DeepSpeed's
_do_error_check. Two gaps, both closed here:
  * unknown TOP-LEVEL keys are silently ignored by DeepSpeed (a typo like
    "zero_optimisation" just disables ZeRO) -> we record which keys DeepSpeedConfig
    actually reads and report the unread ones;
  * with no process group DeepSpeed assumes world_size=1 -> --world-size patches
    deepspeed.comm.get_world_size/get_rank for the duration of the check.
Not checked until deepspeed.initialize(): optimizer/scheduler "type" names, "auto"
values (HF Trainer fills those in first; raw DeepSpeed fails with a TypeError).
"""

import argparse
import json
import logging
import os
import sys
from unittest import mock

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import deepspeed.comm as ds_dist  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402

deepspeed.utils.logging.logger.setLevel(logging.ERROR)


class _Tracking(dict):
    """dict that records which keys were looked up (copy.copy keeps the class)."""

    seen: set = set()

    def get(self, k, *a):
        _Tracking.seen.add(k)
        return super().get(k, *a)

    def __getitem__(self, k):
        _Tracking.seen.add(k)
        return super().__getitem__(k)

    def __contains__(self, k):
        _Tracking.seen.add(k)
        return super().__contains__(k)


def validate(cfg: dict, world_size: int = 1):
    """Returns (DeepSpeedConfig, [unread top-level keys]); raises on invalid config."""
    _Tracking.seen = set()
    with (
        mock.patch.object(ds_dist, "get_rank", lambda *a, **k: 0),
        mock.patch.object(ds_dist, "get_world_size", lambda *a, **k: world_size),
    ):
        c = DeepSpeedConfig(_Tracking(cfg))
    return c, sorted(set(cfg) - _Tracking.seen)


def check(cfg, world_size, label):
    try:
        c, unread = validate(cfg, world_size)
    except Exception as e:  # pydantic.ValidationError, AssertionError, ValueError, TypeError
        msg = " | ".join(l.strip() for l in str(e).splitlines() if "errors.pydantic.dev" not in l)
        print(f"ERROR {label}: {type(e).__name__}: {msg}")
        return False
    summary = (
        f"zero_stage={c.zero_optimization_stage} train_batch={c.train_batch_size} "
        f"micro={c.train_micro_batch_size_per_gpu} gas={c.gradient_accumulation_steps} "
        f"world={c.world_size} bf16={c.bfloat16_config.enabled} fp16={c.float16_config.enabled}"
    )
    if unread:
        print(f"ERROR {label}: unknown top-level key(s) {unread} (DeepSpeed ignores them) [{summary}]")
        return False
    print(f"OK    {label}: {summary}")
    return True


BASE = {
    "train_batch_size": 256,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 4,
    "bf16": {"enabled": True},
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_gather_16bit_weights_on_model_save": True,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
    },
}


def selftest():
    W = 16  # 2 nodes x 8 GPUs
    z = BASE["zero_optimization"]
    cases = [
        ("valid ZeRO-3, world 16", BASE, W),
        ("same config, world 8 (batch identity breaks)", BASE, 8),
        ('"stage": 5', {**BASE, "zero_optimization": {**z, "stage": 5}}, W),
        ('"stage": "3"', {**BASE, "zero_optimization": {**z, "stage": "3"}}, W),
        ("unknown key inside zero_optimization", {**BASE, "zero_optimization": {**z, "offload_params": {}}}, W),
        ("offload device gpu", {**BASE, "zero_optimization": {**z, "offload_param": {"device": "gpu"}}}, W),
        ("reduce_bucket_size as string", {**BASE, "zero_optimization": {**z, "reduce_bucket_size": "5e8"}}, W),
        (
            "top-level typo zero_optimisation",
            {k: v for k, v in BASE.items() if k != "zero_optimization"} | {"zero_optimisation": z},
            W,
        ),
        ("fp16 and bf16 both on", {**BASE, "fp16": {"enabled": True}}, W),
        ("train_batch_size 255", {**BASE, "train_batch_size": 255}, W),
        ('HF-style "auto"', {**BASE, "train_batch_size": "auto"}, W),
        ("optimizer type typo (only caught by initialize)", {**BASE, "optimizer": {"type": "AdamWW"}}, W),
        ("no batch keys", {"zero_optimization": {"stage": 2}}, W),
        ("only micro batch (derives train_batch)", {"train_micro_batch_size_per_gpu": 2}, W),
    ]
    for label, cfg, w in cases:
        check(cfg, w, label)

    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    GB = 2**30
    print("\nmemory estimators (model states only; activations not included), GiB:")
    print(
        f"{'params':>7} {'nodes x gpus':>12} | {'Z2 gpu':>7} {'Z2 gpu+offl':>11} {'Z2 cpu offl':>11} |"
        f" {'Z3 gpu':>7} {'Z3 gpu offl opt':>15} {'Z3 gpu offl all':>15} {'Z3 cpu offl all':>15}"
    )
    # (total params, largest layer params): largest layer ~ embedding/lm_head
    for total, largest, nodes, gpus in [
        (125e6, 39e6, 1, 1),
        (1.3e9, 103e6, 1, 8),
        (7e9, 131e6, 1, 8),
        (13e9, 164e6, 2, 8),
        (70e9, 1.05e9, 4, 8),
    ]:
        total, largest = int(total), int(largest)
        z2 = estimate_zero2_model_states_mem_needs(total, gpus, nodes, cpu_offload=False)
        z2o = estimate_zero2_model_states_mem_needs(total, gpus, nodes, cpu_offload=True)
        z3 = estimate_zero3_model_states_mem_needs(
            total, largest, gpus, nodes, cpu_offload=False, cpu_offload_params=False
        )
        z3o = estimate_zero3_model_states_mem_needs(
            total, largest, gpus, nodes, cpu_offload=True, cpu_offload_params=False
        )
        z3oo = estimate_zero3_model_states_mem_needs(
            total, largest, gpus, nodes, cpu_offload=True, cpu_offload_params=True
        )
        print(
            f"{total / 1e9:6.2f}B {nodes:>5} x {gpus:<4} | {z2[1] / GB:7.1f} {z2o[1] / GB:11.1f} {z2o[0] / GB:11.1f} |"
            f" {z3[1] / GB:7.1f} {z3o[1] / GB:15.1f} {z3oo[1] / GB:15.1f} {z3oo[0] / GB:15.1f}"
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?")
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        selftest()
        return 0
    cfg = json.load(open(a.config))
    return 0 if check(cfg, a.world_size, a.config) else 1


if __name__ == "__main__":
    sys.exit(main())
