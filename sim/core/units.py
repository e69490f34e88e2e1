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

import re
from fractions import Fraction

PS_PER_NS = 1_000
PS_PER_US = 1_000_000
PS_PER_MS = 1_000_000_000
PS_PER_S = 1_000_000_000_000

_SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_TIME_UNITS = {"ps": 1, "ns": PS_PER_NS, "us": PS_PER_US, "µs": PS_PER_US, "ms": PS_PER_MS, "s": PS_PER_S}
_RATE_PREFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-z]*)\s*$")
_TIME_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>ps|ns|us|µs|ms|s)\s*$")
_RATE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?P<prefix>Ki|Mi|Gi|[KMGT]?)(?P<unit>b|B)(?:/s|ps)\s*$")


class UnitError(ValueError):
    """A quantity could not be parsed; the message names the accepted forms."""


def _exact(num: str) -> Fraction:
    return Fraction(num)


def parse_size(value: str | int) -> int:
    """Parse a size into integer bytes; a bare integer is bytes.

    :raises UnitError: unknown unit, negative or fractional byte count.
    """
    if isinstance(value, bool):
        raise UnitError(f"expected a size such as '4KiB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UnitError(f"size must not be negative, got {value}")
        return value
    match = _SIZE_RE.match(str(value))
    if not match or match["unit"] not in _SIZE_UNITS:
        raise UnitError(f"expected a size such as '4KiB', '64KB' or '4096', got {value!r} "
                        f"(units: {', '.join(u for u in _SIZE_UNITS if u)})")
    exact = _exact(match["num"]) * _SIZE_UNITS[match["unit"]]
    if exact.denominator != 1:
        raise UnitError(f"size {value!r} is not a whole number of bytes")
    return int(exact)


def parse_time(value: str | int) -> int:
    """Parse a duration into integer picoseconds; a bare integer is picoseconds.

    :raises UnitError: unknown unit, negative or sub-picosecond value.
    """
    if isinstance(value, bool):
        raise UnitError(f"expected a duration such as '600ns', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise UnitError(f"duration must not be negative, got {value}")
        return value
    match = _TIME_RE.match(str(value))
    if not match:
        raise UnitError(f"expected a duration such as '600ns', '1.5us' or '2ms', got {value!r} "
                        f"(units: {', '.join(_TIME_UNITS)})")
    exact = _exact(match["num"]) * _TIME_UNITS[match["unit"]]
    if exact.denominator != 1:
        raise UnitError(f"duration {value!r} is finer than one picosecond")
    return int(exact)


def parse_rate(value: str) -> float:
    """Parse a data rate into bytes per second (``b`` = bit, ``B`` = byte).

    :raises UnitError: unknown unit or a zero rate.
    """
    match = _RATE_RE.match(str(value))
    if not match:
        raise UnitError(f"expected a rate such as '400Gb/s' or '55GB/s', got {value!r} "
                        "(b = bit, B = byte; prefixes K M G T Ki Mi Gi)")
    per_second = float(_exact(match["num"]) * _RATE_PREFIX[match["prefix"]])
    if match["unit"] == "b":
        per_second /= 8
    if per_second <= 0:
        raise UnitError(f"rate must be positive, got {value!r}")
    return per_second


def transfer_ps(nbytes: int, rate_Bps: float) -> int:
    """Time in integer picoseconds to move ``nbytes`` at ``rate_Bps`` bytes per second (rounded to nearest)."""
    return int(nbytes * PS_PER_S / rate_Bps + 0.5)


def ps_to_us(ps: int | float) -> float:
    """Picoseconds to microseconds (float, for output columns)."""
    return ps / PS_PER_US



def format_size(nbytes: int) -> str:
    """Render bytes with the largest exact binary unit: ``4096 -> '4KiB'``, ``1000 -> '1000B'``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        factor = _SIZE_UNITS[unit]
        if nbytes and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"
