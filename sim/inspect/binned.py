"""Latency aggregates of a run's operations, streamed a row group at a time: what the figures draw.

A figure shows each operation while there are at most :data:`EXACT_MAX` of them (each point is one work
request, as before); beyond that it draws binned aggregates, so that writing the results of a run of 10^8 work
requests needs neither its rows in memory nor 10^8 points on a canvas. Latencies are binned on a logarithmic
grid of :data:`PER_OCTAVE` buckets per doubling (each bucket's upper edge within 2.2 % of its lower one), and
a bucket is reported at its upper edge: the fraction of operations at most that latency is then exact at every
point of a binned CDF.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from sim.core.units import PS_PER_US
from sim.store.operations import OperationTable

EXACT_MAX = 50_000
"""Operations up to which a latency curve or scatter shows every operation."""
PER_OCTAVE = 32
"""Logarithmic latency buckets per doubling."""
BUCKETS = 64 * PER_OCTAVE + 1
"""Buckets from 1 ps to 2^64 ps (bucket 0 holds latencies of 0 and 1 ps)."""
TIME_BINS = 400
"""Time bins of the latency-over-time panel."""


def bucket_of(latency_ps: np.ndarray) -> np.ndarray:
    """The bucket of each latency: the least k with latency <= 2^(k / PER_OCTAVE) ps."""
    latency = np.maximum(np.asarray(latency_ps, dtype=np.float64), 1.0)
    return np.ceil(np.log2(latency) * PER_OCTAVE).astype(np.int64)


def bucket_us(bucket: np.ndarray) -> np.ndarray:
    """The upper edge of each bucket, in µs."""
    return np.exp2(np.asarray(bucket, dtype=np.float64) / PER_OCTAVE) / PS_PER_US


class _Curve:
    """One group's latencies: every value while they are few, a bucket count always, and the exact maximum."""

    def __init__(self) -> None:
        self.values: list[np.ndarray] | None = []
        self.count = 0
        self.highest = 0
        self.buckets = np.zeros(BUCKETS, dtype=np.int64)

    def add(self, latency_ps: np.ndarray) -> None:
        if not len(latency_ps):
            return
        self.count += len(latency_ps)
        self.highest = max(self.highest, int(latency_ps.max()))
        self.buckets += np.bincount(bucket_of(latency_ps), minlength=BUCKETS)
        if self.values is not None and self.count <= EXACT_MAX:
            self.values.append(latency_ps)
        else:
            self.values = None  # too many to draw one by one: the buckets serve

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(latency in µs, fraction of operations at most that latency): each operation, or each non-empty
        bucket at its upper edge, the last point at the exact maximum."""
        if self.values is not None:
            latency = np.sort(np.concatenate(self.values)) / PS_PER_US
            return latency, np.arange(1, len(latency) + 1) / len(latency)
        filled = np.flatnonzero(self.buckets)
        latency = bucket_us(filled)
        latency[-1] = self.highest / PS_PER_US
        return latency, np.cumsum(self.buckets[filled]) / self.count


CDF_COLUMNS = ["variant", "workload", "bytes", "latency_us", "cdf"]
CURVE_KEY = ["variant", "workload", "bytes"]
"""What makes one latency distribution: the columns :func:`cdf_curves` groups the operations by."""


def _constant(column: pd.Series) -> bool:
    """Whether every row of ``column`` holds one value (a category's codes, or the values, all alike)."""
    values = column.cat.codes.to_numpy() if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()
    return len(values) > 0 and values.min() == values.max()


def cdf_curves(tables: Iterable[OperationTable]) -> pd.DataFrame:
    """The latency CDF of the successful operations per variant, workload and message size (one distribution
    per size: sizes whose latencies differ by orders of magnitude are never pooled), in the tables' order: every
    operation of a group of at most :data:`EXACT_MAX`, binned points beyond."""
    curves: dict[tuple[str, str, int], _Curve] = {}
    for table in tables:
        for batch in table.batches([*CURVE_KEY, "latency_ps", "ok"]):
            ok = batch["ok"].to_numpy()
            if all(_constant(batch[column]) for column in CURVE_KEY):  # one curve's rows (one workload and size)
                key = tuple(batch[column].iloc[0] for column in CURVE_KEY)
                curves.setdefault(key, _Curve()).add(batch["latency_ps"].to_numpy(dtype=np.int64)[ok])
                continue
            for key, rows in batch[ok].groupby(CURVE_KEY, sort=False, observed=True):
                curves.setdefault(key, _Curve()).add(rows["latency_ps"].to_numpy(dtype=np.int64))
    frames = []
    for (variant, workload, size), curve in curves.items():
        latency, cdf = curve.points()
        frames.append(pd.DataFrame({"variant": variant, "workload": workload, "bytes": int(size),
                                    "latency_us": latency, "cdf": cdf}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CDF_COLUMNS)


class LatencyBands:
    """Per time bin of [start_ps, end_ps], the operations posted in it: how many, their median latency (a
    bucket's upper edge) and their maximum (exact), accumulated a batch at a time."""

    def __init__(self, start_ps: int, end_ps: int, bins: int = TIME_BINS) -> None:
        self.start, self.bins = start_ps, bins
        self.width = max(1, -(-(end_ps + 1 - start_ps) // bins))
        self.counts = np.zeros(bins * BUCKETS, dtype=np.int64)
        self.highest = np.zeros(bins, dtype=np.int64)

    def add(self, posted_ps: np.ndarray, latency_ps: np.ndarray) -> None:
        where = np.clip((posted_ps - self.start) // self.width, 0, self.bins - 1)
        self.counts += np.bincount(where * BUCKETS + bucket_of(latency_ps), minlength=self.bins * BUCKETS)
        np.maximum.at(self.highest, where, latency_ps)

    def frame(self) -> pd.DataFrame:
        """``posted_ms`` (each bin's start, ms since ``start_ps``), ``ops``, ``p50_us`` and ``max_us`` (NaN
        where no operation was posted)."""
        counts = self.counts.reshape(self.bins, BUCKETS)
        ops = counts.sum(axis=1)
        median = np.argmax(np.cumsum(counts, axis=1) * 2 >= np.maximum(ops, 1)[:, None], axis=1)
        return pd.DataFrame({"posted_ms": np.arange(self.bins) * self.width / 1e9, "ops": ops,
                             "p50_us": np.where(ops > 0, bucket_us(median), np.nan),
                             "max_us": np.where(ops > 0, self.highest / PS_PER_US, np.nan)})
