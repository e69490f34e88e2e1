"""Statistics over per-operation records, computed the way perftest reports them.

Inputs are integer-picosecond numpy arrays; outputs are floats with the unit in the key name.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.core.raw_columns import RawColumns
from sim.core.units import PS_PER_S, PS_PER_US

MIB = 2**20
LATENCY_COLUMNS = ("t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p99_9_us")
BANDWIDTH_COLUMNS = ("bw_peak_Gbps", "bw_avg_Gbps", "bw_avg_MiBps", "msg_rate_Mpps")


def latency_summary(latency_ps: np.ndarray) -> dict[str, float]:
    """perftest latency columns in microseconds.

    Percentiles use perftest's rule: sort, then take element ``int(n * q)`` (``t_typical`` is the median
    element ``n // 2``). Zero samples (no work request succeeded) measure nothing: every column is NaN.
    """
    if len(latency_ps) == 0:
        return dict.fromkeys(LATENCY_COLUMNS, float("nan"))
    ordered = np.sort(np.asarray(latency_ps, dtype=np.int64))
    n = len(ordered)
    us = ordered / PS_PER_US
    return {
        "t_min_us": float(us[0]),
        "t_max_us": float(us[-1]),
        "t_typical_us": float(us[n // 2]),
        "t_avg_us": float(us.mean()),
        "t_stdev_us": float(us.std()),
        "p99_us": float(us[min(n - 1, int(n * 0.99))]),
        "p99_9_us": float(us[min(n - 1, int(n * 0.999))]),
    }


def bandwidth_summary(size_bytes: int, posted_ps: np.ndarray, completed_ps: np.ndarray,
                      window: int, ok: np.ndarray | None = None) -> dict[str, float]:
    """perftest bandwidth columns of operations in posting order (see :func:`bandwidth_of`).

    Only operations that succeeded (``ok``, default all) carry bytes; failed ones still count in the elapsed
    time.
    """
    posted = np.asarray(posted_ps, dtype=np.int64)
    good = np.ones(len(posted), dtype=bool) if ok is None else np.asarray(ok, dtype=bool)
    return bandwidth_of(size_bytes, OpColumns(posted, np.asarray(completed_ps, dtype=np.int64), good), window)


class OpColumns:
    """Operations in posting order held as arrays: the reads :func:`bandwidth_of` makes."""

    def __init__(self, posted_ps: np.ndarray, completed_ps: np.ndarray, ok: np.ndarray) -> None:
        self.n, self._posted = len(posted_ps), posted_ps
        self.first_post_ps = int(posted_ps.min()) if self.n else None
        self.last_done_ps = int(completed_ps.max()) if self.n else None
        self._done_by = np.maximum.accumulate(completed_ps)
        self._delivered = np.concatenate(([0], np.cumsum(ok)))
        self.good = int(self._delivered[-1])

    def posted(self, lo: int, hi: int) -> np.ndarray:
        """Posting times of operations ``lo..hi-1`` (ps)."""
        return self._posted[lo:hi]

    def done_by(self, lo: int, hi: int) -> np.ndarray:
        """For operations ``lo..hi-1``: the latest completion up to each (ps)."""
        return self._done_by[lo:hi]

    def delivered(self, lo: int, hi: int) -> np.ndarray:
        """Successful operations before each index ``lo..hi-1`` (index ``n``: all of them)."""
        return self._delivered[lo:hi]


class OpSpool:
    """Operations in posting order appended piece by piece (the same reads as :class:`OpColumns`), kept in
    :class:`~sim.core.raw_columns.RawColumns`: in memory up to ``hold`` operations, then in raw files under
    ``directory`` (a path, or a function of the columns that makes one then), so :func:`bandwidth_of` over any number
    of operations holds one chunk at a time in memory."""

    def __init__(self, directory: str | Callable[[RawColumns], str], hold: int = 0) -> None:
        self.n, self.good, self.first_post_ps, self.last_done_ps, self._last_post = 0, 0, None, None, None
        # ``delivered`` holds one value more than the operations (none succeeded before the first): it is the column
        # that passes ``hold + 1`` values once the operations pass ``hold``.
        self._columns = RawColumns(dict.fromkeys(("posted", "done_by", "delivered"), np.int64), directory, hold + 1)
        self._columns.append("delivered", np.zeros(1, dtype=np.int64))

    def add(self, posted_ps: np.ndarray, completed_ps: np.ndarray, ok: np.ndarray) -> None:
        """Append operations that follow the ones added so far in posting order.

        :raises ValueError: a post earlier than the one before it.
        """
        if len(posted_ps) == 0:
            return
        if (np.diff(posted_ps) < 0).any() or (self._last_post is not None and int(posted_ps[0]) < self._last_post):
            raise ValueError("operations are not appended in posting order")
        done_by = np.maximum.accumulate(completed_ps)
        if self.last_done_ps is not None:
            np.maximum(done_by, self.last_done_ps, out=done_by)
        for name, values in (("posted", posted_ps), ("done_by", done_by),
                             ("delivered", self.good + np.cumsum(ok, dtype=np.int64))):
            self._columns.append(name, values)
        self.n, self.good = self.n + len(posted_ps), self.good + int(np.count_nonzero(ok))
        self.first_post_ps = int(posted_ps[0]) if self.first_post_ps is None else self.first_post_ps
        self.last_done_ps, self._last_post = int(done_by[-1]), int(posted_ps[-1])

    def posted(self, lo: int, hi: int) -> np.ndarray:
        """As :meth:`OpColumns.posted`."""
        return self._columns.read("posted", lo, hi)

    def done_by(self, lo: int, hi: int) -> np.ndarray:
        """As :meth:`OpColumns.done_by`."""
        return self._columns.read("done_by", lo, hi)

    def delivered(self, lo: int, hi: int) -> np.ndarray:
        """As :meth:`OpColumns.delivered`."""
        return self._columns.read("delivered", lo, hi)

    def close(self) -> None:
        """Close the files (their directory is the caller's to remove)."""
        self._columns.close()


CHUNK = 1 << 20
"""Operations :func:`bandwidth_of` reads at once (a few 8 MiB arrays)."""


def bandwidth_of(size_bytes: int, ops: OpColumns | OpSpool, window: int, chunk: int = CHUNK) -> dict[str, float]:
    """perftest bandwidth columns of ``ops`` (posting order), read ``chunk`` operations at a time.

    ``bw_avg`` is the successful operations' bytes over the time from the first post to the last completion
    (perftest's average). ``bw_peak`` is perftest's best rate over a run of consecutive operations (post of
    the first to completion of the last), searched over runs of ``window``, 2x``window``, 4x``window``...
    operations and the whole test, so it is never below the average. Rates are reported in Gb/s (1e9 bit/s)
    and in MiB/s (perftest's "MB/sec"); ``msg_rate_Mpps`` is operations per microsecond at the average rate.
    When no operation succeeded nothing was measured: every column is NaN.
    """
    n = ops.n
    if n == 0:
        raise ValueError("bandwidth summary of zero operations")
    if not ops.good:
        return dict.fromkeys(BANDWIDTH_COLUMNS, float("nan"))
    elapsed = ops.last_done_ps - ops.first_post_ps
    avg_Bps = size_bytes * ops.good * PS_PER_S / elapsed
    first = max(1, window)
    windows = [first << k for k in range(n.bit_length()) if first << k < n]
    best_Bps = max(avg_Bps, _best_run_Bps(ops, float(size_bytes * PS_PER_S), windows, chunk))
    return {"bw_peak_Gbps": best_Bps * 8 / 1e9, **average_columns(avg_Bps, n * PS_PER_US / elapsed)}


def _best_run_Bps(ops: OpColumns | OpSpool, scale: float, windows: list[int], chunk: int) -> float:
    """The best rate (B/s) of a run of ``w`` consecutive operations of ``ops`` for each of ``windows``: ``scale``
    (bytes x ps per s, a float: times the operations it outgrows 64-bit integers) times the run's successful
    operations over its span (at least 1 ps). Each ``chunk`` of runs' first operations is read once for every
    window; where every run of a window succeeded whole, its shortest span alone decides (0 without windows)."""
    best, n = 0.0, ops.n
    spans, rates = np.empty(min(chunk, n), np.int64), np.empty(min(chunk, n))
    for lo in range(0, n - windows[0] + 1 if windows else 0, chunk):
        posted, delivered = ops.posted(lo, min(lo + chunk, n)), ops.delivered(lo, min(lo + chunk, n))
        for w in windows:
            m = min(lo + chunk, n - w + 1) - lo
            if m <= 0:
                break
            span, rate = spans[:m], rates[:m]
            np.subtract(ops.done_by(lo + w - 1, lo + m + w - 1), posted[:m], out=span)
            if int(ops.delivered(lo + m + w - 1, lo + m + w)[0]) - int(delivered[0]) == m + w - 1:
                best = max(best, scale * w / max(int(span.min()), 1))
                continue
            np.maximum(span, 1, out=span)
            np.multiply(np.subtract(ops.delivered(lo + w, lo + m + w), delivered[:m], out=rate, casting="unsafe"),
                        scale, out=rate)
            best = max(best, float(np.divide(rate, span, out=rate).max()))
    return best


def average_columns(avg_Bps: float, msg_rate_Mpps: float) -> dict[str, float]:
    """perftest's average columns of a bandwidth test running at ``avg_Bps`` bytes a second: in Gb/s (1e9 bit/s)
    and MiB/s (perftest's "MB/sec"), and its message rate (Mpps)."""
    return {"bw_avg_Gbps": avg_Bps * 8 / 1e9, "bw_avg_MiBps": avg_Bps / MIB, "msg_rate_Mpps": msg_rate_Mpps}
