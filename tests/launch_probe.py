"""A training script for the real-framework launch tests (tests/test_launch_real.py): one real training step of a
tiny random model on CPU (gloo), then one line per rank saying what the FRAMEWORK used, read back from the framework's
own objects, not from the plan:

    LAUNCH_PROBE {"framework": ..., "world_size": ..., "micro_batch": ..., "grad_accum": ..., "global_batch": ...,
                  "zero_stage": ..., "precision": ..., "checkpoint_dir": ..., "saved": [...], "signal": ...}

--framework ddp        plain torch DDP (launch kind torchrun): the batch it ran is counted over ranks with an all-reduce
--framework deepspeed  deepspeed.initialize with the config the launcher passed (--deepspeed_config); the engine reports
                       batch, accumulation, ZeRO stage and precision (launch kind hf-trainer: tests/hf_trainer_probe.py)
(launch kind accelerate with FSDP: tests/fsdp_probe.py)
--wait-signal          after the step, wait for $MLINFRA_CHECKPOINT_SIGNAL (the launcher's checkpoint contract), then save
"""

import argparse
import gc
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

GOT_SIGNAL = []


def report(row: dict) -> None:
    sys.stdout.write("LAUNCH_PROBE " + json.dumps(row, sort_keys=True) + "\n")  # one write: ranks share stdout
    sys.stdout.flush()


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def wait_for_signal(seconds: float) -> str | None:
    name = os.environ["MLINFRA_CHECKPOINT_SIGNAL"]  # the contract: the launcher names the signal it forwards
    signal.signal(getattr(signal, "SIG" + name), lambda signum, frame: GOT_SIGNAL.append(signal.Signals(signum).name))
    sys.stdout.write(f"LAUNCH_PROBE_WAITING rank={os.environ.get('RANK')}\n")
    sys.stdout.flush()
    deadline = time.monotonic() + seconds
    while not GOT_SIGNAL and time.monotonic() < deadline:
        time.sleep(0.05)
    return GOT_SIGNAL[0] if GOT_SIGNAL else None


def run_ddp(args) -> dict:
    dist.init_process_group(backend="gloo")
    world = dist.get_world_size()
    micro, accum = int(os.environ["MLINFRA_MICRO_BATCH"]), int(os.environ["MLINFRA_GRAD_ACCUM"])
    net = torch.nn.parallel.DistributedDataParallel(model())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    seen = 0
    for i in range(accum):  # one optimizer step of `accum` micro-batches
        batch = torch.randn(micro, 16)
        seen += batch.shape[0]
        with net.no_sync() if i < accum - 1 else torch.enable_grad():
            (net(batch).pow(2).mean() / accum).backward()
    opt.step()
    total = torch.tensor([seen])
    dist.all_reduce(total)
    signal_name = wait_for_signal(args.wait_seconds) if args.wait_signal else None
    ckpt = os.environ["MLINFRA_CHECKPOINT_DIR"]
    saved = []
    if dist.get_rank() == 0:
        os.makedirs(ckpt, exist_ok=True)
        path = os.path.join(ckpt, "step-1.pt")
        torch.save({"model": net.module.state_dict(), "optimizer": opt.state_dict()}, path)
        saved = sorted(os.listdir(ckpt))
    row = {
        "framework": "ddp",
        "world_size": world,
        "micro_batch": micro,
        "grad_accum": accum,
        "global_batch": int(total.item()),
        "zero_stage": 0,
        "precision": str(next(net.parameters()).dtype),
        "checkpoint_dir": ckpt,
        "saved": saved,
        "signal": signal_name,
        "rank": dist.get_rank(),
    }
    del net, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return row


def run_deepspeed(args) -> dict:
    import deepspeed

    config = args.deepspeed_config
    deepspeed.init_distributed(dist_backend="gloo")
    engine, _, _, _ = deepspeed.initialize(
        model=model(), config=config, optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3)
    )
    accum = engine.gradient_accumulation_steps()
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float16 if engine.fp16_enabled() else torch.float32
    for _ in range(accum):  # DeepSpeed steps the optimizer at the accumulation boundary
        batch = torch.randn(engine.train_micro_batch_size_per_gpu(), 16, dtype=dtype)
        engine.backward(engine(batch).float().pow(2).mean())
        engine.step()
    signal_name = wait_for_signal(args.wait_seconds) if args.wait_signal else None
    ckpt = os.environ["MLINFRA_CHECKPOINT_DIR"]
    engine.save_checkpoint(ckpt, tag="step-1")
    dist.barrier()
    row = {
        "framework": "deepspeed",
        "world_size": dist.get_world_size(),
        "micro_batch": engine.train_micro_batch_size_per_gpu(),
        "grad_accum": accum,
        "global_batch": engine.train_batch_size(),
        "zero_stage": engine.zero_optimization_stage(),
        "precision": str(dtype),
        "checkpoint_dir": ckpt,
        "saved": sorted(os.listdir(ckpt)),
        "signal": signal_name,
        "optimizer_steps": engine.global_steps,
        "config_flag": "--deepspeed_config",
        "rank": dist.get_rank(),
    }
    del engine
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=["ddp", "deepspeed"], required=True)
    parser.add_argument("--deepspeed_config")  # deepspeed.add_config_arguments' name (launch kind deepspeed)
    parser.add_argument("--wait-signal", action="store_true")
    parser.add_argument("--wait-seconds", type=float, default=60)
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    row = {"ddp": run_ddp, "deepspeed": run_deepspeed}[args.framework](args)
    report(row)


if __name__ == "__main__":
    main()
