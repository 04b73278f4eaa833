"""The site calibration file (`cluster.calibration`, site_calibration.py): its points as validated models, frozen
with unknown keys refused, and its loader, whose errors name the file, line and column."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog.catalog import Catalog
from .catalog.types import Architecture, CatalogId, CatalogText
from .diagnostics import PlanInputError
from .plan.spec_model import ArchitectureSpec
from .source import load_yaml_file


class CalibrationError(ValueError):
    """A calibration file that cannot be read, does not validate or names what the catalog lacks."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SiteLora(_Strict):
    """The LoRA adapters a measured fine-tuning step trained (a frozen base: train.lora of its plan; qlora: NF4)."""

    method: Literal["lora", "qlora"] = "lora"
    rank: int = Field(ge=1, le=4096)
    targets: list[Literal["q", "k", "v", "o", "gate", "up", "down"]] = Field(min_length=1, max_length=7)


class SitePoint(_Strict):
    gpu: CatalogId
    model: CatalogId | None = Field(None, description="a catalog preset id (or give the architecture)")
    architecture: ArchitectureSpec | None = Field(
        None, description="the measured shape, e.g. a probe's reduced layers (checked as a plan's inline architecture)"
    )
    gpus: int = Field(ge=1, le=1_000_000)
    tp: int = Field(1, ge=1, le=1024)
    pp: int = Field(1, ge=1, le=1024)
    zero_stage: Literal[0, 1, 2, 3] = 0
    micro_batch: int = Field(1, ge=1, le=100_000)
    global_batch: int = Field(ge=1, le=100_000_000, description="sequences per optimizer step")
    seq_len: int = Field(ge=1, le=10_000_000)
    recompute: Literal["none", "selective", "full"] = "none"
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    framework: Literal["auto", "deepspeed", "fsdp", "megatron", "ddp"] = Field(
        "auto", description="the framework that ran the step (a probe's job: the plan's); auto: the search's choice"
    )
    offload: bool = Field(False, description="optimizer states offloaded to the host (DeepSpeed ZeRO-Offload)")
    dropout: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="the dropout the measured job trained with (a probe's: its plan's recipe), which decides whether "
        "the step moves dropout masks; none: Korthikanti et al.'s Table 2 with masks",
    )
    lora: SiteLora | None = Field(None, description="the adapters of a LoRA step (none: every weight trained)")
    step_seconds: float = Field(gt=1e-6, le=1e6, description="the measured time of one optimizer step")

    @model_validator(mode="after")
    def one_shape(self) -> SitePoint:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give model (a preset id) or architecture, not both")
        return self

    def shape(self, catalog: Catalog) -> Architecture:
        return self.architecture or catalog.models[self.model].architecture


class ServingPoint(_Strict):
    """One serving step measured on one replica (TP `tp`): a prefill of `batch` prompts of `tokens` tokens,
    `prefill_group` prompts per forward, or one decode step of `batch` sequences at `tokens` tokens of context."""

    gpu: CatalogId
    model: CatalogId | None = Field(None, description="a catalog preset id (or give the architecture)")
    architecture: ArchitectureSpec | None = Field(
        None, description="the measured shape, e.g. a probe's reduced layers (checked as a plan's inline architecture)"
    )
    precision: Literal["bf16", "fp16"] = "bf16"
    phase: Literal["prefill", "decode"]
    batch: int = Field(ge=1, le=100_000)
    tokens: float = Field(ge=1, le=10_000_000, description="prefill: prompt tokens; decode: context tokens")
    prefill_group: int = Field(1, ge=1, le=100_000)
    tp: int = Field(1, ge=1, le=1024, description="the replica's tensor parallelism (the engine's own, measured)")
    step_seconds: float = Field(gt=1e-9, le=1e6)

    @model_validator(mode="after")
    def one_shape(self) -> ServingPoint:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give model (a preset id) or architecture, not both")
        return self

    def shape(self, catalog: Catalog) -> Architecture:
        return self.architecture or catalog.models[self.model].architecture


class VisionPoint(_Strict):
    """One batch of `batch` items of a non-generative model (CNN, ViT, encoder) on one GPU, as its engine's server
    timed it (a Triton probe: perf_analyzer's server compute time): the vision sizing's batch time
    (sizing/serve/vision.py) prices it."""

    gpu: CatalogId
    model: CatalogId | None = Field(None, description="a catalog preset id (or give the architecture)")
    architecture: ArchitectureSpec | None = Field(None, description="the measured model's shape")
    precision: Literal["bf16", "fp16", "fp8", "int8"] = "fp16"
    engine: Literal["triton"] = Field("triton", description="the engine whose backend ran the batch (its fusion)")
    batch: int = Field(ge=1, le=100_000)
    tokens: int = Field(1, ge=1, le=10_000_000, description="an encoder's sequence; images: 1 (unused)")
    step_seconds: float = Field(gt=1e-9, le=1e6, description="the measured time of one batch")

    @model_validator(mode="after")
    def one_shape(self) -> VisionPoint:
        if (self.model is None) == (self.architecture is None):
            raise ValueError("give model (a preset id) or architecture, not both")
        return self

    def shape(self, catalog: Catalog) -> Architecture:
        return self.architecture or catalog.models[self.model].architecture


class MemoryPoint(_Strict):
    """One layout's peak memory on one GPU: measured (torch.cuda.max_memory_reserved/allocated; a CPU run: its
    resident set) and what train_memory predicted for the same shape and layout."""

    layout: CatalogText
    measured_allocated_bytes: int = Field(ge=0, le=2**50)
    measured_reserved_bytes: int = Field(ge=0, le=2**50)
    predicted_allocated_bytes: int = Field(ge=1, le=2**50)
    predicted_reserved_bytes: int = Field(ge=1, le=2**50)

    @property
    def ratio(self) -> float:
        return self.measured_reserved_bytes / self.predicted_reserved_bytes


class SiteMemory(_Strict):
    """The memory factor a full-training memory fit uses at this site: the largest measured ÷ predicted peak reserved
    memory over the probe's layouts (a margin covers the worst layout measured), never below 1 when applied."""

    gpu: CatalogId
    device: CatalogText = Field(
        description="what measured it: cuda (the caching allocator's counters) or cpu (resident set)"
    )
    factor: float = Field(gt=0, le=1000)
    points: list[MemoryPoint] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def factor_from_points(self) -> SiteMemory:
        largest = max(p.ratio for p in self.points)
        if abs(self.factor - largest) > 0.001 * largest + 0.0005:
            raise ValueError(
                f"factor {self.factor} is not the largest measured ÷ predicted of its points ({largest:.3f})"
            )
        return self


class CollectivePoint(_Strict):
    """One collective's bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md: all-reduce algbw × 2(n−1)/n,
    all-gather algbw × (n−1)/n), over `ranks` ranks at `bytes` bytes."""

    op: Literal["all_reduce", "all_gather"]
    bytes: int = Field(ge=1, le=2**40)
    ranks: int = Field(ge=2, le=1_000_000)
    bus_bytes_per_second: float = Field(gt=0, le=1e15)


class SiteInterconnect(_Strict):
    """The collectives a probe measured: inside one node of `gpu`, and across two nodes over `interconnect`."""

    gpu: CatalogId
    interconnect: CatalogId
    device: CatalogText = Field(description="cuda (NCCL) or cpu (gloo: a test of the loop)")
    ranks_per_node: int = Field(ge=1, le=1024)
    intra_node: list[CollectivePoint] = Field(default_factory=list, max_length=100)
    inter_node: list[CollectivePoint] = Field(default_factory=list, max_length=100)


class SiteCalibration(_Strict):
    site: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    measured_at: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]
    source: CatalogText
    points: list[SitePoint] = Field(default_factory=list, max_length=100)
    serving_points: list[ServingPoint] = Field(default_factory=list, max_length=100)
    vision_points: list[VisionPoint] = Field(default_factory=list, max_length=100)
    memory: SiteMemory | None = None
    interconnect: SiteInterconnect | None = None
    warnings: list[CatalogText] = Field(
        default_factory=list,
        max_length=20,
        description="where the measured node differs from the catalog entry (probe_environment.py)",
    )

    @model_validator(mode="after")
    def some_points(self) -> SiteCalibration:
        if not self.points and not self.serving_points and not self.vision_points:
            raise ValueError("give points (training steps), serving_points or vision_points")
        return self


def load_site_calibration(path: Path) -> SiteCalibration:
    loaded = None
    try:
        loaded = load_yaml_file(path)
        return SiteCalibration.model_validate(loaded.data)
    except PlanInputError as exc:
        first = exc.diagnostics[0]
        raise CalibrationError(
            f"{path}:{first.line}:{first.column}: {first.message}" if first.line else f"{path}: {first.message}"
        ) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = loaded.position(tuple(first["loc"]))
        field = ".".join(map(str, first["loc"]))
        raise CalibrationError(f"{path}:{where.line}:{where.column}: {field}: {first['msg']}") from None
