"""Statistics over per-operation records, computed the way perftest reports them.

Inputs are integer-picosecond numpy arrays; outputs are floats with the unit in the key name.
"""

from __future__ import annotations

import numpy as np

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
    """perftest bandwidth columns.

    Only operations that succeeded (``ok``, default all) carry bytes; failed ones still count in the elapsed
    time. ``bw_avg`` is those bytes over the time from the first post to the last completion (perftest's
    average). ``bw_peak`` is perftest's best rate over a run of consecutive operations (post of the first
    to completion of the last), searched over runs of ``window``, 2x``window``, 4x``window``... operations
    and the whole test, so it is never below the average. Rates are reported in Gb/s (1e9 bit/s) and in MiB/s
    (perftest's "MB/sec"); ``msg_rate_Mpps`` is operations per microsecond at the average rate. When no
    operation succeeded nothing was measured: every column is NaN.
    """
    posted = np.asarray(posted_ps, dtype=np.int64)
    completed = np.asarray(completed_ps, dtype=np.int64)
    n = len(posted)
    if n == 0:
        raise ValueError("bandwidth summary of zero operations")
    good = np.ones(n, dtype=bool) if ok is None else np.asarray(ok, dtype=bool)
    if not good.any():
        return dict.fromkeys(BANDWIDTH_COLUMNS, float("nan"))
    elapsed = int(completed.max() - posted.min())
    avg_Bps = size_bytes * int(good.sum()) * PS_PER_S / elapsed
    done_by = np.maximum.accumulate(completed)
    delivered = np.concatenate(([0], np.cumsum(good)))
    best_Bps, w = avg_Bps, max(1, window)
    while w < n:
        spans = np.maximum(done_by[w - 1:] - posted[: n - w + 1], 1)
        best_Bps = max(best_Bps, float((size_bytes * (delivered[w:] - delivered[:-w]) * PS_PER_S / spans).max()))
        w *= 2
    peak_Bps = best_Bps
    return {
        "bw_peak_Gbps": peak_Bps * 8 / 1e9,
        "bw_avg_Gbps": avg_Bps * 8 / 1e9,
        "bw_avg_MiBps": avg_Bps / MIB,
        "msg_rate_Mpps": n * PS_PER_US / elapsed,
    }
