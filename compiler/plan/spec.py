"""PlanSpec: the user's words, validated. Frozen; unknown keys are errors.

Quantities are written the way a person writes them ("7B", "30d", "$400k") and parsed by `units`.
Which sections are required depends on `workload`. Each section has its module: spec_model, spec_train, spec_serve,
spec_cluster; the field types they share are in spec_fields.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from .runs import RUNS_FOLDER
from .spec_cluster import ClusterSpec
from .spec_fields import DNS1123_LABEL, Precision, Spec, Usd
from .spec_model import ModelSpec
from .spec_serve import ServeSpec
from .spec_train import TrainSpec


class BudgetSpec(Spec):
    usd: Usd | None = Field(None, description="total budget (train/finetune)")
    usd_per_month: Usd | None = Field(None, description="monthly budget (serve)")
    alert_at: float = Field(0.8, gt=0, le=1, description="share of the budget that raises an alert")


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
    """out/runs/ holds what jobs write (compiler/plan/runs.py): a plan folder of that name would be it."""
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
    precision: Precision = Field(
        "bf16",
        description="compute precision; int8/int4 for serving only. A serve plan that leaves it out on a pre-quantized "
        "checkpoint (model.quantization, or what the preset's repository ships: fp8 for deepseek-v3/r1) is served "
        "in the checkpoint's precision",
    )
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
