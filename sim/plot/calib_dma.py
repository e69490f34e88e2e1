"""Calibration figure ``calib_dma_engine``: pcie-bench's NFP-6000 on Gen3 x8 (points) against the ``nfp6000``
preset's closed form (lines): posted-write rate, the latency of one outstanding read, and read rate, by size.

Dashed lines are what the link alone gives, so the gap to the solid line is the DMA engine's part
(:mod:`models.pcie.dma_engine`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from models.pcie import closed_form as cf
from models.pcie.dma_engine import load
from models.pcie.link import PcieParams
from models.pcie.presets import PCIE_PRESETS
from sim.plot.figures import save

SIZES = np.unique(np.concatenate([np.geomspace(8, 2048, 120).astype(int), 256 * np.arange(1, 9)]))
"""Sizes the model lines are drawn at (bytes), with every MPS multiple, where writes step."""


def _line(ax, f, style: str, label: str) -> None:
    ax.plot(SIZES, [f(int(n)) for n in SIZES], style, lw=1, label=label)


def dma_engine_figure(directory: Path) -> list[Path]:
    """Draw ``calib_dma_engine`` into ``directory``; return its PNG, PDF and CSV paths."""
    data, nfp = load(), PcieParams(**PCIE_PRESETS["nfp6000"])
    link_only = replace(nfp, dma_write_issue_ps=0, read_latency_ps_per_byte=0.0, read_tags=None)
    gbps = 8 / 1e9
    writes, reads = pd.DataFrame(data["write_rows"]), pd.DataFrame(data["rows"])
    latency = pd.DataFrame(data["latency_rows"])
    latency = latency[latency["bytes"] >= 8]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))

    ax = axes[0]
    _line(ax, lambda n: cf.write_Bps(nfp, n) * gbps, "-", "model: min(link, issue)")
    _line(ax, lambda n: cf.write_link_Bps(nfp, n) * gbps, "--", "link alone")
    _line(ax, lambda n: cf.write_issue_Bps(nfp, n) * gbps, ":", f"one write per {nfp.dma_write_issue_ps / 1e3:.1f} ns")
    ax.scatter(writes["bytes"], writes["bw_Gbps"], s=16, color="k", zorder=3, label="pcie-bench")
    ax.set(ylim=(0, 60), ylabel="Gb/s", title="posted DMA writes")

    ax = axes[1]
    _line(ax, lambda n: nfp.lone_read_ps(n) / 1e3, "-", "model: link + round trip + per-byte term")
    _line(ax, lambda n: replace(nfp, read_latency_ps_per_byte=0.0).lone_read_ps(n) / 1e3, "--",
          "link + round trip only")
    mid = latency["median_ns"]
    ax.errorbar(latency["bytes"], mid, yerr=[mid - latency["min_ns"], latency["p95_ns"] - mid], fmt="o", ms=3,
                color="k", capsize=2, lw=0.8, label="pcie-bench median (min..95 %)")
    ax.set(ylabel="ns", title="one outstanding DMA read: latency (linear in size)")

    ax = axes[2]
    _line(ax, lambda n: cf.read_Bps(nfp, n) * gbps, "-", f"model: link and {nfp.read_tags} read tags")
    _line(ax, lambda n: cf.read_link_Bps(link_only, n) * gbps, "--", "link alone")
    ax.scatter(reads["bytes"], reads["bw_Gbps"], s=16, color="k", zorder=3, label="pcie-bench")
    ax.set(ylim=(0, 60), ylabel="Gb/s", title="DMA reads (random, 8 KB window)")

    for ax in axes:
        ax.set(xscale="linear" if ax is axes[1] else "log", xlabel="bytes per DMA")
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=7)
    fig.suptitle("NFP-6000 on PCIe Gen3 x8 (pcie-bench): measured vs the nfp6000 preset")
    fig.tight_layout()
    points = pd.concat([
        pd.DataFrame({"what": "write", "bytes": writes["bytes"], "unit": "Gb/s", "measured": writes["bw_Gbps"],
                      "model": [cf.write_Bps(nfp, n) * gbps for n in writes["bytes"]]}),
        pd.DataFrame({"what": "read latency", "bytes": latency["bytes"], "unit": "ns", "measured": mid,
                      "model": [nfp.lone_read_ps(n) / 1e3 for n in latency["bytes"]]}),
        pd.DataFrame({"what": "read", "bytes": reads["bytes"], "unit": "Gb/s", "measured": reads["bw_Gbps"],
                      "model": [cf.read_Bps(nfp, n) * gbps for n in reads["bytes"]]})], ignore_index=True)
    return save(fig, points, directory, "calib_dma_engine")
