"""The final checkpoint at the time limit for Hugging Face Trainer and accelerate scripts.

Slurm warns the job before its time limit; launch/torchrun.sh forwards the warning to every worker as the signal
named in $MLINFRA_CHECKPOINT_SIGNAL and puts this folder on PYTHONPATH. The handler only sets a flag (the signal may
arrive twice); at the next step end every rank agrees on it with one all-reduce, so all ranks stop at the same step.

Hugging Face Trainer (the Trainer saves checkpoint-N into --output_dir, then stops; a later job resumes from it):

    from mlinfra_signal import CheckpointOnSignal, last_checkpoint
    trainer = Trainer(..., callbacks=[CheckpointOnSignal()])
    trainer.train(resume_from_checkpoint=last_checkpoint(args.output_dir))

accelerate:

    from mlinfra_signal import CheckpointSignal
    stop = CheckpointSignal()                        # in the main thread, before training
    for batch in loader:
        ...                                          # one optimizer step
        if stop.agreed(accelerator.device):
            accelerator.save_state(os.environ["MLINFRA_CHECKPOINT_DIR"])
            break
"""

import os
import signal
import sys

import torch
import torch.distributed as dist

try:
    from transformers import TrainerCallback
except ImportError:  # an accelerate script without transformers: CheckpointOnSignal is not used there
    TrainerCallback = object


class CheckpointSignal:
    """Installs the handler for $MLINFRA_CHECKPOINT_SIGNAL (nothing outside the launcher, which sets it)."""

    def __init__(self):
        self.received = ""  # the signal's name once it arrives
        name = os.environ.get("MLINFRA_CHECKPOINT_SIGNAL", "")
        if name:
            signal.signal(getattr(signal, "SIG" + name), self._on_signal)

    def _on_signal(self, signum, frame):
        self.received = signal.Signals(signum).name

    def agreed(self, device="") -> bool:
        """True on every rank once any rank got the signal (a collective: call it on every rank at each step end)."""
        if not (dist.is_available() and dist.is_initialized()):
            return bool(self.received)
        if not device:
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([int(bool(self.received))], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


class CheckpointOnSignal(TrainerCallback):
    """At the step end after the signal: the Trainer saves checkpoint-N into output_dir and stops training."""

    def __init__(self):
        self.signal = CheckpointSignal()

    def on_step_end(self, args, state, control, **kwargs):
        if self.signal.agreed(args.device):
            sys.stderr.write(
                f"mlinfra_signal: checkpoint signal: saving checkpoint-{state.global_step} into "
                f"{args.output_dir} and stopping\n"
            )
            control.should_save = True
            control.should_training_stop = True
        return control


def last_checkpoint(output_dir: str):
    """The newest checkpoint-N in output_dir, or False when the folder is not there yet (the first job): what
    Trainer.train takes as resume_from_checkpoint (False: start afresh)."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else False
