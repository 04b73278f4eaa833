"""Where jobs write: out/runs/<folder>/, beside the plan folders. A compile makes it and never replaces, empties or
removes it, so a job's logs, results and working directory survive any number of recompiles. The path is decided
here, kept in `ResolvedPlan.runs_dir` (and `Probe.runs_dir`), and every target that names a log or result path
reads it from there."""

from __future__ import annotations

RUNS_FOLDER = "runs"  # a plan cannot be named so (spec.PlanSpec.name)


def runs_dir(folder_name: str) -> str:
    """The runs folder of the plan folder `folder_name`, relative to that folder (sbatch --chdir takes it as given)."""
    return f"../{RUNS_FOLDER}/{folder_name}"
