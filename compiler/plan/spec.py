"""PlanSpec: the user's words, validated. Frozen; unknown keys are errors.

Quantities are written the way a person writes them ("7B", "30d", "$400k") and parsed by `units`.
Which sections are required depends on `workload`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .. import units
from ..catalog.types import Architecture
from .credential_shapes import WHERE_INSTEAD, credential_shape, credential_word
from .runs import RUNS_FOLDER

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MAX_DIMENSION = 1e15  # any size of an inline architecture (the largest, params_override, is a parameter count)
# Kubernetes object names, Slurm job names and directory names are all safe in this alphabet.


def _quantity(
    parse, code: str, suffixes: dict, examples: list, minimum: float, maximum: float, expected: str, prefix: str = ""
):
    """A number written with a unit suffix; the JSON Schema accepts a number or a matching string, as one type so an
    editor says what is expected in the compiler's words (yaml-language-server reads patternErrorMessage and
    errorMessage). `maximum` is far beyond any real plan; it keeps the sizing's arithmetic finite."""

    def validate(value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except units.QuantityError as exc:
            got = repr(exc.got)
            got = got if len(got) <= 60 else got[:57] + "..."  # a 400-digit number is not echoed whole
            raise PydanticCustomError(code, "expected {expected}, got {got}", {"expected": exc.expected, "got": got})

    unit = "|".join(sorted((re.escape(k) for k in suffixes if k), key=len, reverse=True))
    pattern = (
        rf"^\s*{re.escape(prefix)}{'?' if prefix else ''}[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*({unit})?\s*$"
    )
    schema = {
        "type": ["number", "string"],
        "minimum": minimum,
        "maximum": maximum,
        "pattern": pattern,
        "examples": examples,
        "patternErrorMessage": f"expected {expected}",
        "errorMessage": f"expected {expected} (a number, or a string with a unit)",
    }
    return BeforeValidator(validate), WithJsonSchema(schema), Field(ge=minimum, le=maximum)


Count = Annotated[
    float,
    *_quantity(
        units.parse_count, "invalid-quantity", units.COUNT_SUFFIXES, ["7B", "2T", 8e9], 1, 1e18, units.COUNT_EXPECTED
    ),
]
Bytes = Annotated[
    int,
    *_quantity(
        units.parse_bytes, "invalid-size", units.BYTE_SUFFIXES, ["80GiB", "500GB"], 0, 1e18, units.BYTES_EXPECTED
    ),
]
Seconds = Annotated[
    float,
    *_quantity(
        units.parse_seconds,
        "invalid-duration",
        units.SECONDS_PER,
        ["30d", "2h", "150ms"],
        1e-9,
        1e10,
        units.SECONDS_EXPECTED,
    ),
]
Usd = Annotated[
    float,
    *_quantity(
        units.parse_usd,
        "invalid-amount",
        units.USD_SUFFIXES,
        ["$400k", 400000],
        0.01,
        1e15,
        units.USD_EXPECTED,
        prefix="$",
    ),
]
IntCount = Annotated[
    int,
    *_quantity(
        lambda v: int(units.parse_count(v)),
        "invalid-quantity",
        units.COUNT_SUFFIXES,
        [512, "4k"],
        1,
        1e18,
        units.COUNT_EXPECTED,
    ),
]
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")  # C0/C1 controls but tab, and Unicode line breaks


def _no_control_characters(text: str) -> str:
    """Paths, names and arguments reach shell lines and YAML: a control character (e.g. U+001C, which Python
    counts as a line break) is refused rather than carried into a script."""
    if found := _CONTROL.search(text):
        raise PydanticCustomError("invalid-format", "control character {c} is not allowed", {"c": repr(found[0])})
    return text


def _offers(kind: str):
    """json_schema_extra: the packaged catalog's ids as the field's examples, so an editor completes them."""

    def extra(schema: dict) -> None:
        from ..catalog.catalog import packaged_ids

        ids = packaged_ids(kind)
        for branch in schema.get("anyOf", [schema]):  # optional fields: the non-null branch
            if branch.get("type") == "array":
                branch["items"]["examples"] = ids
            elif branch.get("type") == "string":
                branch["examples"] = ids

    return extra


# Rates below this (one request every 11.6 days) are not a service to size; a denormal such as 5e-324 made the
# cost per million tokens infinite.
MIN_RATE = 1e-6


SafeText = Annotated[
    str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00\r\n]*$"), AfterValidator(_no_control_characters)
]
Precision = Literal["fp32", "fp16", "bf16", "fp8", "fp4", "int8", "int4"]
CheckpointQuantization = Literal["none", "fp8", "nvfp4", "awq", "gptq", "compressed-tensors"]


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ArchitectureSpec(Architecture):
    """A model architecture given inline (same fields as the catalog's presets)."""

    @field_validator("*")
    @classmethod
    def not_negative(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 <= value <= MAX_DIMENSION:
            raise PydanticCustomError(
                "out-of-range", "expected a number from 0 to {top}", {"top": f"{MAX_DIMENSION:g}"}
            )
        return value

    @model_validator(mode="after")
    def shape_is_complete(self) -> ArchitectureSpec:
        """The sizes the sizing divides by: a transformer needs them ≥ 1, a CNN its parameters and FLOPs."""
        if self.kind == "cnn":
            needed = {"params_override": self.params_override, "gflops_per_sample": self.gflops_per_sample}
        else:
            needed = {
                "layers": self.layers,
                "hidden": self.hidden,
                "heads": self.heads,
                "kv_heads": self.kv_heads,
                "ffn_hidden": self.ffn_hidden or self.moe_ffn_hidden,
                "vocab": self.vocab,
                "experts": self.experts,
                "experts_per_token": self.experts_per_token,
            }
            if self.kind == "vision-transformer":
                needed |= {"image_size": self.image_size, "patch_size": self.patch_size}
        missing = [k for k, v in needed.items() if v <= 0]
        if missing:
            raise PydanticCustomError(
                "invalid-architecture",
                "a {kind} architecture needs {fields} ≥ 1",
                {"kind": self.kind, "fields": ", ".join(missing)},
            )
        if self.kind != "cnn" and (self.kv_heads > self.heads or self.heads % self.kv_heads):
            raise PydanticCustomError(
                "invalid-architecture",
                "heads ({h}) must be a multiple of kv_heads ({kv})",
                {"h": self.heads, "kv": self.kv_heads},
            )
        if self.experts_per_token > self.experts or self.dense_layers > self.layers:
            raise PydanticCustomError(
                "invalid-architecture", "experts_per_token ≤ experts and dense_layers ≤ layers", {}
            )
        if self.interleave_moe_layer_step < 1 or (self.interleave_moe_layer_step > 1 and not self.is_moe):
            raise PydanticCustomError(
                "invalid-architecture",
                "interleave_moe_layer_step must be ≥ 1, and above 1 only for an MoE "
                "model (experts > 1; got {step} with {experts} experts)",
                {"step": self.interleave_moe_layer_step, "experts": self.experts},
            )
        if self.kind != "cnn" and self.is_moe and not self.moe_layer_count:
            raise PydanticCustomError(
                "invalid-architecture",
                "no layer has experts: with dense_layers {dense} and "
                "interleave_moe_layer_step {step} every one of the {layers} layers is dense",
                {"dense": self.dense_layers, "step": self.interleave_moe_layer_step, "layers": self.layers},
            )
        return self


class ModelSpec(Spec):
    preset: str | None = Field(None, description="a catalog preset id", json_schema_extra=_offers("models"))
    params: Count | None = Field(
        None, description="a parameter count alone; a Llama-like shape is assumed and the report says so"
    )
    architecture: ArchitectureSpec | None = Field(None, description="an explicit architecture")
    weights: SafeText | None = Field(
        None,
        description="where serving / fine-tuning loads weights from (URI or path)",
        examples=["s3://bucket/llama3-8b"],
    )
    hf_id: SafeText | None = Field(
        None, description="the model id engines load (Hugging Face repo id); defaults to the preset's repo"
    )
    quantization: CheckpointQuantization = Field(
        "none",
        description="how the checkpoint the engine loads (hf_id / weights) is already quantized: none = 16-bit weights (the presets' repos); fp8, nvfp4 (NVIDIA ModelOpt NVFP4, e.g. nvidia/DeepSeek-R1-FP4), awq, gptq or compressed-tensors = a pre-quantized checkpoint whose method the engine reads from its config.json (serve plans)",
    )

    @model_validator(mode="after")
    def exactly_one_source(self) -> ModelSpec:
        given = [k for k in ("preset", "params", "architecture") if getattr(self, k) is not None]
        if len(given) != 1:
            raise PydanticCustomError(
                "model-source",
                "give exactly one of preset, params or architecture (got {given})",
                {"given": ", ".join(given) or "none"},
            )
        return self


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


def _no_credentials(env: dict[str, str]) -> dict[str, str]:
    """Plain env lands in the launcher, a ConfigMap and plan.json, readable by anyone who reads out/ or the namespace:
    a name that marks a credential (credential_shapes.py) or a value shaped like one is refused."""
    for name, value in env.items():
        word, shape = credential_word(name), credential_shape(value)
        if word or shape:
            why = f"its name holds {word}" if word else f"its value looks like {shape}"
            raise PydanticCustomError(
                "secret-in-plain-env",
                "{name} looks like a credential ({why}); plain env is written into the launcher, a ConfigMap and "
                "plan.json: {instead}",
                {"name": name, "why": why, "instead": WHERE_INSTEAD},
            )
    return env


# Names bash owns (GNU Bash manual, "Bash Variables"): readonly ones (assigning them stops the launcher: "UID: readonly
# variable"), ones bash resets or ignores when assigned (GROUPS, RANDOM, SECONDS, LINENO, FUNCNAME, DIRSTACK ...), and
# ones that change how every later line is read or run (IFS, BASH_ENV, ENV, SHELLOPTS, POSIXLY_CORRECT, PS4 ...).
SHELL_NAMES = frozenset(
    "UID EUID PPID SHELLOPTS BASHOPTS BASH_VERSINFO BASHPID BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_LINENO BASH_SOURCE "
    "BASH_COMMAND BASH_SUBSHELL BASH_REMATCH BASH_ENV BASH_XTRACEFD BASH_COMPAT BASH_ALIASES BASH_CMDS ENV GROUPS "
    "DIRSTACK FUNCNAME HISTCMD LINENO RANDOM SRANDOM SECONDS EPOCHREALTIME EPOCHSECONDS PIPESTATUS IFS OPTIND OPTARG "
    "PWD OLDPWD POSIXLY_CORRECT PS4 GLOBIGNORE CDPATH".split()
)


def _no_shell_names(env: dict[str, str]) -> dict[str, str]:
    """The launcher is a bash script that exports each name: a name bash owns cannot be one of the plan's."""
    for name in env:
        if name in SHELL_NAMES:
            raise PydanticCustomError(
                "shell-variable",
                "{name} is a variable bash itself owns (readonly, reset or read by the shell); launch/torchrun.sh "
                "cannot export it. Set it inside the training script, or choose another name",
                {"name": name},
            )
    return env


def _no_credential_args(args: list[str]) -> list[str]:
    """Arguments are written into the launcher and plan.json like env: no token-shaped value, and no option named as a
    credential given a value (--hub-token X, --password=X); a bare flag (--use-auth-token) is kept."""
    for i, arg in enumerate(args):
        option, has_value, _ = arg.partition("=")
        given = has_value or (i + 1 < len(args) and not args[i + 1].startswith("-"))
        word = credential_word(option) if arg.startswith("-") and given else None
        shape = credential_shape(arg)
        if word or shape:
            why = f"the option {option} holds {word}" if word else f"it looks like {shape}"
            raise PydanticCustomError(
                "secret-in-args",
                "argument {i} looks like a credential ({why}); arguments are written into the launcher and plan.json: "
                "{instead}, and let the script read it from there",
                {"i": i, "why": why, "instead": WHERE_INSTEAD},
            )
    return args


class EntrypointSpec(Spec):
    kind: Literal["auto", "torchrun", "deepspeed", "hf-trainer", "accelerate", "megatron"] = Field(
        "auto",
        description="how the script reads the generated configuration: torchrun (plain script, MLINFRA_* "
        "environment), deepspeed (deepspeed.initialize: --deepspeed_config PATH), hf-trainer (Hugging Face Trainer/TRL: "
        "--deepspeed PATH), accelerate (accelerate launch --config_file <fsdp config>), megatron (pretrain_gpt.py with "
        "megatron/args.sh); auto picks from the framework",
    )
    script: SafeText = Field("train.py", description="training script run by torchrun")
    args: Annotated[list[SafeText], AfterValidator(_no_credential_args)] = Field(
        default_factory=list,
        description="arguments, passed shell-quoted",
    )
    env: Annotated[
        dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], SafeText],
        AfterValidator(_no_shell_names),
        AfterValidator(_no_credentials),
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


class TrafficSpec(Spec):
    requests_per_second: float | None = Field(
        None,
        ge=MIN_RATE,
        le=1e9,
        description="average request rate (open loop: requests arrive whatever the latency); give this or concurrency",
    )
    concurrency: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="closed loop: clients each sending the next request when the previous one completes (vllm bench serve --max-concurrency, genai-perf --concurrency); give this or requests_per_second",
    )
    prompt_tokens: int = Field(512, ge=1, le=10_000_000, description="average prompt length")
    output_tokens: int = Field(256, ge=1, le=10_000_000, description="average generated length")
    peak_factor: float = Field(1.0, ge=1, le=1000, description="peak / average load (request rate or clients)")

    @model_validator(mode="after")
    def one_kind_of_load(self) -> TrafficSpec:
        if self.requests_per_second is None and self.concurrency is None:
            raise PydanticCustomError(
                "missing-field", "give requests_per_second (open loop) or concurrency (closed loop)", {}
            )
        if self.requests_per_second is not None and self.concurrency is not None:
            raise PydanticCustomError(
                "conflicting-fields", "give requests_per_second (open loop) or concurrency (closed loop), not both", {}
            )
        return self


class SloSpec(Spec):
    ttft_p99: Seconds | None = Field(None, description="time to first token, p99", examples=["2s"])
    tpot_p99: Seconds | None = Field(None, description="time per output token, p99", examples=["50ms"])
    latency_p99: Seconds | None = Field(None, description="request latency p99 (vision models)", examples=["100ms"])


class StageSpec(Spec):
    """One stage of a multi-stage service (e.g. an image encoder feeding an LLM through a queue)."""

    name: Annotated[str, Field(pattern=DNS1123_LABEL)] = Field(description="stage name; names its deployment and queue")
    model: ModelSpec = Field(description="the stage's model")
    precision: Precision = Field("bf16", description="the stage's serving precision")
    engine: Literal["vllm", "triton", "tgi"] = Field("vllm", description="the stage's serving engine")
    gpus: list[str] | None = Field(
        None, description="GPU types this stage may use (default: the cluster's)", json_schema_extra=_offers("gpus")
    )
    items_per_request: float = Field(
        1.0, ge=MIN_RATE, le=1e6, description="items this stage handles per request entering the service"
    )
    prompt_tokens: int | None = Field(
        None, ge=1, le=10_000_000, description="LLM stages: prompt length (default: traffic's)"
    )
    output_tokens: int | None = Field(
        None, ge=1, le=10_000_000, description="LLM stages: output length (default: traffic's)"
    )
    slo: SloSpec = Field(default_factory=SloSpec, description="the stage's own latency targets")


class SpeculativeSpec(Spec):
    method: Literal["mtp"] = Field(
        "mtp",
        description="draft: the checkpoint's own multi-token-prediction module (architecture.mtp_layers; vLLM speculative method 'mtp')",
    )
    num_speculative_tokens: int = Field(
        ge=1, le=16, description="draft tokens proposed per decode step (vLLM num_speculative_tokens)"
    )
    acceptance_rate: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="probability the target model accepts each draft token; default: DeepSeek-V3 report §5.4.3, 0.85-0.90 for its MTP module, sized at 0.85",
    )


class ServeSpec(Spec):
    engine: Literal["vllm", "triton", "tgi"] = Field("vllm", description="serving engine")
    context_len: int = Field(8192, ge=1, le=10_000_000, description="max tokens per sequence (prompt + output)")
    traffic: TrafficSpec = Field(description="load (a request rate or closed-loop clients) and lengths")
    slo: SloSpec = Field(default_factory=SloSpec, description="without it, maximise throughput")
    precisions: list[Precision] | None = Field(
        None, description="serving precisions the search may use; default: the plan's precision"
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="KV cache element type (auto = the weights' dtype)"
    )
    prefix_caching: bool = Field(True, description="reuse KV of shared prompt prefixes")
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="pin the sequences a replica runs at once (vLLM max_num_seqs, TGI max-batch-size, TensorRT-LLM max batch); default: the search picks. With attention_dp, per DP rank",
    )
    speculative: SpeculativeSpec | None = Field(
        None,
        description="speculative decoding (vLLM --speculative-config): each decode step verifies the draft's tokens; the decode time per output token divides by the tokens a step yields",
    )
    attention_dp: int = Field(
        1,
        ge=1,
        le=64,
        description="MoE models on engine vllm: attention data-parallel ranks per replica (vLLM --data-parallel-size with --enable-expert-parallel): each rank holds the attention and dense layers (split by its own TP) and its own KV cache and batch; the routed experts are split over all attention_dp × TP GPUs of one node. 1 = off",
    )
    stages: list[StageSpec] | None = Field(
        None,
        description="a multi-stage service: stages in order, decoupled by queues (top-level model is then omitted)",
    )
    min_replicas: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="availability floor: replicas kept however low the load (HPA/KEDA minReplicas); default: 2 (1 on edge devices), or the sizing's minimum when higher. Counted in cost and GPUs: a service deploys max(peak need, floor)",
    )

    @field_validator("stages")
    @classmethod
    def stage_names_unique(cls, stages: list[StageSpec] | None) -> list[StageSpec] | None:
        """A stage name names its Deployment, Service and queue: two stages of one name would be one object. An empty
        list is no staged service: refused here rather than read as 'no stages, so a model is missing'."""
        if stages is not None and not stages:
            raise PydanticCustomError(
                "empty-stages", "stages is empty: list the stages in order, or leave stages out and give a model", {}
            )
        names = [s.name for s in stages or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise PydanticCustomError(
                "duplicate-stage-name", "stage name {n} is used more than once", {"n": repr(twice[0])}
            )
        return stages


class BudgetSpec(Spec):
    usd: Usd | None = Field(None, description="total budget (train/finetune)")
    usd_per_month: Usd | None = Field(None, description="monthly budget (serve)")
    alert_at: float = Field(0.8, gt=0, le=1, description="share of the budget that raises an alert")


# #SBATCH flags the compiler writes itself, with the plan field that decides each: an extra directive repeating one
# would give sbatch two values (the last wins for most flags) while the chain, signal lead and launcher keep the first.
OWNED_DIRECTIVES = {  # long forms only: extra_directives takes --name[=value]
    "--time": "cluster.slurm.max_time",
    "--nodes": "cluster.count / cluster.gpus_per_node",
    "--gpus-per-node": "cluster.gpus_per_node",
    "--gres": "cluster.gpus_per_node",
    "--gpus": "cluster.count",
    "--ntasks-per-node": "nothing: one torchrun agent per node is the launch contract",
    "--ntasks": "nothing: one torchrun agent per node is the launch contract",
    "--cpus-per-task": "cluster.slurm.cpus_per_node",
    "--mem": "cluster.slurm.memory_per_node",
    "--mem-per-cpu": "cluster.slurm.memory_per_node",
    "--mem-per-gpu": "cluster.slurm.memory_per_node",
    "--exclusive": "nothing: whole-node jobs are exclusive already, partial-node jobs share on purpose",
    "--job-name": "name",
    "--output": "nothing: the log pattern follows the chain",
    "--error": "nothing: the log pattern follows the chain",
    "--signal": "nothing: the lead is decided from the step and checkpoint write times",
    "--array": "cluster.slurm.max_time (the chain)",
    "--requeue": "nothing: it is always written",
    "--partition": "cluster.slurm.partition",
    "--account": "cluster.slurm.account",
    "--qos": "cluster.slurm.qos",
    "--reservation": "cluster.slurm.reservation",
    "--constraint": "cluster.slurm.constraint",
}


def _not_owned(directive: str) -> str:
    flag = directive.partition("=")[0]
    if flag in OWNED_DIRECTIVES:
        raise PydanticCustomError(
            "owned-directive",
            "{flag} is written by the compiler; set {field} instead",
            {"flag": flag, "field": OWNED_DIRECTIVES[flag]},
        )
    return directive


class SlurmSpec(Spec):
    partition: SafeText | None = Field(None, description="#SBATCH --partition")
    account: SafeText | None = Field(None, description="#SBATCH --account")
    qos: SafeText | None = Field(None, description="#SBATCH --qos")
    reservation: SafeText | None = Field(None, description="#SBATCH --reservation")
    constraint: SafeText | None = Field(None, description="#SBATCH --constraint (node features)")
    container_image: SafeText | None = Field(None, description="pyxis/enroot image")
    container_mounts: list[SafeText] = Field(
        default_factory=list, description="pyxis --container-mounts entries (src:dst)"
    )
    extra_directives: list[
        Annotated[str, Field(pattern=r"^--[a-z][a-z0-9-]*(=[^\x00\r\n]*)?$"), AfterValidator(_not_owned)]
    ] = Field(
        default_factory=list,
        description="any other #SBATCH flag, e.g. --mail-type=END (not one the compiler writes: --time, --nodes, ...)",
    )
    max_time: Seconds | None = Field(
        None,
        description="the site's longest job (partition/QOS walltime); longer runs chain as a job array (default 24h)",
        examples=["20h"],
    )
    cpus_per_node: int | None = Field(
        None, ge=1, le=100_000, description="CPU cores per node (default: the GPU catalog's node)"
    )
    memory_per_node: Bytes | None = Field(None, description="host memory per node to request (default: all, --mem=0)")


# Secret and ServiceAccount names are DNS-1123 subdomains (kubernetes.io "Object Names and IDs").
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# The cloud identity a workload-identity ServiceAccount is bound to, one form per object store: an AWS IAM role ARN
# (EKS IAM roles for service accounts, s3://), a Google service-account email (GKE Workload Identity, gs://), or a
# Microsoft Entra application client id (Azure Workload Identity, az://).
IAM_ROLE_ARN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"
GCP_SERVICE_ACCOUNT = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$"
AZURE_CLIENT_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
WORKLOAD_IDENTITY = f"{IAM_ROLE_ARN}|{GCP_SERVICE_ACCOUNT}|{AZURE_CLIENT_ID}"
SecretName = Annotated[str, Field(pattern=DNS1123_SUBDOMAIN, max_length=253)]


class ObjectStoreSpec(Spec):
    """How pods reach model.weights in object storage (s3://, gs://, az://): by reference only, never a key in the plan."""

    secret: SecretName | None = Field(
        None,
        description="a Secret whose keys become the environment of the containers that read the weights (envFrom): for s3:// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN / AWS_REGION if needed)",
    )
    workload_identity: Annotated[str, Field(pattern=WORKLOAD_IDENTITY)] | None = Field(
        None,
        description="the cloud identity the pods' ServiceAccount is bound to: an IAM role ARN (s3://, EKS IRSA), a Google service-account email (gs://, GKE Workload Identity) or an Azure client id (az://, Azure Workload Identity)",
    )
    service_account: SecretName | None = Field(
        None, description="name of the ServiceAccount emitted for workload_identity (default: <plan name>-weights)"
    )

    @model_validator(mode="after")
    def one_way(self) -> ObjectStoreSpec:
        if (self.secret is None) == (self.workload_identity is None):
            raise PydanticCustomError("object-store-credentials", "give exactly one of secret or workload_identity", {})
        if self.service_account is not None and self.workload_identity is None:
            raise PydanticCustomError(
                "object-store-credentials",
                "service_account names the workload-identity ServiceAccount: give workload_identity",
                {},
            )
        return self


# Kubernetes label keys and values (apimachinery validation IsQualifiedName, IsValidLabelValue): an optional DNS-1123
# subdomain prefix and '/', then a name of 1-63 alphanumerics, '-', '_', '.', starting and ending alphanumeric.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LabelKey = Annotated[str, Field(pattern=rf"^({_SUBDOMAIN}/)?{_LABEL_NAME}$", max_length=253 + 1 + 63)]
LabelValue = Annotated[str, Field(pattern=rf"^({_LABEL_NAME})?$")]


class TolerationSpec(Spec):
    """A pod toleration, as Kubernetes types it (core/v1 Toleration) and validates it (ValidateTolerations)."""

    key: LabelKey | None = Field(None, description="taint key; empty with operator Exists matches every taint")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists: any value; Equal: the value below")
    value: LabelValue | None = Field(None, description="taint value (operator Equal)")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="taint effect to match; empty matches every effect"
    )
    tolerationSeconds: int | None = Field(  # noqa: N815 - the Kubernetes field name
        None, ge=0, le=2**63 - 1, description="NoExecute only: how long the pod stays bound after the taint appears"
    )

    @model_validator(mode="after")
    def consistent(self) -> TolerationSpec:
        if self.operator == "Exists" and self.value:
            raise PydanticCustomError("invalid-toleration", "operator Exists takes no value", {})
        if not self.key and self.operator != "Exists":
            raise PydanticCustomError("invalid-toleration", "a toleration without a key needs operator Exists", {})
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise PydanticCustomError("invalid-toleration", "tolerationSeconds needs effect NoExecute", {})
        return self


class KubernetesSpec(Spec):
    namespace: Annotated[str, Field(pattern=DNS1123_LABEL)] = Field("default", description="Kubernetes namespace")
    job_api: Literal["jobset", "pytorchjob"] = Field("jobset", description="training job kind")
    autoscaler: Literal["hpa", "keda"] = Field("hpa", description="serving autoscaler")
    storage_class: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] | None = Field(
        None, description="StorageClass of the claims one pod mounts (default: the cluster default)"
    )
    shared_storage_class: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")] | None = Field(
        None,
        description="a StorageClass whose volumes are ReadWriteMany (EFS, Filestore, Azure Files, CephFS, a Lustre or "
        "NFS CSI driver): the claims several pods mount, the shared model cache and a multi-node job's checkpoints "
        "(default: storage_class); one of the two is required when the plan emits such a claim (the cluster default is "
        "usually ReadWriteOnce, where it stays Pending)",
    )
    secret_name: Annotated[str, Field(pattern=DNS1123_LABEL)] = Field("hf-token", description="Secret holding HF_TOKEN")
    image_pull_secret: SecretName | None = Field(
        None,
        description="a kubernetes.io/dockerconfigjson Secret for pulling the images from a private registry or mirror (imagePullSecrets)",
    )
    object_store: ObjectStoreSpec | None = Field(
        None,
        description="credentials for model.weights in object storage (default: none, the node's own identity or a public bucket)",
    )
    image: SafeText | None = Field(None, description="container image (default per engine/framework)")
    tolerations: list[TolerationSpec] = Field(
        default_factory=lambda: [TolerationSpec(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
        description="pod tolerations for the GPU nodes",
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="extra node labels to select on (the GPU product label is added)"
    )


class ClusterSpec(Spec):
    scheduler: Literal["slurm", "kubernetes", "both"] = Field("slurm", description="which deployment files to emit")
    gpus: list[str] | None = Field(None, description="GPU types to choose from", json_schema_extra=_offers("gpus"))
    gpu: str | None = Field(None, description="pin one GPU type", json_schema_extra=_offers("gpus"))
    count: int | None = Field(
        None, ge=1, le=1_000_000, description="pin the GPU count (train) or GPUs per replica (serve)"
    )
    max_gpus: int = Field(4096, ge=1, le=1_000_000, description="largest allocation the search may use")
    pricing: Literal["on-demand", "spot", "reserved"] = Field(
        "on-demand",
        description="price list used for cost; spot also makes jobs restart from the last checkpoint (on fewer nodes only where the launched program keeps the global batch: plan.json deployment.launcher.restart_reason)",
    )
    gpus_per_node: int | None = Field(
        None, ge=1, le=64, description="GPUs per node (default: the GPU catalog's server)"
    )
    interconnect: str = Field(
        "ib-400g",
        description="inter-node fabric; NVLink inside a node comes from the GPU catalog",
        json_schema_extra=_offers("interconnects"),
    )
    storage: str = Field(
        "lustre", description="shared storage kind for data and checkpoints", json_schema_extra=_offers("storage")
    )
    catalog: SafeText | None = Field(
        None, description="YAML file adding or overriding GPU entries, relative to the plan"
    )
    calibration: SafeText | None = Field(
        None,
        description="site calibration file: training and serving steps measured on this cluster; the measured GPUs' achievable matmul and HBM shares are fitted to them, its memory factor replaces the published one and its measured collectives give the training collectives' intra- and inter-node link shares (relative to the plan; compiler/site_calibration.py)",
    )
    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="Slurm partition, account and directives")
    kubernetes: KubernetesSpec = Field(default_factory=KubernetesSpec, description="Kubernetes namespace and APIs")

    @model_validator(mode="after")
    def gpu_or_gpus(self) -> ClusterSpec:
        if self.gpu and self.gpus:
            raise PydanticCustomError("conflicting-fields", "give gpu (a pin) or gpus (candidates), not both", {})
        return self

    @property
    def gpu_choices(self) -> list[str]:
        return [self.gpu] if self.gpu else list(self.gpus or [])


class ParallelismSpec(Spec):
    tp: int | None = Field(None, ge=1, le=1024, description="pin tensor-parallel degree")
    pp: int | None = Field(None, ge=1, le=1024, description="pin pipeline-parallel stages")
    dp: int | None = Field(None, ge=1, le=1_000_000, description="pin data-parallel degree")
    zero_stage: Literal[0, 1, 2, 3] | None = Field(
        None, description="pin ZeRO stage (FSDP: 2 = SHARD_GRAD_OP, 3 = FULL_SHARD)"
    )
    micro_batch: int | None = Field(None, ge=1, le=100_000, description="pin sequences per GPU per micro-step")
    recompute: Literal["none", "selective", "full"] | None = Field(
        None,
        description="pin activation recomputation: selective is the framework's own (Megatron-LM: the attention core; fsdp: torchtitan's op-level selective AC, which runs on fsdp/fsdp_tp.py, so a 1-D FSDP plan launches with torchrun instead of Accelerate), full re-runs every block",
    )
    offload: bool | None = Field(None, description="CPU offload of optimizer states (and params at ZeRO-3)")
    cp: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="pin context-parallel degree: each sequence split over cp GPUs (ring attention; Megatron --context-parallel-size)",
    )
    ep: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="pin expert-parallel degree (MoE models only): routed experts split over ep of the data-parallel GPUs (Megatron --expert-model-parallel-size)",
    )
    vp: int | None = Field(
        None,
        ge=1,
        le=128,
        description="pin virtual pipeline stages per GPU (interleaved 1F1B): each pipeline rank runs vp model chunks",
    )
    pp_first_stage_layers: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="pin the layers on the first pipeline stage (uneven PP; Megatron --decoder-first-pipeline-num-layers)",
    )
    pp_last_stage_layers: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="pin the layers on the last pipeline stage (uneven PP; Megatron --decoder-last-pipeline-num-layers)",
    )
    pp_stage_layers: list[Annotated[int, Field(ge=1, le=100_000)]] | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="pin the layers of every pipeline stage, first to last (sums to the model's layers)",
    )
    ep_overlap: bool | None = Field(
        None,
        description="overlap the MoE all-to-alls (dispatch, combine) of one micro-batch with another's compute (DeepSeek-V3 DualPipe; Megatron-Core --overlap-moe-expert-parallel-comm); default: on where Megatron-Core allows it (EP > 1, VP when PP > 1, no full recompute); false turns it off",
    )
    shard_group_gpus: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="HSDP: ZeRO-3/FSDP shards over groups of this many data-parallel ranks (GPUs without TP/PP; with TP each TP rank has its own group) and replicates across groups (FSDP HYBRID_SHARD; a node's GPUs: Accelerate's FSDP1, any other group, or with TP/PP: FSDP2's [dp_replicate, dp_shard] mesh); must divide DP (all of DP: full sharding, no group searched); default: searched beside full sharding where ZeRO-3 FSDP spans nodes (a node's data-parallel ranks, or 2, 4, 8 nodes' worth where memory needs them)",
    )

    @model_validator(mode="after")
    def one_way_to_split_stages(self) -> ParallelismSpec:
        if self.pp_stage_layers is not None and (self.pp_first_stage_layers or self.pp_last_stage_layers):
            raise PydanticCustomError(
                "conflicting-fields", "give pp_stage_layers or pp_first/last_stage_layers, not both", {}
            )
        if self.pp_stage_layers is not None and self.pp is not None and len(self.pp_stage_layers) != self.pp:
            raise PydanticCustomError(
                "conflicting-fields",
                "pp_stage_layers lists {n} stages, pp is {pp}",
                {"n": len(self.pp_stage_layers), "pp": self.pp},
            )
        return self


def _not_the_runs_folder(name: str) -> str:
    """out/runs/ holds what jobs write (compiler/runs.py): a plan folder of that name would be it."""
    if name == RUNS_FOLDER:
        raise PydanticCustomError(
            "reserved-plan-name",
            "{name} is reserved: out/{name}/ holds what jobs write; rename the plan",
            {"name": name},
        )
    return name


class PlanSpec(Spec):
    name: Annotated[
        str,
        Field(
            pattern=DNS1123_LABEL,
            description="DNS-1123 label; names jobs and resources",
            examples=["llama3-8b-pretrain"],
        ),
        AfterValidator(_not_the_runs_folder),
    ]
    workload: Literal["train", "finetune", "serve"] = Field(description="decides which sections are required")
    model: ModelSpec | None = Field(
        None, description="the model: a preset, an architecture, or a parameter count (omit only with serve.stages)"
    )
    precision: Precision = Field("bf16", description="compute precision; int8/int4 for serving only")
    train: TrainSpec | None = Field(None, description="required for train and finetune")
    serve: ServeSpec | None = Field(None, description="required for serve")
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description="spending limit and alert threshold")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="GPUs, scheduler, network and storage")
    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec, description="optional pins; what is not pinned is searched"
    )
    optimize: Literal["cost", "time", "latency"] = Field(
        "cost", description="cheapest meeting the targets, or fastest within budget"
    )

    @model_validator(mode="after")
    def sections_match_workload(self) -> PlanSpec:
        training = self.workload in ("train", "finetune")
        if training and self.train is None:
            raise PydanticCustomError("missing-section", "workload '{w}' needs a train section", {"w": self.workload})
        if training and self.serve is not None:
            raise PydanticCustomError(
                "forbidden-section", "workload '{w}' takes no serve section", {"w": self.workload}
            )
        if not training and self.serve is None:
            raise PydanticCustomError("missing-section", "workload 'serve' needs a serve section", {})
        if not training and self.train is not None:
            raise PydanticCustomError("forbidden-section", "workload 'serve' takes no train section", {})
        staged = self.serve is not None and bool(self.serve.stages)
        if self.model is None and not staged:
            raise PydanticCustomError("missing-field", "required field 'model' is missing", {})
        if self.model is not None and staged:
            raise PydanticCustomError(
                "conflicting-fields",
                "a staged service names each stage's model in serve.stages, not a top-level model",
                {},
            )
        if training and self.precision in ("fp4", "int8", "int4"):
            raise PydanticCustomError(
                "invalid-precision",
                "precision {p} is for serving; train in fp32, fp16, bf16 or fp8",
                {"p": self.precision},
            )
        if self.workload == "train" and self.train.method != "full":
            raise PydanticCustomError("invalid-method", "method {m} is for workload finetune", {"m": self.train.method})
        return self


def weights_locations(spec: PlanSpec) -> list[str]:
    """model.weights of the plan's model and of every serving stage ('' where not given)."""
    models = [spec.model] if spec.model else []
    models += [st.model for st in (spec.serve.stages or [] if spec.serve else [])]
    return [m.weights or "" for m in models]
