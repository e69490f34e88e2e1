"""Host (CPU) memory: a virtual address space, pin_user_pages-style pinning by page backing, RLIMIT_MEMLOCK.

Pinning cost follows the path and the page backing, as measured on an H200 host
(``models/data/h200_host_pinning_pages.json``, script ``calib/host_pin/measure_pin.py``): ``ibv_reg_mr`` pins
with ``pin_user_pages`` (``ib_umem_get``), ``mlock`` and ``cudaHostRegister`` (which also maps every page for the
GPU) are measured beside it, each on 4 KiB pages, transparent huge pages (THP) and hugetlbfs 2 MiB pages, with the
pages present (prefaulted) or faulted in by the pin. Each curve is ``fixed + per_GiB * (n / GiB) ** exponent``
(:mod:`models.size_cost`). Huge pages make present-page pinning 5 to 6 times cheaper for ``pin_user_pages``
(one folio per 2 MiB), barely change ``cudaHostRegister``, and halve the cost of faulting pages in. Faulting pages
in costs less per byte up to a knee (:class:`~models.size_cost.KneeCost`, one per page size): there the zeroed
pages stay in the last-level cache, which spares 2 MiB pages 5 times their cost per byte and 4 KiB pages, whose
per-page fault work stays, about 2 times.

The backing also sets the registration's translation granularity: an MR over huge pages is written with one
MTT entry per 2 MiB (``ib_umem_find_best_pgsz``), so it needs 512 times fewer entries and the NIC's
translation cache reaches 512 times further (:attr:`HostParams.mtt_page_size`, the layout
:func:`~models.ib.mkey_page.mkey_page_size` reads).

Host memory is a capacity: a buffer's pages become resident when they are pinned or, in data mode, filled,
and resident pages beyond the node's memory fail as ``pin_user_pages`` does when it cannot fault a page in
(``ENOMEM``). A managed (unified) range is backed by host memory where the GPU does not hold it, so one larger
than the GPU's memory and the host's free memory together is refused when it is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.core import PS_PER_NS, SimError, VerbsError, format_size

from models.size_cost import CallCost, KneeCost, fit_shared_knee


DGX_H200_MEMORY = 2 * 2**40
"""System memory of an NVIDIA DGX H200 (bytes): the datasheet's "2TB" (32 x 64 GB DDR5 DIMMs)."""


PAGE_BACKINGS = {"4k": 4096, "thp": 2 * 2**20, "hugetlb": 2 * 2**20}
"""Page size of each host page backing: base pages, transparent huge pages, hugetlbfs pages (x86-64)."""
PIN_PATHS = ("pin_user_pages", "mlock", "cudaHostRegister")
"""The measured ways of pinning host memory (``ibv_reg_mr`` takes ``pin_user_pages``)."""

FAULT_KNEES = tuple(m * 2**20 for m in range(1, 129))
"""Knees tried for the fault-in cost (1 MiB steps to 128 MiB): below its knee, faulting pages in and zeroing them
costs 2 (4 KiB pages) to 5 (2 MiB pages) times less per byte, the zeroed lines staying in the last-level cache."""


def fit_fault_in(points: list[dict]) -> dict[tuple[str, str], KneeCost]:
    """Per (path, backing), the cost of faulting pages in: cold minus prefaulted medians (``points`` as in
    ``h200_host_pinning_pages.json``) fitted as a :class:`KneeCost`, one knee per page size for every path and
    backing of that size (the same zeroing and page allocation behind each)."""
    median = {(p["path"], p["pages"], p["prefaulted"], p["bytes"]): p["median_s"] for p in points}
    keys = sorted({(p["path"], p["pages"]) for p in points})
    out = {}
    for page in sorted({PAGE_BACKINGS[pages] for _, pages in keys}):
        mine = [k for k in keys if PAGE_BACKINGS[k[1]] == page]
        curves = []
        for key in mine:
            sizes = sorted(n for (*k, pre, n) in median if tuple(k) == key and not pre)
            curves.append((sizes, [median[(*key, False, n)] - median[(*key, True, n)] for n in sizes]))
        _, fits = fit_shared_knee(curves, FAULT_KNEES)
        out.update(zip(mine, fits))
    return out


PIN_PRESETS: dict[str, dict[tuple, CallCost | KneeCost]] = {
    "h200": {
        ("cudaHostRegister", "4k", True): CallCost(74_989_866, 42_429_093_422, 0.98),
        ("cudaHostRegister", "4k", False): KneeCost(210_787_880_793, 315_126_118_151, 4_194_304),
        ("cudaHostRegister", "hugetlb", True): CallCost(50_918_651, 28_115_157_388, 0.97),
        ("cudaHostRegister", "hugetlb", False): KneeCost(32_458_333_260, 189_466_680_040, 13_631_488),
        ("cudaHostRegister", "thp", True): CallCost(81_526_472, 26_472_018_922, 0.98),
        ("cudaHostRegister", "thp", False): KneeCost(123_252_154_067, 189_351_234_671, 13_631_488),
        ("mlock", "4k", True): CallCost(823_277, 56_979_537_598, 1.02),
        ("mlock", "4k", False): KneeCost(101_545_970_894, 260_911_334_170, 4_194_304),
        ("mlock", "hugetlb", True): CallCost(0, 154_929_362, 0.62),
        ("mlock", "hugetlb", False): KneeCost(32_584_537_342, 179_700_427_453, 13_631_488),
        ("mlock", "thp", True): CallCost(242_506, 383_810_595, 0.69),
        ("mlock", "thp", False): KneeCost(57_029_095_248, 179_144_803_118, 13_631_488),
        ("pin_user_pages", "4k", True): CallCost(11_548_548, 20_931_597_857, 1.03),
        ("pin_user_pages", "4k", False): KneeCost(165_650_455_819, 365_478_084_961, 4_194_304),
        ("pin_user_pages", "hugetlb", True): CallCost(341_771, 4_014_572_332, 0.99),
        ("pin_user_pages", "hugetlb", False): KneeCost(34_836_861_345, 193_567_787_034, 13_631_488),
        ("pin_user_pages", "thp", True): CallCost(10_233_677, 3_529_103_678, 1.0),
        ("pin_user_pages", "thp", False): KneeCost(77_639_584_455, 181_603_880_127, 13_631_488),
        ("cudaHostRegister", "4k"): CallCost(51_377_515, 18_888_697_006, 0.95),
        ("cudaHostRegister", "hugetlb"): CallCost(25_705_416, 19_629_742_844, 0.97),
        ("cudaHostRegister", "thp"): CallCost(56_038_536, 19_237_965_466, 0.96),
        ("mlock", "4k"): CallCost(566_958, 35_876_989_850, 1.01),
        ("mlock", "hugetlb"): CallCost(0, 13_657_386, 0.34),
        ("mlock", "thp"): CallCost(3_632_357, 223_166_666, 0.76),
        ("pin_user_pages", "4k"): CallCost(505_345, 4_569_864_348, 0.98),
        ("pin_user_pages", "hugetlb"): CallCost(0, 53_621_658, 0.57),
        ("pin_user_pages", "thp"): CallCost(704_016, 42_718_515, 0.4),
    },
}
"""Fitted curves per (path, backing): present pages (``True``), faulting pages in on top of that (``False``,
proportional to the size) and unpinning (no third key); refitted from the data by ``tests/models/test_host.py``
(``calib/host_pin/fit_pin.py``)."""

USER_TOUCH: dict[str, CallCost] = {
    "4k": CallCost(69_271_629_102, 371_801_402_562, 1.13),
    "thp": CallCost(0, 152_963_888_052, 1.09),
}
"""What an application's own first write to every page of an untouched buffer costs it, per backing: the page
faults taken from user space, one per page (4 KiB) or per 2 MiB folio (THP). Measured on an H100 machine's host,
1-32 GiB (``models/data/h100_host_pin_scale.json``, ``calib/host_pin/fit_scale.py``): 0.57 s per GiB of 4 KiB pages
at 16-32 GiB, half again what pin_user_pages takes to fault the same pages in (beyond 32 GiB the curve is
extrapolated: 0.61 s per GiB at 50 GB); refitted from the data by ``tests/models/test_host.py``."""


@dataclass(frozen=True, slots=True)
class HostParams:
    """Host memory and pinning parameters (times in integer ps, sizes in bytes)."""

    page_size: int = 4096
    """Base page size in bytes (x86-64: 4 KiB): the unit of addresses, ``pinned_vm`` and RLIMIT_MEMLOCK."""
    pages: str = "4k"
    """Page backing of the buffers: ``4k`` base pages, ``thp`` transparent huge pages, ``hugetlb`` (2 MiB)."""
    pin_path: str = "pin_user_pages"
    """How registrations pin (``ibv_reg_mr``: ``pin_user_pages``); a key of :data:`PIN_PATHS`."""
    pin_preset: str = "h200"
    """Key of :data:`PIN_PRESETS`."""
    memory: int = DGX_H200_MEMORY
    """Physical memory the node's buffers can occupy, in bytes (default: a DGX H200's)."""
    memlock_limit: int | None = None
    """RLIMIT_MEMLOCK in bytes; ``None`` is unlimited (or CAP_IPC_LOCK)."""
    prefaulted: bool = True
    """Buffers are touched before registration, so pinning finds their pages present."""
    poll_period_ps: int = 40 * PS_PER_NS
    """One pass of a CPU busy-poll loop; a completion is seen after a uniform delay in [0, period]."""
    memory_write_ps: int = 0
    """Extra time for a DMA write to become visible to a CPU poll after it reaches the root complex."""

    @property
    def mtt_page_size(self) -> int:
        """The backing's page: the physically contiguous, aligned unit of a pinned MR's layout (huge pages are
        contiguous and aligned), from which :func:`~models.ib.mkey_page.mkey_page_size` picks the entry size."""
        return PAGE_BACKINGS[self.pages]

    def _span(self, nbytes: int) -> int:
        """``nbytes`` rounded up to whole backing pages."""
        page = PAGE_BACKINGS[self.pages]
        return -(-nbytes // page) * page

    def fault_in(self, path: str | None = None) -> KneeCost:
        """What faulting pages in costs a pin along ``path`` (default :attr:`pin_path`) on top of pinning them."""
        return PIN_PRESETS[self.pin_preset][path or self.pin_path, self.pages, False]

    def pin_cost_ps(self, nbytes: int, *, prefaulted: bool | None = None, path: str | None = None) -> int:
        """Time to pin ``nbytes`` along ``path`` (default :attr:`pin_path`), faults included when not prefaulted."""
        curves, span = PIN_PRESETS[self.pin_preset], self._span(nbytes)
        key = (path or self.pin_path, self.pages)
        present = curves[(*key, True)].time_ps(span)
        return present if (self.prefaulted if prefaulted is None else prefaulted) else \
            present + self.fault_in(path).time_ps(span)

    def unpin_cost_ps(self, nbytes: int, *, path: str | None = None) -> int:
        """Time to unpin ``nbytes`` pinned along ``path`` (default :attr:`pin_path`)."""
        return PIN_PRESETS[self.pin_preset][path or self.pin_path, self.pages].time_ps(self._span(nbytes))


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
        self.unmapped: set[str] = set()
        """Buffers the process unmapped (``munmap``), by name: gone from its address space; pages an MR pinned
        stay the MR's (:func:`models.nic.translation.mr_bytes` still reaches them)."""

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
            raise VerbsError("ENOMEM", f"buffer {name!r} needs {format_size(need)} of {self.node}'s host memory but "
                             f"{format_size(self.params.memory - used)} of {format_size(self.params.memory)} are free",
                             call=call)
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

    def buffer_at(self, addr: int, length: int) -> HostBuffer | None:
        """The buffer whose mapping (whole pages) holds ``[addr, addr+length)``, None when none does."""
        return next((b for b in self.buffers.values() if b.name not in self.unmapped
                     and b.addr <= addr and addr + length <= b.addr + self.mapped_length(b)), None)

    def unmap(self, name: str) -> None:
        """``munmap`` of buffer ``name``: the range leaves the address space (a later pin of it is EFAULT, an ODP
        fault on it fails); its resident pages go, except those an MR pinned, which that MR keeps."""
        self.unmapped.add(name)
        self.resident.discard(name)

    def is_mapped(self, addr: int, length: int) -> bool:
        """True when ``[addr, addr+length)`` lies inside one buffer's mapping (whole pages: see
        :meth:`mapped_length`); the guard page after each buffer is never mapped."""
        return self.buffer_at(addr, length) is not None

    def mapping_at(self, addr: int) -> tuple[int, int] | None:
        """``[start, end)`` of the mapping holding ``addr`` (a buffer's whole pages), None when it is unmapped."""
        buf = self.buffer_at(addr, 1)
        return None if buf is None else (buf.addr, buf.addr + self.mapped_length(buf))

    def is_present(self, addr: int, length: int) -> bool:
        """True when the CPU's page table holds the pages of ``[addr, addr+length)``: they lie in one buffer's
        mapping that was touched before registration (``prefaulted``) or faulted in since (pinned or filled)."""
        buf = self.buffer_at(addr, length)
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
        buffer = self.buffer_at(addr, length)
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
