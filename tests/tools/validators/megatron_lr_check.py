"""megatron-core's OptimizerParamScheduler (PyPI megatron-core 0.16.1) built from the words of a generated
megatron/args.sh, as bash reads them, the way Megatron-LM's training loop builds it (megatron/training/training.py
get_optimizer_param_scheduler, iteration-based: steps are iterations × --global-batch-size samples, the decay over
--lr-decay-iters, default --train-iters); then stepped one global batch per iteration. Prints
`MEGATRON_LR {"lr": {iteration: lr, ...}, "wd": ..., "args": {...}}` for the iterations asked, or Megatron's own error.

usage: megatron_lr_check.py ARGS_SH ITERATION [ITERATION ...]
"""

import json
import subprocess
import sys


def words_of(args_sh: str) -> list[str]:
    return subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "_", args_sh],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]


def main() -> None:
    args_sh, iterations = sys.argv[1], sorted(int(i) for i in sys.argv[2:])
    words = words_of(args_sh)
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    import torch
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    batch = int(value["--global-batch-size"])
    train_iters = int(value["--train-iters"])
    decay_iters = int(value.get("--lr-decay-iters", train_iters))
    wsd = value.get("--lr-wsd-decay-iters")
    weight_decay = float(value.get("--weight-decay", 0.01))  # Megatron-LM's default
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=float(value.get("--lr-warmup-init", 0.0)),
        max_lr=value.get("--lr"),  # float(None) fails here, as in Megatron-LM without --lr
        min_lr=float(value.get("--min-lr", 0.0)),
        lr_warmup_steps=int(value.get("--lr-warmup-iters", 0)) * batch,
        lr_decay_steps=decay_iters * batch,
        lr_decay_style=value.get("--lr-decay-style", "linear"),
        start_wd=weight_decay,
        end_wd=weight_decay,
        wd_incr_steps=train_iters * batch,
        wd_incr_style="constant",
        wsd_decay_steps=int(wsd) * batch if wsd else None,
        lr_wsd_decay_style=value.get("--lr-wsd-decay-style", "exponential"),
    )
    seen, done = {}, 0
    for iteration in iterations:
        scheduler.step(increment=(iteration - done) * batch)  # one global batch of samples per iteration
        done = iteration
        seen[iteration] = optimizer.param_groups[0]["lr"]
    row = {"lr": seen, "wd": optimizer.param_groups[0]["weight_decay"], "args": value}
    print("MEGATRON_LR " + json.dumps(row, sort_keys=True))


if __name__ == "__main__":
    main()
