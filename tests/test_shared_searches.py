"""One run over many plans: plans that ask the same training question share one search, with the same outputs."""

from __future__ import annotations

from pathlib import Path

import yaml

from compiler.catalog.fabrics import load_fabrics
from compiler.catalog.loader import load_gpus, load_models
from compiler.catalog.params import count_params
from compiler.pipeline import compile_plan, one_run
from compiler.sizing.search_cache import SearchCache
from compiler.sizing.train.search import TrainRequest, search_training

FABRICS = load_fabrics()
EXAMPLE = Path(__file__).resolve().parent.parent / "examples/llama3-8b-pretrain.yaml"


def _request(**overrides) -> TrainRequest:
    arch = load_models()["llama-3.1-8b"].architecture
    args = dict(
        arch=arch,
        params=count_params(arch),
        tokens=1e11,
        seq_len=8192,
        global_batch_sequences=512,
        gpu_ids=("h100-sxm-80gb",),
        max_gpus=64,
        interconnect=FABRICS.interconnects["ib-400g"],
        storage=FABRICS.storage["lustre"],
    )
    return TrainRequest(**{**args, **overrides})


def test_searches_are_shared_only_inside_a_run():
    gpus = load_gpus()
    assert search_training(_request(), gpus) is not search_training(_request(), gpus)
    searches = SearchCache()
    first = search_training(_request(), gpus, searches)
    assert search_training(_request(), gpus, searches) is first
    other = search_training(_request(tokens=2e11), gpus, searches)
    assert other is not first and other.chosen.wall_seconds > first.chosen.wall_seconds
    assert search_training(_request(), gpus, SearchCache()) is not first
    assert search_training(_request(), gpus) == first


def test_a_changed_catalog_entry_is_another_question():
    gpus = load_gpus()
    cheaper = {
        **gpus,
        "h100-sxm-80gb": gpus["h100-sxm-80gb"].model_copy(
            update={"price_usd_per_gpu_hour": {"on-demand": 1.0, "spot": 0.5, "reserved": 0.8}}
        ),
    }
    searches = SearchCache()
    assert (
        search_training(_request(), gpus, searches).chosen.cost_usd
        != search_training(_request(), cheaper, searches).chosen.cost_usd
    )


def test_a_changed_fabric_entry_is_another_question():
    gpus, searches = load_gpus(), SearchCache()
    slow = FABRICS.interconnects["ib-400g"].model_copy(update={"bytes_per_second_per_gpu": 1e9})
    fast = search_training(_request(gpu_count=64), gpus, searches)
    assert search_training(_request(gpu_count=64, interconnect=slow), gpus, searches) is not fast
    assert len(searches) == 2


def test_plans_in_one_run_compile_as_they_do_alone(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    paths = []
    for name in ("first", "second"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**data, "name": name}, sort_keys=False))
        paths.append(path)
    alone = [compile_plan(p) for p in paths]
    with one_run() as searches:
        together = [compile_plan(p, searches=searches) for p in paths]
    assert together == alone
    assert len(searches) == 1  # the two plans asked one question
