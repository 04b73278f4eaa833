"""Serving pieces shared by the engine targets (vllm, triton, tgi) and k8s_serving; not a target itself.

The engine arguments are decided in compiler/deployment/serving/ (`plan.deployment.engines`); here they are only
turned into words: a `vllm serve` command line, a TGI launcher line, a config dict.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..deployment.units import UnitView, unit_views
from ..plan.deployment_serving import Engine, EngineArg
from ..plan.resolved import ResolvedPlan, Serving


@dataclass(frozen=True)
class EngineUnit:
    """One served model and its engine decisions; `plan` is the unit's view (its own model/hardware/serving)."""

    view: UnitView
    engine: Engine

    @property
    def plan(self) -> ResolvedPlan:
        return self.view.plan

    @property
    def serving(self) -> Serving:
        return self.view.plan.serving

    @property
    def directory(self) -> str:
        return self.engine.directory


def engine_units(plan: ResolvedPlan, engine: str) -> list[EngineUnit]:
    """The units served by `engine`: the service itself, or every stage of a multi-stage service using it."""
    if plan.deployment is None:
        return []
    decided = {e.stage: e for e in plan.deployment.engines}
    return [EngineUnit(v, decided[v.stage]) for v in unit_views(plan) if decided[v.stage].engine == engine]


def unit_path(engine: str, unit: EngineUnit, name: str) -> str:
    return "/".join(p for p in (engine, unit.directory, name) if p)


def model_word(model: str) -> str:
    """The model as a positional argument argparse cannot take for a flag: a path starting with "-" gets "./"."""
    return f"./{model}" if model.startswith("-") else model


def flag(arg: EngineArg) -> str:
    return "--" + arg.key.replace("_", "-")


def cli_words(arg: EngineArg) -> list[str]:
    """One vLLM argument as `vllm serve` words: booleans are `--flag` / `--no-flag` (argparse BooleanOptionalAction)."""
    if isinstance(arg.value, bool):
        return [flag(arg) if arg.value else "--no-" + flag(arg)[2:]]
    return [f"{flag(arg)}={arg.value:g}" if isinstance(arg.value, float) else f"{flag(arg)}={arg.value}"]


def vllm_serve_args(engine: Engine) -> list[str]:
    """`vllm serve` arguments: the model positionally (vLLM deprecates `--model` for `serve`), then flags."""
    args = engine.args
    words = [model_word(str(args[0].value))]
    for arg in args[1:]:
        words += cli_words(arg)
    return words


def vllm_engine_config(engine: Engine, *, frontend: bool = True) -> dict[str, object]:
    """The engine arguments keyed by EngineArgs field name (config.yaml; Triton's model.json without the frontend's)."""
    return {a.key: a.value for a in engine.args if frontend or not a.frontend}


def tgi_launcher_words(engine: Engine) -> list[str]:
    return [f"{a.key}={a.value}" for a in engine.args]
