"""The training container: an image new enough for every script the plan emits.

fsdp/fsdp_tp.py (FSDP2 x TP x PP) imports fully_shard and MixedPrecisionPolicy from torch.distributed.fsdp, public
since torch 2.6 (pytorch/pytorch#141868, "[FSDP2] Move to public torch.distributed.fsdp", merged December 2024 for
2.6); DTensor/Shard/Replicate from torch.distributed.tensor (public since 2.5), DeviceMesh._flatten (2.5) and
torch.distributed.pipelining (2.4). NVIDIA's PyTorch container 24.05 ships torch 2.4.0a0, without the first two.
The first NGC PyTorch release after that merge is 25.02, based on PyTorch 2.7.0a0+6c54963f75 with CUDA 12.8
(docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel-25-02.html; its data-center GPUs run on the R535
and later drivers through CUDA forward compatibility, per the same notes' driver requirements).
"""

from __future__ import annotations

import re

from ..diagnostics import FieldRefused
from ..plan.resolved import ResolvedPlan
from ..plan.spec import PlanSpec
from .fsdp_tp import uses_fsdp_tp

TRAINING_IMAGE = "nvcr.io/nvidia/pytorch:25.02-py3"
# (year, month) of the first NGC PyTorch tag whose torch has the APIs fsdp/fsdp_tp.py calls.
FSDP_TP_MIN_NGC = (25, 2)
NGC_PYTORCH_TAG = re.compile(r"^(?:nvcr\.io/)?nvidia/pytorch:(\d{2})\.(\d{2})-")


def check_image(plan: ResolvedPlan, image: str, loc: tuple) -> None:
    """An NGC PyTorch image older than what fsdp/fsdp_tp.py needs is refused at the field that gave it (exit 2)."""
    tag = NGC_PYTORCH_TAG.match(image)
    if tag and uses_fsdp_tp(plan) and (int(tag[1]), int(tag[2])) < FSDP_TP_MIN_NGC:
        raise FieldRefused(
            loc,
            f"{image} ships a torch older than fsdp/fsdp_tp.py needs (torch.distributed.fsdp.fully_shard, public "
            "since torch 2.6): use nvcr.io/nvidia/pytorch:25.02-py3 or later",
            "image-too-old",
        )


def training_image(plan: ResolvedPlan, spec: PlanSpec) -> tuple[str, str]:
    """(image, reason) of the Kubernetes training pods: the plan's image, else TRAINING_IMAGE."""
    k8s, slurm = spec.cluster.kubernetes.image, spec.cluster.slurm.container_image
    if k8s:
        check_image(plan, k8s, ("cluster", "kubernetes", "image"))
        return k8s, "cluster.kubernetes.image"
    if slurm:
        check_image(plan, slurm, ("cluster", "slurm", "container_image"))
        return slurm, "cluster.slurm.container_image"
    return TRAINING_IMAGE, (
        "NVIDIA's PyTorch container 25.02 (torch 2.7.0a0, CUDA 12.8): the first NGC release with "
        "torch.distributed.fsdp.fully_shard (torch 2.6), which fsdp/fsdp_tp.py imports"
    )
