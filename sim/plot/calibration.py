"""Calibration figures: each measured H200 curve (points with their 10-90 % spread) against the model's line.

* ``calib_gpu_alloc``: cudaMalloc/cudaFree and the VMM calls against size (:mod:`models.gpu.alloc_cost`).
* ``calib_host_pinning``: pin_user_pages, mlock and cudaHostRegister per page backing, pages present and faulted
  in (:class:`models.host.HostParams`).
* ``calib_um_prefetch``: cudaMemPrefetchAsync to the GPU and back against size, both experiments
  (:mod:`models.gpu.um_calibration`).
* ``calib_dma_engine``: pcie-bench's NFP-6000 writes, read latency and reads against the ``nfp6000`` preset
  (:mod:`sim.plot.calib_dma`).
* ``calib_mtt_cliff``: RDMA READ bandwidth against the destination MR's size, LMCache PR #4432's rows (at their
  largest MR) against the translation model on 4 KiB and 2 MiB pages (:mod:`models.nic.mtt_calibration`).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from models.gpu.alloc_cost import ALLOC_PRESETS, CALLS
from models.gpu.managed import UVM_PRESETS
from models.gpu.um_calibration import compare, load_cases
from models.host import HostParams
from sim.plot.calib_dma import dma_engine_figure
from models.nic.mtt_cache import MttParams, stream_Bps
from models.nic.mtt_calibration import LINK, base_Bps, load_points, simulate_Bps
from sim.plot.figures import save

DATA = Path(__file__).resolve().parents[2] / "models" / "data"
SIZES = np.logspace(21, 36, 61, base=2)
"""Sizes the model lines are drawn at (2 MiB .. 64 GiB)."""


def _load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _points(ax, rows: pd.DataFrame, color) -> None:
    """Measured medians with their 10-90 % spread as error bars (ms)."""
    mid = rows["median_s"] * 1e3
    ax.errorbar(rows["bytes"], mid, yerr=[mid - rows["p10_s"] * 1e3, rows["p90_s"] * 1e3 - mid], fmt="o", ms=3,
                color=color, capsize=2, lw=0.8)


def _gpu_alloc(directory: Path) -> list[Path]:
    points = pd.DataFrame(_load("h200_gpu_alloc.json")["points"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    groups = (("cudaMalloc / cudaFree", CALLS[:2]), ("VMM calls", CALLS[2:]))
    for ax, (title, calls) in zip(axes, groups):
        for call in calls:
            line = ax.plot(SIZES, [ALLOC_PRESETS["h200"][call].time_ps(int(n)) / 1e9 for n in SIZES], lw=1,
                           label=call)
            _points(ax, points[points["call"] == call], line[0].get_color())
        ax.set(xscale="log", yscale="log", xlabel="bytes", title=title)
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("time of one call (ms)")
    fig.suptitle("GPU allocation on an H200: measured (points, 10-90 %) vs model (lines)")
    fig.tight_layout()
    return save(fig, points, directory, "calib_gpu_alloc")


def _host_pinning(directory: Path) -> list[Path]:
    points = pd.DataFrame(_load("h200_host_pinning_pages.json")["points"]).drop(columns=["unpin_s"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    sizes = SIZES[SIZES <= 4 * 2**30]
    for ax, prefaulted in zip(axes, (True, False)):
        for (path, pages), rows in points[points["prefaulted"] == prefaulted].groupby(["path", "pages"]):
            host = HostParams(pages=pages, pin_path=path)
            line = ax.plot(sizes, [host.pin_cost_ps(int(n), prefaulted=prefaulted) / 1e9 for n in sizes], lw=1,
                           label=f"{path}, {pages}")
            _points(ax, rows, line[0].get_color())
        ax.set(xscale="log", yscale="log", xlabel="bytes pinned",
               title="pages present" if prefaulted else "pages faulted in by the pin (cheaper below the knee)")
        ax.grid(True, which="both", alpha=0.2)
    axes[0].set_ylabel("pin time (ms)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Host pinning on the H200 host by path and page backing: measured vs model")
    fig.tight_layout()
    return save(fig, points, directory, "calib_host_pinning")


def _um_prefetch(directory: Path) -> list[Path]:
    cases = [c for c in load_cases() if c.group == "prefetch"]
    rows = pd.DataFrame(compare(cases, UVM_PRESETS["h200"]))
    rows["to"] = np.where(rows["case"].str.contains("to gpu"), "gpu", "host")
    rows["bytes"] = [int(c.model(UVM_PRESETS["h200"]).pages_explicit_to_gpu + c.model(
        UVM_PRESETS["h200"]).pages_explicit_to_host) * 4096 for c in cases]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for to, part in rows.groupby("to"):
        part = part.sort_values("bytes")
        line = ax.plot(part["bytes"], part["model_ms"], lw=1, label=f"model, to {to}")
        ax.scatter(part["bytes"], part["measured_ms"], s=14, color=line[0].get_color(), label=f"measured, to {to}")
    ax.set(xscale="log", yscale="log", xlabel="bytes prefetched", ylabel="cudaMemPrefetchAsync (ms)",
           title="Unified-memory prefetch on an H200: the fixed cost of a call and the rate")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, rows.drop(columns=["runs_ms"]), directory, "calib_um_prefetch")


def _mtt_cliff(directory: Path) -> list[Path]:
    points, params = load_points(), MttParams()
    base = base_Bps(points)
    rows = pd.DataFrame({"mr_bytes": [max(p.slices) for p in points], "slices": [len(p.slices) for p in points],
                         "measured_GBps": [p.measured_Bps / 1e9 for p in points],
                         "model_GBps": [simulate_Bps(params, p, base) / 1e9 for p in points]})
    reach = params.direct_entries * 4096
    sizes = np.union1d(np.logspace(30, 35, 81, base=2).astype(np.int64), [reach, reach + 4096])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for page, label in ((4096, "model, 4 KiB pages"), (2 << 20, "model, 2 MiB pages")):
        ax.step(sizes, [stream_Bps(params, int(n), page, base_Bps=base, write=True, link=LINK) / 1e9 for n in sizes],
                where="post", lw=1, label=label)
    for sliced, part in rows.groupby(rows["slices"] > 1):
        ax.scatter(part["mr_bytes"], part["measured_GBps"], s=22, zorder=3, color="black",
                   marker="s" if sliced else "o", label="measured, buffer in slices" if sliced else "measured, one MR")
    ax.axvline(reach, color="grey", lw=0.6, ls=":")
    ax.set(xscale="log", xlabel="largest destination MR (bytes)", ylabel="RDMA READ (GB/s)", ylim=(0, 11),
           title="Large-MR translation cliff: LMCache PR #4432 (100 GbE mlx5) vs model")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, rows, directory, "calib_mtt_cliff")


def calibration_figures(directory: Path) -> list[Path]:
    """Draw every calibration figure into ``directory``; return the PNG, PDF and CSV paths of each."""
    return (_gpu_alloc(directory) + _host_pinning(directory) + _um_prefetch(directory) + dma_engine_figure(directory)
            + _mtt_cliff(directory))
