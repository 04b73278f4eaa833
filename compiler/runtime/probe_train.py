"""mlinfra-compile probe: the training script of the plan's own emitted job, shortened (job*/ beside this file).

The job's launcher (job*/launch/torchrun.sh) runs this script exactly as it would run the plan's training script, with
the job's framework configuration: DeepSpeed (deepspeed.initialize with --deepspeed_config), Accelerate's FSDP plugin
(accelerate launch --config_file, or torchrun with that file in MLINFRA_ACCELERATE_CONFIG and the environment accelerate
launch would set from it; on a CPU its plugin, the Accelerator refusing FSDP there), the FSDP2 × TP script
(fsdp/fsdp_tp.py), the Hugging Face Trainer (its TrainingArguments from the launcher's flags, DeepSpeed included), or
plain DDP. The model is the job's architecture (plan.json, layers already reduced) as a transformers Llama with random
weights (probe_model.py beside this file); the data are random tokens; nothing is saved. A LoRA job trains what the
plan's does: fsdp_tp.py adds its own adapters (fsdp/lora_tp.py); on the other paths PEFT's LoRA goes on the launcher's
MLINFRA_LORA_RANK/ALPHA/TARGETS, the base frozen (MLINFRA_LORA_METHOD qlora: an NF4 base, under FSDP packed in
MLINFRA_LORA_QUANT_STORAGE). It trains $MLINFRA_PROBE_WARMUP_STEPS + $MLINFRA_PROBE_STEPS optimizer steps and writes, on
rank 0, one JSON object to $MLINFRA_PROBE_RESULTS: the measured steps (CUDA events around each optimizer step on a GPU)
and the peak memory the framework's allocator reports (torch.cuda.max_memory_allocated/reserved; on a CPU, the resident
set).
"""

import json
import os
import re
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
from probe_model import (
    DEVICE,
    base_model,
    compute_dtype,
    fsdp1_on_cpu,
    fsdp1_reported,
    llama,
    materialise,
    peft_wrap_policy,
    trainable,
    trained,
    with_adapters,
)

WARMUP = int(os.environ.get("MLINFRA_PROBE_WARMUP_STEPS", "3"))
STEPS = int(os.environ.get("MLINFRA_PROBE_STEPS", "10"))
OUT_DIR = os.environ.get("MLINFRA_OUT_DIR", ".")


def job_plan():
    with open(os.path.join(OUT_DIR, "plan.json"), encoding="utf-8") as handle:
        return json.load(handle)


class Clock:
    """Each optimizer step's time: CUDA events on a GPU (recorded on the stream, read after one synchronize), the
    monotonic clock on a CPU."""

    def __init__(self, device):
        self.cuda, self.marks = device.type == "cuda", []

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def steps_seconds(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def peak_bytes(device, rss_start):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
    grown = own_peak_rss_bytes() - rss_start
    return grown, grown


def own_peak_rss_bytes():
    """VmHWM: this process's peak RSS (ru_maxrss keeps the launcher's across exec)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def tokens(plan, micro_batch, device):
    return torch.randint(
        0, plan["model"]["architecture"]["vocab"], (micro_batch, plan["training"]["seq_len"]), device=device
    )


def loop(step, clock):
    """Warm-up steps, then the measured ones, each bracketed by the clock."""
    for _ in range(WARMUP):
        step()
    clock.mark()
    for _ in range(STEPS):
        step()
        clock.mark()


def run_deepspeed(plan, device, argv):
    import deepspeed

    config = argv[argv.index("--deepspeed_config") + 1]
    with open(config, encoding="utf-8") as handle:
        zero = json.load(handle).get("zero_optimization", {})
    deepspeed.init_distributed(dist_backend="nccl" if device.type == "cuda" else "gloo")
    model = with_adapters(base_model(plan))
    if zero.get("offload_optimizer", {}).get("device") == "cpu":  # ZeRO-Offload steps AdamW on the host
        from deepspeed.ops.adam import DeepSpeedCPUAdam as optimizer_class
    else:
        optimizer_class = torch.optim.AdamW
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        model_parameters=trainable(model),
        optimizer=lambda params: optimizer_class(params, lr=1e-5),
        config=config,
    )
    accum, clock = engine.gradient_accumulation_steps(), Clock(device)
    batch = tokens(plan, engine.train_micro_batch_size_per_gpu(), engine.device)

    def step():
        for _ in range(accum):  # DeepSpeed steps the optimizer at the accumulation boundary
            engine.backward(engine(input_ids=batch, labels=batch).loss)
            engine.step()

    loop(step, clock)
    return clock, {
        "zero_stage": engine.zero_optimization_stage(),
        "micro_batch": engine.train_micro_batch_size_per_gpu(),
        "grad_accum": accum,
        "offload": bool(engine.zero_cpu_offload()),
        **trained(model),
    }


def accelerate_launch_environment(config_file):
    """A job torchrun starts with Accelerate's FSDP1 config in MLINFRA_ACCELERATE_CONFIG gets the environment
    `accelerate launch --config_file` would hand its workers, from accelerate's own launch code (accelerate 1.15
    commands/launch.py launch_command: _validate_launch_command reads the file, multi_gpu_launcher's
    prepare_multi_gpu_env turns it into ACCELERATE_* and FSDP_* variables); torchrun has set the ranks' own."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", config_file, sys.argv[0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "port in use": torchrun's own rendezvous holds it
        launch = prepare_multi_gpu_env(_validate_launch_command(args)[0])
    os.environ.update({k: v for k, v in launch.items() if k.startswith(("ACCELERATE_", "FSDP_"))})


def run_accelerate(plan, device):
    if device.type == "cpu" and os.environ.get("MLINFRA_PROBE_CPU_LOOP") == "1":
        return run_fsdp1_on_cpu(plan)
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=int(os.environ.get("MLINFRA_GRAD_ACCUM", "1")))
    model = with_adapters(base_model(plan))
    peft_wrap_policy(accelerator.state.fsdp_plugin, model)
    model = accelerator.prepare(model)  # FSDP: the model wrapped, then the optimizer over it
    optimizer = accelerator.prepare(torch.optim.AdamW(trainable(model), lr=1e-5))
    clock, batch = Clock(accelerator.device), tokens(plan, int(os.environ["MLINFRA_MICRO_BATCH"]), accelerator.device)

    def step():
        for _ in range(accelerator.gradient_accumulation_steps):
            with accelerator.accumulate(model):
                accelerator.backward(model(input_ids=batch, labels=batch).loss)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    loop(step, clock)
    return clock, {
        "distributed_type": accelerator.distributed_type.value,
        "mixed_precision": accelerator.mixed_precision,
        **fsdp1_reported(model),
        **trained(model),
    }


def run_fsdp1_on_cpu(plan):
    """The FSDP1 job on a CPU (CI, MLINFRA_PROBE_CPU_LOOP=1): the Accelerator refuses FSDP without a device (accelerate
    1.15 "no available devices"), so the plugin `accelerate launch` configured (its FSDP_* environment) wraps the model
    as Accelerator.prepare_model does (probe_model.py fsdp1_on_cpu), on gloo."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    dist.init_process_group(backend="gloo")
    sync = {k: os.environ.get(k, "false") for k in ("FSDP_SYNC_MODULE_STATES", "FSDP_CPU_RAM_EFFICIENT_LOADING")}
    os.environ.update(dict.fromkeys(sync, "false"))  # with either, the plugin looks for a GPU
    plugin, precision = FullyShardedDataParallelPlugin(), os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    os.environ.update(sync)
    if precision != "no":
        plugin.set_mixed_precision(precision)
    synced = "true" in (v.lower() for v in sync.values())
    model = fsdp1_on_cpu(with_adapters(base_model(plan)), plugin, precision != "no", synced)
    seen = {"distributed_type": "FSDP", "mixed_precision": precision, **fsdp1_reported(model)}
    return fsdp1_loop(plan, model, seen)


def fsdp1_loop(plan, model, seen):
    optimizer = torch.optim.AdamW(trainable(model), lr=1e-5)
    accum, clock = int(os.environ.get("MLINFRA_GRAD_ACCUM", "1")), Clock(DEVICE)
    batch = tokens(plan, int(os.environ["MLINFRA_MICRO_BATCH"]), DEVICE)

    def step():
        for _ in range(accum):
            model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    loop(step, clock)
    return clock, {**seen, **trained(model)}


def run_fsdp_tp(plan, device):
    import importlib.util

    spec = importlib.util.spec_from_file_location("fsdp_tp", os.environ["MLINFRA_FSDP_TP_SCRIPT"])
    fsdp_tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fsdp_tp)
    settings = fsdp_tp.load_settings()
    mesh = fsdp_tp.build_mesh(settings, device.type)
    # built on the meta device and sharded before any storage: an unsharded fp32 copy per rank need not fit the GPU
    model = materialise(fsdp_tp.parallelize(llama(plan, torch.device("meta")), mesh, settings), device)
    optimizer = torch.optim.AdamW(trainable(model), lr=1e-5)
    accum, clock = int(os.environ.get("MLINFRA_GRAD_ACCUM", "1")), Clock(device)
    batch = tokens(plan, int(os.environ["MLINFRA_MICRO_BATCH"]), device)

    def step():
        for _ in range(accum):
            with fsdp_tp.loss_parallel(settings):
                model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    loop(step, clock)
    return clock, {"mesh": list(mesh.mesh_dim_names or ()), **trained(model)}


def run_ddp(plan, device):
    local = int(os.environ.get("LOCAL_RANK", "0"))
    model = with_adapters(base_model(plan)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(trainable(ddp), lr=1e-5)
    accum, clock = int(os.environ.get("MLINFRA_GRAD_ACCUM", "1")), Clock(device)
    batch = tokens(plan, int(os.environ["MLINFRA_MICRO_BATCH"]), device)
    dtype = compute_dtype()

    def step():
        for i in range(accum):
            with ddp.no_sync() if i < accum - 1 else torch.enable_grad():
                with torch.autocast(device.type, dtype=dtype):
                    loss = ddp(input_ids=batch, labels=batch).loss
                loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    loop(step, clock)
    return clock, {"precision": str(dtype), **trained(model)}


def run_trainer(plan, device, argv):
    """The Hugging Face Trainer with the launcher's flags (HfArgumentParser(TrainingArguments)), the step budget and no
    saving; a callback records CUDA events at each optimizer step's end."""
    import transformers
    from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainingArguments

    if device.type == "cpu" and os.environ.get("MLINFRA_PROBE_CPU_LOOP") == "1":
        cpu_stands_in_for_the_gpu(transformers)
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(argv)
    args.max_steps, args.save_strategy, args.report_to = WARMUP + STEPS, "no", []
    clock = Clock(device)

    class Steps(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            if state.global_step >= WARMUP:
                clock.mark()

    samples = (
        (WARMUP + STEPS + 1) * args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    )
    data = [{"input_ids": t, "labels": t} for t in tokens(plan, samples, "cpu")]
    trainer = Trainer(model=with_adapters(base_model(plan)), args=args, train_dataset=data, callbacks=[Steps()])
    metrics = trainer.train().metrics
    engine = trainer.model_wrapped if trainer.is_deepspeed_enabled else None
    return clock, {
        "train_runtime": metrics.get("train_runtime"),
        "deepspeed": trainer.is_deepspeed_enabled,
        "zero_stage": engine.zero_optimization_stage() if engine else 0,
        **trained(trainer.model),
    }


MEGATRON_STEP = re.compile(r" iteration +(\d+)/ *\d+ \|.* elapsed time per iteration \(ms\): ([0-9.]+) \|")
MEGATRON_MEMORY = re.compile(r"\| max allocated: ([0-9.]+) \| reserved: [0-9.]+ \| max reserved: ([0-9.]+)")


def megatron_row(log_path):
    """Megatron-LM's own reporting, read from its log: each iteration's "elapsed time per iteration (ms)"
    (training_log) and the largest "max allocated"/"max reserved" of its memory reports (report_memory, MiB)."""
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    steps = {int(i): float(ms) / 1000 for i, ms in MEGATRON_STEP.findall(text)}
    measured = [seconds for i, seconds in sorted(steps.items()) if i > WARMUP]
    memory = [(float(a), float(r)) for a, r in MEGATRON_MEMORY.findall(text)]
    if not measured or not memory:
        sys.exit(f"probe: {log_path}: no Megatron-LM iteration or memory report after {WARMUP} warm-up steps")
    allocated, reserved = (max(m[i] for m in memory) * 2**20 for i in (0, 1))
    return {
        "launch_kind": "megatron",
        "framework": "megatron",
        "device": "cuda",
        "steps_seconds": measured,
        "step_seconds": statistics.median(measured),
        "peak_allocated_bytes": int(allocated),
        "peak_reserved_bytes": int(reserved),
        "framework_reported": {"iterations": len(steps)},
    }


def cpu_stands_in_for_the_gpu(transformers):
    """A CPU run of the loop (CI, MLINFRA_PROBE_CPU_LOOP=1): TrainingArguments refuses bf16 without a bf16 GPU, and
    Accelerate's PartialState under torchrun on a CPU would run each rank alone; with these two answers the parsing,
    DeepSpeed's checks and the step stay transformers' and DeepSpeed's own, on gloo."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    transformers.training_args.is_torch_bf16_gpu_available = lambda: True
    prepare = PartialState._prepare_backend

    def gloo_when_no_device(self, cpu=False, sagemaker_dp=False, backend=None):
        chosen, kind = prepare(self, cpu, sagemaker_dp, backend)
        if kind == DistributedType.NO and int(os.environ.get("LOCAL_RANK", -1)) != -1:
            return "gloo", DistributedType.MULTI_CPU
        return chosen, kind

    PartialState._prepare_backend = gloo_when_no_device


def main():
    if sys.argv[1:2] == ["--megatron-log"]:  # after a Megatron-LM job: its log to results
        row = megatron_row(sys.argv[2])
        with open(os.environ["MLINFRA_PROBE_RESULTS"], "w", encoding="utf-8") as handle:
            json.dump(row, handle, indent=2, sort_keys=True)
        return
    plan = job_plan()
    launcher, argv = plan["deployment"]["launcher"], sys.argv[1:]
    cuda, device = torch.cuda.is_available(), DEVICE
    if cuda:
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    rss_start = own_peak_rss_bytes()
    kind, framework = launcher["kind"], plan["parallelism"]["framework"]
    if kind == "hf-trainer":
        clock, seen = run_trainer(plan, device, argv)
    elif kind == "deepspeed" or "--deepspeed_config" in argv:
        clock, seen = run_deepspeed(plan, device, argv)
    elif kind == "accelerate":
        clock, seen = run_accelerate(plan, device)
    elif framework == "fsdp" and not os.environ.get("MLINFRA_FSDP_TP_SCRIPT"):  # torchrun, Accelerate's FSDP1 config
        accelerate_launch_environment(os.environ["MLINFRA_ACCELERATE_CONFIG"])
        clock, seen = run_accelerate(plan, device)
    else:
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if cuda else "gloo")
        if os.environ.get("MLINFRA_FSDP_TP_SCRIPT"):
            clock, seen = run_fsdp_tp(plan, device)
        else:
            clock, seen = run_ddp(plan, device)
    steps = clock.steps_seconds()
    allocated, reserved = peak_bytes(device, rss_start)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank == 0:
        row = {
            "launch_kind": kind,
            "framework": framework,
            "device": device.type,
            "steps_seconds": steps,
            "step_seconds": statistics.median(steps),
            "peak_allocated_bytes": int(allocated),
            "peak_reserved_bytes": int(reserved),
            "framework_reported": seen,
            "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        }
        with open(os.environ["MLINFRA_PROBE_RESULTS"], "w", encoding="utf-8") as handle:
            json.dump(row, handle, indent=2, sort_keys=True)
        print(
            f"probe: {plan['name']} {kind}/{framework}: {row['step_seconds']:.4f} s per step (median of {len(steps)}), "
            f"peak {reserved / 2**30:.2f} GiB reserved",
            flush=True,
        )
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
