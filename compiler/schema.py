"""JSON Schemas generated from the pydantic models (committed under schemas/, checked for drift by a test)."""

from __future__ import annotations

from typing import Any

from .plan.resolved import ResolvedPlan
from .plan.spec import PlanSpec

SCHEMA_ID = "https://mlinfra-compile.dev/schemas/"


def plan_schema() -> dict[str, Any]:
    schema = PlanSpec.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID + "plan.schema.json"
    schema["title"] = "mlinfra-compile plan"
    return schema


def resolved_schema() -> dict[str, Any]:
    schema = ResolvedPlan.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID + "resolved.schema.json"
    schema["title"] = "mlinfra-compile resolved plan (out/<plan>/plan.json)"
    return schema
