"""Side-by-side comparison of registration modes: one row per variant of a scenario."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.core.units import PS_PER_US
from sim.tables import RunResult


def _bandwidth_batches(result: RunResult, columns: list[str]):
    """The rows of the bandwidth workloads, a batch at a time, with ``columns`` (and ``kind``)."""
    for batch in result.table.batches(["kind", *columns]):
        yield batch[batch["kind"].str.endswith("_bw")]


def bandwidth_span(result: RunResult) -> tuple[int, int] | None:
    """The first post and the last completion of the bandwidth workloads (ps); None without any."""
    span = None
    for ops in _bandwidth_batches(result, ["posted_ps", "completed_ps"]):
        if len(ops):
            first, last = int(ops["posted_ps"].min()), int(ops["completed_ps"].max())
            span = (first, last) if span is None else (min(span[0], first), max(span[1], last))
    return span


def bandwidth_timeline(result: RunResult, bins: int = 100) -> pd.DataFrame:
    """Delivered bandwidth over time: successful bytes completed per time bin of the bandwidth workloads."""
    span = bandwidth_span(result)
    if span is None:
        return pd.DataFrame(columns=["variant", "time_ms", "bw_Gbps"])
    start, end = span
    edges = np.linspace(start, end + 1, bins + 1)
    delivered = np.zeros(bins)
    for ops in _bandwidth_batches(result, ["completed_ps", "bytes", "ok"]):
        ok = ops[ops["ok"]]
        delivered += np.histogram(ok["completed_ps"], bins=edges, weights=ok["bytes"])[0]
    width_s = (edges[1] - edges[0]) / 1e12
    return pd.DataFrame({"variant": result.variant, "time_ms": (edges[:-1] - start) / 1e9,
                         "bw_Gbps": delivered * 8 / width_s / 1e9})


def event_times(result: RunResult) -> pd.DataFrame:
    """The run's events with their time in ms since the first post of the bandwidth workloads."""
    span = bandwidth_span(result)
    start = span[0] if span else 0
    events = result.events.copy()
    events["time_ms"] = (events["time_ps"] - start) / 1e9
    return events


def ok_latencies(result: RunResult) -> np.ndarray:
    """Latencies of the run's successful operations in row order (ps)."""
    parts = [ops.loc[ops["ok"], "latency_ps"].to_numpy() for ops in result.table.batches(["latency_ps", "ok"])]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def comparison_table(results: list[RunResult]) -> pd.DataFrame:
    """Per variant: registration time and pinned bytes (all buffers, and GPU buffers alone), steady-state
    bandwidth, latency percentiles and the protocol's activity (evictions, invalidations, re-faults, RNR NAKs,
    failed allocations)."""
    rows = []
    for result in results:
        lat_us = np.sort(ok_latencies(result)) / PS_PER_US
        bw = result.summary[result.summary["kind"].str.endswith("_bw")]
        gpu = result.registrations[result.registrations["location"] != "host"]
        pct = (lambda q: float(lat_us[min(len(lat_us) - 1, int(len(lat_us) * q))]) if len(lat_us) else float("nan"))
        rows.append({
            "variant": result.variant,
            "modes": ",".join(sorted(set(result.registrations["mode"]))),
            "register_us": float(result.registrations["register_us"].sum()),
            "gpu_register_us": float(gpu["register_us"].sum()),
            "bw_avg_Gbps": float(bw["bw_avg_Gbps"].mean()) if len(bw) else float("nan"),
            "p50_us": pct(0.5), "p99_us": pct(0.99), "p99_9_us": pct(0.999),
            "pinned_bytes": int(result.registrations["pinned_bytes"].sum()),
            "gpu_pinned_bytes": int(gpu["pinned_bytes"].sum()),
            "errors": int(result.summary["errors"].sum()),
            **result.counters,
        })
    return pd.DataFrame(rows)
