"""Units: parse human quantities once, at the boundary, into integers and floats with fixed meaning.

Conventions (never ambiguous):

* sizes are integer **bytes**; ``KB/MB/GB/TB`` are powers of 10, ``KiB/MiB/GiB/TiB`` powers of 2;
* rates are float **bytes per second**; ``b`` is a bit and ``B`` a byte (``400Gb/s`` = 5e10 B/s,
  ``55GB/s`` = 5.5e10 B/s, ``8GT/s`` is not a rate here);
* times are integer **picoseconds** (``ps, ns, us, µs, ms, s``).

Examples
--------
>>> parse_size("4KiB"), parse_size("1.5 MiB"), parse_size("4KB")
(4096, 1572864, 4000)
>>> parse_rate("400Gb/s"), parse_rate("55GB/s")
(50000000000.0, 55000000000.0)
>>> parse_time("600ns"), parse_time("1.5us")
(600000, 1500000)
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

PS_PER_NS = 1_000
PS_PER_US = 1_000_000
PS_PER_MS = 1_000_000_000
PS_PER_S = 1_000_000_000_000

MAX_CLOCK_PS = 2**63 - 1
"""The engines' clock is int64 picoseconds: about 106 days of simulated time."""
MAX_DURATION_PS = 86_400 * PS_PER_S
"""One day: no duration or time a scenario names is longer, so sums of a few stay far inside the clock."""
MAX_SIZE_B = 2**48
"""256 TiB, x86-64's 48-bit virtual address space: no buffer or allocation is larger."""
MIN_RATE_BPS = 1e6 / 8
"""1 Mb/s, a thousand times slower than any NIC or PCIe link, so a message's time stays inside the clock."""
MAX_RATE_BPS = 1e14 / 8
"""100 Tb/s, sixty times the fastest port built (1.6 Tb/s): beyond it a rate is a typing slip, not a link."""

_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_TIME_UNITS = {"ps": 1, "ns": PS_PER_NS, "us": PS_PER_US, "µs": PS_PER_US, "ms": PS_PER_MS, "s": PS_PER_S}
_RATE_PREFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}

# At most 30 digits and a 3-digit exponent: every number a quantity needs, none that is costly to evaluate.
_DIGITS = r"[0-9]{1,30}(?:\.[0-9]{0,30})?(?:[eE][+-]?[0-9]{1,3})?"
_NUMBER = rf"(?P<num>{_DIGITS})"
_BARE_RE = re.compile(rf"^\s*[+-]?{_NUMBER}\s*$")
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-z]*)\s*$")
_TIME_UNIT = "|".join(_TIME_UNITS)
_RATE_PREFIXES = "Ki|Mi|Gi|[KMGT]?"
_TIME_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>{_TIME_UNIT})\s*$")
_RATE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<prefix>{_RATE_PREFIXES})(?P<unit>b|B)(?:/s|ps)\s*$")

SIZE_PATTERN = rf"^\s*{_DIGITS}\s*(?:{'|'.join(_SIZE_UNITS)})\s*$"
"""The sizes the parser accepts, as a JSON Schema (ECMA-262) pattern, for editors."""
TIME_PATTERN = rf"^\s*{_DIGITS}\s*(?:{_TIME_UNIT})\s*$"
"""The durations the parser accepts, as a JSON Schema pattern."""
RATE_PATTERN = rf"^\s*{_DIGITS}\s*(?:{_RATE_PREFIXES})[bB](?:/s|ps)\s*$"
"""The rates the parser accepts, as a JSON Schema pattern."""


class UnitError(ValueError):
    """A quantity could not be parsed or lies outside its bounds; the message names the accepted forms."""


class BoundError(UnitError):
    """A well-formed quantity outside its dimension's bounds; the message names the bound."""


def _text(value: object, example_unit: str, what: str) -> str:
    """``value`` as the text of a quantity; a number without a unit, an infinity or NaN, or another non-string is
    refused."""
    bare = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)
    if bare or isinstance(value, str) and _BARE_RE.match(value):
        number = str(value).strip()
        raise UnitError(f"{number}: give a unit, e.g. '{number}{example_unit}'")
    if not isinstance(value, str):
        raise UnitError(f"expected {what}, got {value!r}")
    return value


def _within(exact: Fraction, low: int | float, high: int | float, value: str, what: str, shown) -> None:
    """Refuse ``exact`` outside ``low .. high``, naming the bound (rendered by ``shown``) it crosses."""
    if exact < Fraction(low):
        raise BoundError(f"{what} {value!r} is below the minimum of {shown(low)}")
    if exact > Fraction(high):
        raise BoundError(f"{what} {value!r} is above the maximum of {shown(high)}")


def parse_size(value: str) -> int:
    """Parse a size with a unit into integer bytes, ``0 .. MAX_SIZE_B``.

    :raises UnitError: a missing or unknown unit, a negative, fractional or too large byte count.
    """
    text = _text(value, "B", "a size such as '4KiB'")
    match = _SIZE_RE.match(text)
    if not match or match["unit"] not in _SIZE_UNITS:
        raise UnitError(f"expected a size such as '4KiB', '64KB' or '4096B', got {value!r} "
                        f"(units: {', '.join(_SIZE_UNITS)})")
    exact = Fraction(match["num"]) * _SIZE_UNITS[match["unit"]]
    _within(exact, 0, MAX_SIZE_B, text, "size", format_size)
    if exact.denominator != 1:
        raise UnitError(f"size {value!r} is not a whole number of bytes")
    return int(exact)


def parse_time(value: str) -> int:
    """Parse a duration with a unit into integer picoseconds, ``0 .. MAX_DURATION_PS``.

    :raises UnitError: a missing or unknown unit, a negative, sub-picosecond or too long value.
    """
    text = _text(value, "ns", "a duration such as '600ns'")
    match = _TIME_RE.match(text)
    if not match:
        raise UnitError(f"expected a duration such as '600ns', '1.5us' or '2ms', got {value!r} "
                        f"(units: {', '.join(_TIME_UNITS)})")
    exact = Fraction(match["num"]) * _TIME_UNITS[match["unit"]]
    _within(exact, 0, MAX_DURATION_PS, text, "duration", format_time)
    if exact.denominator != 1:
        raise UnitError(f"duration {value!r} is finer than one picosecond")
    return int(exact)


def parse_rate(value: str) -> float:
    """Parse a data rate into bytes per second (``b`` = bit, ``B`` = byte), ``MIN_RATE_BPS .. MAX_RATE_BPS``.

    :raises UnitError: a missing or unknown unit, or a rate outside the bounds.
    """
    text = _text(value, "Gb/s", "a rate such as '400Gb/s'")
    match = _RATE_RE.match(text)
    if not match:
        raise UnitError(f"expected a rate such as '400Gb/s' or '55GB/s', got {value!r} "
                        "(b = bit, B = byte; prefixes K M G T Ki Mi Gi)")
    exact = Fraction(match["num"]) * _RATE_PREFIX[match["prefix"]] / (8 if match["unit"] == "b" else 1)
    _within(exact, MIN_RATE_BPS, MAX_RATE_BPS, text, "rate", _format_bits)
    return float(exact)


def transfer_ps(nbytes: int, rate_Bps: float) -> int:
    """Time in integer picoseconds to move ``nbytes`` at ``rate_Bps`` bytes per second (rounded to nearest)."""
    return int(nbytes * PS_PER_S / rate_Bps + 0.5)


def ps_to_us(ps: int | float) -> float:
    """Picoseconds to microseconds (float, for output columns)."""
    return ps / PS_PER_US


def _format_bits(rate_Bps: float) -> str:
    """A rate in bits per second with the largest decimal prefix: ``1.25e13 -> '100Tb/s'``."""
    bits = rate_Bps * 8
    for prefix in ("T", "G", "M", "K"):
        if bits >= _RATE_PREFIX[prefix]:
            return f"{bits / _RATE_PREFIX[prefix]:g}{prefix}b/s"
    return f"{bits:g}b/s"


def format_time(ps: int) -> str:
    """Render picoseconds with the largest unit that keeps a short number: ``86_400 * PS_PER_S -> '86400s'``."""
    for unit in ("s", "ms", "us", "ns"):
        if ps >= _TIME_UNITS[unit]:
            return f"{ps / _TIME_UNITS[unit]:g}{unit}"
    return f"{ps}ps"


def format_size(nbytes: int) -> str:
    """Render bytes with the largest exact binary unit: ``4096 -> '4KiB'``, ``1000 -> '1000B'``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = _SIZE_UNITS[unit]
        if nbytes and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def format_size_about(nbytes: int, spec: str = ".1f") -> str:
    """Render bytes in the largest binary unit they reach, the number formatted by ``spec``:
    ``3 * 2**30 + 2**29 -> '3.5GiB'``, ``2**10 -> '1.0KiB'``, ``512 -> '512B'``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = _SIZE_UNITS[unit]
        if nbytes >= factor:
            return f"{nbytes / factor:{spec}}{unit}"
    return f"{nbytes}B"


def format_duration(ps: float, digits: int = 4) -> str:
    """Render picoseconds to ``digits`` significant digits in the largest unit they reach, for tables and
    messages: ``337_675_611 -> '337.7us'``, ``20 * PS_PER_MS -> '20ms'``, ``850_000 -> '850ns'``."""
    for unit in ("s", "ms", "us", "ns"):
        shown = f"{ps / _TIME_UNITS[unit]:.{digits}g}"
        if abs(float(shown)) >= 1:  # after rounding: 999.99996us is '1ms'
            return f"{shown}{unit}"
    return f"{ps:.{digits}g}ps"
