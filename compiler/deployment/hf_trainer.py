"""Recognising a Hugging Face Trainer / TRL training script under train.entrypoint.kind auto.

Such a script parses TrainingArguments (HfArgumentParser) and takes its DeepSpeed config as `--deepspeed PATH`; the
`--deepspeed_config PATH` of deepspeed.add_config_arguments is an unknown argument to it, and HfArgumentParser stops.
"""

from __future__ import annotations

import re

# The Trainer entry points of transformers' examples/pytorch (the *_no_trainer.py variants drive Accelerate by hand and
# are not Trainer scripts) and TRL's command scripts (trl/scripts and examples/scripts of the TRL repository).
HF_TRAINER_SCRIPTS = frozenset(
    {
        "run_clm.py",
        "run_mlm.py",
        "run_plm.py",
        "run_fim.py",
        "run_glue.py",
        "run_xnli.py",
        "run_classification.py",
        "run_ner.py",
        "run_qa.py",
        "run_seq2seq_qa.py",
        "run_summarization.py",
        "run_translation.py",
        "run_swag.py",
        "run_image_classification.py",
        "run_audio_classification.py",
        "run_speech_recognition_ctc.py",
        "run_speech_recognition_seq2seq.py",
        "run_semantic_segmentation.py",
        "sft.py",
        "dpo.py",
        "orpo.py",
        "kto.py",
        "cpo.py",
        "bco.py",
        "grpo.py",
        "rloo.py",
        "ppo.py",
        "prm.py",
        "gkd.py",
        "xpo.py",
        "nash_md.py",
        "online_dpo.py",
        "reward.py",
        "reward_modeling.py",
    }
)
# TrainingArguments flags among the plan's own arguments: the script parses TrainingArguments.
TRAINING_ARGUMENT_FLAGS = (
    "--output_dir",
    "--per_device_train_batch_size",
    "--gradient_accumulation_steps",
    "--deepspeed",
)
# Words in a script name that suggest a Trainer/TRL script auto cannot confirm: refused as ambiguous.
HINTS = re.compile(r"sft|dpo|orpo|grpo|trl|(?<!no_)trainer|reward|(^|[_-])hf([_-]|$)", re.I)


def evidence(script: str, args: list[str]) -> str:
    """How the script shows it is a Trainer/TRL script ('' when it does not)."""
    name = script.rsplit("/", 1)[-1]
    if name in HF_TRAINER_SCRIPTS:
        return f"{name} is a transformers example / TRL script name"
    flag = next((a.partition("=")[0] for a in args if a.partition("=")[0] in TRAINING_ARGUMENT_FLAGS), "")
    return f"its arguments carry the TrainingArguments flag {flag}" if flag else ""


def hint(script: str) -> str:
    """The word in the script's file name that suggests a Trainer/TRL script ('' for none)."""
    found = HINTS.search(script.rsplit("/", 1)[-1].removesuffix(".py"))
    return found.group(0) if found else ""
