"""perftest's text report: its rule and column headers, and one block of rows per workload (as perftest prints
them with --report_gbits)."""

from __future__ import annotations

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

NOTHING_MEASURED = "no work request succeeded: nothing measured"
"""Printed in place of a row's rates or latencies when none of its work requests succeeded."""


def format_summary(summary, gbits: bool = True) -> str:
    """perftest's report layout, one block per workload, bandwidth in Gb/sec (``gbits``, perftest's
    --report_gbits) or MiB/sec; a size where no work request succeeded says so instead of printing rates, and
    errors are counted per ``ibv_wc_status``."""
    unit = 1.0 if gbits else GBPS_TO_MIBPS
    blocks = []
    for (variant, label), rows in summary.groupby(["variant", "workload"], sort=False):
        kind = rows["kind"].iloc[0]
        lines = [f" {label}: {kind}" + ("" if variant == "base" else f" [{variant}]"), RULE]
        if kind.endswith("_bw"):
            lines.append(BW_HEADER if gbits else BW_HEADER_MIB)
            for r in rows.itertuples():
                lines.append(f" {r.bytes:<10d} {r.iterations:<10d}     " + (
                    NOTHING_MEASURED if pd.isna(r.bw_avg_Gbps) else
                    f"{r.bw_peak_Gbps * unit:<18.2f} {r.bw_avg_Gbps * unit:<20.2f} {r.msg_rate_Mpps:.6f}"))
        else:
            lines.append(LAT_HEADER)
            for r in rows.itertuples():
                lines.append(f" {r.bytes:<6d} {r.iterations:<10d}  " + (
                    NOTHING_MEASURED if pd.isna(r.t_typical_us) else
                    f"{r.t_min_us:<14.2f} {r.t_max_us:<12.2f} {r.t_typical_us:<18.2f} {r.t_avg_us:<16.2f} "
                    f"{r.t_stdev_us:<15.2f} {r.p99_us:<22.2f} {r.p99_9_us:.2f}"))
        if rows["errors"].any():
            lines.append(f" work requests completed in error: {error_counts(rows['errors_by_status'])}")
        lines.append(RULE)
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def error_counts(by_status) -> str:
    """Summary rows' ``errors_by_status`` added up, most frequent first: '97 IBV_WC_WR_FLUSH_ERR, 3 ...'."""
    total: dict[str, int] = {}
    for counts in by_status:
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    return ", ".join(f"{n} {name}" for name, n in sorted(total.items(), key=lambda item: -item[1]))
