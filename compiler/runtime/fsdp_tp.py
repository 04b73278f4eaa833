"""FSDP2 x TP x PP for a Llama-shaped model, as mlinfra-compile decided it in fsdp_tp.json (beside this file, or
$MLINFRA_FSDP_TP_CONFIG): torchtitan's composition with torch-native APIs only.

    import importlib.util, os
    spec = importlib.util.spec_from_file_location("fsdp_tp", os.environ["MLINFRA_FSDP_TP_SCRIPT"])
    fsdp_tp = importlib.util.module_from_spec(spec); spec.loader.exec_module(fsdp_tp)
    settings = fsdp_tp.load_settings()
    mesh = fsdp_tp.build_mesh(settings)          # after dist.init_process_group, under torchrun
    model = fsdp_tp.parallelize(model, mesh, settings)   # then the optimizer over model.parameters(), as the
                                                         # plan's recipe says: MLINFRA_LR, MLINFRA_ADAM_BETA1/2, ...
    with fsdp_tp.loss_parallel(settings):        # the loss and its backward (with TP: logits sharded over the vocabulary)
        loss = loss_fn(model(input_ids), labels); loss.backward()

build_mesh: a 2-D DeviceMesh [dp_shard, tp], TP innermost (consecutive ranks, one node). parallelize: each block of
model.layers (or model.model.layers: LlamaForCausalLM) gets the block TP plan over mesh["tp"] (parallelize_module),
optionally activation checkpointing, then fully_shard over mesh["dp_shard"]; then the model-level plan (lm_head) and
fully_shard of the root.

HSDP (settings["fsdp_mesh_dims"] == ["dp_replicate", "dp_shard"]): the mesh is [dp_replicate, dp_shard, tp] (with PP,
[pp, dp_replicate, dp_shard, tp]) and fully_shard takes the 2-D mesh["dp_replicate", "dp_shard"]: parameters, gradients
and optimizer states sharded within a shard group, replicated across groups. A rank reads the sequences of its
data-parallel index (data_parallel(mesh, settings): replicas outer, shards inner). With gradient accumulation call
sync_replicas(model, settings, last) before each micro-batch's backward: each backward reduce-scatters inside the
shard group, and the replicas all-reduce the accumulated shard once, on the step's last micro-batch. Module names are Hugging Face Llama's (self_attn.q_proj ... mlp.down_proj, lm_head); the
attention must size its heads from its input (view(..., -1, head_dim)), as transformers' does, since TP splits them.
With settings["sequence_parallel"] (torchtitan's apply_tp with SP) the embedding, norms and block outputs carry
DTensors sharded over the sequence with their global shape, attention and MLP gather them (the attention's
hidden_states passed by keyword, as transformers' decoder layer does), and the head's logits stay sharded over the
vocabulary, as with TP alone: cross_entropy under loss_parallel(settings) takes them as they are.

With PP (settings["pp"]): build_mesh gives [pp, dp_shard, tp]; instead of parallelize, call

    pipe = fsdp_tp.pipeline(model, mesh, settings, loss_fn)   # loss_fn(logits, labels) -> mean loss of a micro-batch
    optimizer = torch.optim.AdamW(pipe.parameters(), lr=float(os.environ["MLINFRA_LR"]))  # and the recipe's betas, ...
    loss = pipe.step(input_ids, labels)   # the rank's micro_batch x grad_accum sequences; the loss on the last stage

which keeps this rank's stages (settings["stage_modules"], stage s on PP rank s mod pp), parallelises each as above
and runs them under torch.distributed.pipelining's settings["pipeline_schedule"] with grad_accum micro-batches
(with TP, step runs under loss_parallel and loss_fn gets the logits as a vocabulary-sharded DTensor).
The stages hold the rank's modules only: drop the reference to the whole model and the other ranks' layers are freed.

With CP (settings["cp"]; TP 1, no PP, no HSDP): build_mesh gives [dp_shard, cp, tp] and flattens dp_shard x cp into
torchtitan's dp_shard_cp (settings["flatten_mesh_dims"]), which fully_shard runs over (settings["fsdp_mesh_dims"]).
The data splits over dp_shard only (settings["data_parallel_mesh_dims"]): the CP ranks
of a dp_shard rank take the same sequences and keep their chunks of them (settings["cp_rank_chunks"]: rank i chunks i
and 2*cp-1-i of 2*cp, Llama 3 paper section 3.3.2); parallelize() points the transformers model's attention
(config._attn_implementation) at an all-gather of K and V over the CP ranks, local queries attending to the keys at
or before their global positions (fsdp_cp.py, written beside this file for a CP plan). Per step:

    inputs, labels, positions = fsdp_tp.context_shard(settings, mesh, inputs, labels)
    loss = loss_fn(model(inputs, position_ids=positions).logits, labels)   # the mean over this rank's tokens
    loss.backward()   # gradients averaged over dp_shard x cp: the mean over every token of the step
"""

import contextlib
import json
import os

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel import loss_parallel as torch_loss_parallel
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

STYLES = {
    "colwise": lambda: ColwiseParallel(),
    "rowwise": lambda: RowwiseParallel(),
    "colwise_gather_output": lambda: ColwiseParallel(output_layouts=Replicate()),
}
# Sequence parallelism: torchtitan's apply_tp (torchtitan/models/llama3/parallelize.py) on Hugging Face Llama's modules.
# Activations between the blocks' TP regions stay DTensors sharded over the sequence (dim 1) with their global shape,
# so LlamaModel builds its positions and causal mask from the full length.
SEQUENCE_PARALLEL_STYLES = {
    "embedding_to_sequence_shards": lambda: RowwiseParallel(
        input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False
    ),
    "sequence_parallel": lambda: SequenceParallel(),
    "gather_sequence_hidden_states": lambda: PrepareModuleInput(  # HF decoder layers pass hidden_states by keyword
        input_kwarg_layouts={"hidden_states": Shard(1)}, desired_input_kwarg_layouts={"hidden_states": Replicate()}
    ),
    "gather_sequence": lambda: PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "rowwise_to_sequence_shards": lambda: RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    "colwise_sequence_to_vocab_shards": lambda: ColwiseParallel(
        input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False
    ),  # logits for loss_parallel
    "colwise_to_vocab_shards": lambda: ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),  # TP alone
}
STYLES.update(SEQUENCE_PARALLEL_STYLES)


def load_settings(path=None):
    path = path or os.environ.get("MLINFRA_FSDP_TP_CONFIG") or os.path.join(os.path.dirname(__file__), "fsdp_tp.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def build_mesh(settings, device_type=None):
    world = torch.distributed.get_world_size()
    if world != settings["world_size"]:
        raise SystemExit(
            f"fsdp_tp: the mesh {settings['mesh_shape']} needs {settings['world_size']} ranks, the job has {world}"
        )
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    mesh = init_device_mesh(
        device_type, tuple(settings["mesh_shape"]), mesh_dim_names=tuple(settings["mesh_dim_names"])
    )
    for name, dims in settings["flatten_mesh_dims"].items():  # one dimension over several (torchtitan's dp_shard_cp)
        mesh[tuple(dims)]._flatten(name)
    return mesh


def _plan(model, table):
    present = {name for name, _ in model.named_modules()}
    return {name: STYLES[style]() for name, style in table.items() if name in present}


def _block_plan(block, settings):
    """The block plan; with sequence parallelism every module it names must be there (a block whose norm kept whole
    sequences would add them to sequence shards)."""
    missing = sorted(set(settings["block_tp_plan"]) - {name for name, _ in block.named_modules()})
    if settings["sequence_parallel"] and missing:
        raise SystemExit(
            f"fsdp_tp: sequence parallelism needs the block modules {missing} (Hugging Face Llama's names)"
        )
    return _plan(block, settings["block_tp_plan"])


def _model_plan(model, settings):
    """The model-level plan; with sequence parallelism also the embedding and the final norm, which LlamaForCausalLM
    keeps under .model, and none may be missing (a pipeline Stage without the embedding or the head holds None)."""
    if not settings["sequence_parallel"]:
        return _plan(model, settings["model_tp_plan"])
    plan = {}
    for name, style in settings["model_tp_plan"].items():
        owner = next((m for m in (model, getattr(model, "model", None)) if m is not None and hasattr(m, name)), None)
        if owner is None:
            raise SystemExit(f"fsdp_tp: sequence parallelism needs the module {name!r} (Hugging Face Llama's names)")
        if getattr(owner, name) is not None:
            plan[name if owner is model else f"model.{name}"] = STYLES[style]()
    return plan


def loss_parallel(settings):
    """The context the loss and its backward run in: torch's loss_parallel when the head leaves its logits sharded
    over the vocabulary (settings["loss_parallel"], with TP): cross_entropy takes the DTensor logits as a tensor.
    transformers' own loss (model(input_ids, labels=labels).loss) runs in it too: call the model inside it."""
    return torch_loss_parallel() if settings["loss_parallel"] else contextlib.nullcontext()


def _blocks(model):
    return getattr(model, "model", model).layers  # LlamaForCausalLM keeps its blocks in .model.layers


def fsdp_mesh(mesh, settings):
    """The mesh fully_shard shards over: mesh["dp_shard"], with CP the flattened mesh["dp_shard_cp"], or under HSDP the
    2-D mesh["dp_replicate", "dp_shard"] (fully_shard replicates over its 0th dim and shards over its 1st)."""
    dims = tuple(settings["fsdp_mesh_dims"])
    return mesh[dims] if len(dims) > 1 else mesh[dims[0]]


def data_parallel(mesh, settings):
    """(this rank's data-parallel index, the number of data-parallel ranks) over settings["data_parallel_mesh_dims"],
    replicas outer: which of the step's sequences the rank reads (its TP and PP peers read the same)."""
    index, size = 0, 1
    for name in settings["data_parallel_mesh_dims"]:
        index, size = index * mesh[name].size() + mesh[name].get_local_rank(), size * mesh[name].size()
    return index, size


def sync_replicas(model, settings, last_microbatch):
    """Gradient accumulation under HSDP: the replicas all-reduce their gradient shard only after the step's last
    micro-batch (FSDP2 set_requires_all_reduce; the reduce-scatters inside the shard group run every backward).
    Call before each backward; without dp_replicate it does nothing."""
    if "dp_replicate" in settings["fsdp_mesh_dims"]:
        model.set_requires_all_reduce(last_microbatch)


def parallelize(model, mesh, settings):
    tp_mesh, dp_mesh = mesh["tp"], fsdp_mesh(mesh, settings)
    if settings.get("cp", 1) > 1:
        _sibling("fsdp_cp.py", "mlinfra_fsdp_cp").context_parallel_attention(model, mesh["cp"], settings)
    mp = MixedPrecisionPolicy(
        param_dtype=getattr(torch, settings["param_dtype"]), reduce_dtype=getattr(torch, settings["reduce_dtype"])
    )
    shard = {"mesh": dp_mesh, "mp_policy": mp, "reshard_after_forward": settings["reshard_after_forward"]}
    if settings.get("lora"):
        _lora_tp().add_adapters(model, tp_mesh, settings["lora"])
    blocks = _blocks(model)
    _no_kv_cache_when_checkpointing(model, settings)
    parallelize_module(model, tp_mesh, _model_plan(model, settings))
    for name, block in list(blocks.named_children()):
        parallelize_module(block, tp_mesh, _block_plan(block, settings))
        if settings.get("lora"):  # TP styles re-create what they distribute: SequenceParallel's norms as trainable
            _lora_tp().freeze_base(model)
        if settings["activation_checkpoint"] != "none":
            block = checkpoint_block(block, settings)
            blocks.register_module(name, block)
        fully_shard(block, **shard)
    fully_shard(model, **shard)
    return model


def checkpoint_block(block, settings):
    """settings["activation_checkpoint"]: "full" re-runs the whole block in the backward; "selective-op" is torchtitan's
    op-level selective AC: the outputs of settings["activation_checkpoint_save_ops"] are kept, except every
    settings["activation_checkpoint_mm_recompute_every"]-th aten.mm of the block, and the rest is recomputed."""
    if settings["activation_checkpoint"] == "full":
        return checkpoint_wrapper(block)
    save = {_torch_op(name) for name in settings["activation_checkpoint_save_ops"]}
    every, mm = settings["activation_checkpoint_mm_recompute_every"], torch.ops.aten.mm.default

    def context_fn():
        counts = {"forward": 0, "recompute": 0}  # the block's mm calls so far, per pass

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if func == mm:
                counts[mode] += 1
            keep = func in save and not (func == mm and counts[mode] % every == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return checkpoint_wrapper(block, context_fn=context_fn)


def _no_kv_cache_when_checkpointing(model, settings):
    """A Hugging Face model appends each block's keys and values to its cache in the forward (config.use_cache), and a
    recompute would append them again: transformers turns the cache off under its own gradient checkpointing, and so
    does this when blocks are checkpointed."""
    config = getattr(model, "config", None)
    if settings["activation_checkpoint"] != "none" and getattr(config, "use_cache", False):
        config.use_cache = False


def _torch_op(name):
    op = torch.ops
    for part in name.split("."):
        op = getattr(op, part)
    return op


def context_shard(settings, mesh, *sequences):
    """This CP rank's chunks of each [batch, seq] tensor and their global positions (fsdp_cp.py beside this file);
    without CP the tensors as they are and positions None."""
    if settings.get("cp", 1) == 1:
        return (*sequences, None)
    return _sibling("fsdp_cp.py", "mlinfra_fsdp_cp").context_shard(settings, mesh, *sequences)


class Stage(nn.Module):
    """One pipeline stage of a Llama-shaped model: the named modules it keeps (embed_tokens, layers.N, norm, lm_head),
    run in that order; Hugging Face decoder layers also get the rotary position embeddings they take by keyword."""

    def __init__(self, model, modules):
        super().__init__()
        inner = getattr(model, "model", model)
        self.embed_tokens = inner.embed_tokens if "embed_tokens" in modules else None
        self.layers = nn.ModuleDict(
            {
                name.split(".")[1]: inner.layers[int(name.split(".")[1])]
                for name in modules
                if name.startswith("layers.")
            }
        )
        self.norm = inner.norm if "norm" in modules else None
        self.lm_head = model.lm_head if "lm_head" in modules else None
        self.rotary_emb = getattr(inner, "rotary_emb", None)
        self.sequence_mesh = None  # with sequence parallelism: the TP mesh its hidden states are sharded over

    def forward(self, x):
        if self.sequence_mesh is not None:
            x = self._sequence_shards(x)
        if self.embed_tokens is not None:
            x = self.embed_tokens(x)
        extra = {}
        if self.rotary_emb is not None:
            positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            extra["position_embeddings"] = self.rotary_emb(x, positions)
        for layer in self.layers.values():
            x = layer(x, **extra)
            x = x[0] if isinstance(x, tuple) else x
        if self.norm is not None:
            x = self.norm(x)
        x = self.lm_head(x) if self.lm_head is not None else x
        return x.to_local() if isinstance(x, DTensor) else x  # stages send and receive plain tensors

    def _sequence_shards(self, x):
        """The stage's input with sequence parallelism: token ids on the first stage (their length must split over
        TP), else the previous stage's output for this TP rank, its sequence shard: a DTensor again, global length."""
        tp = self.sequence_mesh.size()
        if self.embed_tokens is not None:
            if x.shape[1] % tp:
                raise ValueError(
                    f"fsdp_tp: sequence parallelism splits each sequence over {tp} TP ranks: "
                    f"a length of {x.shape[1]} does not divide"
                )
            return x
        return DTensor.from_local(x, self.sequence_mesh, [Shard(1)])


class Pipeline:
    """This rank's stages under the decided schedule; step() is one optimizer step's forward and backward."""

    def __init__(self, schedule, parts, first, last, loss_context=contextlib.nullcontext):
        self.schedule, self.parts, self.first, self.last = schedule, parts, first, last
        self.loss_context = loss_context

    def parameters(self):
        return [p for part in self.parts for p in part.parameters()]

    def step(self, inputs, labels):
        losses = []
        with self.loss_context():
            self.schedule.step(*((inputs,) if self.first else ()), target=labels if self.last else None, losses=losses)
        return torch.stack(losses).mean() if losses else None


def pipeline(model, mesh, settings, loss_fn, device=None):
    pp_mesh = mesh["pp"]
    rank, pp = pp_mesh.get_local_rank(), pp_mesh.size()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    names = settings["stage_modules"]
    stages, parts = [], []
    for index in range(rank, len(names), pp):  # stage s on PP rank s mod pp (torchtitan's "loop" placement)
        part = Stage(model, names[index])
        part.sequence_mesh = mesh["tp"] if settings["sequence_parallel"] else None
        part = parallelize(part, mesh, settings)
        stages.append(PipelineStage(part, index, len(names), device, group=pp_mesh.get_group()))
        parts.append(part)
    schedule_class = get_schedule_class(settings["pipeline_schedule"])
    single = issubclass(schedule_class, PipelineScheduleSingle)
    if settings["loss_parallel"]:
        loss_fn = _vocab_sharded_loss(loss_fn, mesh["tp"])
    schedule = schedule_class(
        stages[0] if single else stages,
        n_microbatches=settings["pipeline_microbatches"],
        loss_fn=loss_fn,
        scale_grads=True,
    )
    return Pipeline(
        schedule,
        parts,
        any(s.is_first for s in stages),
        any(s.is_last for s in stages),
        lambda: loss_parallel(settings),
    )


def _vocab_sharded_loss(loss_fn, tp_mesh):
    """The last stage hands on its vocabulary shard of the logits; loss_fn sees them as one DTensor (loss_parallel)."""

    def loss(logits, labels):
        value = loss_fn(DTensor.from_local(logits, tp_mesh, [Shard(logits.ndim - 1)]), labels)
        return value.to_local() if isinstance(value, DTensor) else value  # replicated over TP: the whole loss

    return loss


def _lora_tp():
    """lora_tp.py beside this file (LoRA adapters sharded as the TP plan shards their base layers), loaded only when
    the settings carry LoRA; parallelize() wraps the targeted layers, whose TP plan keys name "<module>.base_layer"."""
    return _sibling("lora_tp.py", "mlinfra_lora_tp")


def _sibling(file_name, module_name):
    """A module written beside this file (lora_tp.py, fsdp_cp.py), loaded once, when a setting needs it."""
    import importlib.util
    import sys

    if module_name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file_name)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[module_name] = module
    return sys.modules[module_name]
