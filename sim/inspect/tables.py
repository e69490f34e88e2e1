"""Tables as people read them: each value in a human unit chosen by its column's name (``*_ps``, ``*_us``,
``*_ms`` times, ``*bytes`` sizes, ``*_Gbps`` rates, ``*_pct`` shares), headers in words, and a table wider than a
terminal wrapped into blocks of columns that repeat the columns naming each row. ``rdmasim run`` prints its
comparison this way and ``rdmasim report`` shows every table so."""

from __future__ import annotations

import math

from sim.core.units import PS_PER_MS, PS_PER_US, format_duration, format_size, format_size_about

WIDTH = 120
"""A terminal's width (characters) that printed tables fit."""
NOTHING = "-"
"""A cell with no value."""

WORDS = {
    "variant": "variant", "workload": "workload", "kind": "kind", "bytes": "size", "modes": "registration modes",
    "register_us": "registration time", "gpu_register_us": "GPU registration time",
    "bw_avg_Gbps": "average bandwidth", "bw_peak_Gbps": "peak bandwidth", "bw_avg_MiBps": "average bandwidth (MiB/s)",
    "msg_rate_Mpps": "message rate (Mpps)", "p50_us": "p50 latency", "p99_us": "p99 latency",
    "p99_9_us": "p99.9 latency", "t_min_us": "min latency", "t_max_us": "max latency",
    "t_typical_us": "typical latency", "t_avg_us": "mean latency", "t_stdev_us": "latency stdev",
    "stall_us": "longest stall", "stall_at": "stall from..to", "window": "event window", "bw_lost_pct": "bandwidth lost in window",
    "allocation": "competing allocation", "pinned_bytes": "pinned", "gpu_pinned_bytes": "GPU pinned",
    "gpu_bar1_bytes": "GPU BAR1", "errors": "errors", "errors_by_status": "errors by status",
    "iterations": "iterations", "time_ps": "time (run clock)", "time_ms": "time since first post",
    "target": "target", "outcome": "outcome", "evicted": "buffers evicted", "gpu_used": "VRAM in use",
    "buffer": "buffer", "node": "node", "location": "location", "mode": "mode", "mtt_entries": "MTT entries",
    "mtt_page_bytes": "MTT page size", "bar1_bytes": "BAR1 mapped", "failed_allocations": "failed allocations",
    "rnr_naks": "RNR NAKs", "frames_lost": "frames lost", "refaults": "re-faults",
    "invariant_violations": "invariant violations", "kernel_warnings": "kernel warnings",
    "amount_bytes": "amount", "requested": "engine asked for", "ran": "engine that ran",
    "fallback": "why auto fell back", "bw_Gbps": "delivered bandwidth", "estimate_Gbps": "estimate",
}
"""Column names -> the words of their header; a column not named here is shown with its underscores as spaces."""
EXACT_SIZES = ("bytes", "mtt_page_bytes")
"""Size columns whose values are exact sizes (message sizes, page sizes): ``4KiB`` rather than ``4.0KiB``."""


FIELD_WORDS = {"sizes": "message size", "register": "registration mode", "mtu": "MTU", "rate": "rate",
               "tx_depth": "send queue depth", "rx_depth": "receive queue depth", "iterations": "iterations",
               "qps": "queue pairs", "preset": "preset", "memory": "memory", "allocate": "allocation"}
"""A sweep axis's last field in words (the others keep their own name, underscores as spaces)."""


def axis_words(key: str) -> str:
    """A sweep axis in words: ``workload.stream.sizes.0 -> 'message size (workload stream)'``,
    ``buffers.src.register -> 'registration mode (buffer src)'``, ``fabric.mtu -> 'fabric MTU'``."""
    parts = [p for p in key.split(".") if not p.isdigit()]
    if len(parts) < 2:
        return key.replace("_", " ")
    field = FIELD_WORDS.get(parts[-1], parts[-1].replace("_", " "))
    if len(parts) == 2:
        return f"{parts[0]} {field}"
    owner = {"workload": "workload", "buffers": "buffer", "nodes": "node", "events": "event"}.get(parts[0], parts[0])
    return f"{field} ({owner} {' '.join(parts[1:-1])})"


def header(column: str) -> str:
    """The words of ``column``'s header; a sweep axis (a dotted key) by :func:`axis_words`."""
    if "." in column:
        return axis_words(column)
    return WORDS.get(column, column.replace("_", " "))


def _missing(value) -> bool:
    return value is None or isinstance(value, float) and math.isnan(value)


def cell(column: str, value) -> str:
    """``value`` of ``column`` as text in a human unit chosen by the column's name; nothing as ``-``."""
    if _missing(value):
        return NOTHING
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or NOTHING
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value == 0 and column.endswith(("_ps", "_us", "_ms")):
        return "0"
    if column.endswith("_ps"):
        return format_duration(value)
    if column.endswith("_us"):
        return format_duration(value * PS_PER_US)
    if column.endswith("_ms"):
        return format_duration(value * PS_PER_MS)
    if column in EXACT_SIZES:
        return format_size(int(value))
    if column.endswith("bytes") or column == "gpu_used":
        return format_size_about(int(value))
    if column.endswith("_Gbps"):
        return format_rate(value)
    if column.endswith("_pct"):
        return f"{value + 0.0:.1f}%".replace("-0.0%", "0.0%")
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"
    return str(value)


def format_rate(gbps: float) -> str:
    """A rate given in Gb/s, with the prefix that keeps it at least 1: ``0.0034 -> '3.4Mb/s'``."""
    for prefix, scale in (("G", 1.0), ("M", 1e-3), ("K", 1e-6)):
        if abs(gbps) >= scale:
            return f"{gbps / scale:.4g}{prefix}b/s"
    return f"{gbps * 1e9:.4g}b/s"


def blocks(headers: list[str], rows: list[list[str]], keys: int, width: int = WIDTH) -> str:
    """A text table right-aligned in columns, split into blocks of columns at most ``width`` wide (a column too
    wide alone gets a block of its own); each block repeats the first ``keys`` columns (left-aligned), which
    name the rows."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    key_width = sum(widths[:keys]) + 2 * keys
    groups, current, used = [], [], key_width
    for i in range(keys, len(headers)):
        if current and used + widths[i] + 2 > width:
            groups.append(current)
            current, used = [], key_width
        current.append(i)
        used += widths[i] + 2
    groups.append(current)
    lines = []
    for n, group in enumerate(groups):
        shown = [*range(keys), *group]
        if n:
            lines.append("")
        for texts in (headers, *rows):
            lines.append("  ".join(texts[i].ljust(widths[i]) if i < keys else texts[i].rjust(widths[i])
                                   for i in shown).rstrip())
    return "\n".join(lines)
