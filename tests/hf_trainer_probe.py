"""A Hugging Face Trainer script for the launch kind hf-trainer (tests/test_launch_real.py): every argument the generated
launcher passes goes through transformers' own HfArgumentParser(TrainingArguments) (an unknown flag is an error), then
one REAL Trainer optimizer step of a tiny random 2-layer Llama on CPU (with DeepSpeed when the launcher passed
--deepspeed), stopped after that step with a save, and one line per rank saying what the parser and the framework used:

    HF_PROBE {"parsed": {...TrainingArguments fields...}, "world_size": ..., "zero_stage": ..., "precision": ..., ...}

MLINFRA_PROBE_MODE=parse: parse only (no process group, no step).
MLINFRA_PROBE_MODE=signal: the generated launch/mlinfra_signal.py contract (the launcher puts it on PYTHONPATH): train
up to --max_steps with CheckpointOnSignal, resuming from last_checkpoint(output_dir); the first step end of this run
prints `HF_PROBE_STEP {...}` (the test then sends the checkpoint signal), and the row says where the run started and stopped.
"""

import gc
import json
import os
import sys

import torch
import torch.distributed as dist
import transformers
from transformers import HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

PARSED = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
    "deepspeed",
    "output_dir",
    "save_steps",
    "save_total_limit",
    "max_steps",
    "max_grad_norm",
    "gradient_checkpointing",
    "seed",
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
)
SEQ_LEN, VOCAB = 16, 128


def report(row: dict) -> None:
    sys.stdout.write("HF_PROBE " + json.dumps(row, sort_keys=True) + "\n")  # one write: ranks share stdout
    sys.stdout.flush()


class StopAfterOneStep(TrainerCallback):
    """One optimizer step, then the Trainer's own save (checkpoint-1 under output_dir) and stop."""

    def on_step_end(self, args, state, control, **kwargs):
        control.should_save = True
        control.should_training_stop = True
        return control


class AnnounceFirstStep(TrainerCallback):
    """One line at this run's first step end (the global step, after a resume), so the test knows training is under way."""

    def __init__(self):
        self.first = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.first is None:
            self.first = state.global_step
            sys.stdout.write(
                "HF_PROBE_STEP " + json.dumps({"rank": args.process_index, "global_step": state.global_step}) + "\n"
            )
            sys.stdout.flush()
        return control


class Tokens(torch.utils.data.Dataset):
    def __init__(self, samples: int):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (samples, SEQ_LEN), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def cpu_stands_in_for_the_gpu() -> None:
    """Two device probes answer as on a GPU node; parsing, the DeepSpeed checks and the step stay transformers' and
    DeepSpeed's own. TrainingArguments refuses bf16 without a bf16 GPU (unless use_cpu, which would bypass DeepSpeed),
    and accelerate's PartialState finds no device backend under torchrun on CPU and would run each rank alone
    (world size 1): with the workers' LOCAL_RANK it takes gloo, as it does for use_cpu, where a GPU takes nccl."""
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


def scheduled_lr(args) -> dict:
    """The learning rate the Trainer's own scheduler gives after each step of MLINFRA_PROBE_LR_STEPS (comma-separated),
    built as Trainer.create_scheduler builds it from the parsed arguments, over an AdamW as create_optimizer makes it."""
    from transformers.optimization import get_scheduler

    wanted = sorted(int(s) for s in os.environ.get("MLINFRA_PROBE_LR_STEPS", "").split(",") if s)
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW(
        [parameter], lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon
    )
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=args.get_warmup_steps(args.max_steps),
        num_training_steps=args.max_steps,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    seen, done = {}, 0
    for step in wanted:
        while done < step:
            optimizer.step()
            scheduler.step()
            done += 1
        seen[step] = scheduler.get_last_lr()[0]
    return seen


def main() -> None:
    if os.environ.get("DS_ACCELERATOR") == "cpu":
        cpu_stands_in_for_the_gpu()
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    parsed = {name: getattr(args, name) for name in PARSED}
    if os.environ.get("MLINFRA_PROBE_MODE") == "parse":
        report({"parsed": parsed, "lr": scheduled_lr(args)})
        return
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ_LEN,
    )
    torch.manual_seed(0)
    samples = 2 * args.world_size * args.per_device_train_batch_size * args.gradient_accumulation_steps
    signal_mode = os.environ.get("MLINFRA_PROBE_MODE") == "signal"
    resumed_from = None
    if signal_mode:
        from mlinfra_signal import (  # the generated module, from the launcher's PYTHONPATH
            CheckpointOnSignal,
            last_checkpoint,
        )

        announce = AnnounceFirstStep()
        callbacks = [CheckpointOnSignal(), announce]
        resumed_from = last_checkpoint(args.output_dir)
    else:
        callbacks = [StopAfterOneStep()]
    trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Tokens(samples), callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resumed_from)
    engine = trainer.model_wrapped if trainer.is_deepspeed_enabled else None
    dtype = next((engine.module if engine else trainer.model).parameters()).dtype
    row = {
        "parsed": parsed,
        "rank": dist.get_rank(),
        "world_size": args.world_size,
        "optimizer_steps": trainer.state.global_step,
        "precision": str(dtype),
        "checkpoint_dir": args.output_dir,
        "saved": sorted(os.listdir(args.output_dir)),
        "deepspeed": trainer.is_deepspeed_enabled,
    }
    if signal_mode:
        row.update(
            {"resumed_from": os.path.basename(resumed_from) if resumed_from else None, "first_step": announce.first}
        )
    if engine is not None:  # what DeepSpeed itself ran with
        row.update(
            {
                "micro_batch": engine.train_micro_batch_size_per_gpu(),
                "grad_accum": engine.gradient_accumulation_steps(),
                "global_batch": engine.train_batch_size(),
                "zero_stage": engine.zero_optimization_stage(),
            }
        )
    else:
        row.update(
            {
                "micro_batch": args.per_device_train_batch_size,
                "grad_accum": args.gradient_accumulation_steps,
                "global_batch": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
                "zero_stage": 0,
            }
        )
    report(row)
    del trainer, engine
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
