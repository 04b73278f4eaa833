"""A real DeepSpeed engine (deepspeed.initialize, CPU accelerator, gloo, world size 1) built from a generated
deepspeed/ds_config.json with no client optimizer or scheduler: DeepSpeed makes both from the config's "optimizer" and
"scheduler" blocks. It runs optimizer steps of a tiny model (gradient_accumulation_steps micro-batches each) and prints
`DS_LR {"lr": {step: lr after that many steps}, "applied_lr": {update: the lr the optimizer stepped with}, "skipped_steps": {step: steps DeepSpeed skipped by then (an
overflow: no update, no scheduler step)}, "optimizer": ..., "scheduler": ..., "betas": ..., ...}`.

usage: ds_lr_check.py CONFIG.json STEP [STEP ...]
"""

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
    os.environ.setdefault(key, value)
os.environ.setdefault("MASTER_PORT", "29561")


def main() -> None:
    import deepspeed
    import torch

    config, steps = json.load(open(sys.argv[1])), sorted(int(s) for s in sys.argv[2:])
    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(8, 8)
    engine, optimizer, _, scheduler = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    applied = []  # the learning rate of each update, read by the optimizer that makes it (FusedAdam), as it makes it
    basic, original_step = engine.basic_optimizer, engine.basic_optimizer.step

    def recorded_step(*args, **kwargs):
        applied.append(basic.param_groups[0]["lr"])
        return original_step(*args, **kwargs)

    basic.step = recorded_step
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float16 if engine.fp16_enabled() else torch.float32
    seen, skipped, done = {0: engine.get_lr()[0]}, {0: 0}, 0
    for step in steps:
        while done < step:
            for _ in range(engine.gradient_accumulation_steps()):
                batch = torch.randn(engine.train_micro_batch_size_per_gpu(), 8, dtype=dtype)
                engine.backward(engine(batch).float().pow(2).mean())
                engine.step()
            done += 1
        seen[step], skipped[step] = engine.get_lr()[0], engine.skipped_steps
    group = engine.optimizer.param_groups[0]
    row = {
        "lr": seen,
        "applied_lr": {step: applied[step - 1] for step in steps if step >= 1},
        "skipped_steps": skipped,
        "scheduler_iteration": scheduler.last_batch_iteration,
        "optimizer": type(engine.basic_optimizer).__name__,
        "scheduler": type(scheduler).__name__,
        "betas": list(group["betas"]),
        "eps": group["eps"],
        "weight_decay": group["weight_decay"],
        "gradient_clipping": engine.gradient_clipping(),
        "optimizer_steps": engine.global_steps,
    }
    print("DS_LR " + json.dumps(row, sort_keys=True))


if __name__ == "__main__":
    main()
