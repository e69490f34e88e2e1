"""The NIC's memory-key translation: MPT (one context per MR) and MTT (one entry per registered page)
caches of limited size and reach, and what a translation costs when the cache cannot hold it.

* **Caches.** The NIC keeps recently used MPT contexts and MTT lines (``mtt_line_entries`` consecutive
  entries fetched together) in exact LRU caches (:class:`~models.pcie.iommu.LruCache`). Every miss is one more
  PCIe DMA read by the NIC (``mpt_bytes`` or an MTT line) before the data moves.
* **Reach.** The MTT cache holds the lines of MR tables of at most ``direct_entries`` entries, which the MR
  context locates directly (:func:`translation_depth` 1). A larger table has a second, indirect level (as
  mlx5 builds indirect KSM mkeys over fixed-size children for implicit ODP): its translations are beyond the
  cache's reach. Each page the NIC *writes* into such an MR then needs its own PCIe read of the entry from host
  memory, and the receive path, which places data in packet order, resolves them one at a time on the NIC's
  MTT walker (a FIFO server): it is busy for the read's round trip on the NIC's link plus ``lookup_ps``
  (:func:`deep_lookup_ps`). The NIC's own reads of such an MR issue those lookups with their data reads, which
  overlap them with the reads' round trips. The stream into a deep MR is then capped at
  ``page_size / deep_lookup_ps``: a step at the reach, not a slope (the number of pages beyond it changes
  nothing).

Why: RDMA READ into one destination MR larger than ~4 GiB of 4 KiB pages runs at 6.0 instead of 9.3 GB/s on
100 GbE mlx5 (LMCache PR #4432, ``models/data/lmcache_mr_cliff.json``): 5.9 and 24 GiB MRs are equally slow, the
same bytes in 3.5 GiB slices are fast, and only the MR the NIC writes matters; a per-MR table depth explains all
three, a shared cache of the pages touched none (slices touch the same pages). The reach 2^20 entries (4 GiB of
4 KiB pages) lies in the published bracket (3.5 .. 5.9 GiB) and is the per-HCA translation budget AMD's ionic
reports (SemiAnalysisAI/InferenceX PR #3330); ``lookup_ps`` is fitted to the 6.0 GB/s on a ConnectX-5's Gen3 x16 link. mlx5's table
layout is not published. 2 MiB pages keep every MR below the reach up to 2 TiB.

Examples
--------
>>> from models.pcie.link import PcieParams
>>> p, link = MttParams(), PcieParams(gen=3)
>>> translation_depth(p, 24 << 30, 4096), translation_depth(p, 24 << 30, 2 << 20)
(2, 1)
>>> round(stream_Bps(p, 24 << 30, 4096, base_Bps=9.3e9, write=True, link=link) / 1e9, 2)
6.02
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from models.pcie.iommu import LruCache
from models.pcie.link import PcieParams
from sim.core import FifoServer, PS_PER_S
from sim.core.steps import Claim


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
    """The cache's reach per MR: the most entries an MR's table may have for the cache to hold its lines
    (LMCache PR #4432's step lies between 3.5 and 5.9 GiB of 4 KiB pages; 2^20 pages = 4 GiB). None: every
    MR is within reach."""
    lookup_ps: int = 122_800
    """Walker time per translation beyond the reach, besides the PCIe read of its entry. Fit: 4096 B / 6.02 GB/s
    (the mean of PR #4432's single-MR rows) less a 64 B read round trip on a Gen3 x16 link (557.6 ns)."""

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
    "connectx8": {"mtt_entries": 32768},
    "efa": {"mtt_entries": 16384, "direct_entries": None},
}
"""Constructor arguments of :class:`MttParams` per NIC preset (names as in :mod:`models.presets`)."""
SOURCES = {
    "cache sizes": "not published for any of these NICs: unvalidated defaults growing with the generation "
                   "(ConnectX-8 keeps ConnectX-7's).",
    "direct_entries, lookup_ps": "the reach bracketed and lookup_ps fitted by github.com/LMCache/LMCache PR #4432 "
                                 "(mlx5, 100 GbE RoCE, 4 KiB pages, IOMMU on; models/data/lmcache_mr_cliff.json); "
                                 "applied to every ConnectX preset (unvalidated beyond that NIC).",
    "efa": "no large-MR cliff reported: direct_entries None (unvalidated).",
}


def translation_depth(params: MttParams, mr_size: int, page_size: int) -> int:
    """Translation levels the NIC walks for an MR of ``mr_size`` bytes registered with ``page_size`` pages:
    2 when its table is beyond the cache's reach."""
    pages = -(-mr_size // page_size)
    return 2 if params.direct_entries is not None and pages > params.direct_entries else 1


def deep_lookup_ps(params: MttParams, link: PcieParams) -> int:
    """Walker time of one translation beyond the reach: one MTT line read alone over ``link``
    (:meth:`~models.pcie.link.PcieParams.lone_read_ps`) plus ``lookup_ps``."""
    return link.lone_read_ps(params.line_bytes) + params.lookup_ps


class MttAccess(NamedTuple):
    """What one NIC access through an MR cost in translation."""

    mpt_miss: bool
    mtt_misses: int
    """MTT lines read from host memory."""
    deep_pages: int
    """Pages written into an MR beyond the reach (each one :func:`deep_lookup_ps` on the walker)."""


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
        mpt_miss = not self.mpt.lookup([mr_key])[0]
        if write and translation_depth(p, mr_size, page_size) == 2:
            return MttAccess(mpt_miss, 0, pages.size)
        lines = np.unique(pages // p.mtt_line_entries)  # ascending, so one lookup per line
        misses = int((~self.mtt.lookup((mr_key << 40) + lines)).sum())
        return MttAccess(mpt_miss, misses, 0)

    def walk_stage(self, access: MttAccess, link: PcieParams) -> list[Claim]:
        """The walker stage of a write beyond the reach (none otherwise), for a NIC on ``link``: insert it before
        the NIC's DMA write."""
        if not access.deep_pages:
            return []
        walk = deep_lookup_ps(self.params, link)
        return [Claim(self.walker, access.deep_pages * walk, walk)]


def stream_Bps(params: MttParams, mr_size: int, page_size: int, *, base_Bps: float, write: bool,
               link: PcieParams) -> float:
    """Closed-form rate (bytes/s) of a long sequential stream that a NIC on ``link`` reads from (``write``
    False) or writes into an MR, given the rate ``base_Bps`` it reaches without translation limits."""
    if write and translation_depth(params, mr_size, page_size) == 2:
        return min(base_Bps, page_size * PS_PER_S / deep_lookup_ps(params, link))
    return base_Bps
