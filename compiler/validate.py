"""Turn a loaded YAML document into a PlanSpec, or into located diagnostics (all of them at once)."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from .diagnostics import Diagnostic, PlanInputError, did_you_mean
from .plan.spec import PlanSpec
from .plan.spec_fields import DNS1123_LABEL
from .source import LoadedYaml, Loc

# pydantic error types -> our stable diagnostic codes
_CODES = {
    "missing": "missing-field",
    "extra_forbidden": "unknown-key",
    "literal_error": "invalid-choice",
    "enum": "invalid-choice",
    "string_pattern_mismatch": "invalid-format",
    "string_too_short": "invalid-format",
    "string_too_long": "invalid-format",
    "greater_than": "out-of-range",
    "greater_than_equal": "out-of-range",
    "less_than": "out-of-range",
    "less_than_equal": "out-of-range",
    "finite_number": "out-of-range",
}


def _data_path(data: Any, loc: tuple) -> Loc:
    """Keep only the parts of a pydantic loc that index into the data (drops union/validator tags)."""
    path: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not re.search(r"[\[\(]", part):
            path.append(part)  # a missing or unknown key: keep it, stop walking
            node = None
            continue
        else:
            continue
        path.append(part)
    return tuple(path)


def _model_at(model: type[BaseModel], path: Loc) -> type[BaseModel] | None:
    """The pydantic model class that describes the mapping at `path` (for "did you mean")."""
    current: Any = model
    for part in path:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        current = _unwrap(current.model_fields[part].annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _unwrap(arg)
            if isinstance(found, type) and issubclass(found, BaseModel):
                return found
    return annotation


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _diagnostic(err: dict, loaded: LoadedYaml) -> Diagnostic:
    path = _data_path(loaded.data, err["loc"])
    kind = err["type"]
    code = _CODES.get(kind, kind if "-" in kind else "invalid-value")
    message = err["msg"]
    at_key = False
    if kind == "extra_forbidden":
        parent = _model_at(PlanSpec, path[:-1])
        hint = did_you_mean(str(path[-1]), parent.model_fields) if parent else ""
        message = f"unknown key '{path[-1]}'{hint}"
        at_key = True
    elif kind == "missing":
        message = f"required field '{path[-1]}' is missing"
        at_key = True
    elif kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        options = re.findall(r"'([^']*)'", expected)
        message = f"expected one of {expected}, got {_describe(err['input'])}{did_you_mean(str(err['input']), options)}"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        message = f"{message[0].lower()}{message[1:]}, got {_describe(err['input'])}"
        code = "invalid-type"
    elif kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == DNS1123_LABEL:
        message = (
            f"expected a DNS-1123 label (lowercase letters, digits and '-', at most 63), got {_describe(err['input'])}"
        )
    elif code in ("out-of-range", "invalid-format"):
        message = f"{message[0].lower()}{message[1:]}, got {_describe(err['input'])}"
    pos = loaded.position(path, key=at_key)
    return Diagnostic(pos.line, pos.column, ".".join(map(str, path)), message, code, file=loaded.file)


def _best_per_path(errors: list[dict], data: Any) -> list[dict]:
    """A union reports one error per branch; keep the most specific one per field path."""
    chosen: dict[Loc, dict] = {}
    for err in errors:
        path = _data_path(data, err["loc"])
        specific = "-" in err["type"]
        if path not in chosen or (specific and "-" not in chosen[path]["type"]):
            chosen[path] = err
    return list(chosen.values())


def validate_plan(loaded: LoadedYaml) -> PlanSpec:
    if not isinstance(loaded.data, dict):
        raise PlanInputError(
            [
                Diagnostic(
                    1,
                    1,
                    "",
                    f"a plan is a mapping of keys, got {type(loaded.data).__name__}",
                    "invalid-type",
                    file=loaded.file,
                )
            ],
            loaded.text,
        )
    try:
        return PlanSpec.model_validate(loaded.data)
    except ValidationError as exc:
        errors = _best_per_path(exc.errors(include_url=False), loaded.data)
        raise PlanInputError([_diagnostic(e, loaded) for e in errors], loaded.text) from None
