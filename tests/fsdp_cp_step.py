"""One optimizer step of transformers' LlamaForCausalLM (a tiny config) with the plan's context parallelism, through
the generated fsdp/fsdp_tp.py under launch/torchrun.sh on CPU (gloo): the mesh [dp_shard, cp, tp], fully_shard over
dp_shard × cp, each CP rank's chunks of the sequences (fsdp_tp.context_shard) and the all-gather attention. Run by
tests/test_fsdp_cp_real.py; checks against a single-process fp32 reference on the whole sequences and prints one
FSDP_CP_STEP line per rank."""

import copy
import gc
import importlib.util
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

VOCAB, HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, SEQ, LR = 128, 64, 4, 2, 128, 2, 16, 1e-3


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=FFN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=SEQ,
        )
    )


def cross_entropy(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def main():
    dist.init_process_group("gloo")
    spec = importlib.util.spec_from_file_location("fsdp_tp", os.environ["MLINFRA_FSDP_TP_SCRIPT"])
    fsdp_tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fsdp_tp)
    settings = fsdp_tp.load_settings()
    mesh = fsdp_tp.build_mesh(settings, "cpu")
    dp, cp = mesh["dp_shard"].size(), mesh["cp"].size()
    local = settings["micro_batch"]
    torch.manual_seed(0)
    model = tiny_model()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, VOCAB, (dp * local, SEQ + 1), generator=torch.Generator().manual_seed(1))
    shard = mesh["dp_shard"].get_local_rank()
    mine = ids[shard * local : (shard + 1) * local]  # the CP ranks of a dp_shard rank take the same sequences
    inputs, labels, positions = fsdp_tp.context_shard(settings, mesh, mine[:, :-1], mine[:, 1:])

    model = fsdp_tp.parallelize(model, mesh, settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loss = cross_entropy(model(inputs, position_ids=positions).logits, labels)  # the mean over this rank's tokens
    loss.backward()
    whole = loss.detach().clone()
    dist.all_reduce(whole, group=mesh["cp"].get_group())  # the CP ranks hold as many tokens: their mean is the mean
    grads = {n: p.grad.full_tensor().float() for n, p in model.named_parameters()}
    optimizer.step()

    ref_loss_mine = cross_entropy(reference(mine[:, :-1]).logits, mine[:, 1:]).item()
    cross_entropy(reference(ids[:, :-1]).logits, ids[:, 1:]).backward()  # every DP rank's sequences, whole
    ref_grads = {n: p.grad.detach() for n, p in reference.named_parameters()}
    grad_error = 0.0
    for wrapped, grad in grads.items():
        name = wrapped.replace("._checkpoint_wrapped_module", "")
        grad_error = max(grad_error, float((grad - ref_grads[name]).norm() / ref_grads[name].norm()))
    row = {
        "rank": dist.get_rank(),
        "dp_rank": shard,
        "cp_rank": mesh["cp"].get_local_rank(),
        "mesh": [mesh.size(i) for i in range(mesh.ndim)],
        "mesh_dims": list(mesh.mesh_dim_names),
        "fsdp_ranks": fsdp_tp.fsdp_mesh(mesh, settings).size(),
        "positions": positions[0].tolist(),
        "local_loss": loss.item(),
        "loss": whole.item() / cp,
        "reference_loss": ref_loss_mine,
        "grad_rel_error": grad_error,
        "attention": model.config._attn_implementation,
        "checkpointed": sum(n.endswith("._checkpoint_wrapped_module") for n, _ in model.named_modules()),
        "placement": [str(x) for x in model.model.embed_tokens.weight.placements],
    }
    os.write(1, ("FSDP_CP_STEP " + json.dumps(row, sort_keys=True) + "\n").encode())
    del model, optimizer, reference, loss
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
