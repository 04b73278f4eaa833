"""The field types of the plan's sections: quantities written the way a person writes them ("7B", "30d", "$400k")
and parsed by `units`, safe text, the catalog ids an editor completes, and `Spec`, the frozen base of every section.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from .. import units

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MAX_PARAMS = 1e14  # model.params: the shape assumed from it stays within catalog.types.ARCHITECTURE_LIMITS
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


def offers(kind: str):
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


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
