"""Megatron-LM as a versioned target: the megatron-core release the job runs, the arguments its parser has, and the
script torchrun starts.

The release is train.megatron.core_version when given, else the container image's row in
compiler/catalog/megatron_images.yaml (cluster.slurm.container_image, then cluster.kubernetes.image), else the default
image's. Which flags a release has comes from compiler/catalog/megatron_flags.yaml, generated from each
core_vX.Y.0 tag's own parse_args (scripts/megatron_flag_history.py). A flag the release lacks is written in its older
spelling where one exists (`older_spelling`), or the plan is refused at the field that chose the release, naming the
flag and the first release (and image) that has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import yaml

from ..catalog.loader import PACKAGED_LOADER, packaged_text
from ..diagnostics import FieldRefused
from ..plan.spec import PlanSpec

Arg = tuple[str, str | None]
IMAGE_TAG = re.compile(r"^(?P<repo>[^@:]+(?::[0-9]+/[^@:]+)?):(?P<tag>[0-9]{2}\.[0-9]{2})(?:[.-][^@]*)?(?:@.*)?$")
DEFAULT_SCRIPT = "pretrain_gpt.py"  # Megatron-LM's GPT training entry point (decoder-only, MoE and MLA models)


@dataclass(frozen=True)
class MegatronRelease:
    core_version: str  # "0.13"
    image: str  # the image the job runs ('' when the plan gives a version and no image)
    path: str  # Megatron-LM's folder inside the image ('' when unknown)
    reason: str  # why this release, with its source
    loc: tuple = field(default=())  # the plan field that chose it (refusals point here)
    label: str = ""  # the release's origin in a few words ("the image nvcr.io/nvidia/nemo:24.07")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@cache
def images() -> dict:
    return yaml.load(packaged_text("megatron_images.yaml"), Loader=PACKAGED_LOADER)


@cache
def flag_table() -> dict:
    return yaml.load(packaged_text("megatron_flags.yaml"), Loader=PACKAGED_LOADER)


def image_row(image: str) -> dict | None:
    """The catalog row of an image, matched by repository and YY.MM tag (25.07, 25.07.01 and 25.07-py3 match 25.07)."""
    found = IMAGE_TAG.match(image)
    if not found:
        return None
    key = f"{found['repo']}:{found['tag']}"
    return next((row for row in images()["entries"] if row["image"] == key), None)


def _given_image(spec: PlanSpec) -> tuple[str, tuple] | None:
    cluster = spec.cluster
    if cluster.slurm.container_image and cluster.scheduler != "kubernetes":
        return cluster.slurm.container_image, ("cluster", "slurm", "container_image")
    if cluster.kubernetes.image and cluster.scheduler != "slurm":
        return cluster.kubernetes.image, ("cluster", "kubernetes", "image")
    return None


def release(spec: PlanSpec, strict: bool = True) -> MegatronRelease:
    """strict: Megatron-LM itself runs in the image (train.framework megatron), so an image not in the table is refused;
    otherwise (a plain script that reads args.sh) the arguments follow the default Megatron image's release."""
    given, image = spec.train.megatron, _given_image(spec)
    if image and not strict and not given.core_version and image_row(image[0]) is None:
        default = images()["default_image"]
        row = image_row(default)
        reason = (
            f"{image[0]} is not a Megatron image in the table and the launch is not Megatron-LM's: the arguments follow "
            f"the default Megatron image {default} ({row['source']}); train.megatron.core_version chooses another"
        )
        return MegatronRelease(row["core_version"], "", given.path or "", reason, ("train", "megatron"), reason)
    default = images()["default_image"]
    row = image_row(image[0] if image else default)
    path = given.path or (row["path"] if row else "")
    if given.core_version:
        _known_version(given.core_version)
        where = ("train", "megatron", "core_version")
        return MegatronRelease(
            given.core_version, image[0] if image else "", path, "train.megatron.core_version", where,
            "train.megatron.core_version",
        )  # fmt: skip
    if image and row is None:
        raise FieldRefused(
            image[1],
            f"{image[0]!r} is not in the Megatron image table (compiler/catalog/megatron_images.yaml: NeMo "
            f"{', '.join(r['image'].rsplit(':', 1)[1] for r in images()['entries'])}), so the megatron-core release "
            "its arguments must match is unknown; set train.megatron.core_version (and train.megatron.path)",
            "megatron-version-unknown",
        )
    reason = f"{'the image' if image else 'the default Megatron image'} {row['image']}: {row['source']}"
    label = f"the image {image[0]}" if image else f"the default Megatron image {default}"
    return MegatronRelease(
        row["core_version"], image[0] if image else default, path, reason, image[1] if image else (), label
    )


def _known_version(version: str) -> None:
    versions = flag_table()["versions"]
    if version_key(version) < version_key(versions[0]):
        raise FieldRefused(
            ("train", "megatron", "core_version"),
            f"megatron-core {version} is older than the flag table (megatron-core {versions[0]} to {versions[-1]}, "
            "compiler/catalog/megatron_flags.yaml)",
            "megatron-version-unknown",
        )


def has_flag(version: str, flag: str, value: str | None = None) -> bool:
    table, key = flag_table(), version_key(version)
    since, removed = table["since"].get(flag), table["removed"].get(flag)
    if since is None or key < version_key(since) or (removed and key >= version_key(removed)):
        return False
    choice = table["choice_since"].get(flag, {}).get(value) if value is not None else None
    return choice is None or key >= version_key(choice)


def first_release(flag: str, value: str | None = None) -> str:
    table = flag_table()
    since = table["since"].get(flag)
    if since is None:
        return ""
    choice = table["choice_since"].get(flag, {}).get(value) if value is not None else None
    return max(since, choice or since, key=version_key)


def _images_from(version: str) -> str:
    rows = [r["image"] for r in images()["entries"] if version_key(r["core_version"]) >= version_key(version)]
    return f" ({rows[0]} and later)" if rows else " (no image in the table yet: set train.megatron.core_version)"


def refusal(rel: MegatronRelease, missing: list[tuple[str, str | None, str]]) -> FieldRefused:
    """One located error naming every (flag, value, what needs it) the release lacks, with the first release and image
    that has each."""
    named = []
    for flag, value, what in missing:
        shown = f"{flag} {value}" if value is not None and first_release(flag, value) != first_release(flag) else flag
        first = first_release(flag, value)
        newer = f"first in megatron-core {first}{_images_from(first)}" if first else "in no megatron-core release"
        named.append(f"{shown} ({what}; {newer})")
    return FieldRefused(
        rel.loc or ("train", "megatron", "core_version"),
        f"megatron-core {rel.core_version} ({rel.label}) has no {', '.join(named)}; use a newer image or set "
        "train.megatron.core_version",
        "megatron-flag-missing",
    )


def image_for(rel: MegatronRelease) -> str:
    """The image of a release: the plan's, else the table's image with that megatron-core, else the default."""
    if rel.image:
        return rel.image
    row = next((r for r in images()["entries"] if r["core_version"] == rel.core_version), None)
    return row["image"] if row else images()["default_image"]


def megatron_ep_overlap(spec: PlanSpec) -> bool | None:
    """The sizing's default for the MoE all-to-all overlap under train.framework megatron: off where the release has
    no --overlap-moe-expert-parallel-comm (megatron-core < 0.14), so the layout priced is the one launched; None (the
    sizing decides) otherwise."""
    if spec.train.framework != "megatron" or spec.workload not in ("train", "finetune") or spec.model is None:
        return None
    return None if has_flag(release(spec).core_version, "--overlap-moe-expert-parallel-comm") else False
