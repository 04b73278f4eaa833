"""One forward and backward of a tiny Llama-shaped model through the generated fsdp/fsdp_tp.py on CPU gloo ranks, three
times from the same weights and sequences: with the plan's activation checkpointing (torchtitan's op-level selective
AC, "selective-op"), with none and with full. Run by tests/test_fsdp_sac_real.py under launch/torchrun.sh; prints one
FSDP_SAC_STEP line per rank: each run's loss, its gradients' largest difference from the no-checkpointing run, and the
aten.mm calls its backward made (the recompute re-runs the matrices the policy did not save)."""

import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp_tp_step import LAYERS, finish, loss_of, sequences, start, tiny_model  # noqa: E402


class CountMatmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.mm = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.mm += func == torch.ops.aten.mm.default
        return func(*args, **(kwargs or {}))


def run(fsdp_tp, base, mesh, settings, mode, mine):
    model = fsdp_tp.parallelize(copy.deepcopy(base), mesh, dict(settings, activation_checkpoint=mode))
    loss = loss_of(model, mine)
    counter = CountMatmuls()
    with counter:
        loss.backward()
    grads = {n.replace("._checkpoint_wrapped_module", ""): p.grad.full_tensor() for n, p in model.named_parameters()}
    wrapped = sum(n.endswith("._checkpoint_wrapped_module") for n, _ in model.named_modules())
    return loss.detach(), grads, counter.mm, wrapped


def step():
    """The three runs on this rank; the rank's row."""
    fsdp_tp, settings, mesh = start()
    torch.manual_seed(0)
    base = tiny_model()
    _, _, mine = sequences(mesh, settings["micro_batch"])
    runs = {
        mode: run(fsdp_tp, base, mesh, settings, mode, mine)
        for mode in (settings["activation_checkpoint"], "none", "full")
    }
    loss0, grads0, _, _ = runs["none"]
    row = {
        "rank": dist.get_rank(),
        "mode": settings["activation_checkpoint"],
        "layers": LAYERS,
        "mesh": [mesh.size(i) for i in range(mesh.ndim)],
        "grads": len(grads0),
    }
    for mode, (loss, grads, mm, wrapped) in runs.items():
        row[mode] = {
            "loss": loss.item(),
            "loss_equal": bool(torch.equal(loss, loss0)),
            "grad_max_abs_diff": max(float((grads[n] - g).abs().max()) for n, g in grads0.items()),
            "backward_mm": mm,
            "wrapped": wrapped,
        }
    return row


if __name__ == "__main__":
    finish("FSDP_SAC_STEP", step())
