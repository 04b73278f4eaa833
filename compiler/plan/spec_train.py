"""The plan's train section: tokens and batch, the optimizer recipe, the method (full, LoRA, QLoRA), checkpoints, the
entrypoint the job runs and the quantiles its gates use."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from .plain_env import no_credential_args, no_credentials, no_shell_names
from .spec_fields import Count, IntCount, SafeText, Seconds, Spec


class LoraSpec(Spec):
    rank: int = Field(16, ge=1, le=4096, description="adapter rank r")
    alpha: float = Field(32, gt=0, description="LoRA scaling alpha")
    targets: list[Literal["q", "k", "v", "o", "gate", "up", "down"]] = Field(
        default_factory=lambda: ["q", "k", "v", "o"], description="projection matrices that get adapters"
    )


class CheckpointSpec(Spec):
    every: Literal["auto"] | Seconds = Field("auto", description="interval; auto = Young-Daly optimum")
    min_interval: Seconds | None = Field(
        None,
        description="floor under the Young-Daly interval (e.g. the site's limit on checkpoint traffic)",
        examples=["30min"],
    )
    keep: int = Field(3, ge=1, le=1000, description="checkpoints retained")
    dir: SafeText = Field("/checkpoints", description="checkpoint directory on the shared filesystem")


class EntrypointSpec(Spec):
    kind: Literal["auto", "torchrun", "deepspeed", "hf-trainer", "accelerate", "megatron"] = Field(
        "auto",
        description="how the script reads the generated configuration: torchrun (plain script, MLINFRA_* "
        "environment), deepspeed (deepspeed.initialize: --deepspeed_config PATH), hf-trainer (Hugging Face Trainer/TRL: "
        "--deepspeed PATH), accelerate (accelerate launch --config_file <fsdp config>), megatron (pretrain_gpt.py with "
        "megatron/args.sh); auto picks from the framework",
    )
    script: SafeText = Field("train.py", description="training script run by torchrun")
    args: Annotated[list[SafeText], AfterValidator(no_credential_args)] = Field(
        default_factory=list,
        description="arguments, passed shell-quoted",
    )
    env: Annotated[
        dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], SafeText],
        AfterValidator(no_shell_names),
        AfterValidator(no_credentials),
    ] = Field(
        default_factory=dict,
        description="extra environment variables (no credentials: names with TOKEN, KEY, SECRET, PASSWORD ... are refused)",
    )


Schedule = Literal["cosine", "wsd", "linear", "constant"]


class RecipeSpec(Spec):
    """The optimizer recipe; every field left out is decided per model family with its source (docs/recipe.md)."""

    lr_peak: float | None = Field(None, gt=0, le=10, description="peak learning rate, reached at the end of warmup")
    lr_min: float | None = Field(None, ge=0, le=10, description="learning rate at the end of the decay")
    schedule: Schedule | None = Field(
        None,
        description="after the linear warmup: cosine or linear decay to lr_min over the run, constant at lr_peak, or wsd (warmup-stable-decay: constant, then a cosine decay over the last decay_fraction of the run)",
    )
    warmup_steps: int | None = Field(
        None, ge=0, le=1_000_000_000, description="linear warmup from 0, in optimizer steps"
    )
    warmup_fraction: float | None = Field(None, ge=0, lt=1, description="linear warmup as a share of the run's steps")
    decay_fraction: float | None = Field(
        None, gt=0, le=1, description="wsd: share of the run's steps in the final decay to lr_min"
    )
    weight_decay: float | None = Field(None, ge=0, le=10, description="decoupled (AdamW) weight decay")
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] | None = Field(
        None, description="Adam β1, β2"
    )
    eps: float | None = Field(None, gt=0, le=1, description="Adam ε")
    grad_clip_norm: float | None = Field(
        None, ge=0, le=1e6, description="clip the global gradient norm to this (0: no clipping)"
    )
    init_std: float | None = Field(
        None, gt=0, le=10, description="standard deviation of the random weight initialisation (pre-training)"
    )
    dropout: float | None = Field(None, ge=0, lt=1, description="attention and hidden dropout probability")

    @model_validator(mode="after")
    def consistent(self) -> RecipeSpec:
        if self.warmup_steps is not None and self.warmup_fraction is not None:
            raise PydanticCustomError("conflicting-fields", "give warmup_steps or warmup_fraction, not both", {})
        if self.lr_peak is not None and self.lr_min is not None and self.lr_min > self.lr_peak:
            raise PydanticCustomError(
                "invalid-recipe",
                "lr_min ({low:g}) is above lr_peak ({high:g})",
                {"low": self.lr_min, "high": self.lr_peak},
            )
        if self.decay_fraction is not None and self.schedule not in ("wsd", None):
            raise PydanticCustomError(
                "invalid-recipe", "decay_fraction is the wsd schedule's; schedule is {s}", {"s": self.schedule}
            )
        return self


class MegatronSpec(Spec):
    core_version: Annotated[str, Field(pattern=r"^0\.[0-9]{1,3}$")] | None = Field(
        None,
        description="megatron-core release (major.minor) of the Megatron-LM the job runs; decides which arguments exist. Default: the container image's (compiler/catalog/megatron_images.yaml)",
        examples=["0.13"],
    )
    path: SafeText | None = Field(
        None,
        description="absolute folder of Megatron-LM inside the image (where pretrain_gpt.py is); a relative train.entrypoint.script is resolved against it. Default: the image's (/opt/megatron-lm in NeMo images)",
        examples=["/opt/megatron-lm"],
    )
    grad_reduce: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="gradient buffer and DP reduction dtype of a bf16 model: fp32 (Megatron-LM's default main_grad, 4 B per parameter) or bf16 (--grad-reduce-in-bf16, megatron-core >= 0.12: a 2-B buffer plus the fp32 copy of the gradients the rank's optimizer owns, 2 + 4/DP B with the distributed optimizer; faster reductions, as Megatron-Bridge's performance recipes run)",
    )


class TrainSpec(Spec):
    tokens: Count | None = Field(None, description="tokens to train on", examples=["1T"])
    dataset_tokens: Count | None = Field(None, description="dataset size in tokens (with epochs)")
    epochs: float | None = Field(None, ge=1e-3, le=1e6, description="passes over dataset_tokens")
    seq_len: int = Field(4096, ge=1, le=10_000_000, description="sequence length in tokens")
    global_batch_tokens: Count | None = Field(None, description="tokens per optimizer step", examples=["4M"])
    global_batch: IntCount | None = Field(None, description="sequences per optimizer step")
    optimizer: Literal["adamw", "adamw-8bit", "adamw-8bit-paged", "sgd", "adafactor"] = Field(
        "adamw",
        description="optimizer; decides the bytes of optimizer state per parameter (adamw-8bit-paged: bitsandbytes' paged states in unified memory, counted on the host)",
    )
    recipe: RecipeSpec = Field(
        default_factory=RecipeSpec,
        description="learning rate, schedule, warmup, weight decay, betas, eps, gradient clip, init std and dropout; each left out is the model family's published value",
    )
    master_weights: Literal["fp32", "none"] = Field(
        "fp32",
        description="fp32 master copy of 16-bit weights (Megatron, DeepSpeed, FSDP mixed precision) or none: pure 16-bit weights and optimizer states (torchtune's default)",
    )
    loss: Literal["auto", "standard", "chunked", "fused", "flash-attn"] = Field(
        "auto",
        description="cross-entropy: standard (fp32 logits: Megatron's fused loss under megatron/deepspeed, 8 B per logit; PyTorch's eager F.cross_entropy elsewhere and under the hf-trainer entrypoint, 12 B), chunked (torchtune, 16-bit logits, fp32 one chunk of 8 at a time), fused (Liger/CCE, no logits), flash-attn (flash-attn's CrossEntropyLoss, llm-foundry's default: 16-bit logits + 16-bit gradient); auto: chunked for lora/qlora, standard for full",
    )
    optimizer_in_backward: bool = Field(
        False, description="step each parameter in the backward and free its gradient (torchtune optimizer_in_bwd)"
    )
    activation_offload: bool = Field(
        False,
        description="checkpointed activations wait in host memory (torchtune enable_activation_offloading); with full recompute",
    )
    reshard_after_forward: bool = Field(
        True,
        description="FSDP frees gathered weights after the forward (FSDP2 default); false keeps them to the backward",
    )
    expandable_segments: bool = Field(
        False,
        description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: no fragmentation reserve on top of allocated memory",
    )
    method: Literal["full", "lora", "qlora"] = Field("full", description="finetune method")
    lora: LoraSpec = Field(default_factory=LoraSpec, description="LoRA/QLoRA adapter settings")
    framework: Literal["auto", "deepspeed", "fsdp", "megatron", "ddp"] = Field(
        "auto", description="training framework; auto picks from the chosen parallelism"
    )
    deadline: Seconds | None = Field(None, description="wall-clock deadline", examples=["30d"])
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec, description="checkpoint interval, retention and location"
    )
    entrypoint: EntrypointSpec = Field(default_factory=EntrypointSpec, description="what torchrun runs on every node")
    megatron: MegatronSpec = Field(
        default_factory=MegatronSpec, description="Megatron-LM launches: the megatron-core release and its folder"
    )
    data: SafeText | None = Field(None, description="dataset location (path or URI)")
    bytes_per_token: float | None = Field(
        None,
        ge=0.01,
        le=1e6,
        description="stored bytes per token; default from the vocabulary: 2 (uint16 ids) below 65,500 tokens, 4 (int32) above, as Megatron stores them",
    )
    mtbf_gpu_hours: float | None = Field(
        None, ge=1, le=1e12, description="mean time between failures per GPU; default from the Llama 3 paper"
    )
    flash_attention: bool = Field(True, description="attention kernel without the s² activation term (FlashAttention)")
    memory_quantile: Literal["none", "p50", "p90"] = Field(
        "p50",
        description="a layout fits when its predicted memory × the method's measured ÷ predicted peak at this quantile fits (none: the prediction itself)",
    )
    gate_quantile: Literal["p50", "p90"] = Field(
        "p90",
        description="the deadline and budget are met by the predicted time and cost at this quantile of the published runs' actual ÷ predicted (p90: 9 in 10 comparable runs would have made it)",
    )

    @model_validator(mode="after")
    def amount_of_training(self) -> TrainSpec:
        if self.tokens is None and self.dataset_tokens is None:
            raise PydanticCustomError("missing-field", "give tokens, or dataset_tokens and epochs", {})
        if self.tokens is not None and self.dataset_tokens is not None:
            raise PydanticCustomError("conflicting-fields", "give tokens or dataset_tokens + epochs, not both", {})
        if self.global_batch_tokens is not None and self.global_batch is not None:
            raise PydanticCustomError("conflicting-fields", "give global_batch_tokens or global_batch, not both", {})
        return self

    @property
    def total_tokens(self) -> float:
        return self.tokens if self.tokens is not None else self.dataset_tokens * (self.epochs or 1.0)
