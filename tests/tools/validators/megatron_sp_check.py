"""megatron-core's (PyPI) own sequence-parallel split: scatter_to_sequence_parallel_region, the call that hands each
TP rank its share of the sequence under --sequence-parallel (the embedding output; o/down outputs reduce-scatter along
the same dimension), on a [seq, 1, 8] tensor. A stand-in group answers size() and rank(): the split is local, no
collective runs (a one-process gloo group is initialised only because megatron-core looks at torch.distributed first). Prints `SP_SPLIT_OK <local seq>` or megatron-core's own exception and exits non-zero.

usage: megatron_sp_check.py SEQ_LEN TP
"""

import sys
import tempfile

import torch
from megatron.core.tensor_parallel.mappings import scatter_to_sequence_parallel_region


class Group:
    def __init__(self, size: int):
        self._size = size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


def main() -> None:
    seq_len, tp = int(sys.argv[1]), int(sys.argv[2])
    with tempfile.NamedTemporaryFile() as store:
        torch.distributed.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
    local = scatter_to_sequence_parallel_region(torch.zeros(seq_len, 1, 8), group=Group(tp))
    print(f"SP_SPLIT_OK {local.shape[0]}")


if __name__ == "__main__":
    main()
