"""Load the packaged catalogs (and a user's additions) into validated entries.

A user catalog file has the packaged shape (`entries:` list); an entry whose id exists already is merged
field by field (so `{id: h100-sxm-80gb, price_usd_per_gpu_hour: {spot: 1.9}}` changes one price).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..diagnostics import PlanInputError
from ..source import load_yaml_file
from .types import GpuSpec, ModelPreset

# The packaged catalogs are our own files, read once per process: with libyaml's safe parser where PyYAML has it
# (the same data, about 6x faster; tests/test_catalog_loader.py checks that both parsers agree on them). A user's
# catalog keeps PyYAML's own parser, whose error messages the diagnostics quote.
PACKAGED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CatalogError(ValueError):
    """A user catalog that cannot be read or does not validate; `file`, `line` and `column` say where, when known."""

    def __init__(self, message: str, file: str = "", line: int = 0, column: int = 0):
        super().__init__(message)
        self.file, self.line, self.column = file, line, column


def packaged_text(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _packaged(name: str) -> list[dict]:
    return yaml.load(packaged_text(name), Loader=PACKAGED_LOADER)["entries"]


def _merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def _user_entries(path: Path):
    """A user catalog goes through the plan's own loader (a regular file, size, node and depth caps, standard tags
    only); its errors name the file and the position, never quote the file's text (it may be any file, e.g. a .env).
    Returns the entries and the loaded document (for positions)."""
    path = Path(path)
    try:
        loaded = load_yaml_file(path)
    except PlanInputError as exc:
        first = exc.diagnostics[0]
        raise CatalogError(f"catalog: {first.message}", str(path), first.line, first.column) from None
    data = loaded.data
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise CatalogError("a catalog must be a mapping with an 'entries' list", str(path), 1, 1)
    for index, entry in enumerate(data["entries"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("id"), str)):
            where = loaded.position(("entries", index))
            raise CatalogError("every catalog entry needs a string 'id'", str(path), where.line, where.column)
    return data["entries"], loaded


def _build(kind: type, raw: dict[str, dict], origin: str, user=None) -> dict[str, Any]:
    """Validated entries; `user` (the user catalog's entries and loaded document) locates an error in that file."""
    built = {}
    for ident, entry in sorted(raw.items()):
        try:
            built[ident] = kind.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = "".join(f"{part}: " for part in [".".join(map(str, first["loc"]))] if part)
            if user is None or not any(e["id"] == ident for e in user[0]):
                raise CatalogError(f"{origin}: entry '{ident}': {where}{first['msg']}") from None
            index = next(i for i, e in enumerate(user[0]) if e["id"] == ident)
            at = user[1].position(("entries", index, *first["loc"]))
            raise CatalogError(f"entry '{ident}': {where}{first['msg']}", origin, at.line, at.column) from None
    return built


@cache
def _packaged_gpus() -> dict[str, GpuSpec]:
    return _build(GpuSpec, {e["id"]: e for e in _packaged("gpus.yaml")}, "gpus.yaml")


@cache
def _packaged_models() -> dict[str, ModelPreset]:
    return _build(ModelPreset, {e["id"]: e for e in _packaged("models.yaml")}, "models.yaml")


def _with_user(packaged: dict[str, Any], kind: type, extra: Path | None) -> dict[str, Any]:
    if extra is None:
        return dict(packaged)
    raw = {ident: entry.model_dump() for ident, entry in packaged.items()}
    user = _user_entries(extra)
    for entry in user[0]:
        raw[entry["id"]] = _merge(raw.get(entry["id"], {}), entry)
    return _build(kind, raw, str(extra), user)


def load_gpus(extra: Path | None = None) -> dict[str, GpuSpec]:
    """The packaged GPU catalog, plus (and overridden by) the entries of the user catalog `extra`."""
    return _with_user(_packaged_gpus(), GpuSpec, extra)


def load_models(extra: Path | None = None) -> dict[str, ModelPreset]:
    """The packaged model presets, plus (and overridden by) the entries of the user catalog `extra`."""
    return _with_user(_packaged_models(), ModelPreset, extra)
