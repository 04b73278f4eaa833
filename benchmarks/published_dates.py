"""When each calibration row was published: the latest year its source and notes name (a 20xx year or an arXiv id's
YYMM), or None where they name none. The time split of benchmarks/residuals.py keeps rows published after its
cut-off out of every fit; undated rows stay in the fit (they cannot be placed after the cut-off)."""

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
    return max(years) if years else None


def _row_year(row: dict) -> int | None:
    return year_in(" ".join(row.get(column) or "" for column in ("source", "notes", "quote", "engine_version")))


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
