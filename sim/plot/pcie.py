"""PCIe DMA efficiency figures: bandwidth against transfer size, the MPS sawtooth, per MPS and per generation.

Values come from :mod:`models.pcie.closed_form` (which the TLP-level simulation matches to 0.1 %); reads include
the default 256-tag limit and 550 ns read round trip of :class:`models.pcie.link.PcieParams`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from models.pcie import closed_form as cf
from models.pcie.link import PcieParams
from sim.plot.figures import save

SIZES = [n for n in range(1, 4097) if n % 32 in (0, 1)]
"""Transfer sizes (bytes): every multiple of 32 and the byte after it, so each MPS step shows."""
OPS = {"write": cf.write_Bps, "read": cf.read_Bps}


def _table(links: dict[str, PcieParams]) -> pd.DataFrame:
    rows = [(label, op, p.gen, p.lanes, p.mps, p.mrrs, n, f(p, n) / 1e9)
            for label, p in links.items() for op, f in OPS.items() for n in SIZES]
    return pd.DataFrame(rows, columns=["link", "op", "gen", "lanes", "mps", "mrrs", "bytes", "bw_GBps"])


def _figure(data: pd.DataFrame, directory: Path, name: str, title: str) -> list[Path]:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (op, rows) in zip(axes, data.groupby("op", sort=False)):
        for label, line in rows.groupby("link", sort=False):
            ax.plot(line["bytes"], line["bw_GBps"], lw=1, label=label)
        ax.set_title(f"DMA {op}")
        ax.set_xlabel("transfer size (bytes)")
        ax.set_xticks(range(0, 4097, 512))
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("effective bandwidth (GB/s)")
    axes[0].set_ylim(bottom=0)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, data, directory, name)


def pcie_efficiency_figures(directory: Path) -> list[Path]:
    """Draw the two figures into ``directory``; return the PNG, PDF and CSV paths of each.

    ``pcie_bw_vs_mps``: Gen5 x16 for every MPS (MRRS 512). ``pcie_bw_vs_gen``: x16, MPS 256, Gen1..6.
    """
    base = PcieParams(gen=5, lanes=16)
    by_mps = {f"MPS {m}": replace(base, mps=m) for m in cf.MPS_CHOICES}
    by_gen = {f"Gen{g} x16": replace(base, gen=g) for g in cf.GT_PER_S}
    return (_figure(_table(by_mps), directory, "pcie_bw_vs_mps", "PCIe Gen5 x16: DMA bandwidth by MPS")
            + _figure(_table(by_gen), directory, "pcie_bw_vs_gen", "PCIe x16, MPS 256: DMA bandwidth by generation"))
