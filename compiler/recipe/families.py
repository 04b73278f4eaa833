"""Published optimizer recipes per model family, each value with the sentence of its source.

A plan's preset picks the family (`family_for`); a plan that leaves a recipe value out gets the family's. Pre-training:
Llama 3 (Dubey et al. 2024, arXiv:2407.21783), Llama 2 (Touvron et al. 2023, arXiv:2307.09288), DeepSeek-V3
(arXiv:2412.19437), BERT (Devlin et al. 2018, arXiv:1810.04805), vision models after DeiT (Touvron et al. 2021,
arXiv:2012.12877), every other transformer after GPT-3 (Brown et al. 2020, arXiv:2005.14165). Fine-tuning: LoRA/QLoRA
after QLoRA (Dettmers et al. 2023, arXiv:2305.14314), full fine-tuning after Llama 2's SFT (§3.1) and Stanford Alpaca.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Published:
    value: object
    source: str


WarmupRule = tuple[Literal["steps", "tokens", "fraction"], float]


@dataclass(frozen=True)
class Family:
    name: str
    lr_by_params: tuple[tuple[float, float], ...]  # (parameters, peak LR) rows; the nearest row in log size is used
    lr_source: str  # "{row}" is replaced by the row used
    lr_min_ratio: Published  # lr_min = ratio × lr_peak
    schedule: Published
    warmup: Published  # value: WarmupRule
    weight_decay: Published
    betas: Published
    eps: Published
    grad_clip_norm: Published
    init_std: Published
    dropout: Published
    lr_per_batch: int = 0  # > 0: lr_by_params is per this many sequences of global batch, scaled linearly (DeiT)
    decay_fraction: Published = field(
        default_factory=lambda: Published(
            4.3 / 14.8,
            "DeepSeek-V3 report §4.2: a cosine decay over 4.3T of its 14.8T tokens after the constant stage (0.29 of the run)",
        )
    )


_LLAMA2_ADAM = "Llama 2 paper §2.2: AdamW with β1 = 0.9, β2 = 0.95, eps = 10⁻⁵"
LLAMA3 = Family(
    name="Llama 3 (Dubey et al. 2024, arXiv:2407.21783)",
    lr_by_params=((8e9, 3e-4), (70e9, 1.5e-4), (405e9, 8e-5)),
    lr_source="Llama 3 paper Table 3: peak learning rate {lr:g} of the {row} model",
    lr_min_ratio=Published(
        0.01,
        "Llama 3 paper §3.4.1: 405B decays from 8 × 10⁻⁵ to 8 × 10⁻⁷ (1% of the peak); §3.4: the 8B and 70B use "
        "'similar recipes' (their minimum is not published)",
    ),
    schedule=Published("cosine", "Llama 3 paper §3.4.1: a cosine learning rate schedule after a linear warmup"),
    warmup=Published(("steps", 8000), "Llama 3 paper §3.4.1: a linear warm up of 8,000 steps"),
    weight_decay=Published(0.1, "Llama 2 paper §2.2: weight decay 0.1 (the Llama 3 paper does not state it)"),
    betas=Published((0.9, 0.95), _LLAMA2_ADAM + " (the Llama 3 paper does not state them)"),
    eps=Published(1e-5, _LLAMA2_ADAM + " (the Llama 3 paper does not state it)"),
    grad_clip_norm=Published(1.0, "Llama 2 paper §2.2: gradient clipping of 1.0"),
    init_std=Published(0.02, "config.json of meta-llama/Llama-3.1-8B: initializer_range 0.02"),
    dropout=Published(0.0, "config.json of meta-llama/Llama-3.1-8B: attention_dropout 0.0 (no dropout)"),
)
LLAMA2 = Family(
    name="Llama 2 (Touvron et al. 2023, arXiv:2307.09288)",
    lr_by_params=((7e9, 3e-4), (13e9, 3e-4), (34e9, 1.5e-4), (70e9, 1.5e-4)),
    lr_source="Llama 2 paper Table 1: learning rate {lr:g} of the {row} model",
    lr_min_ratio=Published(0.1, "Llama 2 paper §2.2: decay final learning rate down to 10% of the peak"),
    schedule=Published("cosine", "Llama 2 paper §2.2: a cosine learning rate schedule"),
    warmup=Published(("steps", 2000), "Llama 2 paper §2.2: warmup of 2000 steps"),
    weight_decay=Published(0.1, "Llama 2 paper §2.2: weight decay of 0.1"),
    betas=Published((0.9, 0.95), _LLAMA2_ADAM),
    eps=Published(1e-5, _LLAMA2_ADAM),
    grad_clip_norm=Published(1.0, "Llama 2 paper §2.2: gradient clipping of 1.0"),
    init_std=Published(0.02, "config.json of meta-llama/Llama-2-7b-hf: initializer_range 0.02"),
    dropout=Published(0.0, "config.json of meta-llama/Llama-2-7b-hf: attention_dropout 0.0 (no dropout)"),
)
_DSV3 = "DeepSeek-V3 report (arXiv:2412.19437) §4.2"
DEEPSEEK_V3 = Family(
    name="DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437)",
    lr_by_params=((671e9, 2.2e-4),),
    lr_source=_DSV3 + ": linearly increase it from 0 to 2.2 × 10⁻⁴ during the first 2K steps",
    lr_min_ratio=Published(
        0.1,
        _DSV3 + ": decay the learning rate to 2.2 × 10⁻⁵ (10% of the peak); its last 500B tokens at 2.2 × 10⁻⁵ then "
        "7.3 × 10⁻⁶ are a further stage, not part of this one schedule",
    ),
    schedule=Published(
        "wsd",
        _DSV3 + ": warmup, a constant 2.2 × 10⁻⁴ until 10T tokens, then a cosine decay (warmup-stable-decay)",
    ),
    warmup=Published(("steps", 2000), _DSV3 + ": the first 2K steps"),
    weight_decay=Published(0.1, _DSV3 + ": AdamW with weight_decay = 0.1"),
    betas=Published((0.9, 0.95), _DSV3 + ": AdamW with β1 = 0.9, β2 = 0.95"),
    eps=Published(1e-8, "not in the DeepSeek-V3 report: PyTorch AdamW's and Megatron-LM's default eps 10⁻⁸"),
    grad_clip_norm=Published(1.0, _DSV3 + ": the gradient clipping norm is set to 1.0"),
    init_std=Published(0.006, _DSV3 + ": all learnable parameters are randomly initialized with std 0.006"),
    dropout=Published(0.0, "config.json of deepseek-ai/DeepSeek-V3: attention_dropout 0.0 (no dropout)"),
)
_GPT3 = "GPT-3 paper (Brown et al. 2020) appendix B"
GPT3 = Family(
    name="GPT-3 (Brown et al. 2020, arXiv:2005.14165), for a model without a published recipe of its own",
    lr_by_params=(
        (125e6, 6e-4),
        (350e6, 3e-4),
        (760e6, 2.5e-4),
        (1.3e9, 2e-4),
        (2.7e9, 1.6e-4),
        (6.7e9, 1.2e-4),
        (13e9, 1e-4),
        (175e9, 0.6e-4),
    ),
    lr_source="GPT-3 paper Table 2.1: learning rate {lr:g} of the {row} model, the nearest size",
    lr_min_ratio=Published(0.1, _GPT3 + ": cosine decay of the learning rate down to 10% of its value"),
    schedule=Published("cosine", _GPT3 + ": cosine decay"),
    warmup=Published(("tokens", 375e6), _GPT3 + ": a linear LR warmup over the first 375 million tokens"),
    weight_decay=Published(0.1, _GPT3 + ": weight decay of 0.1"),
    betas=Published((0.9, 0.95), _GPT3 + ": Adam with β1 = 0.9, β2 = 0.95"),
    eps=Published(1e-8, _GPT3 + ": Adam with ε = 10⁻⁸"),
    grad_clip_norm=Published(1.0, _GPT3 + ": clip the global norm of the gradient at 1.0"),
    init_std=Published(
        0.02, "not in the GPT-3 paper: GPT-2's initializer_range 0.02, also Megatron-LM's --init-method-std default"
    ),
    dropout=Published(
        0.0,
        "not in the GPT-3 paper: no dropout, as Llama 3 and DeepSeek-V3 pre-train (Megatron-LM's default 0.1 is GPT-2's)",
    ),
)
_BERT = "BERT paper (Devlin et al. 2018) §A.2"
BERT = Family(
    name="BERT (Devlin et al. 2018, arXiv:1810.04805)",
    lr_by_params=((340e6, 1e-4),),
    lr_source=_BERT + ": Adam with learning rate of 1e-4",
    lr_min_ratio=Published(0.0, _BERT + ": linear decay of the learning rate (to 0)"),
    schedule=Published("linear", _BERT + ": linear decay of the learning rate"),
    warmup=Published(("steps", 10000), _BERT + ": learning rate warmup over the first 10,000 steps"),
    weight_decay=Published(0.01, _BERT + ": L2 weight decay of 0.01"),
    betas=Published((0.9, 0.999), _BERT + ": β1 = 0.9, β2 = 0.999"),
    eps=Published(1e-6, "google-research/bert optimization.py: AdamWeightDecayOptimizer epsilon=1e-6"),
    grad_clip_norm=Published(1.0, "google-research/bert optimization.py: clip_by_global_norm(grads, clip_norm=1.0)"),
    init_std=Published(0.02, "config.json of google-bert/bert-large-uncased: initializer_range 0.02"),
    dropout=Published(0.1, _BERT + ": a dropout probability of 0.1 on all layers"),
)
_DEIT = "DeiT paper (Touvron et al. 2021, arXiv:2012.12877) Table 9"
DEIT = Family(
    name="DeiT (Touvron et al. 2021, arXiv:2012.12877), for vision models",
    lr_by_params=((86e6, 5e-4),),
    lr_source=_DEIT + ": AdamW, lr 5e-4 × batch size / 512",
    lr_per_batch=512,
    lr_min_ratio=Published(0.02, "facebookresearch/deit main.py: --min-lr 1e-5 at its --lr 5e-4 (2% of the peak)"),
    schedule=Published("cosine", _DEIT + ": cosine learning rate decay"),
    warmup=Published(("fraction", 5 / 300), _DEIT + ": 5 warmup epochs of 300"),
    weight_decay=Published(0.05, _DEIT + ": weight decay 0.05"),
    betas=Published((0.9, 0.999), "facebookresearch/deit main.py: timm's AdamW with PyTorch's betas (0.9, 0.999)"),
    eps=Published(1e-8, "facebookresearch/deit main.py: --opt-eps 1e-8"),
    grad_clip_norm=Published(0.0, _DEIT + ": no gradient clipping"),
    init_std=Published(0.02, _DEIT + ": truncated normal initialisation (std 0.02)"),
    dropout=Published(0.0, _DEIT + ": dropout 0 (stochastic depth 0.1 is not a plan setting)"),
)
_QLORA = "QLoRA (Dettmers et al. 2023, arXiv:2305.14314)"
_QLORA_PY = "artidoro/qlora qlora.py defaults"
LORA = Family(
    name=_QLORA + ", for LoRA and QLoRA fine-tuning",
    lr_by_params=((7e9, 2e-4), (13e9, 2e-4), (33e9, 1e-4), (65e9, 1e-4)),
    lr_source=_QLORA + " appendix B: learning rate {lr:g} for the {row} model",
    lr_min_ratio=Published(1.0, _QLORA_PY + ": lr_scheduler_type constant"),
    schedule=Published("constant", _QLORA_PY + ": lr_scheduler_type constant"),
    warmup=Published(("fraction", 0.03), _QLORA_PY + ": warmup_ratio 0.03"),
    weight_decay=Published(0.0, _QLORA_PY + ": weight_decay 0.0"),
    betas=Published((0.9, 0.999), _QLORA_PY + ": adam_beta2 0.999 (beta1 transformers' 0.9)"),
    eps=Published(1e-8, "transformers TrainingArguments' adam_epsilon default 1e-8 (qlora.py keeps it)"),
    grad_clip_norm=Published(0.3, _QLORA_PY + ": max_grad_norm 0.3"),
    init_std=Published(0.02, "the loaded weights are not initialised; 0.02 for any new weight (initializer_range)"),
    dropout=Published(0.0, "the base model's dropout, none (LoRA's own adapter dropout is fsdp/lora_tp.py's)"),
)
_ALPACA = "tatsu-lab/stanford_alpaca README training command"
FULL_FINETUNE = Family(
    name="Llama 2 supervised fine-tuning (arXiv:2307.09288 §3.1) with Stanford Alpaca's warmup",
    lr_by_params=((7e9, 2e-5),),
    lr_source="Llama 2 paper §3.1: an initial learning rate of 2 × 10⁻⁵",
    lr_min_ratio=Published(0.0, "Llama 2 paper §3.1: a cosine learning rate schedule (to 0, as transformers' cosine)"),
    schedule=Published("cosine", "Llama 2 paper §3.1: a cosine learning rate schedule"),
    warmup=Published(("fraction", 0.03), _ALPACA + ": --warmup_ratio 0.03"),
    weight_decay=Published(0.1, "Llama 2 paper §3.1: a weight decay of 0.1"),
    betas=Published((0.9, 0.999), _ALPACA + ": transformers' default adam_beta1 0.9, adam_beta2 0.999"),
    eps=Published(1e-8, _ALPACA + ": transformers' default adam_epsilon 1e-8"),
    grad_clip_norm=Published(1.0, _ALPACA + ": transformers' default max_grad_norm 1.0"),
    init_std=Published(0.02, "the loaded weights are not initialised; 0.02 for any new weight (initializer_range)"),
    dropout=Published(0.0, "no dropout, as the Llama-family configs (attention_dropout 0.0)"),
)


def family_for(preset: str, kind: str, workload: str, method: str) -> Family:
    """Fine-tuning by method; pre-training by the preset's family, the model kind, else GPT-3's table."""
    if workload == "finetune":
        return LORA if method in ("lora", "qlora") else FULL_FINETUNE
    if kind in ("cnn", "vision-transformer"):
        return DEIT
    if kind == "encoder":
        return BERT
    for prefix, family in (("llama-3", LLAMA3), ("llama-2", LLAMA2), ("deepseek-v3", DEEPSEEK_V3)):
        if preset.startswith(prefix):
            return family
    return DEEPSEEK_V3 if preset == "deepseek-r1" else GPT3


def size_name(params: float) -> str:
    return f"{params / 1e9:g}B" if params >= 1e9 else f"{params / 1e6:g}M"


def peak_lr(family: Family, params: float, global_batch: int) -> tuple[float, str]:
    """The family's peak LR at the row nearest in log size (scaled by the batch where the family says so)."""
    row, lr = min(family.lr_by_params, key=lambda r: abs(math.log(max(params, 1.0) / r[0])))
    source = family.lr_source.format(lr=lr, row=size_name(row))
    if family.lr_per_batch:
        scaled = float(f"{lr * global_batch / family.lr_per_batch:.12g}")
        return scaled, f"{source} = {scaled:g} at this plan's batch of {global_batch}"
    return lr, source
