"""How a memory region's pages reach the NIC, for every mode but pinned host memory.

A pinned host MR is always translatable (its backing is ``None`` and costs nothing on the data path).
The other modes answer, for each NIC access, one of:

* ``None``: the NIC's translation is valid now;
* :class:`~models.nic.translation.Fault`: the translation is missing (never mapped, or zapped by an
  invalidation); the driver's fault handler runs and the translation is valid from ``ready_ps`` on. A
  requester-side access stalls its send queue until then; a responder-side access answers RNR NAK and the
  requester retries later;
* a :class:`~models.nic.wqe.WcStatus`: the access fails (the MR was torn down or revoked).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.nic.nic import OdpParams
from models.nic.translation import Fault, MrBacking
from models.nic.wqe import WcStatus
from sim.core import PS_PER_NS, PS_PER_US


class OdpBacking(MrBacking):
    """``IBV_ACCESS_ON_DEMAND``: nothing pinned; pages mapped into the NIC when it first touches them and
    zapped when the kernel moves them (mmu interval notifier)."""

    mode = "odp"

    def __init__(self, length: int, page_size: int, params: OdpParams) -> None:
        self.page_size = page_size
        self.params = params
        self.mapped = np.zeros(-(-length // page_size), dtype=bool)
        """Per page: present in the NIC's translation table."""
        self.ready_ps = np.zeros(len(self.mapped), dtype=np.int64)
        """Per page: when its most recent fault handling finishes."""
        self.faults = 0
        self.invalidations = 0

    def _pages(self, offset: int, length: int) -> slice:
        return slice(offset // self.page_size, -(-(offset + max(length, 1)) // self.page_size))

    def translate(self, now_ps: int, offset: int, length: int):
        span = self._pages(offset, length)
        if self.mapped[span].all():
            ready = int(self.ready_ps[span].max())
            return None if ready <= now_ps else Fault(ready, 0)
        grain = max(1, self.params.fault_granularity // self.page_size)
        lo, hi = span.start // grain * grain, min(len(self.mapped), -(-span.stop // grain) * grain)
        missing = int((~self.mapped[lo:hi]).sum())
        ready = now_ps + self.params.fault_ps + missing * self.params.fault_page_ps
        self.mapped[lo:hi] = True
        self.ready_ps[lo:hi] = np.maximum(self.ready_ps[lo:hi], ready)
        self.faults += 1
        return Fault(ready, missing)

    def invalidate(self, offset: int, length: int) -> int:
        """The kernel moved (or unmapped) these pages: zap them; return the notifier's cost (ps)."""
        span = self._pages(offset, length)
        self.mapped[span] = False
        self.invalidations += 1
        return self.params.invalidate_ps


def migrate_pages(mr) -> str:
    """The kernel migrates the host pages under ``mr`` (:class:`~models.verbs.verbs.MemoryRegion`, a host
    buffer): an ODP MR's notifier zaps its translation (the NIC re-faults on next access); any other MR holds a
    long-term pin and the migration fails. Returns the event-log outcome."""
    if isinstance(mr.backing, OdpBacking):
        mr.backing.invalidate(0, mr.length)
        return "invalidated (ODP re-faults on next access)"
    return "blocked: pages are pinned (long-term pin prevents migration)"


@dataclass(frozen=True, slots=True)
class PeerMemParams:
    """Legacy peer-memory (nvidia-peermem) registration costs; unvalidated defaults."""

    get_pages_ps: int = 30 * PS_PER_US
    """nvidia_p2p_get_pages fixed cost."""
    page_ps: int = 100 * PS_PER_NS
    """Per 64 KiB GPU page pinned and DMA-mapped."""
    gpu_page_size: int = 64 * 1024
    """GPU page size of the p2p API (GPU_PAGE_SHIFT 16)."""


class PeerMemBacking(MrBacking):
    """GPU memory pinned through the GPU driver's peer-memory client for the MR's lifetime. When the GPU
    driver reclaims the memory (cudaFree, process exit) its free callback tears the MR down; later accesses
    complete in error, with no re-fault."""

    mode = "peermem"

    def __init__(self, length: int, allocation, pin_owner: str) -> None:
        self.pinned_bytes = length
        self.allocation = allocation
        """The GPU allocation whose pages are pinned (it records ``pin_owner`` among its pinners)."""
        self.pin_owner = pin_owner
        self.invalidated_at: int | None = None
        allocation.pin(pin_owner)

    def translate(self, now_ps: int, offset: int, length: int):
        if self.invalidated_at is not None and now_ps >= self.invalidated_at:
            return WcStatus.LOC_PROT_ERR
        return None

    def epoch(self) -> tuple:
        return (self.invalidated_at,)

    def target(self, now_ps: int) -> str:
        return "gpu0"

    def reached_bytes(self, mr):
        return self.allocation.data, mr.addr - self.allocation.addr

    def reclaim(self, now_ps: int) -> None:
        """The GPU driver's free callback: the MR's mkey is invalidated from ``now_ps`` on, the pin dropped."""
        self.invalidated_at = now_ps
        self.pinned_bytes = 0
        self.allocation.unpin(self.pin_owner)

    def release(self, now_ps: int) -> int:
        """Deregistration: put the GPU pages back (nvidia_p2p_put_pages)."""
        self.reclaim(now_ps)
        return 0
