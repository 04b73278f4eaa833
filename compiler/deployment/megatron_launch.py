"""Megatron-LM launch decisions: the entry point torchrun starts, the arguments gated by the release the image runs
(megatron_version), checkpoint retention, and the parameters the launched model has.

Entry point: train.entrypoint.script when it is absolute; a relative one (or none: pretrain_gpt.py) is resolved
against Megatron-LM's folder in the image (train.megatron.path, else the image's row: /opt/megatron-lm in NeMo
images), since the job's working directory is the submit directory, not Megatron-LM's. Refused when that folder is
unknown.

Retention: Megatron-LM has no keep-last-K option. --save-retain-interval N (megatron-core >= 0.14,
megatron/training/checkpointing.py) deletes the previous checkpoint after each save unless its iteration is a multiple
of N: with N past the last step it keeps exactly the newest one, so it holds train.checkpoint.keep 1. Any other keep is
held by the launcher on node 0 (launch/torchrun.sh), which deletes the oldest complete iter_* folders beyond the keep.
"""

from __future__ import annotations

import posixpath
import re

from ..catalog.params import count_params
from ..diagnostics import FieldRefused
from ..plan.deployment_fields import DeploymentDecision
from ..plan.deployment_training import Checkpoint, MegatronTarget
from ..plan.resolved import ResolvedPlan
from ..plan.spec import PlanSpec
from . import megatron_arch
from .megatron_version import DEFAULT_SCRIPT, Arg, MegatronRelease, has_flag, refusal

RETAIN_FLAG = "--save-retain-interval"
MEGATRON_ENTRY = re.compile(r"(^|/)pretrain_[A-Za-z0-9_]+\.py$")  # Megatron-LM's entry points parse its arguments
RETENTION_REASON = (
    "train.checkpoint.keep; Megatron-LM has no keep-last-K option: --save-retain-interval (megatron-core >= 0.14) "
    "deletes the previous checkpoint after a save unless its iteration is a multiple of N"
)


def entry_script(spec: PlanSpec, rel: MegatronRelease) -> tuple[str, str]:
    """(script torchrun starts, why)."""
    named = "script" in spec.train.entrypoint.model_fields_set
    given = spec.train.entrypoint.script if named else DEFAULT_SCRIPT
    if given.startswith("/"):
        return given, "train.entrypoint.script (absolute)"
    origin = "train.entrypoint.script" if named else "Megatron-LM's GPT entry point (no train.entrypoint.script)"
    if not rel.path:
        raise FieldRefused(
            ("train", "entrypoint", "script"),
            f"{given!r} is relative and Megatron-LM's folder in the image is unknown (megatron-core "
            f"{rel.core_version}: {rel.reason}); give an absolute script or train.megatron.path",
            "megatron-script-unresolved",
        )
    where = "train.megatron.path" if spec.train.megatron.path else f"{rel.image}'s Megatron-LM folder"
    return posixpath.join(rel.path, given), f"{origin}, resolved against {where} ({rel.path})"


def gate(args: list[Arg], rel: MegatronRelease) -> tuple[list[Arg], list[str]]:
    """The arguments as the release spells them: a flag it lacks is replaced by an older spelling or refused."""
    present = dict(args)
    out: list[Arg] = []
    notes: list[str] = []
    missing: list[tuple[str, str | None, str]] = []
    for flag, value in args:
        if has_flag(rel.core_version, flag, value):
            out.append((flag, value))
            continue
        older = _older_spelling(flag, value, present, rel.core_version)
        if older is None:
            missing.append((flag, value, megatron_arch.PURPOSE.get(flag, "the sized layout")))
            continue
        edits, note = older
        out = [(f, edits.get(f, v)) for f, v in out]
        notes.append(note)
    if missing:
        raise refusal(rel, missing)
    return out, notes


def _older_spelling(flag: str, value: str | None, present: dict, version: str) -> tuple[dict, str] | None:
    if flag == "--rope-scaling-factor" and has_flag(version, "--use-rope-scaling") and float(value or 0) == 8:
        return {}, (
            "--rope-scaling-factor 8 left out: this release's --use-rope-scaling applies Llama 3.1's factor 8 "
            "(rotary_pos_embedding.py _apply_scaling(factor=8), core_v0.10.0)"
        )
    if flag == "--moe-ffn-hidden-size" and "--moe-layer-freq" not in present:
        return {"--ffn-hidden-size": value}, (
            f"--ffn-hidden-size {value} in place of --moe-ffn-hidden-size: every layer has experts, and releases "
            "before 0.10 size the experts by --ffn-hidden-size"
        )
    return None


def check_user_args(spec: PlanSpec, rel: MegatronRelease) -> None:
    """The plan's own arguments (train.entrypoint.args) reach the same parser: a flag the release lacks is refused."""
    if not MEGATRON_ENTRY.search(spec.train.entrypoint.script):  # the plan's own script reads its own arguments
        return
    for index, word in enumerate(spec.train.entrypoint.args):
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and not has_flag(rel.core_version, flag):
            message = refusal(rel, [(flag, None, "train.entrypoint.args")]).message
            raise FieldRefused(("train", "entrypoint", "args", index), message, "megatron-flag-missing")


def retention(rel: MegatronRelease, checkpoint: Checkpoint, train_steps: int) -> tuple[list[Arg], int, str]:
    """(arguments, keep for the launcher's pruning, how keep is held)."""
    if checkpoint.keep == 1 and has_flag(rel.core_version, RETAIN_FLAG):
        past_end = (train_steps // checkpoint.interval_steps + 1) * checkpoint.interval_steps
        return (
            [(RETAIN_FLAG, str(past_end))],
            0,
            (
                f"{RETAIN_FLAG} {past_end} (a multiple of --save-interval past the last step): Megatron-LM deletes the "
                "previous checkpoint after each save, keeping the newest"
            ),
        )
    why = (
        f"megatron-core {rel.core_version} has no {RETAIN_FLAG} (first in 0.14)"
        if not has_flag(rel.core_version, RETAIN_FLAG)
        else f"{RETAIN_FLAG} keeps every N-th checkpoint, not the newest {checkpoint.keep}"
    )
    return (
        [],
        checkpoint.keep,
        (
            f"{why}: node 0's launcher deletes all but the newest {checkpoint.keep} complete iter_* folders after saves, "
            "never the iteration latest_checkpointed_iteration.txt names nor a newer one an async save is still writing"
        ),
    )


def target(
    plan: ResolvedPlan, spec: PlanSpec, rel: MegatronRelease, older: list[str], retention_how: str, runs: bool
) -> MegatronTarget:
    """runs: Megatron-LM's pretrain_gpt.py is what torchrun starts (else a plain script reads args.sh)."""
    script, why = entry_script(spec, rel) if runs else (spec.train.entrypoint.script, "train.entrypoint.script")
    arch = plan.model.architecture
    sized = count_params(arch).total
    mtp = megatron_arch.mtp_params(arch)
    return MegatronTarget(
        core_version=rel.core_version,
        version_reason=rel.reason,
        image=rel.image,
        path=rel.path,
        script=script,
        script_reason=why,
        older_spellings=older,
        retention=retention_how,
        gradients=gradient_words(spec),
        sized_params=sized,
        mtp_params=mtp,
        launched_params=sized + mtp,
    )


def gradient_words(spec: PlanSpec) -> str:
    """What Megatron-LM holds a bf16 model's gradients in, as sized (model_states.gradient_bytes_per_param)."""
    if spec.precision not in ("bf16", "fp8"):
        return ""
    if spec.train.megatron.grad_reduce == "bf16":
        return "bf16 buffer, 2 B per parameter, and the optimizer's fp32 copy of the gradients it owns (--grad-reduce-in-bf16)"
    return "fp32 main_grad, 4 B per parameter (Megatron-LM's default for bf16)"


GRADIENTS_REASON = (
    "train.megatron.grad_reduce: Megatron-LM's validate_args accumulates and all-reduces a bf16 model's gradients in "
    "fp32 unless --grad-reduce-in-bf16 (megatron-core >= 0.12), which NeMo's and Megatron-Bridge's performance runs "
    "set; the memory per GPU counts the buffer at this width"
)


def decisions(target: MegatronTarget) -> list[DeploymentDecision]:
    model = f"{target.launched_params / 1e9:.2f}B parameters" + (
        f" = {target.sized_params / 1e9:.2f}B + {target.mtp_params / 1e9:.2f}B multi-token prediction "
        "(--mtp-num-layers: one layer as the model's last, its 2d → d projection and norms, DeepSeek-V3 report §2.2; "
        "sized on the last pipeline stage, where Megatron-LM builds it: its states, activations and logits, step "
        "FLOPs and checkpoint)"
        if target.mtp_params
        else ", the sized count"
    )
    return [
        DeploymentDecision(
            topic="Megatron-LM release",
            choice=f"megatron-core {target.core_version}"
            + (f" in {target.image}" if target.image else "")
            + (f"; {'; '.join(target.older_spellings)}" if target.older_spellings else ""),
            reason=f"{target.version_reason}; megatron/args.sh uses only flags this release's parser has "
            "(compiler/catalog/megatron_flags.yaml, from each core_vX.Y.0 tag's parse_args)",
        ),
        DeploymentDecision(topic="Megatron-LM entry point", choice=target.script, reason=target.script_reason),
        DeploymentDecision(
            topic="Megatron-LM model",
            choice=model,
            reason="megatron/args.sh builds the sized "
            "architecture: MoE width, dense-layer pattern, shared experts, router, MLA, positions",
        ),
        DeploymentDecision(topic="Megatron checkpoint retention", choice=target.retention, reason=RETENTION_REASON),
    ] + (
        [DeploymentDecision(topic="Megatron-LM gradients", choice=target.gradients, reason=GRADIENTS_REASON)]
        if target.gradients
        else []
    )
