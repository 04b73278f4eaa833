"""Target: tgi — `tgi/launcher.sh`, Hugging Face Text Generation Inference's `text-generation-launcher` with the
serving search's numbers. A multi-stage service gets one launcher per TGI stage under `tgi/<stage>/`.

TGI shards one replica over the GPUs of one node (`--num-shard` = TP); it has no pipeline parallelism and cannot
span nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan.resolved import ResolvedPlan
from .base import OutputFile, Target
from .base import render as render_template
from .engine_common import EngineUnit, engine_units, tgi_launcher_words, unit_path


def applies(plan: ResolvedPlan) -> bool:
    return bool(engine_units(plan, "tgi"))


def launcher_words(plan: ResolvedPlan) -> list[str]:
    """Launcher arguments of a single-unit plan (tests and tools)."""
    return tgi_launcher_words(plan.deployment.engines[0])


def _launcher_sh(unit: EngineUnit) -> str:
    return render_template(
        "tgi/launcher.sh.j2",
        tgi_version=unit.engine.version,
        name=unit.plan.name,
        gpus=unit.serving.tp,
        prefix_caching="1" if unit.engine.prefix_caching else "0",
        words=tgi_launcher_words(unit.engine),
    )


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    return [
        OutputFile(unit_path("tgi", unit, "launcher.sh"), _launcher_sh(unit), 0o755)
        for unit in engine_units(plan, "tgi")
    ]


TARGET = Target("tgi", applies, render)
