"""The launch contract (torchrun, deepspeed, hf-trainer, accelerate, megatron): chosen under entrypoint.kind auto, or
checked against what was sized when the plan gives it."""

from __future__ import annotations

import re

from ...diagnostics import FieldRefused
from ...plan.resolved import ResolvedPlan
from ...plan.spec import PlanSpec
from .. import hf_trainer
from ..fsdp_tp import uses_fsdp_tp
from ..megatron_args import uses_megatron

# The launch contract of each kind: (frameworks it can launch, flag before the framework file on the script's
# command line per framework). deepspeed: deepspeed.add_config_arguments adds --deepspeed_config (the
# `deepspeed` launcher's convention); hf-trainer: transformers TrainingArguments.deepspeed is `--deepspeed PATH`
# (TRL's parsers inherit it); accelerate: `accelerate launch --config_file` reads the file itself; megatron:
# pretrain_gpt.py reads megatron/args.sh's words.
LAUNCH_KINDS = {
    "torchrun": ({"ddp", "deepspeed", "fsdp", "megatron"}, {}),
    "deepspeed": ({"deepspeed"}, {"deepspeed": "--deepspeed_config"}),
    "hf-trainer": ({"ddp", "deepspeed"}, {"deepspeed": "--deepspeed"}),
    "accelerate": ({"fsdp"}, {}),
    "megatron": ({"megatron"}, {}),
}
# entrypoint.kind auto: the kind that reads what the framework's target writes.
AUTO_KIND = {"ddp": "torchrun", "deepspeed": "deepspeed", "fsdp": "accelerate", "megatron": "megatron"}

# Megatron-LM's training entry points are pretrain_*.py (pretrain_gpt.py, pretrain_mamba.py, pretrain_t5.py, ...): each
# parses the full Megatron argument set of megatron/args.sh (megatron.training.arguments.parse_args).
MEGATRON_ENTRY = re.compile(r"(^|/)pretrain_[A-Za-z0-9_]+\.py$")


def auto_kind(plan: ResolvedPlan, spec: PlanSpec) -> tuple[str, str]:
    """(kind, how it was decided) under entrypoint.kind auto. A Hugging Face Trainer/TRL script on a ddp or deepspeed
    layout is recognised by its file name (hf_trainer.HF_TRAINER_SCRIPTS) or by TrainingArguments flags among the
    plan's own arguments, and gets kind hf-trainer (--deepspeed, not --deepspeed_config); a name that hints at one but
    is not known is refused at train.entrypoint.script as ambiguous (exit 2)."""
    framework, entry = plan.parallelism.framework, spec.train.entrypoint
    # FSDP2 × TP × PP: the script applies fsdp/fsdp_tp.py; Accelerate's FSDP1 config has no TP/PP
    if uses_fsdp_tp(plan):
        return "torchrun", "the FSDP2 × TP × PP script fsdp/fsdp_tp.py runs under torchrun"
    default = AUTO_KIND.get(framework, "torchrun")
    if framework not in LAUNCH_KINDS["hf-trainer"][0]:
        return default, f"the kind that reads what the {framework} target writes"
    found = hf_trainer.evidence(entry.script, entry.args)
    if found:
        return "hf-trainer", f"a Hugging Face Trainer/TRL script: {found}"
    if hint := hf_trainer.hint(entry.script):
        raise FieldRefused(
            ("train", "entrypoint", "script"),
            f"{entry.script!r} looks like a Hugging Face Trainer/TRL script ({hint!r} in its name) but is not one "
            f"auto recognises: set train.entrypoint.kind to hf-trainer (TrainingArguments flags, --deepspeed) or to "
            f"{default} (the plain {framework} contract)",
            "ambiguous-entrypoint",
        )
    return default, f"the kind that reads what the {framework} target writes"


def launch_kind(plan: ResolvedPlan, spec: PlanSpec) -> str:
    """The launch contract; a given kind that cannot start what was sized is refused at train.entrypoint.kind (or at the
    script for megatron), exit 2, with the kinds that can."""
    framework, given = plan.parallelism.framework, spec.train.entrypoint.kind
    tensor_parallel = uses_fsdp_tp(plan)
    if given == "auto":
        return auto_kind(plan, spec)[0]
    allowed = LAUNCH_KINDS[given][0] - ({"fsdp"} if tensor_parallel and given == "accelerate" else set())
    fits = uses_megatron(plan) if given == "megatron" else framework in allowed
    if not fits:
        sized = (
            f"train.framework {framework}"
            if spec.train.framework != "auto"
            else f"the {framework} layout the sizing chose (train.framework auto)"
        )
        sized += (
            " with tensor/pipeline parallelism (FSDP2 × TP × PP: fsdp/fsdp_tp.py under torchrun)"
            if tensor_parallel
            else ""
        )
        can = (
            ["torchrun"]
            if tensor_parallel
            else sorted(k for k, (frameworks, _) in LAUNCH_KINDS.items() if framework in frameworks and k != "megatron")
        )
        raise FieldRefused(
            ("train", "entrypoint", "kind"),
            f"kind {given} cannot launch {sized}: {given} launches "
            + (" or ".join(sorted(allowed)) if given != "megatron" else "Megatron-LM layouts (megatron/args.sh)")
            + f"; use kind {' or '.join(can)} (or auto), or set train.framework to one that {given} launches",
            "launch-kind-mismatch",
        )
    if given == "megatron" and not MEGATRON_ENTRY.search(spec.train.entrypoint.script):
        raise FieldRefused(
            ("train", "entrypoint", "script"),
            f"kind megatron passes Megatron-LM's arguments (megatron/args.sh) to the script, and "
            f"{spec.train.entrypoint.script!r} is not a Megatron-LM entry point (pretrain_gpt.py, pretrain_mamba.py, "
            "... : pretrain_*.py); give that script, or use kind torchrun, whose script can source "
            "$MLINFRA_OUT_DIR/megatron/args.sh itself",
            "launch-kind-mismatch",
        )
    return given


# The final checkpoint at the time limit, per launch kind: the one line the script needs. Megatron-LM has a flag
# (--exit-signal-handler, in megatron/args.sh); a plain script installs its own handler; the Hugging Face Trainer and
# accelerate get the generated launch/mlinfra_signal.py (on PYTHONPATH): a TrainerCallback that sets the Trainer's own
# should_save + should_training_stop at the next step end (it saves checkpoint-N into --output_dir), or a flag an
