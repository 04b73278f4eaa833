"""The plan reference table in README.md, generated from the pydantic models (a test keeps it in sync).

Run `python -m compiler.docs` to print it, `python -m compiler.docs --write` (in the repo root) to regenerate
README's reference and the committed schemas.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from .plan.spec import PlanSpec
from .validate import _unwrap

BEGIN, END = "<!-- plan-reference:begin -->", "<!-- plan-reference:end -->"


def _type_name(annotation: typing.Any) -> str:
    """A short, readable type: Annotated metadata dropped, quantities named as such."""
    if "BeforeValidator" in str(annotation):
        return "quantity (number, or string with a unit)"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None)) + (
            " or null" if type(None) in args else ""
        )
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (list, dict):
        return f"{origin.__name__} of " + ", ".join(_type_name(a) for a in args)
    return getattr(annotation, "__name__", str(annotation))


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        nested = _unwrap(field.annotation)
        default = "" if field.is_required() else repr(field.get_default(call_default_factory=True))
        if isinstance(nested, type) and issubclass(nested, BaseModel) and nested is not PlanSpec:
            rows.append(f"| `{path}` | section | {field.description or ''} | |")
            rows.extend(_rows(nested, path + "."))
            continue
        description = (field.description or "").replace("|", "\\|")
        default = default.replace("|", "\\|")
        if len(default) > 40:
            default = default[:37] + "..."
        type_name = _type_name(field.annotation)
        rows.append(f"| `{path}` | {type_name} | {description} | {default} |")
    return rows


def plan_reference() -> str:
    lines = [BEGIN, "| field | type | meaning | default |", "|---|---|---|---|", *_rows(PlanSpec), END]
    return "\n".join(lines)


def write_generated(repo: Path) -> None:
    """Regenerate the committed schemas and README's plan reference (`python -m compiler.docs --write`)."""
    from .schema import plan_schema, resolved_schema

    for name, schema in (("plan.schema.json", plan_schema()), ("resolved.schema.json", resolved_schema())):
        (repo / "schemas" / name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    readme = (repo / "README.md").read_text()
    readme = readme[: readme.index(BEGIN)] + plan_reference() + readme[readme.index(END) + len(END) :]
    (repo / "README.md").write_text(readme)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_generated(Path.cwd())
    else:
        print(plan_reference())
