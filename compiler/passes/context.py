"""What every pass is given besides the plan: `PassContext`, built by the pipeline, one per compile.

    pass(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan

`catalog`: GPUs, model presets, fabrics and storage (catalog/catalog.py), the plan's own catalog file merged in.
`searches`: the run's shared search results (sizing/search_cache.py); a compile alone gets a fresh one, the
plans of one CLI run share one (pipeline.one_run). `probe`: decide the probe section (`mlinfra-compile probe`).
Passes read nothing else: no module-global state, no files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..catalog.catalog import Catalog
from ..sizing.search_cache import SearchCache


@dataclass(frozen=True)
class PassContext:
    catalog: Catalog
    searches: SearchCache = field(default_factory=SearchCache)
    probe: bool = False
    probe_gpus: int | None = None  # the probe's GPUs on its one node (None: the node's, up to the plan's)
    probe_neighbours: bool = True  # False: the probe measures the chosen layout only
    # a plan's YAML text resolved by the pipeline (pipeline.resolve_text): the probe compiles its reduced jobs with it
    resolve_text: Callable | None = None
