"""The axes of the SVG charts: the unit an axis writes its numbers in (as the tables do), round ticks, and a linear or
logarithmic scale from values to pixels (charts.py draws them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """How an axis writes its numbers: value / scale, then prefix and suffix ("$", "k"; "", " d")."""

    scale: float
    prefix: str = ""
    suffix: str = ""


def seconds_unit(largest: float) -> Unit:
    """The unit the tables use for a duration of this size (units.format_seconds' thresholds)."""
    for scale, suffix in ((86400, " d"), (3600, " h"), (60, " min"), (1, " s")):
        if largest >= scale:
            return Unit(scale, suffix=suffix)
    return Unit(1e-3, suffix=" ms")


def usd_unit(largest: float) -> Unit:
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if largest >= scale:
            return Unit(scale, "$", suffix)
    return Unit(1, "$")


@dataclass(frozen=True)
class Axis:
    label: str
    unit: Callable[[float], Unit]
    limit: float | None = None  # a deadline, budget or SLO, drawn as a dashed line
    limit_label: str = ""
    checked: str = ""  # the quantile the limit is checked at, said on its line: "checked at P90"

    def limit_text(self, value: str) -> str:
        return f"{self.limit_label} {value}" + (f" ({self.checked})" if self.checked else "")


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 × 10^k (Heckbert, "Nice numbers for graph
    labels", Graphics Gems 1990)."""
    span = high - low or abs(high) or 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    return [round(first + i * step, 12) for i in range(int(math.ceil((high - first) / step - 1e-9)) + 1)]


def axis_range(values: list[float]) -> tuple[float, float]:
    """From zero when the values spread over more than half their size; otherwise around them, so options
    $173.0k-$175.4k do not collapse into one line at the edge of a 0-$200k axis."""
    low, high = min(values), max(values)
    if low <= 0.5 * high:
        return 0.0, high * 1.1 or 1.0
    pad = (high - low) * 0.15 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


LOG_SPAN = 30.0  # an axis whose values span more than this factor is drawn on a log scale


def _log_ticks(values: list[float], unit: Unit) -> tuple[tuple[float, float], float, list[float]]:
    """Decades (× 1, 2, 5 when they give fewer than three) covering the values, in the display unit; returned in
    base units."""
    low, high = min(values) / unit.scale, max(values) / unit.scale
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks: list[float] = []
    for steps in ((1,), (1, 2, 5)):  # decades, or 1-2-5 within them when decades give fewer than three ticks
        ticks = [m * 10.0**k for k in range(first, last + 1) for m in steps if low / 1.5 <= m * 10.0**k <= high * 1.5]
        if len(ticks) >= 3:
            break
    lo, hi = min(low / 1.2, ticks[0]), max(high * 1.2, ticks[-1])
    step = min(ticks) if ticks else 1.0
    return (lo * unit.scale, hi * unit.scale), step * unit.scale, [t * unit.scale for t in ticks]


def _scale(values: list[float], unit: Unit, start: float, length: float):
    """(range, tick step, ticks, position of a value, log?) of one axis: linear, or log where values span decades."""
    positive = [v for v in values if v > 0]
    if positive and len(positive) == len(values) and max(values) / min(values) > LOG_SPAN:
        (lo, hi), step, ticks = _log_ticks(values, unit)
        span = math.log10(hi) - math.log10(lo)
        return (lo, hi), step, ticks, lambda v: start + length * (math.log10(max(v, lo)) - math.log10(lo)) / span, True
    (lo, hi), step, ticks = _scaled_ticks(values, unit)
    return (lo, hi), step, ticks, lambda v: start + length * (v - lo) / (hi - lo), False


def _scaled_ticks(values: list[float], unit: Unit) -> tuple[tuple[float, float], float, list[float]]:
    """The axis range, tick step and ticks, nice in the axis' display unit (days, $k), returned in base units."""
    low, high = axis_range([v / unit.scale for v in values])
    ticks = nice_ticks(low, high)
    step = (ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    low, high = min(low, ticks[0]), max(high, ticks[-1])
    return (low * unit.scale, high * unit.scale), step * unit.scale, [t * unit.scale for t in ticks]


def tick_text(value: float, unit: Unit, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step / unit.scale) + 1e-9)) if step > 0 else 0
    return f"{unit.prefix}{value / unit.scale:.{decimals}f}{unit.suffix}"


@dataclass(frozen=True)
class ScaledAxis:
    """One axis as drawn: its display unit, range, tick step and ticks, where a value lands (px), log scale or not."""

    axis: Axis
    unit: Unit
    lo: float
    hi: float
    step: float
    ticks: list[float]
    at: Callable[[float], float]
    log: bool

    def text(self, value: float) -> str:
        return tick_text(value, self.unit, self.step)

    def label(self) -> str:
        """The axis label, saying when the scale is logarithmic."""
        return self.axis.label + (" (log scale)" if self.log else "")


def scaled_axis(axis: Axis, values: list[float], start: float, length: float) -> ScaledAxis:
    unit = axis.unit(max(values))
    (lo, hi), step, ticks, at, log = _scale(values, unit, start, length)
    return ScaledAxis(axis, unit, lo, hi, step, ticks, at, log)
