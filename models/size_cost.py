"""A measured call's cost as a curve of its size: ``fixed + per_GiB * (n / GiB) ** exponent``, and its fit.

Used for GPU allocation calls (:mod:`models.gpu.alloc_cost`) and host pinning (:mod:`models.host`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.core import PS_PER_S

GiB = 1 << 30
EXPONENTS = np.round(np.arange(0.30, 1.201, 0.01), 2)
"""Exponents :func:`fit_call_cost` tries by default."""


@dataclass(frozen=True, slots=True)
class CallCost:
    """Time of one call on ``nbytes``: ``fixed_ps + per_GiB_ps * (nbytes / GiB) ** exponent`` (integer ps)."""

    fixed_ps: int
    """Cost of the call at any size (ps)."""
    per_GiB_ps: int
    """Size-dependent part at 1 GiB (ps)."""
    exponent: float
    """How the size-dependent part grows (1: linear in bytes)."""

    def time_ps(self, nbytes: int) -> int:
        """Time of one call on ``nbytes`` bytes (ps)."""
        return self.fixed_ps + round(self.per_GiB_ps * (nbytes / GiB) ** self.exponent)


def fit_call_cost(nbytes, seconds, exponents=EXPONENTS) -> CallCost:
    """Fit :class:`CallCost` to one call's typical times: for each of ``exponents``, fixed and per-GiB cost by
    least squares of the relative error, with ``fixed`` held at 0 where it would turn negative; keep the fit of
    smallest RMS error (``exponents=(1.0,)``: a straight line).

    :param nbytes: sizes in bytes.
    :param seconds: the typical (median) time at each size, in seconds.
    """
    n, t = np.asarray(nbytes, dtype=float) / GiB, np.asarray(seconds, dtype=float)
    weight = 1.0 / t
    best: tuple[float, float, float, float] | None = None
    for exponent in exponents:
        design = np.stack([np.ones_like(n), n ** exponent], axis=1)
        (fixed, per_gib), *_ = np.linalg.lstsq(design * weight[:, None], t * weight, rcond=None)
        if fixed < 0:  # the constrained optimum lies on fixed = 0
            scaled = design[:, 1] * weight
            fixed, per_gib = 0.0, float(scaled @ (t * weight) / (scaled @ scaled))
        if per_gib < 0:
            continue
        rms = float(np.sqrt(np.mean(((design @ (fixed, per_gib)) * weight - 1.0) ** 2)))
        if best is None or rms < best[0]:
            best = (rms, fixed, per_gib, float(exponent))
    if best is None:
        raise ValueError("no non-negative fixed + per-GiB fit exists for these times")
    _, fixed, per_gib, exponent = best
    return CallCost(round(fixed * PS_PER_S), round(per_gib * PS_PER_S), exponent)


def fit_proportional(nbytes, seconds) -> CallCost:
    """Fit a cost proportional to the size (no fixed part, exponent 1) by least squares of the relative error."""
    x, t = np.asarray(nbytes, dtype=float) / GiB, np.asarray(seconds, dtype=float)
    scaled = x / t
    return CallCost(0, round(float(scaled.sum() / (scaled @ scaled)) * PS_PER_S), 1.0)


def spread_tolerance(point: dict, floor: float) -> float:
    """How far a model may be from a measured point (``median_s``, ``p10_s``, ``p90_s``): the wider side of its
    samples' 10-90 % spread around the median, at least ``floor``."""
    median = point["median_s"]
    return max(floor, 1.0 - point["p10_s"] / median, point["p90_s"] / median - 1.0)
