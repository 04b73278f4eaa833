"""LoRA adapters on a tensor-parallel model, as mlinfra-compile decided them (the "lora" section of fsdp_tp.json).
fsdp_tp.py loads this file from beside itself when its settings carry LoRA; parallelize() then wraps every targeted
linear layer before applying the TP plan (whose keys name the wrapped layer, "<module>.base_layer"):

    y = base_layer(x) + scaling * lora_B(lora_A(dropout(x)))         scaling = alpha / rank (Hu et al. 2021, §4.1)

sharded over the TP mesh the way PEFT's LoraParallelLinear does for Megatron's layers (huggingface/peft,
src/peft/tuners/lora/tp_layer.py; S-LoRA, Sheng et al. 2023 §5):
- column-parallel base (q/k/v, gate/up: weight Shard(0)): lora_A whole (Replicate), lora_B split on its output dim
  (Shard(0)); the rank-wide activation's gradient is summed over TP in the backward (Megatron's
  copy_to_tensor_model_parallel_region), so the replicated lora_A gets the same full gradient on every TP rank;
- row-parallel base (o, down: weight Shard(1), input split on its last dim): lora_A split on its input dim (Shard(1)),
  lora_B whole (Replicate); the rank-wide partial product is summed over TP in the forward (Megatron's
  reduce_from_tensor_model_parallel_region) before lora_B. Reducing the rank-wide product, not lora_B's output with
  the base's, keeps lora_B's gradient whole on every TP rank: no second all-reduce, rank/hidden of the base's volume.
- with sequence parallelism (settings["sequence_parallel"]): the column-parallel adapter takes the whole sequence the
  attention or MLP gathered for its base (a replicated DTensor: its local tensor), and the row-parallel adapter's
  partial products are reduce-scattered over the sequence, as the base's output is (RowwiseParallel with
  output_layouts Shard(1)), before lora_B: its output is this rank's sequence shard, added to the base's as a DTensor;
  the backward all-gathers the sequence-sharded gradient (the rank-wide product again, rank/hidden of the base's), and
  lora_B's gradient, one part per sequence shard, is summed over TP (a Partial gradient, as SP's norms get).
Every base parameter is frozen (requires_grad False); only the adapters train, and fully_shard shards them (and their
gradients and optimizer states) over dp_shard like any parameter. Initialisation is PEFT's default (LoraConfig
init_lora_weights=True): lora_A Kaiming-uniform, lora_B zero, so step 0 computes the base model.

Call fsdp_tp._lora_tp().add_adapters(model, mesh["tp"], settings["lora"]) yourself before fsdp_tp.parallelize/pipeline
to load adapter weights (a resumed run); layers already wrapped are left as they are. Dropout draws its mask from the torch RNG: seed
every rank alike (as torchtitan does), or the replicated lora_A of a TP group sees different masks.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

# (lora_A, lora_B) placements over the TP mesh by the base layer's style (module docstring)
PLACEMENTS = {
    "colwise": (Replicate(), Shard(0)),
    "rowwise": (Shard(1), Replicate()),
    "rowwise_to_sequence_shards": (Shard(1), Replicate()),
}  # sequence parallelism: output sequence-sharded


class _SumGradientOverTP(torch.autograd.Function):
    """Identity forward; backward, the gradient summed over the TP group (in fp32)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.group), None


class _SumOverTP(torch.autograd.Function):
    """Forward, the partial products summed over the TP group (in fp32); identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _all_reduce(x, group):
    total = x.float().contiguous()
    dist.all_reduce(total, group=group)
    return total.to(x.dtype)


def _local(weight):
    return weight.to_local() if isinstance(weight, DTensor) else weight


class LoraLinear(nn.Module):
    """A frozen linear layer (base_layer, tensor-parallelised later by the TP plan) plus its TP-sharded adapter."""

    def __init__(self, base_layer, style, tp_mesh, rank, alpha, dropout):
        super().__init__()
        if style not in PLACEMENTS:
            raise SystemExit(f"lora_tp: no adapter sharding for TP style {style!r} ({', '.join(PLACEMENTS)})")
        self.base_layer, self.style, self.scaling = base_layer, style, alpha / rank
        self.tp_mesh, self.group = tp_mesh, tp_mesh.get_group()
        self.lora_dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        weight = base_layer.weight
        self.lora_A = nn.Linear(base_layer.in_features, rank, bias=False, device=weight.device, dtype=weight.dtype)
        self.lora_B = nn.Linear(rank, base_layer.out_features, bias=False, device=weight.device, dtype=weight.dtype)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        for layer, placement in zip((self.lora_A, self.lora_B), PLACEMENTS[style]):
            layer.weight = nn.Parameter(distribute_tensor(layer.weight.detach(), tp_mesh, [placement]))

    def forward(self, x):
        out = self.base_layer(x)
        a, b = _local(self.lora_A.weight), _local(self.lora_B.weight)
        h = F.linear(self.lora_dropout(_local(x)), a)  # with SP a colwise base's x is the gathered, replicated DTensor
        if self.style == "colwise":  # x whole: h is whole; lora_B's slice gives this rank's output columns
            h = _SumGradientOverTP.apply(h, self.group)
        elif self.style == "rowwise":  # x is this rank's slice of the input: h is a partial sum
            h = _SumOverTP.apply(h, self.group)
        else:  # the partial sums reduce-scattered over the sequence (dim 1), as the base's output
            h = DTensor.from_local(h, self.tp_mesh, [Partial()]).redistribute(self.tp_mesh, [Shard(1)]).to_local()
            b = self.lora_B.weight.to_local(
                grad_placements=[Partial()]
            )  # each sequence shard gives part of its gradient
            return out + self.scaling * DTensor.from_local(F.linear(h, b), self.tp_mesh, [Shard(1)])
        return out + self.scaling * F.linear(h, b)


def add_adapters(model, tp_mesh, lora):
    """Freeze model's parameters and wrap each module named by lora["modules"] (suffixes such as self_attn.q_proj,
    mapped to the base's TP style) in a LoraLinear; returns the wrapped module names."""
    wrapped = []
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if not _is_lora(module) and any(name == suffix or name.endswith("." + suffix) for suffix in lora["modules"])
    ]
    freeze_base(model)
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if _is_lora(parent):
            continue  # already wrapped: its base_layer
        style = next(s for suffix, s in lora["modules"].items() if name == suffix or name.endswith("." + suffix))
        parent.register_module(child, LoraLinear(module, style, tp_mesh, lora["rank"], lora["alpha"], lora["dropout"]))
        wrapped.append(name)
    return wrapped


def freeze_base(model):
    """Every parameter but the adapters' frozen: add_adapters does it, and fsdp_tp.parallelize again after each block's
    TP plan, whose styles re-create the parameters they distribute (SequenceParallel's norms as trainable ones)."""
    for name, param in model.named_parameters():
        if ".lora_A." not in name and ".lora_B." not in name:
            param.requires_grad_(False)


def _is_lora(module):
    return isinstance(module, LoraLinear) or (hasattr(module, "base_layer") and hasattr(module, "lora_A"))


def trainable_parameters(model):
    """The adapters: what the optimizer updates."""
    return [p for p in model.parameters() if p.requires_grad]
