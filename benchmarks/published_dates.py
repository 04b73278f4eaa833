"""When each calibration row was published: the latest year its model, source and notes name (a 20xx year, an arXiv
id's YYMM, or the release of a model or engine in RELEASES), or None where they name none. The time split of
benchmarks/residuals.py keeps rows published after its cut-off out of every fit; undated rows stay in the fit (they
cannot be placed after the cut-off)."""

from __future__ import annotations

import csv
import re
from functools import cache
from pathlib import Path

CALIBRATION = Path(__file__).resolve().parent / "calibration"
YEAR = re.compile(r"\b(20[12]\d)\b")
ARXIV = re.compile(r"arXiv[: ]*(\d\d)\d\d\.\d{4,5}", re.IGNORECASE)


def year_in(text: str) -> int | None:
    years = [int(y) for y in YEAR.findall(text)] + [2000 + int(y) for y in ARXIV.findall(text)]
    released = release_year(text)
    return max(years + ([released] if released else []), default=None)


def _row_year(row: dict) -> int | None:
    return year_in(
        " ".join(row.get(column) or "" for column in ("model", "source", "notes", "quote", "engine", "engine_version"))
    )


@cache
def years_by(file: str, key: str) -> dict[str, int | None]:
    """{row[key]: year} over one calibration CSV."""
    with (CALIBRATION / file).open(encoding="utf-8") as handle:
        return {row[key]: _row_year(row) for row in csv.DictReader(handle)}


@cache
def years_by_index(file: str) -> tuple[int | None, ...]:
    with (CALIBRATION / file).open(encoding="utf-8") as handle:
        return tuple(_row_year(row) for row in csv.DictReader(handle))


def year_by_prefix(name: str, file: str, key: str) -> int | None:
    """The year of the row whose key is the longest prefix of a case name (cases are named after their row)."""
    matches = [k for k in years_by(file, key) if k and name.startswith(k)]
    return years_by(file, key)[max(matches, key=len)] if matches else None


# A row cannot be older than the model it measures nor the software that ran it: the year each was first released,
# with its announcement. A row's year is the latest of the years its source states and the releases it names.
RELEASES = (
    (r"Llama[- ]?3\.1", 2024, "Meta, 'Introducing Llama 3.1', 2024-07-23"),
    (r"Llama[- ]?3\.2", 2024, "Meta, 'Llama 3.2: Revolutionizing edge AI and vision', 2024-09-25"),
    (r"Llama[- ]?3\.3", 2024, "Meta, Llama-3.3-70B-Instruct model card, 2024-12-06"),
    (r"Llama[- ]4(?![0-9])", 2025, "Meta, 'The Llama 4 herd', 2025-04-05"),
    (r"Qwen3", 2025, "Qwen team, 'Qwen3: Think Deeper, Act Faster', 2025-04-29"),
    (r"Mixtral[- ]8x22B", 2024, "Mistral AI, 'Cheaper, Better, Faster, Stronger' (Mixtral 8x22B), 2024-04-17"),
    (r"TensorRT-LLM 0\.17", 2025, "NVIDIA/TensorRT-LLM pull request #2725, 'TensorRT-LLM v0.17 Release', 2025-01-30"),
)


def release_year(text: str) -> int | None:
    """The latest release (RELEASES) a row's name or source names, or None where it names none listed."""
    years = [year for pattern, year, _ in RELEASES if re.search(pattern, text)]
    return max(years) if years else None


def published_year(name: str, stated: int | None) -> int | None:
    """A row's year: the one its source states, but never before the release of a model its name names."""
    years = [y for y in (stated, release_year(name)) if y is not None]
    return max(years) if years else None
