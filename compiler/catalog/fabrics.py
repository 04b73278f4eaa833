"""Inter-node fabrics and storage kinds, from the packaged fabrics.yaml (each entry with its source)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from .loader import PACKAGED_LOADER, packaged_text


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Interconnect(_Entry):
    id: str
    name: str
    family: Literal["ib", "roce", "efa", "tcp"]
    bytes_per_second_per_gpu: float
    bytes_per_second_per_node: float
    latency_seconds: float
    source: str


class Storage(_Entry):
    id: str
    name: str
    read_bytes_per_second: float
    write_bytes_per_second: float
    shared: bool
    source: str
    aggregate_write_bytes_per_second: float | None = None  # the whole filesystem's ceiling, all clients together
    aggregate_source: str = ""


@dataclass(frozen=True)
class Fabrics:
    interconnects: dict[str, Interconnect]
    storage: dict[str, Storage]


@lru_cache(maxsize=1)
def load_fabrics() -> Fabrics:
    data = yaml.load(packaged_text("fabrics.yaml"), Loader=PACKAGED_LOADER)
    return Fabrics(
        interconnects={e["id"]: Interconnect.model_validate(e) for e in data["interconnects"]},
        storage={e["id"]: Storage.model_validate(e) for e in data["storage"]},
    )
