"""LMCache PR #4432's large-MR cliff (``models/data/lmcache_mr_cliff.json``) replayed on the translation model.

Each row is an RDMA READ stream into one destination MR or into slices of the same bytes. The stream is as fast
as its slowest slice (:func:`models.nic.mtt_cache.stream_Bps`, the NIC writing, 4 KiB pages) on the testbed's
link, taken as a ConnectX-5's PCIe Gen3 x16 (the report names a 100 GbE mlx5 NIC only). The rate within the
cache's reach is the input: the mean of the sliced rows (the testbed's stack, below the 100 GbE line rate, is not
modelled). The tolerance of each row is the published spread of its side of the cliff (max - min over mean).

The cliff's depth is also checked as a ratio, free of that input's level: each single-MR row over the sliced rows
of the same read (:func:`cliff_ratios`), its tolerance the two sides' spreads added (a ratio's relative errors
add).

Examples
--------
>>> points = load_points()
>>> [round(simulate_Bps(MttParams(), p, base_Bps(points)) / 1e9, 2) for p in points[:2]]
[6.02, 9.27]
>>> [(round(c.measured, 3), round(c.simulated(MttParams()), 3)) for c in cliff_ratios(points)]
[(0.649, 0.652), (0.649, 0.649), (0.651, 0.649)]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from models.nic.mtt_cache import MttParams, stream_Bps
from models.pcie.link import PcieParams
from models.pcie.presets import PCIE_PRESETS

DATA = Path(__file__).resolve().parents[1] / "data" / "lmcache_mr_cliff.json"
LINK = PcieParams(**PCIE_PRESETS["gen3x16"])
"""The testbed NIC's host link as modelled: a 100 GbE ConnectX-5's PCIe Gen3 x16 (its preset's,
:data:`models.presets.NIC_PCIE`)."""
GiB = 1 << 30


class CliffPoint(NamedTuple):
    """One published row."""

    read_bytes: float
    slices: tuple[int, ...]
    """Destination MR sizes (bytes): one MR, or the slices the same buffer was registered as."""
    measured_Bps: float

    @property
    def sliced(self) -> bool:
        """The buffer was registered as several MRs (the fast side of the report)."""
        return len(self.slices) > 1


def load_points() -> list[CliffPoint]:
    """The published rows, in the report's order."""
    data = json.loads(DATA.read_text())
    return [CliffPoint(r["read_bytes"], tuple(int(s * GiB) for s in r["slices_GiB"]), r["GBps"] * 1e9)
            for r in data["rows"]]


def base_Bps(points: list[CliffPoint]) -> float:
    """The rate within the reach: the mean of the sliced rows (bytes/s)."""
    return float(np.mean([p.measured_Bps for p in points if p.sliced]))


def simulate_Bps(params: MttParams, point: CliffPoint, base: float, link: PcieParams = LINK) -> float:
    """The model's rate for ``point``'s layout: its slowest slice (bytes/s)."""
    return min(stream_Bps(params, size, 4096, base_Bps=base, write=True, link=link) for size in point.slices)


def tolerance(points: list[CliffPoint], sliced: bool) -> float:
    """The published spread of one side of the cliff: (max - min) / mean of its rates."""
    rates = [p.measured_Bps for p in points if p.sliced == sliced]
    return (max(rates) - min(rates)) / float(np.mean(rates))


class CliffRatio(NamedTuple):
    """One MR past the reach against the slices of the same read: the rate after the cliff over the rate
    before it."""

    point: CliffPoint
    before_Bps: float
    """The mean of the sliced rows of the same ``read_bytes``."""

    @property
    def measured(self) -> float:
        """The published ratio."""
        return self.point.measured_Bps / self.before_Bps

    def simulated(self, params: MttParams, link: PcieParams = LINK) -> float:
        """The model's ratio with the sliced rate as its input."""
        return simulate_Bps(params, self.point, self.before_Bps, link) / self.before_Bps


def cliff_ratios(points: list[CliffPoint]) -> list[CliffRatio]:
    """One ratio per single-MR row that has sliced rows of the same read, in the report's order."""
    ratios = []
    for p in points:
        before = [q.measured_Bps for q in points if q.sliced and q.read_bytes == p.read_bytes]
        if not p.sliced and before:
            ratios.append(CliffRatio(p, float(np.mean(before))))
    return ratios


def ratio_tolerance(points: list[CliffPoint]) -> float:
    """The tolerance of a ratio: both sides' published spreads added."""
    return tolerance(points, True) + tolerance(points, False)
