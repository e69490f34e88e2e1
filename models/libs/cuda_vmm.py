"""One process's CUDA virtual-memory objects on one GPU: physical allocations (``cuMemCreate``), address
reservations (``cuMemAddressReserve``), the mappings between them (``cuMemMap``, ``cuMemSetAccess``,
``cuMemUnmap``), their release (``cuMemRelease``, ``cuMemAddressFree``) and the dma-buf export of a mapped range
(``cuMemGetHandleForAddressRange``).

The argument rules are the CUDA Driver API's (13.4, "Virtual Memory Management", group__CUDA__VA); a call that
breaks one raises :class:`~models.dmabuf.gpu_export.CudaError` with the CUresult the driver returns:

* ``cuMemCreate``: size a nonzero multiple of ``cuMemGetAllocationGranularity``'s minimum (2 MiB on the H200,
  calib/gpu_alloc/raw), flags zero; CUDA_ERROR_OUT_OF_MEMORY when VRAM has no room.
* ``cuMemAddressReserve``: size a multiple of the granularity (the documentation says of the host page size; the
  H200 refused 4 KiB and 2 MiB + 4 KiB with CUDA_ERROR_INVALID_VALUE), address hint a multiple of the host page
  size, alignment a power of two or zero, flags zero.
* ``cuMemMap``: flags zero, ptr and size multiples of the granularity, inside reserved address space (one
  reservation, or several back to back: the driver mapped a range across two), on a range not currently mapped
  (CUDA_ERROR_INVALID_VALUE); the whole handle from offset zero ("currently must be zero"):
  the H200 answered a nonzero offset, half the handle and more than the handle with CUDA_ERROR_NOT_SUPPORTED.
* ``cuMemSetAccess``: whole mappings, as ``cuMemUnmap`` (the H200 refused a sub-range of one mapping and a
  half-mapped range with CUDA_ERROR_INVALID_VALUE). ``cuMemUnmap``: whole mappings only ("cannot unmap a
  sub-range"); the range goes back to being reserved, without access. ``cuMemAddressFree``: exactly a
  reservation's ptr and size, with no mapping left in it.

The H200's answers: ``calib/dmabuf_export/raw/h200_vmm_rules.json`` (``measure_vmm_rules.py`` there); two H100s'
and an H200's, one driver (580.159.04), to maps that reach past their reservation:
``calib/dmabuf_export/raw/h100_vmm_reach_run{1,2}.json``, ``h200_vmm_reach.json`` (``measure_vmm_reach.py``). Some
such maps are not followed. The driver accepted a map that starts inside its reservation and runs past its end
into address space nobody reserved: 2 MiB and 14 MiB past an 8 MiB reservation on every machine, 58 MiB past on
one of the three. It refused others alike: 2 MiB past a 2 MiB reservation, and any map that starts past the end or
in a freed reservation. Which ones pass depends on the driver's own address-space heap, which the model does not
keep. The model refuses them all, as the documentation asks: "ptr ... from a prior cuMemAddressReserve".
* ``cuMemRelease``: the memory is freed "when all outstanding mappings to the memory are unmapped and when all
  outstanding references to the handle ... are also released"; a dma-buf export is such a reference: on the H200
  a VMM allocation unmapped and released while exported kept its VRAM until the fd closed
  (models/data/h200_dmabuf_export_rules.json, ``free_after_export``).

Export (measured on the H200, the same file's ``exports``): a range of mapped memory exports with or without
``cuMemSetAccess``, a range over two allocations mapped back to back exports as one dma-buf, a reserved range with
nothing mapped is CUDA_ERROR_INVALID_VALUE whatever the flags (the address check comes first), and the PCIe
mapping-type flag follows :meth:`models.dmabuf.gpu_export.Gpu.export_mapping_type`. The export holds every
allocation it covers. Where the model places a reservation is its own choice: upwards from
:data:`VA_BASE`, away from cudaMalloc's addresses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.dmabuf.gpu_export import EXPORT_CALL, CudaError, Gpu, GpuAllocation
from models.gpu import GpuOutOfMemory
from sim.core import format_size

HOST_PAGE = 4096
"""The host page size, the unit of ``cuMemAddressReserve``'s size and address."""
VA_BASE = 0x7F00_0000_0000
"""Where the model starts placing reservations."""
INVALID = "CUDA_ERROR_INVALID_VALUE"
NOT_SUPPORTED = "CUDA_ERROR_NOT_SUPPORTED"


@dataclass(eq=False)
class VmmHandle:
    """A ``CUmemGenericAllocationHandle``: pinned device memory with no address until it is mapped."""

    handle: int
    alloc: GpuAllocation
    """Its VRAM (``alloc.addr`` is no address the process sees)."""
    mappings: int = 0
    released: bool = False

    @property
    def size(self) -> int:
        """Bytes."""
        return self.alloc.size


@dataclass(eq=False)
class Mapping:
    """``[addr, addr + size)`` mapped to ``handle`` (always from its offset 0)."""

    addr: int
    size: int
    handle: VmmHandle
    access: bool = False
    """``cuMemSetAccess`` gave the device read-write access."""


@dataclass(frozen=True)
class Reservation:
    """A reserved virtual address range."""

    addr: int
    size: int


def _check(ok: bool, call: str, rule: str, result: str = INVALID) -> None:
    if not ok:
        raise CudaError(result, rule, call=call)


@dataclass(eq=False)
class CudaVmm:
    """A process's VMM objects on ``gpu`` (an NVIDIA GPU)."""

    gpu: Gpu
    name: str = "proc"
    handles: dict[int, VmmHandle] = field(default_factory=dict)
    reservations: dict[int, Reservation] = field(default_factory=dict)
    mappings: dict[int, Mapping] = field(default_factory=dict)
    """By address; a mapping may cross from one reservation into the next."""
    _next_handle: int = 1
    _next_va: int = VA_BASE

    @property
    def granularity(self) -> int:
        """``cuMemGetAllocationGranularity`` (``CU_MEM_ALLOC_GRANULARITY_MINIMUM``), bytes."""
        return self.gpu.memory.granularity

    def mem_create(self, size: int, flags: int = 0) -> VmmHandle:
        """``cuMemCreate``: a handle to ``size`` bytes of pinned VRAM.

        :raises CudaError: the rules of the module docstring.
        """
        call, gran = "cuMemCreate", self.granularity
        _check(size > 0 and size % gran == 0, call,
               f"size {format_size(size)} is not a nonzero multiple of the allocation "
               f"granularity ({format_size(gran)}, cuMemGetAllocationGranularity)")
        _check(flags == 0, call, f"flags {flags:#x}: must be zero")
        try:
            alloc = self.gpu.malloc(f"{self.name}.vmm{self._next_handle}", size)
        except GpuOutOfMemory as exc:
            raise CudaError("CUDA_ERROR_OUT_OF_MEMORY", str(exc), call=call) from None
        handle = self.handles[self._next_handle] = VmmHandle(self._next_handle, alloc)
        self._next_handle += 1
        return handle

    def address_reserve(self, size: int, alignment: int = 0, addr: int = 0, flags: int = 0) -> int:
        """``cuMemAddressReserve``: the start of a new reservation of ``size`` bytes, at ``addr`` when that
        hint is free and aligned, else where the model places it.

        :raises CudaError: the rules of the module docstring.
        """
        call, gran = "cuMemAddressReserve", self.granularity
        _check(size > 0 and size % gran == 0, call,
               f"size {format_size(size)} is not a nonzero multiple of the allocation granularity ({format_size(gran)})")
        _check(addr % HOST_PAGE == 0, call, "the address hint must be a multiple of the host page size (4 KiB)")
        _check(alignment >= 0 and alignment & (alignment - 1) == 0, call,
               f"alignment {alignment} is neither zero nor a power of two")
        _check(flags == 0, call, f"flags {flags:#x}: must be zero")
        align = max(alignment, self.granularity)
        if not (addr and addr % align == 0 and not self._overlaps(addr, size)):
            addr = -(-self._next_va // align) * align
        self._next_va = max(self._next_va, addr + size)
        self.reservations[addr] = Reservation(addr, size)
        return addr

    def _overlaps(self, addr: int, size: int) -> bool:
        return any(r.addr < addr + size and addr < r.addr + r.size for r in self.reservations.values())

    def _reserved(self, addr: int, size: int) -> bool:
        """Whether every byte of ``[addr, addr + size)`` is reserved (by one reservation or back-to-back ones)."""
        at = addr
        for r in sorted(self.reservations.values(), key=lambda r: r.addr):
            if r.addr <= at < r.addr + r.size:
                at = r.addr + r.size
        return at >= addr + size

    def _mapped_over(self, addr: int, size: int) -> list[Mapping]:
        """The mappings that overlap ``[addr, addr + size)``, in address order."""
        return sorted((m for m in self.mappings.values() if m.addr < addr + size and addr < m.addr + m.size),
                      key=lambda m: m.addr)

    def mem_map(self, ptr: int, size: int, handle: VmmHandle, offset: int = 0, flags: int = 0) -> Mapping:
        """``cuMemMap``: map ``handle`` from its start at ``[ptr, ptr + size)``, with no access yet.

        :raises CudaError: the rules of the module docstring.
        """
        call, gran = "cuMemMap", self.granularity
        _check(flags == 0, call, f"flags {flags:#x}: must be zero")
        _check(offset == 0, call, f"offset {format_size(offset)}: the offset into the handle currently must be zero",
               result=NOT_SUPPORTED)
        _check(not handle.released, call, f"handle {handle.handle} was released")
        _check(size > 0 and ptr % gran == 0 and size % gran == 0, call,
               f"ptr and size must be multiples of the allocation granularity ({format_size(gran)})")
        _check(size == handle.size, call, f"{format_size(size)} of the {format_size(handle.size)} handle: a map "
               "takes the whole handle", result=NOT_SUPPORTED)
        _check(self._reserved(ptr, size), call,
               f"[{ptr:#x}, +{format_size(size)}) is not inside cuMemAddressReserve ranges")
        _check(not self._mapped_over(ptr, size), call,
               f"[{ptr:#x}, +{format_size(size)}) is already mapped (cuMemMap maps only ranges not currently mapped)")
        mapping = self.mappings[ptr] = Mapping(ptr, size, handle)
        handle.mappings += 1
        return mapping

    def mapped(self, ptr: int, size: int) -> list[Mapping]:
        """The mappings covering ``[ptr, ptr + size)`` in address order; empty unless every byte is mapped."""
        if size <= 0:
            return []
        found, at = [], ptr
        for m in self._mapped_over(ptr, size):
            if m.addr <= at < m.addr + m.size:
                found.append(m)
                at = m.addr + m.size
        return found if at >= ptr + size else []

    def whole_mappings(self, call: str, ptr: int, size: int) -> list[Mapping]:
        """The mappings that make up exactly ``[ptr, ptr + size)``, in address order.

        :raises CudaError: the range is not whole mappings (``call`` named).
        """
        mappings = self.mapped(ptr, size)
        whole = bool(mappings) and mappings[0].addr == ptr and mappings[-1].addr + mappings[-1].size == ptr + size
        _check(whole, call, f"[{ptr:#x}, +{format_size(size)}) is not the entire range of its mappings (not a "
               "sub-range of a mapping, nor past one)")
        return mappings

    def set_access(self, ptr: int, size: int) -> None:
        """``cuMemSetAccess``: read-write access for the device over whole mappings.

        :raises CudaError: :meth:`whole_mappings`.
        """
        for m in self.whole_mappings("cuMemSetAccess", ptr, size):
            m.access = True

    def mem_unmap(self, ptr: int, size: int) -> None:
        """``cuMemUnmap``: the range becomes reserved again; a released handle with no mapping left frees its
        memory (unless a dma-buf still holds it).

        :raises CudaError: :meth:`whole_mappings`.
        """
        for m in self.whole_mappings("cuMemUnmap", ptr, size):
            del self.mappings[m.addr]
            m.handle.mappings -= 1
            self._maybe_free(m.handle)

    def mem_release(self, handle: VmmHandle) -> None:
        """``cuMemRelease``: the memory goes when its last mapping is unmapped and no dma-buf holds it.

        :raises CudaError: the handle was already released.
        """
        _check(not handle.released, "cuMemRelease", f"handle {handle.handle} was already released")
        handle.released = True
        del self.handles[handle.handle]
        self._maybe_free(handle)

    def _maybe_free(self, handle: VmmHandle) -> None:
        if handle.released and not handle.mappings:
            self.gpu.free(handle.alloc)

    def address_free(self, ptr: int, size: int) -> None:
        """``cuMemAddressFree`` of a whole reservation.

        :raises CudaError: ``ptr`` and ``size`` are not a reservation's, or mappings are left in it.
        """
        call, reservation = "cuMemAddressFree", self.reservations.get(ptr)
        _check(reservation is not None and reservation.size == size, call,
               f"[{ptr:#x}, +{format_size(size)}) is not a range cuMemAddressReserve returned "
               "(ptr and size must match it)")
        left = self._mapped_over(ptr, size)
        _check(not left, call, f"{len(left)} mapping(s) left in the range: cuMemUnmap them first")
        del self.reservations[ptr]

    def range_view(self, ptr: int, size: int) -> tuple[GpuAllocation, tuple[GpuAllocation, ...]]:
        """What ``cuMemGetHandleForAddressRange`` exports for ``[ptr, ptr + size)``: the range as one
        :class:`GpuAllocation` over the mapped memory, and the allocations under it (which the export holds).

        :raises CudaError: CUDA_ERROR_INVALID_VALUE, the range is not fully mapped; where allocations carry bytes,
            CUDA_ERROR_NOT_SUPPORTED for a range over several allocations (not modelled: their bytes are apart).
        """
        call, mappings = EXPORT_CALL[self.gpu.vendor], self.mapped(ptr, size)
        _check(bool(mappings), call, f"[{ptr:#x}, +{format_size(size)}) is not fully mapped")
        first = mappings[0].handle.alloc
        data = None
        if first.data is not None:
            _check(len(mappings) == 1, call, "data mode: an export over several VMM allocations is not modelled "
                   "(their bytes are apart)", result="CUDA_ERROR_NOT_SUPPORTED")
            data = first.data[ptr - mappings[0].addr:]
        view = GpuAllocation(f"{self.name}.va{ptr:#x}", ptr, size, first.vram, first.memory, bar1=first.bar1,
                             vendor=first.vendor, data=data)
        return view, tuple(dict.fromkeys(m.handle.alloc for m in mappings))

    def export(self, ptr: int, size: int, fdtable, flags: int = 0) -> tuple[GpuAllocation, int]:
        """``cuMemGetHandleForAddressRange(DMA_BUF_FD)`` of ``[ptr, ptr + size)``: the exported range
        (:meth:`range_view`) and the fd.

        :raises CudaError: :meth:`range_view`'s rules, then :meth:`models.dmabuf.gpu_export.Gpu.export`'s.
        """
        view, held = self.range_view(ptr, size)
        return view, self.gpu.export(view, fdtable, 0, size, flags, holders=held)
