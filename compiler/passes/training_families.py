"""The published families a training plan is judged by (residuals.yaml): which family's actual ÷ predicted gives
its step time, wall time and cost ranges, the factor its deadline and budget are checked with, and the memory margin
its layouts must fit under."""

from __future__ import annotations

from ..catalog.catalog import Catalog
from ..catalog.residuals import Residual
from ..catalog.types import Architecture

STEP_FAMILY = "train-step-time"  # residuals.yaml: published runs' step time ÷ ours
WHOLE_RUN_FAMILY = "train-whole-run"  # published whole pre-training runs' GPU-hours ÷ ours


CNN_TRAIN_FAMILY = "train-cnn"  # published CNN training images/s ÷ ours (benchmarks/accuracy_cnn_train.py)


def _cnn_with_table(arch: Architecture | None) -> bool:
    return arch is not None and arch.kind == "cnn" and bool(arch.layer_table)


def step_family(arch: Architecture | None) -> str:
    """The published family a plan's step time and throughput are judged by: CNN training rows for a CNN sized layer
    by layer, the transformer training rows otherwise."""
    return CNN_TRAIN_FAMILY if _cnn_with_table(arch) else STEP_FAMILY


def time_family(workload: str, arch: Architecture | None = None) -> str:
    """The published family a plan's wall time, GPU-hours and cost are judged by: whole pre-training runs for a
    pre-training plan (they pay what a steady step leaves out), steady steps for a fine-tune (no published whole
    run resembles one) and for a CNN with a layer table (its own steady-step rows; no published whole CNN run)."""
    if _cnn_with_table(arch):
        return CNN_TRAIN_FAMILY
    return WHOLE_RUN_FAMILY if workload == "train" else STEP_FAMILY


def time_residual(catalog: Catalog, family: str, arch: Architecture | None = None, gpu: str = "") -> Residual:
    """A training-time family's actual ÷ predicted. Where a site calibration fitted the GPU's shares to measured
    training steps (cluster.calibration), the fit already holds what the published steps' median corrects: every
    training-time family is divided by the steady-step family's P50, so the step's median is the fit itself and a
    whole run keeps only what its median adds beyond a steady step (failures, restarts, stragglers). A GPU the site
    did not measure keeps the published median."""
    published = catalog.residuals[family]
    if gpu not in catalog.site_fitted_training:
        return published
    step = catalog.residuals[step_family(arch)].p50
    return published.model_copy(
        update={"p10": published.p10 / step, "p50": published.p50 / step, "p90": published.p90 / step}
    )


def gate_factor(
    catalog: Catalog, workload: str, quantile: str, arch: Architecture | None = None, gpu: str = ""
) -> float:
    """What deadline and budget check time and cost with on `gpu`: the plan's family's actual ÷ predicted at the
    plan's quantile (time_residual), never below 1 (a pessimistic prediction is not relaxed). The same family gives
    the report's range, so a plan never passes its gate with a P90 beyond its deadline."""
    return max(1.0, getattr(time_residual(catalog, time_family(workload, arch), arch, gpu), quantile))


def gate_factors(
    catalog: Catalog, workload: str, quantile: str, arch: Architecture | None, gpus: tuple[str, ...]
) -> tuple[tuple[str, float], ...]:
    """gate_factor on each GPU the search may choose (a site calibration re-centres only the GPUs it measured)."""
    return tuple((gpu, gate_factor(catalog, workload, quantile, arch, gpu)) for gpu in gpus)


MEMORY_FAMILY = {"full": "memory-full", "lora": "memory-lora", "qlora": "memory-qlora"}


def memory_factor(catalog: Catalog, method: str, quantile: str) -> float:
    """The memory margin: measured ÷ predicted peak of the method's published rows at the plan's quantile, or for
    full training the site's own measured ÷ predicted peak (a site calibration file's memory), never below 1 (a
    prediction that runs high is not trimmed)."""
    if quantile == "none":
        return 1.0
    if method == "full" and catalog.site_memory_factor is not None:
        return max(1.0, catalog.site_memory_factor)
    return max(1.0, getattr(catalog.residuals[MEMORY_FAMILY[method]], quantile))


def memory_source(catalog: Catalog, method: str, quantile: str) -> str:
    """Where memory_factor's number comes from, in words for the report."""
    if method == "full" and catalog.site_memory_factor is not None:
        return catalog.site_memory_source + "; cluster.calibration"
    return f"measured ÷ predicted at {quantile.upper()} of {catalog.residuals[MEMORY_FAMILY[method]].rows} published peaks; train.memory_quantile"
