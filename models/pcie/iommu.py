"""The IOMMU on the DMA path: an IO-TLB of limited reach, page walks on a miss, and exact LRU caches.

Calibrated to pcie-bench data (Neugebauer et al., SIGCOMM'18; NFP-6000, Xeon E5-2620v3, VT-d; rows in
``models/data/pciebench_iommu_window_sweep.json``): random 64 B DMA reads keep 28.2 Gb/s while the window
fits 64 IO-TLB entries x 4 KiB = 256 KiB and fall to 10.05 Gb/s at 64 MB; each miss adds ~226 ns to a read
(600 -> 826 ns median); with 2 MiB superpages nothing drops up to 64 MB.

Model: a fully associative LRU IO-TLB (:class:`LruCache`, simulated exactly). A miss adds ``miss_ps`` of
latency and occupies the page walker (one FIFO server) for ``walk_ps``. The walker caps a stream at
``size / (miss rate x walk_ps)``; outstanding reads cap it at ``base x lat0 / (lat0 + miss rate x
miss_ps)`` (Little's law with a fixed number of reads in flight). 128 B and 256 B reads are predictions.

Examples
--------
>>> import numpy as np
>>> iommu = Iommu(IommuParams())
>>> latency, hit = iommu.translate(np.array([0, 64, 4096, 0]))
>>> hit.tolist(), (latency // 1000).tolist()
([False, True, False, True], [226, 0, 226, 0])
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from sim.core import FifoServer, PS_PER_NS, PS_PER_S
from sim.core.steps import Claim


@dataclass(frozen=True, slots=True)
class IommuParams:
    """IO-TLB and page-walk costs (times in integer ps)."""

    iotlb_entries: int = 64
    """IO-TLB entries: the knee of pcie-bench's window sweep (flat to 256 KiB, dropping at 512 KiB)."""
    page_size: int = 4096
    """IOMMU mapping granularity (bytes): 4 KiB, or 2 MiB with superpages."""
    miss_ps: int = 226 * PS_PER_NS
    """Latency a miss adds: 64 B read median 826 vs 600 ns (pcie-bench ``lat_dma_sweep_rd_rnd_64``)."""
    walk_ps: int = 51_100
    """Page-walker occupancy per miss. Fit: 64 B random reads at 64 MB window run 19.64 M reads/s with a
    99.6 % miss rate."""

    def __post_init__(self) -> None:
        if self.iotlb_entries < 1 or self.page_size < 1 or self.page_size & (self.page_size - 1):
            raise ValueError(f"IommuParams: need iotlb_entries >= 1 and a power-of-two page_size, got "
                             f"{self.iotlb_entries} and {self.page_size}")

    @property
    def reach(self) -> int:
        """Bytes the IO-TLB covers (entries x page size)."""
        return self.iotlb_entries * self.page_size


IOMMU_PRESETS: dict[str, dict] = {"vtd": {}, "vtd_superpages": {"page_size": 2 << 20}}
"""Constructor arguments of :class:`IommuParams`; both from pcie-bench's Xeon E5-2620v3 (Haswell) runs."""


class LruCache:
    """A fully associative LRU set of integer keys, updated by whole arrays of accesses.

    Exact: repeats of the key just used are hits without changing the order; when the cache is empty and the
    array holds at most ``capacity`` distinct keys only first uses miss (numpy); otherwise an OrderedDict
    replays the remaining accesses one by one.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"LruCache: capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._keys: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def lookup(self, keys) -> np.ndarray:
        """Access ``keys`` in order; return a boolean array, True where the access hit."""
        keys = np.asarray(keys, dtype=np.int64).ravel()
        hits = np.ones(keys.size, dtype=bool)
        if keys.size == 0:
            return hits
        if not self._keys:
            distinct, first = np.unique(keys, return_index=True)
            if distinct.size <= self.capacity:
                hits[first] = False
                last = keys.size - 1 - np.unique(keys[::-1], return_index=True)[1]
                self._keys.update((int(k), None) for k in distinct[np.argsort(last)])
                return hits
        cache, cap = self._keys, self.capacity
        new = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])  # a repeat of the last key is a hit
        for i, key in zip(new.tolist(), keys[new].tolist()):
            if key in cache:
                cache.move_to_end(key)
            else:
                hits[i] = False
                cache[key] = None
                if len(cache) > cap:
                    cache.popitem(last=False)
        return hits


class Iommu:
    """One IOMMU: its IO-TLB state and its page walker (a FIFO server shared by every DMA it translates)."""

    def __init__(self, params: IommuParams, name: str = "iommu") -> None:
        self.params = params
        self.tlb = LruCache(params.iotlb_entries)
        self.walker = FifoServer(f"{name}.walker")

    def translate(self, addrs) -> tuple[np.ndarray, np.ndarray]:
        """Translate DMA addresses in order: per-access added latency (int64 ps) and hit flags."""
        hits = self.tlb.lookup(np.asarray(addrs, dtype=np.int64) // self.params.page_size)
        return np.where(hits, 0, self.params.miss_ps).astype(np.int64), hits

    def stages(self, addr: int, nbytes: int) -> list[Claim]:
        """Translate every page of ``[addr, addr + nbytes)``; return the page-walk stage its misses need
        (none when all hit), to insert where the TLPs reach the root complex."""
        page = self.params.page_size
        misses = int((~self.tlb.lookup(np.arange(addr // page, (addr + max(nbytes, 1) - 1) // page + 1))).sum())
        if not misses:
            return []
        walk = self.params.walk_ps
        return [Claim(self.walker, misses * walk, walk, 0, self.params.miss_ps - walk)]


def stream_Bps(params: IommuParams, addrs, size: int, *, base_Bps: float,
               base_latency_ps: int | None = None) -> float:
    """Closed-form rate (bytes/s) of a stream of ``size``-byte DMAs at ``addrs`` through a warm IO-TLB.

    Each DMA is taken to lie within one IOMMU page. The miss rate is measured over the second half of
    ``addrs`` (the first half warms the IO-TLB up).
    ``base_Bps`` is the stream's rate without misses; ``base_latency_ps`` the latency of a hit for reads
    (None for posted writes, which no outstanding limit ties to latency).
    """
    hits = Iommu(params).translate(addrs)[1]
    miss = 1.0 - hits[hits.size // 2:].mean()
    rate = base_Bps
    if miss:
        rate = min(rate, size * PS_PER_S / (miss * params.walk_ps))
        if base_latency_ps is not None:
            rate = min(rate, base_Bps * base_latency_ps / (base_latency_ps + miss * params.miss_ps))
    return rate


def random_addresses(window: int, size: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` uniformly random ``size``-aligned addresses in ``[0, window)`` (pcie-bench's Rand pattern)."""
    return rng.integers(0, max(window // size, 1), count, dtype=np.int64) * size
