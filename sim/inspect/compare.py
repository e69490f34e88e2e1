"""Side-by-side comparison of registration modes: one row per variant of a scenario."""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pandas as pd

from sim.inspect.binned import EXACT_MAX, LatencyBands
from sim.core.units import PS_PER_US
from sim.store.operations import OperationTable
from sim.engine.tables import RunResult


def _bandwidth_batches(result: RunResult, columns: list[str], backwards: bool = False):
    """The rows of the bandwidth workloads, a batch at a time (the last first when ``backwards``), with
    ``columns`` (and ``kind``)."""
    for batch in result.table.batches(["kind", *columns], backwards):
        yield batch[batch["kind"].str.endswith("_bw")]


def bandwidth_span(result: RunResult) -> tuple[int, int] | None:
    """The first post and the last completion of the bandwidth workloads (ps); None without any."""
    span = None
    for ops in _bandwidth_batches(result, ["posted_ps", "completed_ps"]):
        if len(ops):
            first, last = int(ops["posted_ps"].min()), int(ops["completed_ps"].max())
            span = (first, last) if span is None else (min(span[0], first), max(span[1], last))
    return span


def bandwidth_timeline(result: RunResult, bins: int = 100, link_Bps: float | None = None) -> pd.DataFrame:
    """Delivered bandwidth over time: the bytes of the bandwidth workloads' successful operations per time bin.

    Each operation's bytes are placed on the wire at ``link_Bps`` (default: the run's fabric rate), ending at
    its completion or, if the next operation needs the wire by then, just before that one's share: the latest
    schedule the link could have carried. Counting whole messages in the bin of their completion would show
    bins above the link rate (a bin holding one completion more than the wire carried in it).
    """
    span = bandwidth_span(result)
    if span is None:
        return pd.DataFrame(columns=["variant", "time_ms", "bw_Gbps"])
    rate = result.testbed.fabric.params.rate_Bps if link_Bps is None else link_Bps
    start, end = span
    edges = np.linspace(start, end + 1, bins + 1)
    delivered = np.diff(_delivered_by(result, rate, edges))
    width_s = (edges[1] - edges[0]) / 1e12
    return pd.DataFrame({"variant": result.variant, "time_ms": (edges[:-1] - start) / 1e9,
                         "bw_Gbps": delivered * 8 / width_s / 1e9})


class _Schedule(NamedTuple):
    """The latest wire schedule of operations in completion order: each one's bytes ramp from ``knots[2i]`` to
    ``knots[2i + 1]`` (ps), reaching the cumulative ``values``; ``slack`` is the least completion less wire time
    sent so far among them (what bounds the finish of operations before them)."""

    knots: np.ndarray
    values: np.ndarray
    slack: float


def _schedule(completed_ps: np.ndarray, nbytes: np.ndarray, rate: float, sent: float, total: float,
              later_slack: float) -> _Schedule:
    """:class:`_Schedule` of operations in completion order, after ``sent`` ps of wire time and ``total`` bytes
    of earlier ones and before operations whose least slack is ``later_slack``. Sums start from the carried
    value, so that a table read in row groups gives the very floats of one pass over all of it."""
    wire = nbytes / rate * 1e12
    sent_by = np.cumsum(np.concatenate(([sent], wire)))[1:]
    total_by = np.cumsum(np.concatenate(([total], nbytes)))[1:]
    slack = np.minimum(np.minimum.accumulate((completed_ps - sent_by)[::-1])[::-1], later_slack)
    finish = slack + sent_by  # each finish: at most its completion, at most the next one's start
    return _Schedule(np.column_stack([finish - wire, finish]).ravel(),
                     np.column_stack([total_by - nbytes, total_by]).ravel(), float(slack[0]))


def _ok_batches(result: RunResult, backwards: bool = False):
    """(completion ps, bytes as floats) of each row group's successful bandwidth operations."""
    for ops in _bandwidth_batches(result, ["completed_ps", "bytes", "ok"], backwards):
        ok = ops.loc[ops["ok"]]
        yield ok["completed_ps"].to_numpy(dtype=np.int64), ok["bytes"].to_numpy(dtype=float)


def _delivered_by(result: RunResult, rate: float, edges: np.ndarray) -> np.ndarray:
    """Bytes delivered by each of ``edges`` (ps) on the latest schedule. A table whose operations complete in
    row order (streams one after another) is read a row group at a time, twice: forwards for the sums each
    group starts from, backwards for the slack that later operations leave; otherwise it is sorted whole."""
    starts, sent, total, last = [], 0.0, 0.0, None
    for completed, nbytes in _ok_batches(result):
        if len(completed) and ((last is not None and completed[0] < last) or np.any(np.diff(completed) < 0)):
            return _delivered_sorted(result, rate, edges)
        starts.append((sent, total))
        if len(completed):
            sent = float(np.cumsum(np.concatenate(([sent], nbytes / rate * 1e12)))[-1])
            total += float(nbytes.sum())
            last = completed[-1]
    by = np.full(len(edges), total)  # after the last operation: everything
    slack, later = np.inf, None
    for (sent, total), (completed, nbytes) in zip(reversed(starts), _ok_batches(result, backwards=True)):
        if not len(completed):
            continue
        part = _schedule(completed, nbytes, rate, sent, total, slack)
        inside = edges >= part.knots[0]
        by[inside & (edges <= part.knots[-1])] = np.interp(edges[inside & (edges <= part.knots[-1])], part.knots,
                                                           part.values)
        by[(edges > part.knots[-1]) & (edges < (later if later is not None else np.inf))] = part.values[-1]
        slack, later = part.slack, part.knots[0]
    if later is not None:
        by[edges < later] = 0.0
    return by


def _delivered_sorted(result: RunResult, rate: float, edges: np.ndarray) -> np.ndarray:
    """:func:`_delivered_by` of a table whose rows do not complete in order: every operation sorted at once."""
    parts = list(_ok_batches(result))
    completed, nbytes = (np.concatenate([p[k] for p in parts]) for k in (0, 1))
    order = np.argsort(completed, kind="stable")
    part = _schedule(completed[order], nbytes[order], rate, 0.0, 0.0, np.inf)
    return np.interp(edges, part.knots, part.values, left=0.0) if len(completed) else np.zeros(len(edges))


def post_latencies(result: RunResult) -> pd.DataFrame:
    """The latencies of the bandwidth workloads' successful operations against when they were posted (ms since
    the first post): each one (``posted_ms``, ``latency_us``) while there are at most
    :data:`sim.inspect.binned.EXACT_MAX`, else per time bin (``posted_ms``, ``ops``, ``p50_us``, ``max_us``:
    :class:`sim.inspect.binned.LatencyBands`), read a row group at a time."""
    span = bandwidth_span(result)
    start = span[0] if span else 0
    parts, count, bands = [], 0, None
    for ops in _bandwidth_batches(result, ["posted_ps", "latency_ps", "ok"]):
        ok = ops.loc[ops["ok"]]
        posted, latency = ok["posted_ps"].to_numpy(dtype=np.int64), ok["latency_ps"].to_numpy(dtype=np.int64)
        count += len(ok)
        if bands is None and count > EXACT_MAX:
            bands = LatencyBands(*span)
            for part in parts:
                bands.add(*part)
        if bands is not None:
            bands.add(posted, latency)
        else:
            parts.append((posted, latency))
    if bands is not None:
        return bands.frame().assign(variant=result.variant)
    posted, latency = (np.concatenate([p[k] for p in parts]) if parts else np.empty(0, np.int64) for k in (0, 1))
    return pd.DataFrame({"variant": result.variant, "posted_ms": (posted - start) / 1e9,
                         "latency_us": latency / PS_PER_US})


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
    """Per variant: registration time and pinned bytes (all buffers, and the GPU memory held pinned in VRAM),
    steady-state bandwidth, latency percentiles and the protocol's activity (evictions, invalidations, re-faults,
    RNR NAKs, failed allocations)."""
    rows = []
    for result in results:
        lat_us = np.sort(ok_latencies(result)) / PS_PER_US
        bw = result.summary[result.summary["kind"].str.endswith("_bw")]
        gpu = result.registrations[result.registrations["location"] != "host"]
        pct = (lambda q: float(lat_us[min(len(lat_us) - 1, int(len(lat_us) * q))]) if len(lat_us) else float("nan"))
        rows.append({
            "variant": result.variant,
            "modes": ",".join(f"{r.buffer}={r.mode}" for r in result.registrations.itertuples()),
            "register_us": float(result.registrations["register_us"].sum()),
            "gpu_register_us": float(gpu["register_us"].sum()),
            "bw_avg_Gbps": float(bw["bw_avg_Gbps"].mean()) if len(bw) else float("nan"),
            "p50_us": pct(0.5), "p99_us": pct(0.99), "p99_9_us": pct(0.999),
            "pinned_bytes": int(result.registrations["pinned_bytes"].sum()),
            "gpu_pinned_bytes": int(gpu["vram_pinned_bytes"].sum()),
            "gpu_bar1_bytes": int(gpu["bar1_bytes"].sum()),
            "errors": int(result.summary["errors"].sum()),
            **result.counters,
        })
    return pd.DataFrame(rows)


def case_rows(result: RunResult) -> list[tuple[dict, dict]]:
    """Per (workload, size) of ``result``, its perftest summary row and its :func:`comparison_table` row computed
    from that case's operations alone: what compares like with like across variants."""
    ops = result.table.frame()
    rows = []
    for perftest in result.summary.to_dict("records"):
        mine = ops[(ops["workload"] == perftest["workload"]) & (ops["bytes"] == perftest["bytes"])]
        part = SimpleNamespace(variant=result.variant, table=OperationTable.of(mine),
                               summary=pd.DataFrame([perftest]), registrations=result.registrations,
                               counters=result.counters)
        rows.append((perftest, comparison_table([part]).iloc[0].to_dict()))
    return rows
