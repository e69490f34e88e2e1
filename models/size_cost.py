"""A measured call's cost as a curve of its size: ``fixed + per_GiB * (n / GiB) ** exponent``, and its fit.

Used for GPU allocation calls (:mod:`models.gpu.alloc_cost`) and host pinning (:mod:`models.host`), and
:class:`KneeCost`, a cost per byte that changes at a size (faulting host pages in, :mod:`models.host`).
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


def fit_call_cost(nbytes, seconds, exponents=EXPONENTS, tolerances=None) -> CallCost:
    """Fit :class:`CallCost` to one call's typical times: for each of ``exponents``, fixed and per-GiB cost by
    least squares of the relative error, with ``fixed`` held at 0 where it would turn negative; keep the fit of
    smallest RMS error (``exponents=(1.0,)``: a straight line) or, given ``tolerances``, the one whose worst
    point lies least far out relative to its tolerance.

    :param nbytes: sizes in bytes.
    :param seconds: the typical (median) time at each size, in seconds.
    :param tolerances: how far the model may be from each time, relative (:func:`spread_tolerance`).
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
        error = (design @ (fixed, per_gib)) * weight - 1.0
        score = float(np.sqrt(np.mean(error ** 2)) if tolerances is None else np.max(np.abs(error) / tolerances))
        if best is None or score < best[0]:
            best = (score, fixed, per_gib, float(exponent))
    if best is None:
        raise ValueError("no non-negative fixed + per-GiB fit exists for these times")
    _, fixed, per_gib, exponent = best
    return CallCost(round(fixed * PS_PER_S), round(per_gib * PS_PER_S), exponent)


@dataclass(frozen=True, slots=True)
class KneeCost:
    """Time of work on ``nbytes`` at one rate up to ``knee_bytes`` and another beyond (integer ps per GiB)."""

    near_per_GiB_ps: int
    """Cost per GiB of the first ``knee_bytes`` (ps)."""
    far_per_GiB_ps: int
    """Cost per GiB beyond ``knee_bytes`` (ps)."""
    knee_bytes: int
    """Size at which the rate changes (bytes)."""

    def time_ps(self, nbytes: int) -> int:
        """Time of the work on ``nbytes`` bytes (ps)."""
        near = min(nbytes, self.knee_bytes)
        return round((self.near_per_GiB_ps * near + self.far_per_GiB_ps * (nbytes - near)) / GiB)


def fit_knee_cost(nbytes, seconds, knee_bytes: int) -> tuple[KneeCost, float]:
    """Fit :class:`KneeCost` with its knee at ``knee_bytes`` by least squares of the relative error (each rate at
    least 0); return it and its RMS relative error."""
    n, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    design = np.stack([np.minimum(n, knee_bytes), np.maximum(n - knee_bytes, 0.0)], axis=1) / GiB
    weight = 1.0 / t
    rates, *_ = np.linalg.lstsq(design * weight[:, None], t * weight, rcond=None)
    if rates.min() < 0:  # the constrained optimum keeps one rate alone
        col = int(np.argmax(rates))
        scaled = design[:, col] * weight
        rates = np.zeros(2)
        rates[col] = scaled @ (t * weight) / (scaled @ scaled)
    rms = float(np.sqrt(np.mean(((design @ rates) * weight - 1.0) ** 2)))
    return KneeCost(round(rates[0] * PS_PER_S), round(rates[1] * PS_PER_S), int(knee_bytes)), rms


def fit_shared_knee(curves, knees) -> tuple[int, list[KneeCost]]:
    """Fit :class:`KneeCost` to each of ``curves`` (pairs of sizes in bytes and times in seconds) with one knee for
    all, the one of ``knees`` of least summed squared RMS relative error; return it and the curves' fits."""
    best: tuple[float, int, list[KneeCost]] | None = None
    for knee in knees:
        fits = [fit_knee_cost(n, t, knee) for n, t in curves]
        score = sum(rms ** 2 for _, rms in fits)
        if best is None or score < best[0]:
            best = (score, int(knee), [cost for cost, _ in fits])
    if best is None:
        raise ValueError("no knee to try")
    return best[1], best[2]


def spread_tolerance(point: dict, floor: float, *, low: str = "p10_s", high: str = "p90_s") -> float:
    """How far a model may be from a measured point (``median_s``, ``p10_s``, ``p90_s``): the wider side of its
    samples' 10-90 % spread around the median, at least ``floor``. ``low``, ``high``: the keys of the spread's
    ends (``min_s`` and ``max_s`` where only the extremes were kept)."""
    median = point["median_s"]
    return max(floor, 1.0 - point[low] / median, point[high] / median - 1.0)


def range_tolerance(samples, floor: float) -> float:
    """:func:`spread_tolerance` of raw ``samples`` (s) held to their whole [min, max] about their median."""
    s = np.asarray(samples, dtype=float)
    return spread_tolerance({"median_s": float(np.median(s)), "min_s": float(s.min()), "max_s": float(s.max())},
                            floor, low="min_s", high="max_s")
