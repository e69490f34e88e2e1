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

from models.gpu.bar1 import Bar1Exhausted
from models.nic.nic import OdpParams
from models.nic.translation import Fault, MrBacking
from models.nic.wqe import WcStatus
from sim.core import PS_PER_NS, PS_PER_US, VerbsError


class OdpBacking(MrBacking):
    """``IBV_ACCESS_ON_DEMAND``: nothing pinned; pages mapped into the NIC when it first touches them and
    zapped when the kernel moves them (mmu interval notifier).

    Registration looks at no page (``ib_umem_odp_get`` only inserts the notifier), so a range the process has
    not mapped registers; the NIC's first access to it fails as ``hmm_range_fault`` does (-EFAULT: mlx5 resumes
    the faulting QP with an error), answered here as ``LOC_PROT_ERR``. Pages are counted from the page holding
    the MR's first byte (``ib_umem_start``), so an MR that starts inside a page covers that whole page.
    """

    mode = "odp"
    decides = "ODP maps a page when the NIC first touches it (page faults, which depend on the run)"

    def __init__(self, addr: int, length: int, page_size: int, params: OdpParams, host) -> None:
        self.addr = addr
        """User virtual address of the MR's first byte."""
        self.page_size = page_size
        self.params = params
        self.host = host
        """The process's :class:`~models.host.HostMemory`: which ranges are mapped and present."""
        self._first_page = addr // page_size
        self.mapped = np.zeros(-(-(addr + length) // page_size) - self._first_page, dtype=bool)
        """Per page: present in the NIC's translation table."""
        self.ready_ps = np.zeros(len(self.mapped), dtype=np.int64)
        """Per page: when its most recent fault handling finishes."""
        self.faults = 0
        """NIC page faults taken (prefetches not counted)."""
        self.invalidations = 0

    def _pages(self, offset: int, length: int) -> slice:
        va = self.addr + offset
        return slice(va // self.page_size - self._first_page,
                     -(-(va + max(length, 1)) // self.page_size) - self._first_page)

    def lookup(self, now_ps: int, offset: int, length: int):
        """The NIC's table alone: None (every page mapped and ready), a :class:`Fault` that only waits for a
        fault handler already running, or False (a page is missing)."""
        span = self._pages(offset, length)
        if not self.mapped[span].all():
            return False
        ready = int(self.ready_ps[span].max())
        return None if ready <= now_ps else Fault(ready, 0)

    def present(self, now_ps: int, offset: int, length: int) -> bool:
        """Whether every page of the range is in the NIC's table, its fault handling done by ``now_ps``."""
        return self.lookup(now_ps, offset, length) is None

    def claim(self, offset: int, length: int, grain: int) -> tuple[slice, int]:
        """Mark the pages of the range, widened to ``grain``-byte aligned spans within the MR and the process's
        mapping that holds the range, as mapped; return their slice and how many were missing."""
        span = self._pages(offset, length)
        pages, first = max(1, grain // self.page_size), self._first_page
        start, end = self.host.mapping_at(self.addr + offset)
        lo = max(0, (span.start + first) // pages * pages - first, start // self.page_size - first)
        hi = min(len(self.mapped), -(-(span.stop + first) // pages) * pages - first, end // self.page_size - first)
        missing = int((~self.mapped[lo:hi]).sum())
        self.mapped[lo:hi] = True
        return slice(lo, hi), missing

    def settle(self, span: slice, ready_ps: int) -> None:
        """The pages of ``span`` are valid in the NIC from ``ready_ps`` on (no earlier than any handler before)."""
        self.ready_ps[span] = np.maximum(self.ready_ps[span], ready_ps)

    def translate(self, now_ps: int, offset: int, length: int):
        hit = self.lookup(now_ps, offset, length)
        if hit is not False:
            return hit
        if not self.host.is_mapped(self.addr + offset, length):
            return WcStatus.LOC_PROT_ERR
        span, missing = self.claim(offset, length, self.params.fault_granularity)
        ready = now_ps + self.params.fault_cost_ps(missing)
        self.settle(span, ready)
        self.faults += 1
        return Fault(ready, missing)

    def prefetch(self, start_ps: int, offset: int, length: int, *, fault: bool) -> int | None:
        """``pagefault_mr`` for ``ibv_advise_mr`` starting at ``start_ps``: map exactly the pages of the range
        (``fault`` False: only if the CPU already has them, ``MLX5_PF_FLAGS_SNAPSHOT``); return the time it takes
        (the fault path's, run even when every page is mapped), or None when ``hmm_range_fault`` fails (a page
        outside the process's mappings, with ``fault``)."""
        va = self.addr + offset
        reachable = self.host.is_mapped(va, length) if fault else self.host.is_present(va, length)
        if not reachable:
            return None if fault else self.params.fault_cost_ps(0)
        span, missing = self.claim(offset, length, 0)
        cost = self.params.fault_cost_ps(missing)
        self.settle(span, start_ps + cost)
        return cost

    def epoch(self) -> tuple:
        return (self.invalidations,)

    def invalidate(self, offset: int, length: int) -> int:
        """The kernel moved (or unmapped) these pages: zap them; return the notifier's cost (ps)."""
        span = self._pages(offset, length)
        self.mapped[span] = False
        self.invalidations += 1
        return self.params.invalidate_ps


def _covered(mr, addr: int, length: int) -> tuple[int, int] | None:
    """The part ``[start, end)`` of the virtual range ``[addr, addr+length)`` that host MR ``mr`` registers (its
    own virtual addresses, whatever iova its keys use), or None."""
    start, end = max(addr, mr.addr), min(addr + length, mr.addr + mr.length)
    return (start, end) if start < end else None


def _odp(mr) -> bool:
    return mr.backing is not None and mr.backing.mode == "odp"


def pins_in_range(mrs, addr: int, length: int) -> list:
    """The MRs among ``mrs`` that hold pages of ``[addr, addr+length)`` pinned (no notifier: a long-term pin keeps
    the old pages when the process's page tables lose them)."""
    return [mr for mr in mrs if not _odp(mr) and _covered(mr, addr, length)]


def mmu_notifier_invalidate_range(mrs, addr: int, length: int) -> None:
    """The process's page tables lose ``[addr, addr+length)`` (``munmap``, ``madvise(MADV_DONTNEED)``): the MMU
    notifier of every ODP MR among ``mrs`` (:class:`~models.verbs.mr.MemoryRegion`) that covers part of it zaps those
    pages (``ib_umem_odp``'s ``invalidate`` callback; the NIC faults on its next access)."""
    for mr in mrs:
        if _odp(mr) and (covered := _covered(mr, addr, length)):
            start, end = covered
            mr.backing.invalidate(start - mr.addr, end - start)


def migrate_pages(mr, addr: int, length: int) -> str:
    """The kernel migrates the host pages of ``[addr, addr+length)`` under ``mr``
    (:class:`~models.verbs.mr.MemoryRegion`, a host buffer): an ODP MR's notifier zaps their translation (the
    NIC re-faults on next access); any other MR holds a long-term pin and the migration fails. Returns the
    event-log outcome."""
    if mr.backing is not None and mr.backing.mode == "odp":
        mr.backing.invalidate(addr - mr.iova, length)
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
    """GPU memory pinned through the GPU driver's peer-memory client for the MR's lifetime, its pages mapped into
    the GPU's BAR1 (:mod:`models.gpu.bar1`). When the GPU driver reclaims the memory (cudaFree, process exit) its
    free callback tears the MR down; later accesses complete in error, with no re-fault.

    :param span: bytes of the whole GPU pages the MR covers (what ``nvidia_p2p_get_pages`` maps).
    :raises VerbsError: ``EFAULT`` when the pages do not fit in what is left of BAR1 (nothing is pinned): the peer
        client's probe fails, it declines the range, and pinning it as host memory fails
        (:mod:`models.gpu.bar1`).
    """

    mode = "peermem"

    def __init__(self, length: int, allocation, pin_owner: str, span: int) -> None:
        self.pinned_bytes = length
        self.allocation = allocation
        """The GPU allocation whose pages are pinned (it records ``pin_owner`` among its pinners)."""
        self.pin_owner = pin_owner
        self.invalidated_at: int | None = None
        self.bar1_bytes = 0
        """BAR1 bytes the MR's pages hold."""
        if allocation.bar1 is not None:
            try:
                self.bar1_bytes = allocation.bar1.map(pin_owner, span, call="nvidia_p2p_get_pages")
            except Bar1Exhausted as exc:
                raise VerbsError("EFAULT", f"nv_mem_acquire: nvidia_p2p_get_pages failed ({exc.rule}), so no peer "
                                 "client claims the range and ib_umem_get cannot pin it", call="ibv_reg_mr") from exc
        allocation.pin(pin_owner)

    def translate(self, now_ps: int, offset: int, length: int):
        if self.invalidated_at is not None and now_ps >= self.invalidated_at:
            return WcStatus.LOC_PROT_ERR
        return None

    def epoch(self) -> tuple:
        return (self.invalidated_at,)

    def target(self, now_ps: int) -> str:
        return self.vram

    def reached_bytes(self, mr):
        return self.allocation.data, mr.addr - self.allocation.addr

    def reclaim(self, now_ps: int) -> None:
        """The GPU driver's free callback: the MR's mkey is invalidated from ``now_ps`` on, the pin dropped."""
        self.invalidated_at = now_ps
        self.pinned_bytes = 0
        self.allocation.unpin(self.pin_owner)
        if self.allocation.bar1 is not None:
            self.allocation.bar1.unmap(self.pin_owner)
        self.bar1_bytes = 0

    def release(self, now_ps: int) -> int:
        """Deregistration: put the GPU pages back (nvidia_p2p_put_pages)."""
        self.reclaim(now_ps)
        return 0
