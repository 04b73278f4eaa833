"""Whether torch's context parallelism runs on CPU gloo ranks (tests/test_fsdp_cp_cpu.py runs it under torchrun).

A two-layer causal attention toy (embedding, qkv projection, SDPA is_causal, output head) takes one loss and
backward on the whole sequence in every rank, then again inside `context_parallel` (input ids and labels sharded
on the sequence dim, torchtitan's buffers) with the rotate method given. Each rank writes one line to
cp_cpu_rank<N>.txt in the working directory: `CP_CPU ok ...` with the reference and the rank-averaged CP loss, or `CP_CPU error <type>: <message>` naming what
failed; the exit status is 0 either way (the test judges the line).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import set_rotate_method

HEADS, HEAD_DIM, VOCAB, SEQ = 4, 8, 64, 32


class CausalToy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        width = HEADS * HEAD_DIM
        self.embed, self.qkv = nn.Embedding(VOCAB, width), nn.Linear(width, 3 * width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, seq = ids.shape
        q, k, v = self.qkv(self.embed(ids)).view(batch, seq, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(attended.transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM))


def loss_of(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
    loss.backward()
    return loss.detach()


def main() -> None:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("cp",))
    set_rotate_method(sys.argv[1])
    torch.manual_seed(0)
    model = CausalToy()
    ids, labels = torch.randint(0, VOCAB, (2, SEQ)), torch.randint(0, VOCAB, (2, SEQ))
    reference = loss_of(model, ids, labels)
    model.zero_grad()
    try:
        with context_parallel(mesh, buffers=[ids, labels], buffer_seq_dims=[1, 1], no_restore_buffers={ids, labels}):
            loss = loss_of(model, ids, labels)
    except Exception as error:  # noqa: BLE001 - the probe reports what failed
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        said = f"CP_CPU error {type(error).__name__}: {first}"
    else:
        dist.all_reduce(loss)
        said = f"CP_CPU ok reference={reference.item():.6f} cp={loss.item() / dist.get_world_size():.6f}"
    # one file per rank: two ranks printing at once can interleave within a line of torchrun's stdout
    with open(f"cp_cpu_rank{dist.get_rank()}.txt", "w", encoding="utf-8") as f:
        f.write(said + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
