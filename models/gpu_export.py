"""GPU buffers and their dma-buf exporters as vendor profiles, and GPU memory pressure.

* ``nvidia``: a static exporter (``nv_dma_buf``): never moves memory; export rules measured on an H200
  (models/data/h200_dmabuf_export.json): start and size 4 KiB-aligned, nonzero, inside one allocation, device
  memory only, flags 0, about 18 us per export. Memory pressure cannot evict anything: the allocation fails.
* ``amd``: a dynamic exporter (amdgpu/TTM-like): under memory pressure it evicts unpinned buffers from VRAM
  to system memory, least recently exported first: lock, ``move_notify`` to every dynamic attachment, copy at
  the calibrated bandwidth, publish a fence, unlock. Pinned buffers cannot move: the allocation that needed
  the room evicts something else or fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.core import PS_PER_US, SimError, VerbsError

from models.versions import NVIDIA_DMABUF_EXPORT, Version
from models.dmabuf import CopyParams, DmaBufCore, MovableExporter, Placement, StaticExporter, dma_buf_fd

EXPORT_PS = 18 * PS_PER_US
"""cuMemGetHandleForAddressRange(DMA_BUF_FD): 17-20 us regardless of size (h200_dmabuf_export.json)."""
GPU_PAGE = 4096
"""Alignment the export requires (the host page size)."""
NEW_OWNER_BYTE = 0xEE
"""Data mode: what the job that took over evicted VRAM writes there (so stale reads are recognisable)."""


class CudaError(SimError):
    """A CUDA driver API call failed; ``result`` is the CUresult name."""

    def __init__(self, result: str, rule: str, *, call: str) -> None:
        self.result = result
        super().__init__(f"{call}: {result}: {rule}")


@dataclass(eq=False)
class GpuAllocation:
    """A cudaMalloc/hipMalloc allocation: device virtual address range."""

    name: str
    addr: int
    size: int
    exporter: MovableExporter | StaticExporter | None = None
    pinned_by: set[str] = field(default_factory=set)
    """Who pins it in VRAM (peer-memory registrations)."""
    data: np.ndarray | None = None
    """Data mode: the allocation's bytes (None when off)."""


@dataclass(eq=False)
class Gpu:
    """One GPU: VRAM capacity and usage, its allocations, and its dma-buf exporter profile."""

    name: str
    vendor: str
    capacity: int
    core: DmaBufCore
    copy: CopyParams = CopyParams()
    driver: str = "580"
    """Driver version (NVIDIA: dma-buf export needs 515+)."""
    allocations: dict[str, GpuAllocation] = field(default_factory=dict)
    used: int = 0
    pressure_bytes: list[int] = field(default_factory=list)
    """Sizes of the competing allocations currently held."""
    evictions: int = 0
    failed_allocations: int = 0
    _next_addr: int = 0x7000_0000_0000

    def malloc(self, name: str, size: int) -> GpuAllocation:
        """Allocate ``size`` bytes of VRAM (2 MiB granularity).

        :raises CudaError: CUDA_ERROR_OUT_OF_MEMORY when it does not fit.
        """
        rounded = -(-size // (2 << 20)) * (2 << 20)
        if self.used + rounded > self.capacity:
            raise CudaError("CUDA_ERROR_OUT_OF_MEMORY", f"{rounded} bytes requested, "
                            f"{self.capacity - self.used} free", call=f"{self.name}.malloc")
        alloc = GpuAllocation(name, self._next_addr, size)
        self._next_addr += rounded + (2 << 20)
        self.used += rounded
        self.allocations[name] = alloc
        return alloc

    def export(self, alloc: GpuAllocation, fdtable, offset: int = 0, size: int | None = None,
               flags: int = 0) -> int:
        """Export ``[alloc.addr + offset, +size)`` as a dma-buf fd in ``fdtable`` (one exporter per allocation).

        :raises CudaError: the NVIDIA export rules (see the module docstring).
        """
        call = "cuMemGetHandleForAddressRange"
        size = alloc.size - offset if size is None else size
        if self.vendor == "nvidia" and Version.parse(self.driver) < NVIDIA_DMABUF_EXPORT:
            raise CudaError("CUDA_ERROR_NOT_SUPPORTED", f"driver {self.driver} cannot export dma-bufs (needs the "
                            "open kernel modules 515+ and CUDA 11.7+)", call=call)
        if flags:
            raise CudaError("CUDA_ERROR_NOT_SUPPORTED", f"flags {flags:#x}: only 0 is supported here", call=call)
        if size == 0 or size % GPU_PAGE or offset % GPU_PAGE:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", "start and size must be nonzero multiples of 4 KiB", call=call)
        if offset + size > alloc.size:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", "the range runs past the allocation", call=call)
        cls = StaticExporter if self.vendor == "nvidia" else MovableExporter
        kwargs = {} if cls is StaticExporter else {"copy": self.copy}
        with self.core.call(self.name, call, allocation=alloc.name, bytes=size):
            alloc.exporter = cls(self.core, size, name=f"{self.name}", placement=Placement.VRAM, **kwargs)
            if alloc.data is not None:
                alloc.exporter.storage[0] = alloc.data[offset:offset + size]
            self.core.spend(self.name, EXPORT_PS)
            return dma_buf_fd(alloc.exporter.dmabuf, fdtable)

    def _evictable(self) -> list[GpuAllocation]:
        return [a for a in self.allocations.values()
                if isinstance(a.exporter, MovableExporter) and a.exporter.dmabuf.placement is Placement.VRAM
                and not a.pinned_by and not a.exporter.dmabuf.released]

    def pressure(self, size: int) -> bool:
        """Another job allocates ``size`` bytes: evict movable buffers until it fits; False if it cannot."""
        with self.core.call(self.name, "gpu_memory_pressure", bytes=size):
            return self._make_room(size)

    def _make_room(self, size: int) -> bool:
        rounded = -(-size // (2 << 20)) * (2 << 20)
        for alloc in self._evictable():
            if self.used + rounded <= self.capacity:
                break
            vacated = alloc.exporter.storage.get(alloc.exporter.dmabuf.generation)
            try:
                alloc.exporter.move(Placement.SYSTEM)
            except VerbsError:  # pinned by an importer (pinned dma-buf MR or pin-on-map): cannot move
                continue
            if vacated is not None:
                vacated[:] = NEW_OWNER_BYTE  # the memory's new owner writes its own data there
            self.used -= -(-alloc.size // (2 << 20)) * (2 << 20)
            self.evictions += 1
        if self.used + rounded > self.capacity:
            self.failed_allocations += 1
            self.core.instant(self.name, "AllocationFailed", bytes=size, free=self.capacity - self.used)
            return False
        self.used += rounded
        self.pressure_bytes.append(rounded)
        self.core.instant(self.name, "MemoryAllocated", bytes=size, free=self.capacity - self.used)
        return True

    def release_pressure(self) -> None:
        """The competing job frees its oldest allocation."""
        if self.pressure_bytes:
            self.used -= self.pressure_bytes.pop(0)
