"""The tiny CPU (gloo) training script the real-tool tests launch through the generated launcher.

Prints one whole line per rank (one write(), ranks share stdout) with rank, world size and local rank, runs
one all-reduce and a few DDP steps, and tears down in the order that never aborted under torch 2.13
(validators README, "Gloo teardown abort"). Unknown arguments (e.g. --deepspeed_config) are echoed, not parsed.
"""

import gc
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    assert total.item() == sum(range(world)), (total.item(), world)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    args = json.dumps(sys.argv[1:])
    sys.stdout.write(
        f"TINY_TRAIN rank={rank} world={world} local_rank={os.environ.get('LOCAL_RANK')} "
        f"omp={os.environ.get('OMP_NUM_THREADS')} args={args}\n"
    )
    sys.stdout.flush()
    del model, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
