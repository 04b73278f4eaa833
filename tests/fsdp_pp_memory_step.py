"""What FSDP2 stages hold between a pipeline's micro-batches, and the collectives of one step: the generated
fsdp/fsdp_tp.py's pipeline() on CPU gloo ranks (tests/fsdp_tp_step.py's tiny Llama-shaped model), under
launch/torchrun.sh. Run by tests/test_fsdp_pp_memory_real.py; prints one FSDP_PP_MEMORY line per rank.

After every backward of the step (torch.distributed.pipelining runs them all without gradient sync), it sums over the
rank's FSDP parameters the storage of their 16-bit all-gather outputs (the unsharded weights) and of their unsharded
gradients (FSDPParam.unsharded_accumulated_grad in the reduce dtype, or the unsharded parameter's .grad); it counts
dist.all_gather_single / dist.reduce_scatter_single, the collectives FSDP2's DefaultAllGather / DefaultReduceScatter
call (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py)."""

import torch
import torch.distributed as dist
from fsdp_tp_step import cross_entropy, finish, sequences, start, tiny_model
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def param_groups(parts):
    """The FSDP parameter groups of the rank's stages (one per fully_shard call that holds parameters)."""
    return [
        group
        for part in parts
        for state in fully_shard.state(part)._state_ctx.all_states
        for group in state._fsdp_param_groups
    ]


def held_bytes(groups):
    """(unsharded weight bytes, unsharded gradient bytes) alive now."""
    weights = grads = 0
    for group in groups:
        for param in group.fsdp_params:
            weights += sum(t.untyped_storage().nbytes() for t in param.all_gather_outputs)
            grad = param.unsharded_accumulated_grad
            if grad is None and hasattr(param, "_unsharded_param"):
                grad = param._unsharded_param.grad
            if grad is not None:
                grad = grad.to_local() if isinstance(grad, DTensor) else grad
                grads += grad.numel() * grad.element_size()
    return weights, grads


def counted(name, counts):
    original = getattr(dist, name)

    def call(*args, **kwargs):
        counts[name] = counts.get(name, 0) + 1
        return original(*args, **kwargs)

    setattr(dist, name, call)


def step():
    fsdp_tp, settings, mesh = start()
    local = settings["micro_batch"] * settings["grad_accum"]
    torch.manual_seed(0)
    model = tiny_model(sum(settings["pp_stage_layers"]))
    _, _, mine = sequences(mesh, local)
    pipe = fsdp_tp.pipeline(model, mesh, settings, cross_entropy, "cpu")
    pipe.step(mine[:, :-1], mine[:, 1:])  # the first step also infers the stages' shapes and initialises FSDP
    for p in pipe.parameters():
        p.grad = None  # what optimizer.zero_grad() leaves
    groups = param_groups(pipe.parts)
    stages = pipe.schedule._stages if hasattr(pipe.schedule, "_stages") else [pipe.schedule._stage]
    samples = []
    for stage in stages:

        def backward(*args, _original=stage.backward_one_chunk, **kwargs):
            result = _original(*args, **kwargs)
            samples.append(held_bytes(groups))
            return result

        stage.backward_one_chunk = backward
    counts = {}
    for name in ("all_gather_single", "reduce_scatter_single"):
        counted(name, counts)
    pipe.step(mine[:, :-1], mine[:, 1:])
    after = held_bytes(groups)
    peak = max(samples, key=sum)
    return {
        "rank": dist.get_rank(),
        "pp_rank": mesh["pp"].get_local_rank(),
        "tp": mesh["tp"].size(),
        "stages": [s.stage_index for s in stages],
        "num_stages": stages[0].num_stages,
        "microbatches": settings["pipeline_microbatches"],
        "param_groups": len(groups),
        "backwards": len(samples),
        "peak_weight_bytes": peak[0],
        "peak_gradient_bytes": peak[1],
        "after_step": list(after),
        "all_gathers": counts.get("all_gather_single", 0),
        "reduce_scatters": counts.get("reduce_scatter_single", 0),
    }


if __name__ == "__main__":
    finish("FSDP_PP_MEMORY", step())
