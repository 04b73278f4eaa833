"""One optimizer step of a tiny Llama-shaped model through the generated fsdp/fsdp_tp.py, under launch/torchrun.sh
on CPU (gloo); with the plan's PP, through its pipeline (fsdp_tp.pipeline: the decided stages and schedule, the
plan's gradient accumulation as micro-batches) and a model of the plan's layer count. Run by tests/test_fsdp_tp_real.py; checks against a single-process fp32 reference and prints one
FSDP_TP_STEP line per rank.

Module names are Hugging Face Llama's (embed_tokens, layers.N.self_attn.q_proj ..., norm, lm_head), the names the
generated TP plan addresses; with MLINFRA_TEST_MODEL=hf the model is transformers' own LlamaForCausalLM (a tiny
config), the model a plan's checkpoint loads into.
"""

import copy
import gc
import importlib.util
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

VOCAB, HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, SEQ, LR = 128, 64, 4, 2, 128, 2, 16, 1e-3


def rotate(x):
    half = x.shape[-1] // 2
    pos = torch.arange(x.shape[-2], dtype=torch.float32)
    freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
    angle = torch.outer(pos, freq)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.q_proj = nn.Linear(HIDDEN, HEADS * self.head_dim, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=False)
        self.o_proj = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=False)

    def forward(self, hidden_states):
        x = hidden_states
        b, t, _ = x.shape  # heads per rank: -1 (TP splits them)
        q = rotate(self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2))
        k = rotate(self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2))
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        groups = q.shape[1] // k.shape[1]
        out = F.scaled_dot_product_attention(
            q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), is_causal=True
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.RMSNorm(HIDDEN), nn.RMSNorm(HIDDEN)
        self.self_attn, self.mlp = Attention(), Mlp()

    def forward(self, x):
        x = x + self.self_attn(hidden_states=self.input_layernorm(x))  # by keyword, as Hugging Face's decoder layer
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyLlama(nn.Module):
    def __init__(self, layers=LAYERS):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def tiny_model(layers=LAYERS):
    if os.environ.get("MLINFRA_TEST_MODEL") != "hf":
        return TinyLlama(layers)
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=FFN,
            num_hidden_layers=layers,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=SEQ,
        )
    )


def cross_entropy(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def loss_of(model, ids):
    if os.environ.get("MLINFRA_TEST_LOSS") == "labels":  # transformers' own loss: labels= shifted inside the model
        return model(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss
    logits = model(ids[:, :-1])
    logits = getattr(logits, "logits", logits)  # transformers returns a ModelOutput
    return cross_entropy(logits, ids[:, 1:])


def start():
    """The gloo group, the generated fsdp/fsdp_tp.py as a module, its settings and the decided mesh (shared by the
    step scripts: fsdp_sac_step.py, lora_tp_step.py)."""
    dist.init_process_group("gloo")
    spec = importlib.util.spec_from_file_location("fsdp_tp", os.environ["MLINFRA_FSDP_TP_SCRIPT"])
    fsdp_tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fsdp_tp)
    settings = fsdp_tp.load_settings()
    return fsdp_tp, settings, fsdp_tp.build_mesh(settings, "cpu")


def sequences(mesh, local):
    """(every DP rank's sequences, this rank's DP index, its `local` sequences): the same on every rank."""
    ids = torch.randint(
        0, VOCAB, (mesh["dp_shard"].size() * local, SEQ + 1), generator=torch.Generator().manual_seed(1)
    )
    shard = mesh["dp_shard"].get_local_rank()
    return ids, shard, ids[shard * local : (shard + 1) * local]


def finish(tag, row):
    """Print the rank's `TAG {json}` line, then leave the group together (after step() returned: nothing of the step's
    models is left to collect)."""
    # one write() of under PIPE_BUF bytes: the ranks' lines cannot interleave on the shared pipe
    os.write(1, (f"{tag} " + json.dumps(row, sort_keys=True) + "\n").encode())
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def step():
    """One step on this rank against the reference; the rank's row."""
    fsdp_tp, settings, mesh = start()
    pp = settings.get("pp", 1)
    local = settings["micro_batch"] * (settings["grad_accum"] if pp > 1 else 1)  # sequences one step takes per DP rank
    torch.manual_seed(0)
    model = tiny_model(sum(settings["pp_stage_layers"]) if pp > 1 else LAYERS)
    reference = copy.deepcopy(model)
    ids, shard, mine = sequences(mesh, local)

    if pp > 1:
        pipe = fsdp_tp.pipeline(model, mesh, settings, cross_entropy, "cpu")
        optimizer = torch.optim.AdamW(pipe.parameters(), lr=LR)
        loss = pipe.step(mine[:, :-1], mine[:, 1:])
        named = [(n, p) for part in pipe.parts for n, p in part.named_parameters()]
    else:
        model = fsdp_tp.parallelize(model, mesh, settings)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        with fsdp_tp.loss_parallel(settings):  # with SP the logits stay sharded over the vocabulary
            loss = loss_of(model, mine)
            loss.backward()
        loss = loss.full_tensor() if isinstance(loss, DTensor) else loss
        named = list(model.named_parameters())
    grads = {n: p.grad.full_tensor().float() for n, p in named}  # before the step: the reduced gradients themselves
    optimizer.step()

    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=LR)
    ref_loss_mine = loss_of(reference, mine).item()
    loss_of(reference, ids).backward()  # the mean over every DP rank's sequences: what FSDP's averaged gradients give
    before = {n: p.detach().clone() for n, p in reference.named_parameters()}
    ref_grads = {n.removeprefix("model."): p.grad.detach().clone() for n, p in reference.named_parameters()}
    ref_optimizer.step()

    agree = total = 0
    worst = grad_error = 0.0
    placements = {}
    references = {name.removeprefix("model."): r for name, r in reference.named_parameters()}
    for wrapped, p in named:
        name = wrapped.replace("._checkpoint_wrapped_module", "").removeprefix("model.")
        r = references[name]
        full = p.full_tensor().detach()
        before_r = before["model." + name] if "model." + name in before else before[name]
        delta, ref_delta = full - before_r, r.detach() - before_r
        agree += int((torch.sign(delta) == torch.sign(ref_delta)).sum())
        total += delta.numel()
        worst = max(worst, float((full - r.detach()).abs().max()))
        # a gradient not reduced over the TP ranks that shard its sequence (SP norms) is off by about 1/tp of it
        grad_error = max(grad_error, float((grads[wrapped] - ref_grads[name]).norm() / ref_grads[name].norm()))
        placements[name] = [str(x) for x in p.placements]
    parts = pipe.parts if pp > 1 else [model]
    held = sorted(int(n.split(".")[1]) for n in placements if n.startswith("layers.") and n.endswith("q_proj.weight"))
    row = {
        "rank": dist.get_rank(),
        "dp_rank": shard,
        "tp_rank": mesh["tp"].get_local_rank(),
        "pp_rank": mesh["pp"].get_local_rank() if pp > 1 else 0,
        "mesh": [mesh.size(i) for i in range(mesh.ndim)],
        "mesh_dims": list(mesh.mesh_dim_names),
        "loss": loss.item() if loss is not None else None,
        "reference_loss": ref_loss_mine,
        "sign_agreement": agree / total,
        "max_abs_diff": worst,
        "lr": LR,
        "grad_rel_error": grad_error,
        "placements": {
            n: p for n, p in placements.items() if not n.startswith("layers.") or n.split(".")[1] == str(held[0])
        },
        "layers": held,
        "sequence_parallel": settings["sequence_parallel"],
        "checkpointed": sum(
            n.endswith("._checkpoint_wrapped_module") for part in parts for n, _ in part.named_modules()
        ),
    }
    return row  # its models, optimizers and pipeline go with the frame, before finish() collects


if __name__ == "__main__":
    finish("FSDP_TP_STEP", step())
