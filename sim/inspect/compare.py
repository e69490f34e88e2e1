"""Side-by-side comparison of registration modes: one row per variant of a scenario."""

from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import numpy as np
import pandas as pd

from models.verbs.workload_kinds import BANDWIDTH_KINDS
from sim.inspect.binned import EXACT_MAX, LatencyBands
from sim.core.units import PS_PER_US
from sim.engine.tables import RunResult
from sim.inspect.stalls import allocation_outcome, longest_stall, scenario_event_times, window_loss
from sim.inspect.tables import NOTHING, blocks, cell, header


def _bandwidth_batches(result: RunResult, columns: list[str], backwards: bool = False):
    """The rows of the bandwidth workloads, a batch at a time (the last first when ``backwards``), with
    ``columns`` (and ``kind``)."""
    for batch in result.table.batches(["kind", *columns], backwards):
        yield batch[batch["kind"].isin(BANDWIDTH_KINDS)]


_SPANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
""":func:`bandwidth_span` of each operation table read so far, with its row count then: the figures and the
comparison each ask for it, and a spooled table would be read again each time."""


def bandwidth_span(result: RunResult) -> tuple[int, int] | None:
    """The first post and the last completion of the bandwidth workloads (ps); None without any."""
    known = _SPANS.get(result.table)
    if known is not None and known[0] == result.table.rows:
        return known[1]
    span = None
    for ops in _bandwidth_batches(result, ["posted_ps", "completed_ps"]):
        if len(ops):
            first, last = int(ops["posted_ps"].min()), int(ops["completed_ps"].max())
            span = (first, last) if span is None else (min(span[0], first), max(span[1], last))
    _SPANS[result.table] = (result.table.rows, span)
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
        ok = ops["ok"].to_numpy()
        posted, latency = ops["posted_ps"].to_numpy(dtype=np.int64)[ok], ops["latency_ps"].to_numpy(dtype=np.int64)[ok]
        count += len(posted)
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


def size_spans(result: RunResult) -> pd.DataFrame:
    """When each message size of the bandwidth workloads ran: ``bytes``, ``start_ms`` (its first post) and
    ``end_ms`` (its last completion), ms since the first post of the bandwidth workloads, in order of start."""
    spans: dict[int, list[int]] = {}
    for ops in _bandwidth_batches(result, ["bytes", "posted_ps", "completed_ps"]):
        for size, rows in ops.groupby("bytes", sort=False):
            first, last = int(rows["posted_ps"].min()), int(rows["completed_ps"].max())
            known = spans.setdefault(int(size), [first, last])
            known[0], known[1] = min(known[0], first), max(known[1], last)
    origin = _origin(result)
    rows = sorted((first, last, size) for size, (first, last) in spans.items())
    return pd.DataFrame({"bytes": [r[2] for r in rows], "start_ms": [(r[0] - origin) / 1e9 for r in rows],
                         "end_ms": [(r[1] - origin) / 1e9 for r in rows]})


def event_times(result: RunResult) -> pd.DataFrame:
    """The run's events with their time in ms since the first post of the bandwidth workloads."""
    span = bandwidth_span(result)
    start = span[0] if span else 0
    events = result.events.copy()
    events["time_ms"] = (events["time_ps"] - start) / 1e9
    return events


def _origin(result: RunResult) -> int:
    """The run's time zero for what it shows (ps): the first post of its bandwidth workloads, else 0."""
    span = bandwidth_span(result)
    return span[0] if span else 0


def _cases(result: RunResult) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """Per (workload, message size), the posts, completions, latencies (ps) and bytes of its successful
    operations, and its first post, read a row group at a time."""
    parts: dict[tuple[str, int], list[pd.DataFrame]] = {}
    columns = ["workload", "bytes", "ok", "posted_ps", "completed_ps", "latency_ps"]
    for batch in result.table.batches(columns):
        for key, rows in batch.groupby(["workload", "bytes"], sort=False, observed=True):
            parts.setdefault((str(key[0]), int(key[1])), []).append(rows)
    cases = {}
    for key, frames in parts.items():
        rows = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        ok = rows[rows["ok"]]
        cases[key] = {"first_post": int(rows["posted_ps"].min()),
                      **{c: ok[c].to_numpy(dtype=np.int64) for c in ("completed_ps", "latency_ps", "bytes")}}
    return cases


def _number(value) -> float:
    """A summary's value as a float; none (nothing succeeded) as NaN."""
    return float("nan") if value is None else float(value)


def _percentile(sorted_us: np.ndarray, q: float) -> float:
    return float(sorted_us[min(len(sorted_us) - 1, int(len(sorted_us) * q))]) if len(sorted_us) else float("nan")


def _case_columns(case: dict[str, np.ndarray] | None, bandwidth: bool, events_ps: list[int], origin: int) -> dict:
    """The comparison's columns of one case (:func:`_cases`): latency percentiles, the longest stall and, for a
    bandwidth workload, what the first scenario event's window lost."""
    nan = float("nan")
    columns = {"p50_us": nan, "p99_us": nan, "p99_9_us": nan, "stall_us": nan, "stall_from_ms": nan,
               "stall_to_ms": nan, "window_from_ms": nan, "window_to_ms": nan, "bw_lost_pct": nan}
    if case is None:
        return columns
    lat_us = np.sort(case["latency_ps"]) / PS_PER_US
    columns.update(p50_us=_percentile(lat_us, 0.5), p99_us=_percentile(lat_us, 0.99),
                   p99_9_us=_percentile(lat_us, 0.999))
    stall = longest_stall(case["completed_ps"])
    if stall is not None:
        columns.update(stall_us=(stall.end - stall.start) / PS_PER_US, stall_from_ms=(stall.start - origin) / 1e9,
                       stall_to_ms=(stall.end - origin) / 1e9)
    loss = window_loss(case["first_post"], case["completed_ps"], case["bytes"], events_ps) if bandwidth else None
    if loss is not None:
        columns.update(window_from_ms=(loss.start - origin) / 1e9, window_to_ms=(loss.end - origin) / 1e9,
                       bw_lost_pct=loss.lost_pct)
    return columns


def comparison_table(results: list[RunResult]) -> pd.DataFrame:
    """Like with like: one row per variant, workload and message size (a variant without workloads: one row).

    Per case: perftest's average bandwidth, latency percentiles of its successful operations, its longest stall
    (time at zero bandwidth: the longest time between two completions, from and to in ms since the first post of the
    bandwidth workloads, as the events' times) and, for a bandwidth workload with a scenario event during it, that
    event's window (to the next event or the case's end) and the share of the case's bandwidth before the event that
    the window lost (:func:`sim.inspect.stalls.window_loss`). Per variant, repeated on its rows: the competing
    allocations' outcome, each buffer's mode, registration time and pinned bytes (all buffers, and GPU buffers
    alone: the GPU memory held pinned in VRAM), and the protocol's activity (evictions, invalidations, re-faults,
    failed allocations); errors, RNR NAKs and frames lost are the case's own (its summary row's)."""
    rows = []
    for result in results:
        gpu = result.registrations[result.registrations["location"] != "host"]
        events = result.events
        per_variant = {
            "allocation": allocation_outcome(events),
            "modes": ",".join(f"{r.buffer}={r.mode}" for r in result.registrations.itertuples()),
            "register_us": float(result.registrations["register_us"].sum()),
            "gpu_register_us": float(gpu["register_us"].sum()),
            "pinned_bytes": int(result.registrations["pinned_bytes"].sum()),
            "gpu_pinned_bytes": int(gpu["vram_pinned_bytes"].sum()),
            "gpu_bar1_bytes": int(gpu["bar1_bytes"].sum())}
        cases, origin, events_ps = _cases(result), _origin(result), scenario_event_times(events)
        summary = result.summary.to_dict("records") or [{"workload": None, "kind": None, "bytes": None,
                                                         "errors": 0}]
        for perftest in summary:
            bandwidth = perftest["kind"] in BANDWIDTH_KINDS
            case = cases.get((str(perftest["workload"]), int(perftest["bytes"] or 0)))
            rows.append({"variant": result.variant, "workload": perftest["workload"], "kind": perftest["kind"],
                         "bytes": perftest["bytes"],
                         "bw_avg_Gbps": _number(perftest.get("bw_avg_Gbps")) if bandwidth else math.nan,
                         **_case_columns(case, bandwidth, events_ps, origin), **per_variant,
                         "errors": int(perftest["errors"]), **result.counters,
                         **{key: perftest[key] for key in result.counters if key in perftest}})
    return pd.DataFrame(rows)


def case_rows(result: RunResult) -> list[tuple[dict, dict]]:
    """Per (workload, size) of ``result``, its perftest summary row and its :func:`comparison_table` row: what
    compares like with like across variants."""
    return list(zip(result.summary.to_dict("records"), comparison_table([result]).to_dict("records")))


COMPARED = ("bw_avg_Gbps", "p50_us", "p99_us", "p99_9_us", "stall_us", "stall_at", "window", "bw_lost_pct",
            "allocation",
            "errors", "modes", "register_us", "gpu_register_us", "pinned_bytes", "gpu_pinned_bytes",
            "gpu_bar1_bytes")
"""The comparison's columns as ``run`` prints them, after the variant, workload and size (the counters follow)."""
GPU_ONLY = ("gpu_register_us", "gpu_pinned_bytes", "gpu_bar1_bytes")
"""Columns that are 0 on a testbed without GPU buffers."""


def comparison_view(table: pd.DataFrame) -> tuple[list[str], list[dict]]:
    """The columns and records of :func:`comparison_table` as people read it: the variant, workload and size,
    then :data:`COMPARED` and the counters, the stall as its length (``stall_us``) and, in a cell of its own
    unit, when it began and ended (``stall_at``), and the event's window as one span (``window``). A column without
    a value in any row, and a counter or GPU column that is 0 in every row, is left out (``summary.json`` keeps
    them)."""
    records = table.to_dict("records")
    for record in records:
        record["stall_at"] = None if pd.isna(record["stall_us"]) else _span(record["stall_from_ms"],
                                                                           record["stall_to_ms"])
        record["window"] = None if pd.isna(record["window_from_ms"]) else _span(record["window_from_ms"],
                                                                                record["window_to_ms"])
    counters = [c for c in table.columns if c not in COMPARED and c not in
                ("variant", "workload", "kind", "bytes") and not c.startswith(("stall_from", "stall_to", "window_"))]
    columns = [c for c in COMPARED if c == "errors" or any(cell(c, r[c]) != NOTHING for r in records)]
    columns = [c for c in columns + counters if c not in counters + list(GPU_ONLY) or any(r[c] for r in records)]
    return ["variant", "workload", "bytes", *columns], records


def format_comparison(table: pd.DataFrame) -> str:
    """:func:`comparison_table` as ``run`` prints it (:func:`comparison_view`): a row per variant, workload and
    size, values in human units (:mod:`sim.inspect.tables`), in blocks of columns that fit a terminal."""
    columns, records = comparison_view(table)
    return blocks([header(c) for c in columns], [[cell(c, r[c]) for c in columns] for r in records], 3)


def _span(start_ms: float, end_ms: float) -> str:
    """``start..end`` ms since the first post in the end's unit, with the decimals that tell them apart."""
    text = cell("end_ms", end_ms)
    unit = text.lstrip("0123456789.-e+")
    scale = {"ps": 1e-9, "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    apart = (end_ms - start_ms) / scale
    decimals = min(9, max(0, 2 - math.floor(math.log10(apart)))) if apart > 0 else 0
    return f"{start_ms / scale:.{decimals}f}..{end_ms / scale:.{decimals}f}{unit}"
