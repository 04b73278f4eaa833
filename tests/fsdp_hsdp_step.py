"""One HSDP optimizer step through the generated fsdp/fsdp_tp.py under launch/torchrun.sh on CPU (gloo): the plan's
mesh [dp_replicate, dp_shard, tp], its gradient accumulation as micro-batches with fsdp_tp.sync_replicas (with PP:
[pp, dp_replicate, dp_shard, tp] and fsdp_tp.pipeline's schedule), the tiny Llama-shaped model of tests/fsdp_tp_step.py. Run by tests/test_fsdp_hsdp_real.py; prints one FSDP_HSDP_STEP line per
rank: loss and reduced gradients against a single-process fp32 reference, the local shard sizes, the replica
all-reduces per micro-batch, and whether the replicas hold the same shards.
"""

import copy
import importlib.util
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp_tp_step import LAYERS, LR, SEQ, VOCAB, cross_entropy, loss_of, tiny_model  # noqa: E402

PROBE = "mlp.gate_proj.weight"  # FFN × HIDDEN of the rank's first block: split over TP (colwise), then the shard group


def load_fsdp_tp():
    spec = importlib.util.spec_from_file_location("fsdp_tp", os.environ["MLINFRA_FSDP_TP_SCRIPT"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def count_replica_all_reduces(group):
    """Wrap dist.all_reduce (FSDP2's HSDP all-reduce calls it) to count the calls on the replicas' group."""
    calls, members, original = [0], dist.get_process_group_ranks(group), dist.all_reduce

    def counted(tensor, *args, **kwargs):
        given = kwargs.get("group")
        if given is not None and dist.get_process_group_ranks(given) == members:
            calls[0] += 1
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counted
    return calls


def same_across(tensor, group):
    """Whether every rank of the group holds these exact values."""
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, tensor.contiguous(), group=group)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def main():
    dist.init_process_group("gloo")
    fsdp_tp = load_fsdp_tp()
    settings = fsdp_tp.load_settings()
    mesh = fsdp_tp.build_mesh(settings, "cpu")
    index, ranks = fsdp_tp.data_parallel(mesh, settings)
    mb, accum = settings["micro_batch"], settings["grad_accum"]
    torch.manual_seed(0)
    pp = settings.get("pp", 1)
    model = tiny_model(sum(settings["pp_stage_layers"]) if pp > 1 else LAYERS)
    reference = copy.deepcopy(model)
    ids = torch.randint(0, VOCAB, (ranks * mb * accum, SEQ + 1), generator=torch.Generator().manual_seed(1))
    mine = ids[index * mb * accum : (index + 1) * mb * accum]

    replica_group = mesh["dp_replicate"].get_group()
    calls, all_reduces, losses = count_replica_all_reduces(replica_group), [], []
    if pp > 1:  # the schedule runs the micro-batches and reduces the gradients once, after the last
        pipe = fsdp_tp.pipeline(model, mesh, settings, cross_entropy, "cpu")
        optimizer = torch.optim.AdamW(pipe.parameters(), lr=LR)
        loss = pipe.step(mine[:, :-1], mine[:, 1:])
        all_reduces, losses = [calls[0]], [float(loss) if loss is not None else None]
        named_parameters = [item for part in pipe.parts for item in part.named_parameters()]
    else:
        model = fsdp_tp.parallelize(model, mesh, settings)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        for step in range(accum):
            fsdp_tp.sync_replicas(model, settings, step == accum - 1)
            before = calls[0]
            with fsdp_tp.loss_parallel(settings):
                loss = loss_of(model, mine[step * mb : (step + 1) * mb]) / accum
                loss.backward()
            all_reduces.append(calls[0] - before)
            loss = loss.detach()
            losses.append(float(loss.full_tensor() if isinstance(loss, DTensor) else loss))
        named_parameters = list(model.named_parameters())
    named = {n.replace("._checkpoint_wrapped_module", "").removeprefix("model."): p for n, p in named_parameters}
    grads = {n: p.grad.full_tensor().float() for n, p in named.items()}
    probe_name = next(n for n in named if n.endswith(PROBE))
    local_grad = named[probe_name].grad.to_local().float()
    optimizer.step()

    loss_of(reference, ids).backward()  # the mean over every data-parallel rank's sequences
    ref_grads = {n: p.grad for n, p in reference.named_parameters()}
    grad_error = max(float((grads[n] - ref_grads[n]).norm() / ref_grads[n].norm()) for n in grads)
    probe = named[probe_name]
    row = {
        "rank": dist.get_rank(),
        "data_index": index,
        "data_ranks": ranks,
        "replica": mesh["dp_replicate"].get_local_rank(),
        "shard": mesh["dp_shard"].get_local_rank(),
        "tp_rank": mesh["tp"].get_local_rank(),
        "mesh": [mesh.size(i) for i in range(mesh.ndim)],
        "mesh_dims": list(mesh.mesh_dim_names),
        "pp_rank": mesh["pp"].get_local_rank() if pp > 1 else 0,
        "probe": probe_name,
        "loss": None if None in losses else sum(losses),
        "reference_loss": loss_of(reference, mine).item(),
        "grad_rel_error": grad_error,
        "replica_all_reduces": all_reduces,
        "probe_full_numel": probe.numel(),
        "probe_local_numel": probe.to_local().numel(),
        "probe_placements": [str(p) for p in probe.placements],
        "replicas_same_shard": same_across(probe.to_local().detach(), replica_group),
        "replicas_same_grad_shard": same_across(local_grad, replica_group),
        "shards_differ": not same_across(probe.to_local().detach(), mesh["dp_shard"].get_group()),
    }
    os.write(1, ("FSDP_HSDP_STEP " + json.dumps(row, sort_keys=True) + "\n").encode())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
