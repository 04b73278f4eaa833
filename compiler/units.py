"""Quantities a person writes in a plan ("7B", "80GiB", "30d", "$400k") parsed into numbers.

Decimal suffixes (k, M, B/G, T) are powers of 1000; binary byte suffixes (KiB, MiB, GiB, TiB) are powers
of 1024 (IEC 80000-13), so 80GB and 80GiB are never confused.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"

COUNT_SUFFIXES = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
BYTE_SUFFIXES = {
    "B": 1,
    "": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "PB": 1e15,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "PiB": 2**50,
}
SECONDS_PER = {
    "": 1,
    "ms": 1e-3,
    "s": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "d": 86400,
    "w": 7 * 86400,
}
USD_SUFFIXES = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9}


class QuantityError(ValueError):
    """A value that is not the expected kind of quantity; `expected` says what would be."""

    def __init__(self, expected: str, got: object):
        self.expected = expected
        self.got = got
        super().__init__(f"expected {expected}, got {got!r}")


def _parse(value: object, suffixes: dict[str, float], expected: str, prefix: str = "") -> float:
    if isinstance(value, bool):
        raise QuantityError(expected, value)
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float (10**400)
            raise QuantityError(expected, value) from None
    elif isinstance(value, str):
        text = value.strip().replace("_", "").replace(",", "")
        if prefix and text.startswith(prefix):
            text = text[len(prefix) :]
        match = re.fullmatch(_NUMBER + r"\s*(?P<unit>[A-Za-z]*)", text)
        if not match or match["unit"] not in suffixes:
            raise QuantityError(expected, value)
        number = float(match["num"]) * suffixes[match["unit"]]
    else:
        raise QuantityError(expected, value)
    if not math.isfinite(number) or number < 0:
        raise QuantityError(expected, value)
    return number


# What each kind of quantity looks like, in the words of the compiler's errors (the plan schema's too).
COUNT_EXPECTED = "a count like '7B', '2T' or '2e12'"
BYTES_EXPECTED = "a size like '80GiB' or '500GB'"
SECONDS_EXPECTED = "a duration like '30d', '2h' or '150ms'"
USD_EXPECTED = "an amount like '$400k' or '400000'"


def parse_count(value: object) -> float:
    """'7B', '1.5T', '4M', '70e9' or a bare number -> a count."""
    return _parse(value, COUNT_SUFFIXES, COUNT_EXPECTED)


def parse_bytes(value: object) -> int:
    """'80GiB' (binary), '80GB' (decimal) or a bare number of bytes."""
    return int(_parse(value, BYTE_SUFFIXES, BYTES_EXPECTED))


def parse_seconds(value: object) -> float:
    """'30d', '2h', '150ms', '2s' or a bare number of seconds."""
    return _parse(value, SECONDS_PER, SECONDS_EXPECTED)


def parse_usd(value: object) -> float:
    """'$400k', '400k', '1.2M' or a bare number of US dollars."""
    return _parse(value, USD_SUFFIXES, USD_EXPECTED, prefix="$")


def format_count(value: float) -> str:
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def format_bytes(value: float) -> str:
    for suffix, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {suffix}"
    return f"{value:.0f} B"


def format_seconds(value: float) -> str:
    if value >= 86400:
        return f"{value / 86400:.1f} d"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    if value >= 1:
        return f"{value:.2f} s"
    return f"{value * 1e3:.1f} ms"


def format_usd(value: float) -> str:
    if value >= 1e6:
        return f"${value / 1e6:.2f}M"
    if value >= 1e3:
        return f"${value / 1e3:.1f}k"
    return f"${value:.2f}"
