"""The NIC's memory-key translation: MPT (one context per MR) and MTT (one entry per registered page)
caches of limited size, and the deep-translation cliff of very large MRs.

* **Caches.** The NIC keeps recently used MPT contexts and MTT lines (``mtt_line_entries`` consecutive
  entries fetched together) in exact LRU caches (:class:`~models.pcie.iommu.LruCache`). Every miss is one more
  PCIe DMA read by the NIC (``mpt_bytes`` or an MTT line) before the data moves.
* **Cliff.** RDMA READ into one destination MR larger than ~4 GiB of 4 KiB pages runs at 6.0 instead of
  9.3 GB/s on 100 GbE mlx5 (LMCache PR #4432): a step, not a slope (5.9 and 24 GiB MRs are equally slow,
  3.5 GiB slices are fast), and only the MR the NIC *writes* matters. Modelled as a second translation
  level once an MR has more than ``direct_entries`` pages (2^20 x 4 KiB = 4 GiB): each page the NIC writes
  into such an MR needs one serialized lookup of ``deep_walk_ps`` on the NIC's MTT walker (a FIFO server),
  capping the stream at ``page_size / deep_walk_ps``; reads overlap the lookup with their round trip. The
  mechanism is not published: the threshold and the cost are fitted to that one report. 2 MiB pages keep
  every MR below the threshold up to 2 TiB.

Examples
--------
>>> p = MttParams()
>>> translation_depth(p, 24 << 30, 4096), translation_depth(p, 24 << 30, 2 << 20)
(2, 1)
>>> round(stream_Bps(p, 24 << 30, 4096, base_Bps=9.3e9, write=True) / 1e9, 2)
6.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from models.pcie.iommu import LruCache
from models.pcie.stage import Stage
from sim.core import FifoServer, PS_PER_S


@dataclass(frozen=True, slots=True)
class MttParams:
    """NIC translation caches and costs (sizes in bytes or entries, times in integer ps)."""

    mpt_entries: int = 1024
    """MR contexts cached (unvalidated default)."""
    mtt_entries: int = 16384
    """MTT entries cached: 64 MiB of 4 KiB pages (unvalidated default)."""
    mtt_line_entries: int = 8
    """MTT entries fetched by one miss: 8 x 8 B = one 64 B read (unvalidated default)."""
    entry_bytes: int = 8
    """One MTT entry: a 64-bit page address (mlx5 ``struct mlx5_mtt``, ``__be64 ptag``)."""
    mpt_bytes: int = 64
    """One MR context (mlx5 ``struct mlx5_mkey_seg``, 64 B)."""
    direct_entries: int | None = 2**20
    """Pages an MR may have before it needs a second translation level: LMCache PR #4432's step lies
    between 3.5 and 5.9 GiB of 4 KiB pages, 2^20 pages = 4 GiB. None: no such level."""
    deep_walk_ps: int = 683_000
    """Serialized lookup per page the NIC writes into a deep MR. Fit: 4096 B / 6.0 GB/s (LMCache PR
    #4432), about one PCIe read round trip of the NIC plus ~130 ns."""

    def __post_init__(self) -> None:
        if min(self.mpt_entries, self.mtt_entries, self.mtt_line_entries) < 1 or \
                self.mtt_entries % self.mtt_line_entries:
            raise ValueError("MttParams: cache sizes must be positive and mtt_entries a multiple of "
                             f"mtt_line_entries, got {self.mpt_entries}, {self.mtt_entries}, {self.mtt_line_entries}")

    @property
    def line_bytes(self) -> int:
        """Bytes of one MTT miss read."""
        return self.mtt_line_entries * self.entry_bytes


MTT_PRESETS: dict[str, dict] = {
    "connectx5": {"mtt_entries": 8192},
    "connectx6": {"mtt_entries": 16384},
    "connectx7": {"mtt_entries": 32768},
    "efa": {"mtt_entries": 16384, "direct_entries": None},
}
"""Constructor arguments of :class:`MttParams` per NIC preset (names as in :mod:`models.presets`)."""
SOURCES = {
    "cache sizes": "not published for any of these NICs: unvalidated defaults growing with the generation.",
    "direct_entries, deep_walk_ps": "fitted to github.com/LMCache/LMCache PR #4432 (mlx5, 100 GbE RoCE, 4 KiB "
                                    "pages, IOMMU on); applied to every ConnectX preset (unvalidated beyond "
                                    "that NIC).",
    "efa": "no large-MR cliff reported: direct_entries None (unvalidated).",
}


def translation_depth(params: MttParams, mr_size: int, page_size: int) -> int:
    """Translation levels the NIC walks for an MR of ``mr_size`` bytes registered with ``page_size`` pages."""
    pages = -(-mr_size // page_size)
    return 2 if params.direct_entries is not None and pages > params.direct_entries else 1


class MttAccess(NamedTuple):
    """What one NIC access through an MR cost in translation."""

    mpt_miss: bool
    mtt_misses: int
    """MTT lines read from host memory."""
    deep_pages: int
    """Pages written into a deep MR (each one ``deep_walk_ps`` on the walker)."""


class MttCache:
    """One NIC's MPT and MTT caches and its MTT walker (a FIFO server)."""

    def __init__(self, params: MttParams, name: str = "nic") -> None:
        self.params = params
        self.mpt = LruCache(params.mpt_entries)
        self.mtt = LruCache(params.mtt_entries // params.mtt_line_entries)
        self.walker = FifoServer(f"{name}.mtt_walker")

    def access(self, mr_key: int, mr_size: int, page_size: int, offset: int, length: int, *,
               write: bool) -> MttAccess:
        """Translate ``[offset, offset + length)`` of MR ``mr_key`` (a NIC read, or a write if ``write``)."""
        p = self.params
        pages = np.arange(offset // page_size, (offset + max(length, 1) - 1) // page_size + 1, dtype=np.int64)
        lines = np.unique(pages // p.mtt_line_entries)  # ascending, so one lookup per line
        mpt_miss = not self.mpt.lookup([mr_key])[0]
        misses = int((~self.mtt.lookup((mr_key << 40) + lines)).sum())
        deep = pages.size if write and translation_depth(p, mr_size, page_size) == 2 else 0
        return MttAccess(mpt_miss, misses, deep)

    def walk_stage(self, access: MttAccess) -> list[Stage]:
        """The walker stage of a deep-MR write (none otherwise): insert it before the NIC's DMA write."""
        if not access.deep_pages:
            return []
        walk = self.params.deep_walk_ps
        return [Stage(self.walker, access.deep_pages * walk, walk, 0, 0, False)]


def stream_Bps(params: MttParams, mr_size: int, page_size: int, *, base_Bps: float, write: bool) -> float:
    """Closed-form rate (bytes/s) of a long sequential stream that the NIC reads from (``write`` False) or
    writes into an MR, given the rate ``base_Bps`` it reaches without translation limits."""
    if write and translation_depth(params, mr_size, page_size) == 2:
        return min(base_Bps, page_size * PS_PER_S / params.deep_walk_ps)
    return base_Bps
