"""Bandwidth-vs-size and latency-vs-size figures, each saved as PNG and PDF with the CSV behind it."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import LogFormatter
import numpy as np
import pandas as pd

from models.verbs.workload_kinds import BANDWIDTH_KINDS, LATENCY_KINDS
from sim.inspect.binned import CDF_COLUMNS
from sim.core.units import format_size
from sim.engine.events import BOOKKEEPING_KINDS, event_failed

# matplotlib says so when placing a legend at loc="best" took over a second: a loaded machine, not a fault of the
# figure (figures of many operations draw binned aggregates, sim/inspect/binned.py); it would only reach users'
# terminals.
warnings.filterwarnings("ignore", message='Creating legend with loc="best" can be slow', category=UserWarning)

PDF_METADATA = {"CreationDate": None, "ModDate": None, "Producer": "rdmasim"}
"""Fixed PDF metadata so the same run gives the same bytes."""


def _size_axis(ax, sizes) -> None:
    if not np.isfinite(ax.dataLim.x0):  # nothing plotted: the log axis still needs limits, around the sizes
        ax.set_xlim(min(sizes) / 2, max(sizes) * 2)
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))[:: max(1, len(set(sizes)) // 8)]
    ax.set_xticks(ticks, [format_size(int(t)) for t in ticks], rotation=30)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


NO_DATA = "no successful work requests"
"""What a figure says across its middle when nothing it would plot succeeded."""


def measured(axes, values) -> bool:
    """True when ``values`` holds a finite number; else write :data:`NO_DATA` across each of ``axes``."""
    if np.isfinite(np.asarray(values, dtype=float)).any():
        return True
    for ax in axes:
        ax.text(0.5, 0.5, NO_DATA, ha="center", va="center", transform=ax.transAxes, color="grey")
    return False


def from_zero(ax) -> None:
    """Start ``ax``'s y axis at 0 and leave the usual margin above the highest point: autoscaling measures its
    margin from the data's own range, so a curve that barely varies would sit on the top edge, half clipped."""
    top = ax.dataLim.y1
    if np.isfinite(top) and top > 0:
        ax.set_ylim(0, top * (1 + plt.rcParams["axes.ymargin"]))
    else:
        ax.set_ylim(bottom=0)


def line_rate(ax, rates_Gbps) -> None:
    """The link's line rate(s) (Gb/s) as a dotted black reference named with its rate: no link carries more."""
    for rate in sorted(set(rates_Gbps)):
        ax.axhline(rate, color="black", ls=":", lw=1.0, label=f"line rate {rate:g} Gb/s")


def decade_ticks(axis) -> None:
    """Label a log axis at 1, 2 and 5 of every decade, in plain numbers: ticks at decades alone leave a value
    between them to be guessed."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def plain_log_ticks(axis) -> None:
    """Label a log axis where matplotlib would (its decades, and inside a narrow range some ticks between), in
    plain text: numbers from 0.001 to 100,000, powers of ten beyond with superscript digits. Matplotlib's own
    labels are mathtext, whose parser costs a command ~0.2 s per output format."""
    axis.set_major_formatter(PlainLogFormatter(base=10))
    axis.set_minor_formatter(PlainLogFormatter(base=10, labelOnlyBase=False))


class PlainLogFormatter(LogFormatter):
    """Matplotlib's :class:`~matplotlib.ticker.LogFormatter` (its choice of the ticks to label) writing
    :func:`_plain_log`."""

    def _num_to_string(self, x, vmin, vmax):
        return _plain_log(x)


SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def _plain_log(value: float) -> str:
    """A log axis's label: ``0.02``, ``300``, or ``10⁻⁹`` for a power of ten beyond 0.001 .. 100,000 (other values
    there: ``2e-09``)."""
    exponent = np.log10(value)
    if not 1e-3 <= value <= 1e5 and abs(exponent - round(exponent)) < 1e-9:
        return "10" + str(int(round(exponent))).translate(SUPERSCRIPT)
    return f"{value:g}"


LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def curve_style(index: int, points: int) -> dict:
    """Line style and marker of a figure's ``index``-th curve of ``points`` points: both change from curve to
    curve, and the markers of dense curves are thinned and offset, so curves that coincide stay apart."""
    every = max(1, points // 12)
    return {"ls": LINE_STYLES[index % len(LINE_STYLES)], "marker": MARKERS[index % len(MARKERS)], "ms": 4,
            "markevery": (index * max(1, every // 4) % every, every), "lw": 1.3}


def identical_to(curves: list[tuple[str, np.ndarray]]) -> dict[str, str]:
    """For each curve whose values equal an earlier one's: its label -> the earlier label."""
    same: dict[str, str] = {}
    for i, (label, values) in enumerate(curves):
        first = next((other for other, seen in curves[:i] if other not in same and len(seen) == len(values)
                      and np.allclose(seen, values, rtol=1e-12, equal_nan=True)), None)
        if first is not None:
            same[label] = first
    return same


def labelled(curves: list[tuple[str, np.ndarray]]) -> list[str]:
    """Legend labels of ``curves``: a curve that coincides with an earlier one says so."""
    same = identical_to(curves)
    return [f"{label} (identical to {same[label]})" if label in same else label for label, _ in curves]


def save(fig, data: pd.DataFrame, directory: Path, name: str) -> list[Path]:
    """Write ``fig`` as ``name``.png and .pdf (deterministic metadata) and ``data`` as ``name``.csv."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{name}.png", directory / f"{name}.pdf", directory / f"{name}.csv"]
    fig.savefig(paths[0], dpi=120, metadata={"Software": None})
    fig.savefig(paths[1], metadata=PDF_METADATA)
    plt.close(fig)
    data.to_csv(paths[2], index=False)
    return paths


def _curves(data: pd.DataFrame):
    """One curve per (variant, workload), labelled by what differs: the workload, the variant, or both."""
    if "variant" not in data:
        data = data.assign(variant="base")
    variants, workloads = data["variant"].nunique() > 1, data["workload"].nunique() > 1
    for (variant, workload), rows in data.groupby(["variant", "workload"], sort=False, observed=True):
        label = " / ".join(part for part, shown in ((variant, variants), (workload, workloads)) if shown)
        yield label or workload, rows


def bw_vs_size(summary: pd.DataFrame, directory: Path, title: str, line_Gbps=()) -> list[Path]:
    """Average bandwidth (Gb/s) against message size, one line per bandwidth workload, with the line rate(s)
    ``line_Gbps`` as a reference; where the rows say that runs met scenario events (``events``: how many runs
    of that point did), the point is ringed and the legend says so."""
    columns = [c for c in ("variant", "workload", "bytes", "bw_avg_Gbps", "bw_peak_Gbps", "events") if c in summary]
    data = summary[summary["kind"].isin(BANDWIDTH_KINDS)][columns]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = list(_curves(data))
    names = labelled([(label, rows["bw_avg_Gbps"].to_numpy()) for label, rows in curves])
    for i, ((_, rows), name) in enumerate(zip(curves, names)):
        ax.plot(rows["bytes"], rows["bw_avg_Gbps"], label=name, **curve_style(i, len(rows)))
    if "events" in data and (data["events"] > 0).any():
        met = data[data["events"] > 0]
        ax.scatter(met["bytes"], met["bw_avg_Gbps"], s=140, facecolors="none", edgecolors="tab:red", lw=1.2,
                   zorder=3, label="runs that met a scenario event (other sizes ran without one)")
    line_rate(ax, line_Gbps)
    _size_axis(ax, data["bytes"])
    ax.set_ylabel("average bandwidth (Gb/s)")
    from_zero(ax)
    ax.set_title(f"{title}: bandwidth vs. message size")
    if measured([ax], data["bw_avg_Gbps"]):
        ax.legend()
    fig.tight_layout()
    return save(fig, data, directory, "bw_vs_size")


def latency_vs_size(summary: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Typical latency (us) against message size with the p99-p99.9 band, one line per latency workload."""
    columns = [c for c in ("variant", "workload", "bytes", "t_typical_us", "t_min_us", "p99_us", "p99_9_us")
               if c in summary]
    data = summary[summary["kind"].isin(LATENCY_KINDS)][columns]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = list(_curves(data))
    names = labelled([(label, rows[["t_typical_us", "t_min_us", "p99_9_us"]].to_numpy().ravel())
                      for label, rows in curves])
    for i, ((_, rows), name) in enumerate(zip(curves, names)):
        line, = ax.plot(rows["bytes"], rows["t_typical_us"], label=f"{name} (typical)", **curve_style(i, len(rows)))
        ax.fill_between(rows["bytes"], rows["t_min_us"], rows["p99_9_us"], color=line.get_color(), alpha=0.2,
                        label=f"{name} (min..p99.9)")
    _size_axis(ax, data["bytes"])
    if measured([ax], data["t_typical_us"]):
        ax.set_yscale("log")
        decade_ticks(ax.yaxis)
        ax.legend(fontsize=8)
    ax.set_ylabel("latency (µs)")
    ax.set_title(f"{title}: latency vs. message size")
    fig.tight_layout()
    return save(fig, data, directory, "latency_vs_size")




def _time_curves(ax, timeline: pd.DataFrame) -> None:
    """Delivered bandwidth per variant, each in its own style; a curve equal to an earlier one says so."""
    curves = list(timeline.groupby("variant", sort=False))
    names = labelled([(label, rows["bw_Gbps"].to_numpy(dtype=float)) for label, rows in curves])
    for i, ((_, rows), name) in enumerate(zip(curves, names)):
        ax.plot(rows["time_ms"], rows["bw_Gbps"], label=name, **curve_style(i, len(rows)))


OUTCOME_BOX = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}
"""The white box behind an event's outcome, so that the event lines and labels it crosses do not run into it."""


def _mark_events(ax, events: pd.DataFrame) -> None:
    """The scenario's events as dashed lines named by kind; per variant, an event that failed (the competing job's
    allocation, refused because memory was pinned) as a red cross with its outcome, one that evicted a
    registered buffer (move_notify, the copy, the NIC's re-fault follow) as an orange triangle."""
    shown = events[~events["kind"].isin(BOOKKEEPING_KINDS)]
    for _, event in shown.drop_duplicates(["kind", "time_ms"]).iterrows():
        ax.axvline(event["time_ms"], color="grey", ls="--", lw=0.8)
        ax.annotate(event["kind"], (event["time_ms"], 0), xytext=(3, 8), textcoords="offset points",
                    xycoords=("data", "axes fraction"), rotation=90, fontsize=7, color="grey")  # below the outcomes
    if "outcome" not in shown:
        return
    failed = shown["outcome"].astype(str).map(event_failed).astype(bool)
    evicted = (pd.to_numeric(shown["evicted"], errors="coerce").fillna(0) > 0 if "evicted" in shown
               else pd.Series(False, index=shown.index))
    for row, (_, event) in enumerate(shown[failed | evicted].iterrows()):
        y = 0.75 - 0.07 * row
        bad = event_failed(str(event["outcome"]))
        what = event["outcome"] if bad else f"evicted {int(event['evicted'])} buffer(s): move_notify, copy, re-fault"
        colour = "tab:red" if bad else "tab:orange"
        ax.plot([event["time_ms"]], [y], "x" if bad else "v", color=colour, ms=7, mew=2,
                transform=ax.get_xaxis_transform())
        who = "" if event.get("variant", "base") == "base" else f"{event['variant']}: "
        ax.annotate(f"{who}{event['kind']} {what}", (event["time_ms"], y), xytext=(6, 0), textcoords="offset points",
                    xycoords=("data", "axes fraction"), fontsize=7, color=colour, va="center",
                    bbox=OUTCOME_BOX)  # over the event lines and their labels, not through them


SPREAD = 10.0
"""When the variants' typical delivered bandwidths differ by more than this factor, bandwidth over time is drawn on a
log axis: on a linear one the fastest variant flattens the others onto zero."""


def bw_over_time(timeline: pd.DataFrame, events: pd.DataFrame, directory: Path, title: str,
                 latencies: pd.DataFrame | None = None, line_Gbps=(), sizes: pd.DataFrame | None = None
                 ) -> list[Path]:
    """Delivered bandwidth over time per variant with the scenario's events marked (failed ones with their
    outcome) and the line rate(s) ``line_Gbps``; below it, when ``latencies``
    (:func:`sim.inspect.compare.post_latencies`) are given, the operations' latency against the time they were
    posted, where a stall shows as the operations it held. ``sizes`` (:func:`sim.inspect.compare.size_spans`)
    shades and names the time each message size ran, when there are several: a curve through back-to-back sizes
    is one line only within each band."""
    if latencies is None:
        fig, top = plt.subplots(figsize=(8, 4.2))
    else:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.6), sharex=True, height_ratios=(3, 2))
    _time_curves(top, timeline)
    _mark_events(top, events)
    line_rate(top, line_Gbps)
    delivered = timeline["bw_Gbps"].to_numpy(dtype=float)
    measured([top], np.where(delivered > 0, delivered, np.nan))  # nothing delivered: no work request succeeded
    if _spread(timeline) > SPREAD:
        top.set_yscale("log")
        plain_log_ticks(top.yaxis)
        top.set_ylabel("delivered bandwidth (Gb/s, log scale;\nbins with nothing delivered left out)", fontsize=8)
    else:
        top.set_ylabel("delivered bandwidth (Gb/s)")
        from_zero(top)
    fig.suptitle(f"{title}: bandwidth over time")
    top.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False)  # clear of the events
    top.grid(True, alpha=0.3)
    if latencies is not None:
        _latency_panel(bottom, latencies)
    for ax in (top,) if latencies is None else (top, bottom):
        _size_bands(ax, sizes, label=ax is top)
    (top if latencies is None else bottom).set_xlabel("time since the first post (ms)")
    fig.tight_layout()
    return save(fig, timeline, directory, "bw_over_time")


def _spread(timeline: pd.DataFrame) -> float:
    """How many times the variant of the highest median delivered bandwidth outruns the lowest (bins with
    something delivered)."""
    typical = [rows.loc[rows["bw_Gbps"] > 0, "bw_Gbps"].median() for _, rows in timeline.groupby("variant")]
    typical = [t for t in typical if np.isfinite(t) and t > 0]
    return max(typical) / min(typical) if len(typical) > 1 else 1.0


def _size_bands(ax, sizes: pd.DataFrame | None, label: bool) -> None:
    """Alternate shading over the time each message size ran (``start_ms``, ``end_ms``, ``bytes``), each named at
    the foot of ``ax`` when ``label``; nothing for one size."""
    if sizes is None or sizes["bytes"].nunique() < 2:
        return
    for i, band in enumerate(sizes.itertuples()):
        ax.axvspan(band.start_ms, band.end_ms, color="0.5" if i % 2 else "0.8", alpha=0.12, lw=0, zorder=0)
        if label:
            ax.text((band.start_ms + band.end_ms) / 2, 0.03, format_size(int(band.bytes)), rotation=90, ha="center",
                    va="bottom", fontsize=6, color="0.35", transform=ax.get_xaxis_transform())  # below the curves


def _latency_panel(ax, latencies: pd.DataFrame) -> None:
    """Per variant, each operation's latency against its post time, or (a variant of too many operations to
    draw one by one: :mod:`sim.inspect.binned`) the maximum and the median of each time bin's operations."""
    values = [c for c in ("latency_us", "max_us", "p50_us") if c in latencies]
    groups = list(latencies.groupby("variant", sort=False))
    names = labelled([(label, rows[["posted_ms", *values]].to_numpy().ravel()) for label, rows in groups])
    for i, ((_, rows), name) in enumerate(zip(groups, names)):
        if "latency_us" in rows and rows["latency_us"].notna().any():
            ax.scatter(rows["posted_ms"], rows["latency_us"], s=4, marker=MARKERS[i % len(MARKERS)],
                       label=name, alpha=0.6, rasterized=True)
            continue
        colour = f"C{i % 10}"
        ax.step(rows["posted_ms"], rows["max_us"], where="post", color=colour, lw=1.1,
                label=f"{name}: maximum per {rows['posted_ms'].iloc[1] - rows['posted_ms'].iloc[0]:.3g} ms")
        ax.step(rows["posted_ms"], rows["p50_us"], where="post", color=colour, lw=0.8, ls="--",
                label=f"{name}: median")
    if measured([ax], latencies[values].stack()):
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
        ax.legend(fontsize=8, markerscale=2)
    ax.set_ylabel("latency (µs)")
    ax.grid(True, alpha=0.3)


LEGEND_CURVES = 8
"""Up to this many latency distributions are told apart in a legend; more are coloured by message size with a
colour bar, one line style per variant and workload."""


def latency_cdf(curves: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Latency per variant, workload and message size (:func:`sim.inspect.binned.cdf_curves`: one distribution
    per size, never sizes pooled): the CDF, and beside it the tail (the fraction at least this slow, log scale)
    where rare stalls show."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    groups = [rows for _, rows in curves.groupby(["variant", "workload", "bytes"], sort=False, observed=True)]
    series = list(dict.fromkeys((c["variant"].iloc[0], c["workload"].iloc[0]) for c in groups))
    one_series = len(series) <= 1
    sizes = sorted({int(c["bytes"].iloc[0]) for c in groups})
    keys = [" / ".join(([] if one_series else [f"{c['variant'].iloc[0]} / {c['workload'].iloc[0]}"])
                       + [format_size(int(c["bytes"].iloc[0]))]) for c in groups]
    labels = labelled([(k, c["latency_us"].to_numpy()) for k, c in zip(keys, groups)])
    by_size = len(groups) > LEGEND_CURVES
    colours = plt.get_cmap("viridis")
    for i, (curve, label) in enumerate(zip(groups, labels)):
        lat, frac = curve["latency_us"].to_numpy(), curve["cdf"].to_numpy()
        if by_size:
            where = sizes.index(int(curve["bytes"].iloc[0])) / max(1, len(sizes) - 1)
            index = series.index((curve["variant"].iloc[0], curve["workload"].iloc[0]))
            style = {"color": colours(where), "ls": LINE_STYLES[index % len(LINE_STYLES)], "lw": 1.0}
        else:
            style = curve_style(i, len(lat))
        left.step(lat, frac, where="post", label=label, **style)
        right.step(lat, np.maximum(np.append(1.0, 1 - frac[:-1]), 1e-9), where="post", label=label, **style)
    data = pd.concat(groups, ignore_index=True) if groups else pd.DataFrame(columns=CDF_COLUMNS)
    left.set(xlabel="latency (µs)", ylabel="fraction of operations", title="CDF")
    right.set(xlabel="latency (µs)", ylabel="fraction at least this slow", title="tail")
    if measured([left, right], data["latency_us"]):
        left.set(xscale="log")
        right.set(xscale="log", yscale="log")
        for axis in (left.xaxis, right.xaxis, right.yaxis):
            plain_log_ticks(axis)
        if by_size:
            if not one_series:
                left.legend([plt.Line2D([], [], color="black", ls=LINE_STYLES[i % len(LINE_STYLES)])
                             for i in range(len(series))], [f"{v} / {w}" for v, w in series], fontsize=7)
        else:
            left.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{title}: latency per operation, per message size")
    fig.tight_layout()
    if by_size and len(data):
        _size_colour_bar(fig, (left, right), sizes, colours)  # after the layout, which a colour bar's axes escape
    return save(fig, data, directory, "latency_cdf")


def _size_colour_bar(fig, axes, sizes: list[int], colours) -> None:
    """A colour bar naming the message size of each colour (first, middle and last sizes ticked)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    bar = fig.colorbar(ScalarMappable(Normalize(0, max(1, len(sizes) - 1)), colours), ax=list(axes), pad=0.01)
    ticks = sorted({0, (len(sizes) - 1) // 2, len(sizes) - 1})
    bar.set_ticks(ticks, labels=[format_size(sizes[t]) for t in ticks])
    bar.set_label("message size")


NO_GPU = "no GPU memory on this testbed"
"""What the memory panel of :func:`gpu_memory` says across its middle when no node has a GPU."""


def gpu_memory(timeline: pd.DataFrame, events: pd.DataFrame, directory: Path, title: str, line_Gbps=()
               ) -> list[Path]:
    """Delivered bandwidth (top, with the line rate(s) ``line_Gbps``) and VRAM in use (bottom) over time, per
    variant: what memory pressure does to an RDMA stream out of GPU memory."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    _time_curves(top, timeline)
    _mark_events(top, events)
    line_rate(top, line_Gbps)
    used = events.dropna(subset=["gpu_used"]).sort_values("time_ms")
    steps = []
    for label, rows in used.groupby("variant", sort=False):
        end = timeline[timeline["variant"] == label]["time_ms"].max()
        steps.append((label, list(rows["time_ms"]) + [end], list(rows["gpu_used"] / 2**30)
                      + [rows["gpu_used"].iloc[-1] / 2**30]))
    names = labelled([(label, np.array(times + values)) for label, times, values in steps])
    for i, ((_, times, values), name) in enumerate(zip(steps, names)):
        bottom.step(times, values, where="post", label=name, **curve_style(i, len(times)))
    if not steps:
        bottom.text(0.5, 0.5, NO_GPU, ha="center", va="center", transform=bottom.transAxes, color="grey")
    top.set(ylabel="delivered bandwidth (Gb/s)", title=f"{title}: bandwidth and GPU memory over time")
    from_zero(top)
    bottom.set(xlabel="time since the first post (ms)", ylabel="VRAM in use (GiB)")
    from_zero(bottom)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    data = used[["variant", "time_ms", "kind", "gpu_used", "outcome"]]
    return save(fig, data, directory, "gpu_memory")


def rail_bw(rails: pd.DataFrame, directory: Path, title: str, line_Gbps=()) -> list[Path]:
    """Each stream's delivered bandwidth (Gb/s, as every rate rdmasim draws) per (variant, workload) at its
    largest size, bars by the requester's NIC, with the closed-form estimate of the same flows as a tick on each
    bar (:func:`sim.inspect.rails.rail_table`) and the line rate(s) ``line_Gbps``."""
    largest = rails[rails["bytes"] == rails.groupby(["variant", "workload"])["bytes"].transform("max")]
    largest = largest.assign(bw_Gbps=largest["bw_GBps"] * 8, estimate_Gbps=largest["estimate_GBps"] * 8)
    groups = list(largest.groupby(["variant", "workload"], sort=False))
    streams = largest.groupby(["variant", "workload"]).size().max() if len(largest) else 0
    fig, ax = plt.subplots(figsize=(min(max(6.0, 0.25 * streams * len(groups) + 2), 16.0), 4))
    width = 0.8 / max(len(groups), 1)
    for i, ((variant, workload), rows) in enumerate(groups):
        x = np.arange(len(rows)) + i * width
        label = workload if largest["variant"].nunique() == 1 else f"{variant}: {workload}"
        ax.bar(x, rows["bw_Gbps"], width, label=label)
        ax.scatter(x, rows["estimate_Gbps"], marker="_", s=200, color="black", zorder=3,
                   label="estimate" if i == 0 else None)
    line_rate(ax, line_Gbps)
    first = groups[0][1] if groups else largest
    ax.set_xticks(np.arange(len(first)) + 0.4 - width / 2,
                  [f"{src} to {dst}" for src, dst in zip(first["source"], first["sink"])], rotation=60, fontsize=7)
    ax.set(ylabel="delivered bandwidth (Gb/s)", title=f"{title}: bandwidth per rail")
    from_zero(ax)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, largest, directory, "rail_bw")
