"""Prefix maxima and ramps over int64 arrays of times (ps), the scans the vectorized core's recurrences are built
from (:mod:`sim.fast.server`, :mod:`sim.fast.guesses`): numpy's running maximum, and cheaper ways to the same
answer where the data is nearly sorted."""

from __future__ import annotations

import functools

import numpy as np

SIGN = np.int64(-(1 << 63))
"""The int64 sign bit. Adding it (wrapping) maps int64 order onto uint64 order."""


@functools.lru_cache(maxsize=32)
def ramp(n: int, step: int) -> np.ndarray:
    """``step, 2 step, ..., n step`` (read-only int64), e.g. the cumulative sum of a constant service time."""
    out = np.arange(1, n + 1, dtype=np.int64)
    out *= step
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=32)
def flipped_ramp(n: int, step: int) -> np.ndarray:
    """:func:`ramp` with the sign bit flipped (read-only int64; wrapping arithmetic)."""
    out = ramp(n, step) ^ SIGN
    out.flags.writeable = False
    return out


def prefix_max(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """``values_i = max(values_0..values_i)`` along ``axis``, in place (returned). For integers ``fmax`` is
    ``maximum`` (no NaN to skip), and with numpy 2 its accumulation runs several times faster."""
    return np.fmax.accumulate(values, axis=axis, out=values)


def short_prefix_max(values: np.ndarray) -> None:
    """:func:`prefix_max` in place, first as maxima over the 16 latest values (four doubling steps): where those
    do not decrease they are the running maximum, found cheaper than by the scan (short queues, nearly sorted
    data)."""
    a, b = values, np.empty_like(values)
    for k in (1, 2, 4, 8):
        b[:k] = a[:k]
        np.maximum(a[k:], a[:-k], out=b[k:])
        a, b = b, a
    if (values[1:] < values[:-1]).any():
        prefix_max(values)


def running_max(values: np.ndarray) -> np.ndarray:
    """``out_i = max(values_0..values_i)``: ``values`` itself when already non-decreasing, else a new array
    (:func:`short_prefix_max`: nearly sorted data, such as completions after small random delays, is cheap)."""
    if not (values[1:] < values[:-1]).any():
        return values
    out = values.copy()
    short_prefix_max(out)
    return out
