"""Residuals of the sizing against published figures, per family (residuals.yaml, written by
benchmarks/residuals.py): the ratio actual ÷ predicted at P10, P50 and P90 over the family's rows, the GPUs they ran on and
the span of their models' active parameters."""

from __future__ import annotations

from functools import lru_cache

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .loader import PACKAGED_LOADER, packaged_text


class Residual(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int = Field(ge=1)
    p10: float = Field(gt=0)
    p50: float = Field(gt=0)
    p90: float = Field(gt=0)
    gpus: tuple[str, ...] = ()  # the GPUs its rows ran on; empty where not every row names one
    # (fewest, most) active parameters of its rows' models; empty where not every row names its model's count
    active_params: tuple[int, int] | tuple[()] = ()
    source: str


@lru_cache(maxsize=1)
def load_residuals() -> dict[str, Residual]:
    data = yaml.load(packaged_text("residuals.yaml"), Loader=PACKAGED_LOADER)
    return {name: Residual.model_validate(entry) for name, entry in data["families"].items()}
