"""Data shipped with the package: templates/ and schemas/ live at the repo root and are mapped into
the wheel as compiler/templates and compiler/schemas (pyproject force-include). An editable install or a
source checkout reads them from the repo root instead."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path


def data_dir(name: str) -> Traversable:
    packaged = resources.files("compiler").joinpath(name)
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / name
