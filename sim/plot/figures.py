"""Bandwidth-vs-size and latency-vs-size figures, each saved as PNG and PDF with the CSV behind it."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sim.core.units import format_size

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


def bw_vs_size(summary: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Average bandwidth (Gb/s) against message size, one line per bandwidth workload."""
    columns = [c for c in ("variant", "workload", "bytes", "bw_avg_Gbps", "bw_peak_Gbps") if c in summary]
    data = summary[summary["kind"].str.endswith("_bw")][columns]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, rows in _curves(data):
        ax.plot(rows["bytes"], rows["bw_avg_Gbps"], marker="o", ms=3, label=label)
    _size_axis(ax, data["bytes"])
    ax.set_ylabel("average bandwidth (Gb/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title}: bandwidth vs. message size")
    if measured([ax], data["bw_avg_Gbps"]):
        ax.legend()
    fig.tight_layout()
    return save(fig, data, directory, "bw_vs_size")


def latency_vs_size(summary: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Typical latency (us) against message size with the p99-p99.9 band, one line per latency workload."""
    columns = [c for c in ("variant", "workload", "bytes", "t_typical_us", "t_min_us", "p99_us", "p99_9_us")
               if c in summary]
    data = summary[summary["kind"].str.endswith("_lat")][columns]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, rows in _curves(data):
        line, = ax.plot(rows["bytes"], rows["t_typical_us"], marker="o", ms=3, label=f"{label} (typical)")
        ax.fill_between(rows["bytes"], rows["t_min_us"], rows["p99_9_us"], color=line.get_color(), alpha=0.2,
                        label=f"{label} (min..p99.9)")
    _size_axis(ax, data["bytes"])
    if measured([ax], data["t_typical_us"]):
        ax.set_yscale("log")
        ax.legend()
    ax.set_ylabel("latency (us)")
    ax.set_title(f"{title}: latency vs. message size")
    fig.tight_layout()
    return save(fig, data, directory, "latency_vs_size")




def bw_over_time(timeline: pd.DataFrame, events: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Delivered bandwidth over time per variant, with the scenario's events (``kind``, ``time_ms``) marked."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for label, rows in timeline.groupby("variant", sort=False):
        ax.plot(rows["time_ms"], rows["bw_Gbps"], label=label, lw=1.2)
    for _, event in events.drop_duplicates(["kind", "time_ms"]).iterrows():
        ax.axvline(event["time_ms"], color="grey", ls="--", lw=0.8)
        ax.annotate(event["kind"], (event["time_ms"], 0), xytext=(3, 8), textcoords="offset points",
                    rotation=90, fontsize=7, color="grey")
    delivered = timeline["bw_Gbps"].to_numpy(dtype=float)
    measured([ax], np.where(delivered > 0, delivered, np.nan))  # nothing delivered: no work request succeeded
    ax.set_xlabel("time since the first post (ms)")
    ax.set_ylabel("delivered bandwidth (Gb/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title}: bandwidth over time")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return save(fig, timeline, directory, "bw_over_time")


CDF_COLUMNS = ["variant", "workload", "latency_us", "cdf"]
"""The latency CDF's CSV columns."""


def latency_cdf(operations: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Per-operation latency per variant and workload: the CDF, and beside it the tail (1 - CDF, log scale)
    where rare stalls show."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    curves = []
    for (variant, workload), rows in operations[operations["ok"]].groupby(["variant", "workload"], sort=False):
        lat = np.sort(rows["latency_ps"].to_numpy()) / 1e6
        frac = np.arange(1, len(lat) + 1) / len(lat)
        label = variant if operations["workload"].nunique() == 1 else f"{variant} / {workload}"
        left.step(lat, frac, where="post", label=label)
        right.step(lat, np.maximum(1 - frac + 1 / len(lat), 1e-9), where="post", label=label)
        curves.append(pd.DataFrame({"variant": variant, "workload": workload, "latency_us": lat, "cdf": frac}))
    data = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=CDF_COLUMNS)
    left.set(xlabel="latency (us)", ylabel="fraction of operations", title="CDF")
    right.set(xlabel="latency (us)", ylabel="fraction at least this slow", title="tail")
    if measured([left, right], data["latency_us"]):
        left.set(xscale="log")
        right.set(xscale="log", yscale="log")
        left.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{title}: latency per operation")
    fig.tight_layout()
    return save(fig, data, directory, "latency_cdf")


def gpu_memory(timeline: pd.DataFrame, events: pd.DataFrame, directory: Path, title: str) -> list[Path]:
    """Delivered bandwidth (top) and VRAM in use (bottom) over time, per variant: what memory pressure does to
    an RDMA stream out of GPU memory."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for label, rows in timeline.groupby("variant", sort=False):
        top.plot(rows["time_ms"], rows["bw_Gbps"], label=label, lw=1.2)
    used = events.dropna(subset=["gpu_used"]).sort_values("time_ms")
    for label, rows in used.groupby("variant", sort=False):
        end = timeline[timeline["variant"] == label]["time_ms"].max()
        times = list(rows["time_ms"]) + [end]
        values = list(rows["gpu_used"] / 2**30) + [rows["gpu_used"].iloc[-1] / 2**30]
        bottom.step(times, values, where="post", label=label)
    top.set(ylabel="delivered bandwidth (Gb/s)", title=f"{title}: bandwidth and GPU memory over time")
    top.set_ylim(bottom=0)
    bottom.set(xlabel="time since the first post (ms)", ylabel="VRAM in use (GiB)")
    bottom.set_ylim(bottom=0)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a testbed without GPUs draws no memory curve
            ax.legend(fontsize=8)
    fig.tight_layout()
    data = used[["variant", "time_ms", "kind", "gpu_used", "outcome"]]
    return save(fig, data, directory, "gpu_memory")
