"""Durations a script passes to the API: a string with a unit or integer picoseconds."""

from __future__ import annotations

from sim.core.units import MAX_DURATION_PS, BoundError, format_time, parse_time


def duration_ps(value: str | int) -> int:
    """``value`` in integer picoseconds: a string with a unit (``"2us"``) or an int already in ps.

    :raises UnitError: a string without a unit; a value out of ``0 .. MAX_DURATION_PS`` (one day, the bound of a
        scenario's durations: ``BoundError``).
    :raises TypeError: a float or another type.
    """
    if isinstance(value, str):
        return parse_time(value)
    if type(value) is not int or value < 0:
        raise TypeError(f"a duration is a string with a unit ('10us') or a non-negative int of ps, got {value!r}")
    if value > MAX_DURATION_PS:
        raise BoundError(f"duration {format_time(value)} is above the maximum of {format_time(MAX_DURATION_PS)}")
    return value
