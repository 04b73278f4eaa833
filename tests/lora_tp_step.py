"""One LoRA step of a tiny Llama-shaped model through the generated fsdp/fsdp_tp.py and the fsdp/lora_tp.py it loads,
under launch/torchrun.sh on CPU (gloo), with the plan's TP (and PP: fsdp_tp.pipeline). Run by tests/test_lora_tp_real.py.

The reference is PEFT's own LoRA (peft.inject_adapter_in_model) on the unsharded model in one process, with the same
adapter values (random A and B, so that A's gradient is not zero as it is at PEFT's B = 0 initialisation): this
rank's loss, every adapter gradient (gathered from its TP and DP shards) and the frozen base (no gradient, unchanged
by an optimizer built over every parameter) are compared. Prints one LORA_TP_STEP line per rank.
"""

import copy

import torch
import torch.distributed as dist
from fsdp_tp_step import LAYERS, cross_entropy, finish, loss_of, sequences, start, tiny_model
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

LR = 1e-3


def plain(name):
    """A parameter's name without the wrappers: PEFT's adapter name, checkpoint_wrapper, LlamaForCausalLM's .model."""
    name = name.replace("._checkpoint_wrapped_module", "").replace(".default", "").replace(".base_layer", "")
    return name.removeprefix("model.")


def step():
    """One LoRA step on this rank against PEFT's; the rank's row."""
    fsdp_tp, settings, mesh = start()
    lora_tp = fsdp_tp._lora_tp()  # fsdp/lora_tp.py, the module parallelize() uses
    lora = settings["lora"]
    pp = settings.get("pp", 1)
    local = settings["micro_batch"] * (settings["grad_accum"] if pp > 1 else 1)
    torch.manual_seed(0)
    model = tiny_model(sum(settings["pp_stage_layers"]) if pp > 1 else LAYERS)

    from peft import LoraConfig, inject_adapter_in_model

    reference = inject_adapter_in_model(
        LoraConfig(
            r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"], target_modules=list(lora["modules"])
        ),
        copy.deepcopy(model),
    )
    values = torch.Generator().manual_seed(2)
    adapters = {}
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=values) * 0.1)
                adapters[plain(name)] = p.detach().clone()
    base_before = {plain(n): p.detach().clone() for n, p in model.named_parameters()}

    # ours: the adapters added before fsdp_tp (to load their values), which then leaves them as they are
    wrapped = lora_tp.add_adapters(model, mesh["tp"], lora)
    for name in wrapped:
        layer = model.get_submodule(name)
        for part in ("lora_A", "lora_B"):
            weight = getattr(layer, part).weight
            full = adapters[plain(f"{name}.{part}.weight")]
            getattr(layer, part).weight = nn.Parameter(distribute_tensor(full.clone(), mesh["tp"], weight.placements))

    ids, shard, mine = sequences(mesh, local)
    if pp > 1:
        pipe = fsdp_tp.pipeline(model, mesh, settings, cross_entropy, "cpu")
        parts = pipe.parts
        optimizer = torch.optim.AdamW(pipe.parameters(), lr=LR)  # every parameter: the frozen ones get no gradient
        loss = pipe.step(mine[:, :-1], mine[:, 1:])
    else:
        model = fsdp_tp.parallelize(model, mesh, settings)
        parts = [model]
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        with fsdp_tp.loss_parallel(settings):  # with TP the logits stay sharded over the vocabulary
            loss = loss_of(model, mine)
            loss.backward()
        loss = loss.full_tensor() if isinstance(loss, DTensor) else loss
    named = [(plain(n), p) for part in parts for n, p in part.named_parameters()]
    grads = {n: p.grad.full_tensor() for n, p in named if p.grad is not None}
    optimizer.step()

    ref_loss_mine = loss_of(reference, mine).item()
    loss_of(reference, ids).backward()  # the mean over every DP rank's sequences: what FSDP's averaged gradients give
    ref_grads = {plain(n): p.grad for n, p in reference.named_parameters() if p.grad is not None}

    trained = sorted(n for n, p in named if p.requires_grad)
    errors = {n: float((grads[n] - ref_grads[n]).norm() / ref_grads[n].norm()) for n in trained}
    base_changed = [
        n
        for n, p in named
        if not p.requires_grad
        and not torch.equal(p.full_tensor().detach() if hasattr(p, "full_tensor") else p.detach(), base_before[n])
    ]
    first = min(int(n.split(".")[1]) for n in trained)
    row = {
        "rank": dist.get_rank(),
        "dp_rank": shard,
        "tp_rank": mesh["tp"].get_local_rank(),
        "sequence_parallel": settings["sequence_parallel"],
        "pp_rank": mesh["pp"].get_local_rank() if pp > 1 else 0,
        "loss": loss.item() if loss is not None else None,
        "reference_loss": ref_loss_mine,
        "trained": len(trained),
        "adapters": sorted({n.rsplit(".", 2)[0] for n in trained}),
        "grad_rel_error": max(errors.values()),
        "frozen_with_grad": sorted(set(grads) - set(trained)),
        "base_changed": base_changed,
        "reference_trained": len(ref_grads),
        "placements": {
            n.removeprefix(f"layers.{first}."): [str(x) for x in p.placements]
            for n, p in named
            if p.requires_grad and n.startswith(f"layers.{first}.")
        },
        "local_shapes": {
            n.removeprefix(f"layers.{first}."): list(p.to_local().shape)
            for n, p in named
            if p.requires_grad and n.startswith(f"layers.{first}.")
        },
    }
    return row


if __name__ == "__main__":
    finish("LORA_TP_STEP", step())
