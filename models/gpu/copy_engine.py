"""Copy engines: host <-> device copies with a calibrated fixed cost, bandwidth and latency floor.

A copy of ``n`` bytes takes ``max(floor, fixed + n / bw)``: below ~1 MiB every pinned copy costs the same
~13 us (launch + DMA setup hide the transfer), above it the PCIe Gen5 x16 link saturates at 55.4 GB/s per
direction. Fitted by :func:`fit_copy_cost` to ``models/data/h200_copy_bw.json`` (cudaMemcpyAsync through
PyTorch, CUDA-event timed):

* pinned: fixed cost and bandwidth from the best-of times at 1 MiB..1 GiB (relative least squares), floor
  = the fastest copy below 1 MiB. Every point from 64 KiB to 1 GiB lies within 1 % of the best-of time;
  the medians of the 16 MiB and 64 MiB H2D rows are 13 % and 26 % slower than their best-of (contention on
  the shared machine, median/min = 1.15 and 1.34), so the model is held to +-10 % of the measured
  interval [best-of, median].
* pageable (staged through a pinned bounce buffer): ``fixed + n / bw`` by relative least squares on the
  medians at 64 KiB..1 GiB. D2H fits within -19 %..+9 %. H2D's rate falls from 16.5 GB/s at 16-64 MiB to 9.9
  and 9.4 GB/s at 256 MiB and 1 GiB: the driver's staging thread reads the source, which the host's caches keep
  from one copy to the next while it is small enough, and which comes from DRAM beyond that. So H2D is fitted
  on the points up to 64 MiB (within -15 %..+18 %), and its rate beyond ``cached_bytes`` on the larger points
  with the same fixed cost (within 3 %: :func:`fit_staged_copy`). Where the step lies between 64 and 256 MiB was
  not measured on that host: the preset takes 128 MiB, the middle on a log scale.
  ``calib/gpu_copy/measure_pageable.py`` found the same step on two more hosts (an H100 machine: between 16 and
  32 MiB; an H200 machine: between 64 and 96 MiB), and there every copy whose source was flushed from the caches
  first ran at the large copies' rate at every size: the step is the host's, not the GPU's. A source copied once,
  cold, is not modelled apart.

Device-to-device copies use the measured 4250 GB/s of read + write HBM traffic (2125 GB/s copied) with
the pinned D2H fixed cost (not measured separately). H2D and D2H run on separate engines and overlap; the
bidirectional slow-down reported for some hosts (NVIDIA/nvbandwidth issue #53) is not modelled.

Other generations (:func:`scaled_costs`): the H100 has the H200's link (PCIe Gen5 x16) and copy engines and uses
its fit. The A100 (PCIe Gen4 x16: 16 GT/s against 32, the same 128b/130b encoding) streams pinned copies at half
the H200's rate (27.7 GB/s, the same 88 % of the raw link) and device-to-device copies at the H200's measured
fraction of peak HBM bandwidth (A100 40 GB: 1.555 TB/s); fixed costs and the pageable fit, which is bound by the
host's staging copy (15-17 GB/s, below either link), are the H200's. ``models/data/nvbandwidth_copy.json`` holds
the published copy rates these are checked against (:mod:`models.gpu.copy_calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sim.core import PS_PER_S, transfer_ps
from sim.core.servers import FifoServer

MiB = 1 << 20
DIRECTIONS = ("h2d", "d2h", "d2d")
MEMORY_KINDS = ("pinned", "pageable")


@dataclass(frozen=True, slots=True)
class CopyCost:
    """Time of one copy: ``max(floor_ps, fixed_ps + nbytes / bw_Bps)`` in integer ps."""

    fixed_ps: int
    """Launch + DMA setup per copy (ps)."""
    bw_Bps: float
    """Streaming bandwidth (bytes per second)."""
    floor_ps: int = 0
    """No copy completes faster than this (ps)."""
    cached_bytes: int | None = None
    """A host-staged copy whose source the host's caches keep from one copy to the next up to this size (bytes);
    a larger one streams at ``uncached_bw_Bps`` (None: every size streams at ``bw_Bps``)."""
    uncached_bw_Bps: float = 0.0
    """Streaming bandwidth beyond ``cached_bytes``, the source read from DRAM (bytes per second)."""

    def time_ps(self, nbytes: int) -> int:
        """Time to copy ``nbytes`` (ps)."""
        cached = self.cached_bytes is None or nbytes <= self.cached_bytes
        return max(self.floor_ps, self.fixed_ps + transfer_ps(nbytes, self.bw_Bps if cached else self.uncached_bw_Bps))


def fit_copy_cost(nbytes, seconds, *, floor_below: int | None = MiB) -> CopyCost:
    """Fit :class:`CopyCost` to measured copy times.

    ``fixed + n / bw`` is fitted by least squares of the relative error on the points with
    ``nbytes >= floor_below`` (all points when ``floor_below`` is None); the floor is the fastest time
    among the smaller points (0 when there are none).

    :param nbytes: copy sizes in bytes.
    :param seconds: measured times in seconds, one per size.
    """
    n, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    fit = n >= floor_below if floor_below is not None else np.ones(n.shape, dtype=bool)
    weight = 1.0 / t[fit]
    design = np.stack([np.ones(fit.sum()), n[fit]], axis=1) * weight[:, None]
    (fixed_s, s_per_byte), *_ = np.linalg.lstsq(design, t[fit] * weight, rcond=None)
    floor_s = t[~fit].min() if (~fit).any() else 0.0
    return CopyCost(round(fixed_s * PS_PER_S), 1.0 / s_per_byte, round(floor_s * PS_PER_S))


def fit_staged_copy(nbytes, seconds, cached_bytes: int) -> CopyCost:
    """Fit a host-staged copy whose rate steps down beyond ``cached_bytes``: :func:`fit_copy_cost` (no floor) on
    the points up to it, then the rate beyond it on the larger points with that fixed cost (relative least
    squares)."""
    n, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    cached = n <= cached_bytes
    cost = fit_copy_cost(n[cached], t[cached], floor_below=None)
    beyond_n, beyond_t = n[~cached], t[~cached]
    rest = beyond_t - cost.fixed_ps / PS_PER_S
    s_per_byte = np.sum(beyond_n * rest / beyond_t**2) / np.sum(beyond_n**2 / beyond_t**2)
    return replace(cost, cached_bytes=int(cached_bytes), uncached_bw_Bps=float(1.0 / s_per_byte))


def scaled_costs(base: dict[tuple[str, str], CopyCost], *, link: float, hbm: float
                 ) -> dict[tuple[str, str], CopyCost]:
    """``base`` on another GPU: pinned host copies at ``link`` x their rate (the ratio of the raw link rates),
    device-to-device copies at ``hbm`` x theirs (the ratio of peak HBM bandwidths); fixed costs, floors and
    the pageable (host-staged) copies unchanged."""
    factor = {"pinned": link, "pageable": 1.0}
    return {(d, m): replace(c, bw_Bps=c.bw_Bps * (hbm if d == "d2d" else factor[m])) for (d, m), c in base.items()}


_H200: dict[tuple[str, str], CopyCost] = {
    ("h2d", "pinned"): CopyCost(7_254_575, 55.407e9, 12_864_000),
    ("d2h", "pinned"): CopyCost(5_790_373, 55.438e9, 12_608_000),
    ("h2d", "pageable"): CopyCost(17_473_397, 16.922e9, cached_bytes=128 * MiB, uncached_bw_Bps=9.671e9),
    ("d2h", "pageable"): CopyCost(23_846_753, 17.190e9),
    ("d2d", "pinned"): CopyCost(5_790_373, 2.125e12),
}
GEN4_OVER_GEN5 = 16 / 32
"""Raw PCIe Gen4 x16 over Gen5 x16: 16 against 32 GT/s per lane, both 128b/130b."""
A100_OVER_H200_HBM = 1.555e12 / 4.8e12
"""Peak HBM bandwidth, A100 40 GB (HBM2) over H200 (HBM3e): datasheets."""

COPY_PRESETS: dict[str, dict[tuple[str, str], CopyCost]] = {
    "h200": _H200,
    "a100": scaled_costs(_H200, link=GEN4_OVER_GEN5, hbm=A100_OVER_H200_HBM),
}
"""Copy costs per (direction, memory kind): the H200's fitted (``tests/models/gpu`` re-fits them from the data),
the A100's scaled from them (:func:`scaled_costs`)."""


class CopyEngines:
    """The copy engines of one GPU: one FIFO engine per direction, so H2D, D2H and D2D overlap.

    :param costs: per (direction, memory) copy cost, e.g. ``COPY_PRESETS["h200"]``.
    :param name: trace track prefix.
    :param trace: a trace recorder (``env.trace``); None records nothing.
    """

    def __init__(self, costs: dict[tuple[str, str], CopyCost] | None = None, *, name: str = "gpu0.ce",
                 trace=None) -> None:
        self.costs = COPY_PRESETS["h200"] if costs is None else costs
        self.name = name
        self.trace = trace
        self.engines = {d: FifoServer(f"{name}.{d}") for d in DIRECTIONS}
        self.bytes_copied = dict.fromkeys(DIRECTIONS, 0)

    def copy_ps(self, nbytes: int, direction: str, memory: str = "pinned") -> int:
        """Time one copy takes on an idle engine (ps).

        :raises KeyError: unknown direction or memory kind.
        """
        key = (direction, "pinned" if direction == "d2d" else memory)
        if key not in self.costs:
            raise KeyError(f"{self.name}: no copy cost for {key}; directions {DIRECTIONS}, memory {MEMORY_KINDS}")
        return self.costs[key].time_ps(nbytes)

    def submit(self, now_ps: int, nbytes: int, direction: str, memory: str = "pinned") -> tuple[int, int]:
        """Queue a copy at ``now_ps`` on its direction's engine; return its (start, finish) in ps."""
        start, finish = self.engines[direction].claim(now_ps, self.copy_ps(nbytes, direction, memory))
        self.bytes_copied[direction] += nbytes
        if self.trace is not None and self.trace.enabled:
            self.trace.slice(self.engines[direction].name, "memcpy", start, finish, bytes=nbytes, memory=memory)
        return start, finish

    def bandwidth_GBps(self, nbytes: int, direction: str, memory: str = "pinned") -> float:
        """Effective bandwidth of one copy of ``nbytes`` (GB/s, 1e9 B/s)."""
        return nbytes / self.copy_ps(nbytes, direction, memory) * PS_PER_S / 1e9
