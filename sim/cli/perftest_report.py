"""perftest's text report: its rule and column headers, and one block of rows per workload (as perftest prints
them with --report_gbits), from a run's summary rows (dicts, :attr:`sim.engine.tables.RunResult.summary_rows`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from models.verbs.workload_kinds import BANDWIDTH_KINDS, KINDS
from sim.core.metrics import OpColumns, bandwidth_of
from sim.core.units import PS_PER_US

if TYPE_CHECKING:
    import pandas as pd

RULE = "-" * 100
BW_HEADER = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
"""perftest's RESULT_FMT_G (with --report_gbits)."""
BW_HEADER_MIB = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
"""perftest's RESULT_FMT (its default unit, 2**20 bytes a second)."""
GBPS_TO_MIBPS = 1e9 / 8 / 2**20
"""MiB/s in one Gb/s."""


def bandwidth_column(gbits: bool) -> str:
    """The summary column of the average bandwidth in the report's unit."""
    return "bw_avg_Gbps" if gbits else "bw_avg_MiBps"
LAT_HEADER = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
              "   99% percentile[usec]   99.9% percentile[usec]")
LAT_DURATION_HEADER = " #bytes        #iterations       t_avg[usec]    tps average"
"""perftest's RESULT_FMT_LAT_DUR: a latency test run for a duration (-D)."""

NOTHING_MEASURED = "no work request succeeded: nothing measured"
"""Printed in place of a row's rates or latencies when none of its work requests succeeded."""


def missing(value) -> bool:
    """Whether a summary value was not measured (NaN, or None)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def by_workload(summary: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Summary rows by (variant, workload), in the order each first comes, each its rows in order."""
    blocks: dict[tuple[str, str], list[dict]] = {}
    for row in summary:
        blocks.setdefault((row["variant"], row["workload"]), []).append(row)
    return blocks


def format_summary(summary: list[dict], gbits: bool = True, no_peak: bool = False,
                   iterations: Mapping[int, list[str]] | None = None, measured_s: float | None = None) -> str:
    """perftest's report layout of summary rows, one block per workload, bandwidth in Gb/sec (``gbits``, perftest's
    --report_gbits) or MiB/sec; a size where no work request succeeded says so instead of printing rates, and
    errors are counted per ``ibv_wc_status``. ``no_peak`` (perftest's -N) prints the peak as 0.00, as perftest's
    ``print_report_bw`` computes it then; ``iterations`` (perftest's -H/-U) holds, by message size, the lines
    printed before that size's row, which perftest follows with the rule and the column header again. A latency
    test that ran for a duration, measured for ``measured_s`` seconds, gets perftest's
    ``print_report_lat_duration`` row instead (:func:`duration_latency_row`)."""
    unit = 1.0 if gbits else GBPS_TO_MIBPS
    blocks = []
    for (variant, label), rows in by_workload(summary).items():
        kind = rows[0]["kind"]
        title = label if label == kind else f"{label}: {kind}"  # an unnamed workload is called by its kind
        lines = [f" {title}" + ("" if variant == "base" else f" [{variant}]"), RULE]
        if kind in BANDWIDTH_KINDS:
            lines.append(BW_HEADER if gbits else BW_HEADER_MIB)
            for r in rows:
                peak = 0.0 if no_peak else r["bw_peak_Gbps"] * unit
                lines.append(f" {r['bytes']:<10d} {r['iterations']:<10d}     " + (
                    NOTHING_MEASURED if missing(r["bw_avg_Gbps"]) else
                    f"{peak:<18.2f} {r['bw_avg_Gbps'] * unit:<20.2f} {r['msg_rate_Mpps']:.6f}"))
        elif measured_s is not None:
            lines += [LAT_DURATION_HEADER, *(duration_latency_row(r, measured_s) for r in rows)]
        else:
            lines.append(LAT_HEADER)
            for r in rows:
                if iterations is not None:
                    lines += [*iterations[r["bytes"]], RULE, LAT_HEADER]
                lines.append(f" {r['bytes']:<6d} {r['iterations']:<10d}  " + (
                    NOTHING_MEASURED if missing(r["t_typical_us"]) else
                    f"{r['t_min_us']:<14.2f} {r['t_max_us']:<12.2f} {r['t_typical_us']:<18.2f} {r['t_avg_us']:<16.2f} "
                    f"{r['t_stdev_us']:<15.2f} {r['p99_us']:<22.2f} {r['p99_9_us']:.2f}"))
        if any(r["errors"] for r in rows):
            lines.append(f" work requests completed in error: {error_counts(r['errors_by_status'] for r in rows)}")
        lines.append(RULE)
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def duration_latency_row(r: dict, measured_s: float) -> str:
    """perftest's REPORT_FMT_LAT_DUR row of summary row ``r``: its iterations measured over ``measured_s`` seconds,
    the average latency those seconds give (a ping-pong's halved: perftest's ``rtt_factor``) and the iterations
    a second."""
    size, count = r["bytes"], r["iterations"]
    if not count:
        return f" {size:<7d}       {count:<10d}        {NOTHING_MEASURED}"
    return (f" {size:<7d}       {count}            {duration_latency_us(r, measured_s):<7.2f}        "
            f"{count / measured_s:<7.2f}")


def duration_latency_us(r: dict, measured_s: float) -> float:
    """perftest's latency of a test run for a duration (usec): the ``measured_s`` seconds over summary row ``r``'s
    iterations, halved for a ping-pong (its ``rtt_factor``); NaN where none was measured."""
    round_trip = 2 if KINDS[r["kind"]].ping_pong else 1
    return measured_s * 1e6 / round_trip / r["iterations"] if r["iterations"] else float("nan")


def format_values(summary: list[dict], output: str, gbits: bool, iterations: Mapping[int, list[str]] | None = None,
                  measured_s: float | None = None) -> str:
    """perftest's --output: one number a size, as ``printf("%lf\\n")`` prints it: the average bandwidth (in the
    report's unit), the message rate (Mpps) or the average latency (usec; of a latency test measured for
    ``measured_s`` seconds, those seconds over its iterations: :func:`duration_latency_us`); each after its
    ``iterations`` lines."""
    column = {"bandwidth": bandwidth_column(gbits), "message_rate": "msg_rate_Mpps", "latency": "t_avg_us"}[output]
    values = [r[column] for r in summary]
    if output == "latency" and measured_s is not None:
        values = [duration_latency_us(r, measured_s) for r in summary]
    return "\n".join(line for r, value in zip(summary, values)
                     for line in [*(iterations or {}).get(r["bytes"], []), f"{value:f}"])


def iteration_lines(latency_ps: np.ndarray, unsorted: bool, histogram: bool) -> list[str]:
    """perftest's -U and -H lists of one size's latencies (usec, ``%g``): ``#, usec`` and ``N, latency`` lines, in
    the order measured (-U), then sorted (-H), each the run's successful iterations, as rdmasim's row uses them
    all (perftest's sorted list leaves out its two largest)."""
    lines = []
    for wanted, values in ((unsorted, latency_ps), (histogram, np.sort(latency_ps))):
        if wanted:
            lines += ["#, usec", *(f"{k}, {v / PS_PER_US:g}" for k, v in enumerate(values, 1))]
    return lines


def one_way(operations: pd.DataFrame, summary: list[dict], window: int) -> tuple[list[dict], list[dict]]:
    """A bidirectional test's summary rows measured on each direction alone (perftest's --report-both): the local
    one (the first half of each size's streams: the client's sends) and the remote one (the second half: the
    server's); ``window`` is one direction's work requests in flight (its peak's shortest run)."""
    halves: tuple[list[dict], list[dict]] = ([], [])
    for row in summary:
        ops = operations[operations["bytes"] == row["bytes"]]
        local = ops["qp"].to_numpy() < (ops["qp"].max() + 1) // 2
        for half, mine in zip(halves, (local, ~local)):
            part = ops[mine].sort_values("posted_ps", kind="stable")
            columns = OpColumns(*(part[c].to_numpy() for c in ("posted_ps", "completed_ps", "ok")))
            half.append(row | bandwidth_of(row["bytes"], columns, window))
    return halves


def error_counts(by_status) -> str:
    """Summary rows' ``errors_by_status`` added up, most frequent first: '97 IBV_WC_WR_FLUSH_ERR, 3 ...'."""
    total: dict[str, int] = {}
    for counts in by_status:
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    return ", ".join(f"{n} {name}" for name, n in sorted(total.items(), key=lambda item: -item[1]))
