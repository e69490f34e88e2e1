"""A registration cache in front of GPU-buffer registration, as UCX's rcache (ucs/memory/rcache.c) and NCCL's
user-buffer registration use one: a lookup by address range, a registration on a miss, reference counts, lazy
deregistration (an unused region stays registered until the cache holds more than it may), and invalidation by
memory hooks when memory is freed.

The stale hit: without memory hooks (UCM's cudaFree interception not installed, ``UCX_MEMTYPE_CACHE=n`` in UCX
issue #4269) a freed buffer's region stays in the cache, and a new allocation at the recycled address hits it:
the MR still maps the old allocation's pages. Where those pages are depends on how the MR was made (see
:mod:`models.libs.cuda_process`): a peer-memory MR was torn down by the driver's free callback, so accesses fail;
a dma-buf MR still holds the old VRAM through its dma-buf reference, so accesses succeed and the bytes land in
memory nobody reads (and the VRAM is not given back, the delayed cudaFree of NVIDIA/cuDecomp PR #47). Keying
regions on the CUDA buffer ID as well (UCX PR #5910's ``mem_ext_validate``, libfabric's CUDA monitor in issue
#8081) turns the stale hit into a miss. Whatever the cache knows, every hit is checked against the allocation
that is live at the address, so a stale hit is always reported.

Explicit dma-buf registrations (an fd and offset the application exported) bypass the cache: its key is an
address range, and fd and offset are not in it (UCX PR #11723 disables the rcache for such memory handles, and
registers through its own duplicate of the caller's fd, which stays the caller's).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from models.dmabuf import DmaBuf, dma_buf_fd, get_dma_buf
from models.dmabuf.gpu_export import GpuAllocation
from models.libs.cuda_process import DeviceBuffer
from models.libs.fallback import ChainResult, Stack, register_chain
from models.libs.policies import Policy
from models.nic.translation import Fault, mr_bytes
from models.nic.wqe import Access
from models.verbs.dmabuf import ibv_reg_dmabuf_mr
from models.verbs.mr import MemoryRegion, ibv_dereg_mr
from sim.core import PS_PER_NS, VerbsError

LookupOutcome = Literal["hit", "miss", "stale-hit", "rejected-stale"]
"""``rejected-stale``: the region's buffer ID no longer matches, so the cache dropped it and registered anew."""


@dataclass(frozen=True, slots=True)
class RcacheParams:
    """How a registration cache behaves and what its bookkeeping costs (unvalidated defaults: no measurement of
    a lookup is in the project's data)."""

    memory_hooks: bool = True
    """Memory hooks are installed: a free invalidates the regions it overlaps (UCX's UCM events)."""
    validate_buffer_id: bool = False
    """Keep each region's CUDA buffer ID and compare it on every hit (UCX PR #5910, libfabric issue #8081)."""
    max_unreleased: int = 64
    """Unused regions kept registered before the least recently used is deregistered (``UCX_RCACHE_MAX_UNRELEASED``
    counts bytes; this model counts regions)."""
    lookup_ps: int = 200 * PS_PER_NS
    """One lookup: a page-table walk under the cache's read lock."""
    validate_ps: int = 1_000 * PS_PER_NS
    """One buffer-ID query (``cuPointerGetAttribute``) when ``validate_buffer_id`` is set."""


@dataclass(eq=False)
class Region:
    """A cached registration of ``[start, end)``."""

    start: int
    end: int
    chain: ChainResult
    alloc: GpuAllocation
    """The allocation that was registered (the pages the MR maps)."""
    buffer_id: int
    refcount: int = 0
    invalidated: bool = False
    stale_hits: int = 0
    """Stale hits on this region (the first one is warned of)."""

    @property
    def mr(self) -> MemoryRegion:
        """The region's memory region."""
        return self.chain.mr


@dataclass
class Lookup:
    """One :meth:`RegistrationCache.get`: the region (None when its registration failed), the outcome and the
    library's time (ps: lookup, validation, registration)."""

    region: Region | None
    outcome: LookupOutcome
    cost_ps: int


@dataclass
class WriteOutcome:
    """Where one NIC write through a cached region went."""

    ok: bool
    status: str
    """'ok', or the requester's completion status of the failed write (``REM_ACCESS_ERR``)."""
    landed: str
    """'buffer' (the allocation live at the address), 'freed allocation' (old pages a stale MR maps),
    'host staging' or 'nowhere'."""
    bytes_in_buffer: int
    """Data mode: bytes of the payload now in the live allocation (0 otherwise)."""


@dataclass
class RcacheStats:
    """Counts and times (ps) of a cache's life."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    stale_hits: int = 0
    rejected_stale: int = 0
    failed_registrations: int = 0
    invalidations: int = 0
    evictions: int = 0
    registrations: int = 0
    deregistrations: int = 0
    bypassed: int = 0
    lookup_ps: int = 0
    registration_ps: int = 0
    deregistration_ps: int = 0


@dataclass(eq=False)
class RegistrationCache:
    """A cache of ``policy``'s registrations on ``stack``."""

    stack: Stack
    policy: Policy
    params: RcacheParams = RcacheParams()
    access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
    stats: RcacheStats = field(default_factory=RcacheStats)
    warnings: list[str] = field(default_factory=list)
    _regions: list[Region] = field(default_factory=list)
    _unreleased: OrderedDict = field(default_factory=OrderedDict)
    """Regions with no user, least recently used first (region -> None)."""

    def __post_init__(self) -> None:
        if self.params.memory_hooks:
            self.stack.process.install_free_hook(self.invalidate)

    def get(self, addr: int, length: int) -> Lookup:
        """Look ``[addr, addr+length)`` up; register it on a miss. The caller :meth:`put` s the region back."""
        stats, params = self.stats, self.params
        stats.lookups += 1
        bookkeeping = params.lookup_ps + (params.validate_ps if params.validate_buffer_id else 0)
        stats.lookup_ps += bookkeeping
        region = next((r for r in self._regions if r.start <= addr and addr + length <= r.end), None)
        live = self.stack.process.buffer_at(addr)
        outcome: LookupOutcome = "miss"
        if region is not None and params.validate_buffer_id and (live is None or live.buffer_id != region.buffer_id):
            self._drop(region)
            stats.rejected_stale += 1
            region, outcome = None, "rejected-stale"
        if region is None:
            stats.misses += 1
            region = self._register(live, addr, length)
            cost = bookkeeping + (region.chain.cost_ps if region is not None else 0)
        else:
            outcome = "hit" if live is not None and live.alloc is region.alloc else "stale-hit"
            stats.hits += outcome == "hit"
            stats.stale_hits += outcome == "stale-hit"
            if outcome == "stale-hit":
                region.stale_hits += 1
            if outcome == "stale-hit" and region.stale_hits == 1:
                self.warnings.append(f"stale hit at 0x{addr:x}: the cached MR maps {region.alloc.name}, which was "
                                     f"freed; the address now belongs to {live.alloc.name if live else 'nothing'}")
            cost = bookkeeping
        if region is not None:
            region.refcount += 1
            self._unreleased.pop(region, None)
        return Lookup(region, outcome, cost)

    def put(self, region: Region) -> None:
        """Drop one use of ``region``; an unused region stays registered (lazy deregistration) unless it was
        invalidated or the cache holds more unused regions than it may."""
        region.refcount -= 1
        if region.refcount:
            return
        if region.invalidated:
            self._deregister(region)
            return
        self._unreleased[region] = None
        while len(self._unreleased) > self.params.max_unreleased:
            oldest, _ = self._unreleased.popitem(last=False)
            self._regions.remove(oldest)
            self.stats.evictions += 1
            self._deregister(oldest)

    def invalidate(self, addr: int, size: int) -> None:
        """The memory hook: drop every region overlapping ``[addr, addr+size)``; those in use are deregistered
        when their last user puts them back."""
        for region in [r for r in self._regions if r.start < addr + size and addr < r.end]:
            self.stats.invalidations += 1
            self._drop(region)

    def register_dmabuf(self, fd: int, offset: int, length: int, iova: int) -> MemoryRegion:
        """An explicit dma-buf registration: straight to ``ibv_reg_dmabuf_mr`` through a duplicate of the
        caller's ``fd`` (closed afterwards), never cached (fd and offset are not in the cache's key), so the
        same fd registered twice costs two registrations.

        :raises VerbsError: ``EBADF`` when ``fd`` is not an open dma-buf; as ``ibv_reg_dmabuf_mr``.
        """
        fds = self.stack.node.fds
        dmabuf = fds.fget(fd, "dup")
        if not isinstance(dmabuf, DmaBuf):
            raise VerbsError("EBADF", f"fd {fd} is not a dma-buf", call="ibv_reg_dmabuf_mr")
        get_dma_buf(dmabuf)  # dup(2): one more file reference, on a new fd
        duplicate = dma_buf_fd(dmabuf, fds)
        try:
            mr = ibv_reg_dmabuf_mr(self.stack.pd, offset, length, iova, duplicate, self.access)
        finally:
            fds.close(duplicate)
        self.stats.bypassed += 1
        self.stats.registration_ps += mr.reg_ps
        return mr

    def write(self, region: Region, addr: int, payload: np.ndarray) -> WriteOutcome:
        """An RDMA WRITE of ``payload`` lands at ``addr`` through ``region``'s MR (the responder NIC's rkey check
        and translation decide where, as in :mod:`models.nic.work_request`); report where it went."""
        mr, length = region.mr, len(payload)
        now = self.stack.pd.context.env.now
        if not mr.allows(addr, length, int(Access.REMOTE_WRITE)):
            return WriteOutcome(False, "REM_ACCESS_ERR", "nowhere", 0)
        answer = mr.backing.translate(now, addr - mr.iova, length) if mr.backing is not None else None
        if answer is not None and not isinstance(answer, Fault):
            return WriteOutcome(False, "REM_ACCESS_ERR", "nowhere", 0)
        live = self.stack.process.buffer_at(addr)
        landed = ("host staging" if region.chain.method == "host-staging"
                  else "buffer" if live is not None and live.alloc is region.alloc else "freed allocation")
        in_buffer = 0
        if self.stack.process.data and region.chain.method != "host-staging":
            mr_bytes(mr, addr, length)[:] = payload
            if live is not None:
                start = addr - live.addr
                in_buffer = int(np.count_nonzero(live.alloc.data[start:start + length] == payload))
        return WriteOutcome(True, "ok", landed, in_buffer)

    @property
    def regions(self) -> int:
        """Regions in the cache now."""
        return len(self._regions)

    def flush(self) -> None:
        """Deregister every unused region (the cache's destruction)."""
        for region in list(self._unreleased):
            self._unreleased.pop(region)
            self._regions.remove(region)
            self._deregister(region)

    def _register(self, live: DeviceBuffer | None, addr: int, length: int) -> Region | None:
        if live is None:
            self.stats.failed_registrations += 1
            self.warnings.append(f"0x{addr:x}+{length}: no allocation there (cuPointerGetAttribute fails)")
            return None
        chain = register_chain(self.stack, self.policy, live, self.access)
        self.warnings += chain.warnings
        if chain.mr is None:
            self.stats.failed_registrations += 1
            return None
        self.stats.registrations += 1
        self.stats.registration_ps += chain.cost_ps
        region = Region(live.addr, live.addr + live.size, chain, live.alloc, live.buffer_id)
        self._regions.append(region)
        return region

    def _drop(self, region: Region) -> None:
        region.invalidated = True
        self._regions.remove(region)
        if not region.refcount:
            self._unreleased.pop(region, None)
            self._deregister(region)

    def _deregister(self, region: Region) -> None:
        self.stats.deregistrations += 1
        self.stats.deregistration_ps += ibv_dereg_mr(region.mr)
