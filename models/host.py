"""Host (CPU) memory: a virtual address space, get_user_pages-style pinning and RLIMIT_MEMLOCK accounting.

Pinning cost follows the shape measured on an H200 host (``models/data/h200_pinning_cost.json``,
cudaHostRegister, which pins with pin_user_pages like ``ib_umem_get``): a per-page cost for pages already
present, and for pages that must first be faulted in and zeroed a cheaper per-page cost while the working
set fits the last-level cache and a dearer one beyond it.

Host memory is a capacity: a buffer's pages become resident when they are pinned or, in data mode, filled,
and resident pages beyond the node's memory fail as ``pin_user_pages`` does when it cannot fault a page in
(``ENOMEM``). A managed (unified) range is backed by host memory where the GPU does not hold it, so one larger
than the GPU's memory and the host's free memory together is refused when it is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.core import PS_PER_NS, PS_PER_US, SimError, VerbsError


DGX_H200_MEMORY = 2 * 2**40
"""System memory of an NVIDIA DGX H200 (bytes): the datasheet's "2TB" (32 x 64 GB DDR5 DIMMs)."""


@dataclass(frozen=True, slots=True)
class HostParams:
    """Host memory and pinning parameters (times in integer ps, sizes in bytes)."""

    page_size: int = 4096
    """Base page size in bytes (x86-64: 4 KiB)."""
    memory: int = DGX_H200_MEMORY
    """Physical memory the node's buffers can occupy, in bytes (default: a DGX H200's)."""
    memlock_limit: int | None = None
    """RLIMIT_MEMLOCK in bytes; ``None`` is unlimited (or CAP_IPC_LOCK)."""
    prefaulted: bool = True
    """Buffers are touched before registration, so pinning finds their pages present."""
    pin_present_page_ps: int = 124 * PS_PER_NS
    """Pin one present 4 KiB page. Fit: cudaHostRegister, prefaulted, 1 GiB..4 GiB slope = 0.124 us/page."""
    fault_page_cached_ps: int = 550 * PS_PER_NS
    """Fault in, zero and pin one page while the working set fits the LLC. Fit: 64 KiB..16 MiB rows."""
    fault_page_uncached_ps: int = 1023 * PS_PER_NS
    """Same beyond the LLC. Fit: 256 MiB..4 GiB rows (1.02 us/page)."""
    llc_bytes: int = 32 * 2**20
    """Bytes of first-touch zeroing that stay cache-fast (the knee between the two fault costs)."""
    unpin_page_ps: int = 60 * PS_PER_NS
    """Unpin one page. Fit: cudaHostUnregister 4 GiB = 62.8 ms -> 0.060 us/page."""
    poll_period_ps: int = 40 * PS_PER_NS
    """One pass of a CPU busy-poll loop; a completion is seen after a uniform delay in [0, period]."""
    memory_write_ps: int = 0
    """Extra time for a DMA write to become visible to a CPU poll after it reaches the root complex."""

    def pin_cost_ps(self, nbytes: int, *, prefaulted: bool | None = None) -> int:
        """Time to pin ``nbytes`` with get_user_pages (page faults included when not prefaulted)."""
        pages = -(-nbytes // self.page_size)
        if self.prefaulted if prefaulted is None else prefaulted:
            return pages * self.pin_present_page_ps
        cached_pages = min(pages, self.llc_bytes // self.page_size)
        return cached_pages * self.fault_page_cached_ps + (pages - cached_pages) * self.fault_page_uncached_ps

    def unpin_cost_ps(self, nbytes: int) -> int:
        """Time to unpin ``nbytes``."""
        return -(-nbytes // self.page_size) * self.unpin_page_ps


CUDA_HOST_REGISTER_FIXED_PS = 45 * PS_PER_US
"""cudaHostRegister's fixed cost (CUDA bookkeeping), from the small-size rows; used only to compare the pin
model with the measurement."""


class ManagedAllocationFailed(SimError):
    """cudaMallocManaged refused a range (``cudaErrorMemoryAllocation``): no memory could ever back it."""

    errno = "ENOMEM"


@dataclass(frozen=True, slots=True)
class HostBuffer:
    """A range of a process's virtual address space (page aligned start)."""

    name: str
    addr: int
    size: int


class HostMemory:
    """One process's address space on one node: allocation and pinned-page accounting.

    Pinned pages are counted, not tracked one by one (``pinned_vm`` as in ``mm_struct``).
    """

    _BASE = 0x7F00_0000_0000

    def __init__(self, node: str, params: HostParams) -> None:
        self.node = node
        self.params = params
        self._next = self._BASE
        self.buffers: dict[str, HostBuffer] = {}
        self.pinned_pages = 0
        self.resident: set[str] = set()
        """Buffers whose pages are resident (pinned or filled), by name."""
        self.data: dict[str, np.ndarray] = {}
        """Data mode: each buffer's bytes, by name (empty when off)."""

    def allocate(self, name: str, size: int) -> HostBuffer:
        """mmap-like allocation of ``size`` bytes, page aligned, with a guard page after it."""
        if size <= 0:
            raise ValueError(f"{self.node}: buffer {name!r} needs a positive size, got {size}")
        page = self.params.page_size
        buf = HostBuffer(name, self._next, size)
        self._next += (-(-size // page) + 1) * page
        self.buffers[name] = buf
        return buf

    def resident_bytes(self) -> int:
        """Bytes of the resident buffers, in whole pages."""
        page = self.params.page_size
        return sum(-(-self.buffers[name].size // page) * page for name in self.resident)

    def make_resident(self, name: str, *, call: str) -> None:
        """Fault buffer ``name``'s pages in (once): the node's memory must hold them.

        :raises VerbsError: ``ENOMEM`` when they do not fit beside the resident buffers.
        """
        if name in self.resident:
            return
        page, used = self.params.page_size, self.resident_bytes()
        need = -(-self.buffers[name].size // page) * page
        if used + need > self.params.memory:
            raise VerbsError("ENOMEM", f"buffer {name!r} needs {need} bytes of {self.node}'s host memory but "
                             f"{self.params.memory - used} of {self.params.memory} are free", call=call)
        self.resident.add(name)

    def back_managed(self, size: int, gpu_bytes: int, *, call: str = "cudaMallocManaged") -> None:
        """Check that a managed range of ``size`` bytes fits the GPU's ``gpu_bytes`` and this node's free memory.

        :raises ManagedAllocationFailed: it does not.
        """
        free = self.params.memory - self.resident_bytes()
        if size > gpu_bytes + free:
            raise ManagedAllocationFailed(f"{call}: cudaErrorMemoryAllocation: a managed range of {size} bytes "
                                          f"exceeds the GPU's {gpu_bytes} bytes and {self.node}'s {free} free "
                                          "bytes of host memory together")

    def fill(self, name: str, make) -> None:
        """Data mode: fault buffer ``name`` in and keep the bytes ``make()`` returns as its contents (the rest of
        its last page zero).

        :raises VerbsError: ``ENOMEM`` from :meth:`make_resident`, before ``make`` runs.
        """
        self.make_resident(name, call="page fault")
        contents = make()
        tail = self.mapped_length(self.buffers[name]) - len(contents)
        self.data[name] = np.concatenate([contents, np.zeros(tail, dtype=contents.dtype)]) if tail else contents

    def mapped_length(self, buf: HostBuffer) -> int:
        """Bytes mapped for ``buf``: its size rounded up to whole pages, as mmap maps them (the rest of the last
        page is the process's memory too, zero-filled)."""
        page = self.params.page_size
        return -(-buf.size // page) * page

    def _buffer_at(self, addr: int, length: int) -> HostBuffer | None:
        return next((b for b in self.buffers.values()
                     if b.addr <= addr and addr + length <= b.addr + self.mapped_length(b)), None)

    def is_mapped(self, addr: int, length: int) -> bool:
        """True when ``[addr, addr+length)`` lies inside one buffer's mapping (whole pages: see
        :meth:`mapped_length`); the guard page after each buffer is never mapped."""
        return self._buffer_at(addr, length) is not None

    def mapping_at(self, addr: int) -> tuple[int, int] | None:
        """``[start, end)`` of the mapping holding ``addr`` (a buffer's whole pages), None when it is unmapped."""
        buf = self._buffer_at(addr, 1)
        return None if buf is None else (buf.addr, buf.addr + self.mapped_length(buf))

    def is_present(self, addr: int, length: int) -> bool:
        """True when the CPU's page table holds the pages of ``[addr, addr+length)``: they lie in one buffer's
        mapping that was touched before registration (``prefaulted``) or faulted in since (pinned or filled)."""
        buf = self._buffer_at(addr, length)
        return buf is not None and (self.params.prefaulted or buf.name in self.resident)

    def pages_spanned(self, addr: int, length: int) -> int:
        """Number of base pages touched by ``[addr, addr+length)``."""
        page = self.params.page_size
        return (addr + length + page - 1) // page - addr // page

    def pin(self, addr: int, length: int, *, call: str) -> int:
        """Pin a range like ``ib_umem_get``: charge RLIMIT_MEMLOCK (``mm->pinned_vm``), then pin the pages; return
        the time it takes (ps).

        :raises VerbsError: ``ENOMEM`` past RLIMIT_MEMLOCK (checked before any page is looked up), ``EFAULT`` for
            an unmapped range, ``ENOMEM`` past the node's memory.
        """
        pages = self.pages_spanned(addr, length)
        limit = self.params.memlock_limit
        if limit is not None and (self.pinned_pages + pages) * self.params.page_size > limit:
            raise VerbsError("ENOMEM", f"pinning {pages} pages would exceed RLIMIT_MEMLOCK ({limit} bytes; "
                             f"{self.pinned_pages} pages already pinned)", call=call)
        buffer = self._buffer_at(addr, length)
        if buffer is None:
            raise VerbsError("EFAULT", f"range 0x{addr:x}+{length} is not mapped in {self.node}'s address space"
                             " (pin_user_pages fails)", call=call)
        self.make_resident(buffer.name, call=call)
        self.pinned_pages += pages
        return self.params.pin_cost_ps(pages * self.params.page_size)

    def unpin(self, addr: int, length: int) -> int:
        """Release pages pinned by :meth:`pin`; return the time it takes (ps)."""
        pages = self.pages_spanned(addr, length)
        if pages > self.pinned_pages:
            raise AssertionError(f"{self.node}: unpinning {pages} pages but only {self.pinned_pages} are pinned")
        self.pinned_pages -= pages
        return self.params.unpin_cost_ps(pages * self.params.page_size)
