"""Data shipped with the package: templates/ and schemas/ live at the repo root and are mapped into
the wheel as mlinfra_compile/templates and mlinfra_compile/schemas (pyproject force-include; the package itself
is installed as mlinfra_compile). A source checkout reads them from the repo root instead."""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path


def data_dir(name: str) -> Traversable:
    packaged = resources.files(__package__).joinpath(name)
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / name
