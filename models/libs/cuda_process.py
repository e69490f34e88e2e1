"""One process's device allocations as a library sees them: cudaMalloc and cudaFree on one GPU, the virtual
addresses they get, their buffer IDs and the memory hooks a library installs on the free.

* **Virtual addresses are recycled.** A new allocation takes the lowest freed range it fits in, so memory freed
  and allocated again of the same size comes back at the same address (the address recycling UCX issue #4269
  and UCX PR #2738 describe). On the H200 a 1 GiB cudaMalloc after freeing an exported 1 GiB allocation came
  back at the same address, with the dma-buf still open and after closing it
  (models/data/h200_dmabuf_export_rules.json); the lowest-fit rule beyond that case is this model's.
* **Buffer IDs are never recycled**: ``CU_POINTER_ATTRIBUTE_BUFFER_ID`` is unique within the process, so a cache
  that keeps the ID of what it registered can tell a recycled address from the allocation it registered (UCX PR
  #5910, libfabric issue #8081).
* **What cudaFree does, in order**: the memory hooks run first (UCM intercepts cudaFree and dispatches the free
  event before calling it); then the driver calls the free callback of every peer-memory registration of the
  allocation (``nvidia_p2p_get_pages``' ``free_callback``, "invoked when the pages underlying the virtual address
  range are freed implicitly", kernel-open/nvidia/nv-p2p.h), which tears the MR down; then the VRAM goes back,
  unless an exported dma-buf still holds it (``nv_dma_buf_release`` drops the duplicated handles,
  kernel-open/nvidia/nv-dmabuf.c; :meth:`models.dmabuf.gpu_export.Gpu.free`): on the H200 free VRAM did not
  change at the cudaFree (nor at cuMemUnmap + cuMemRelease of a VMM allocation) and came back when the fd closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from models.dmabuf.gpu_export import Gpu, GpuAllocation
from models.verbs.peermem import peermem_reclaim
from models.verbs.mr import MemoryRegion

FreeHook = Callable[[int, int], None]
"""A memory hook: called with the address and size of an allocation about to be freed."""


@dataclass(eq=False)
class DeviceBuffer:
    """A live cudaMalloc allocation and its buffer ID."""

    alloc: GpuAllocation
    buffer_id: int

    @property
    def addr(self) -> int:
        """Its device virtual address."""
        return self.alloc.addr

    @property
    def size(self) -> int:
        """Bytes asked for."""
        return self.alloc.size


@dataclass
class FreeOutcome:
    """What one cudaFree did."""

    hooks_called: int
    peer_mrs_torn_down: int
    vram_held: bool
    """True when an exported dma-buf still holds the allocation's VRAM (it goes back with the last release)."""


@dataclass(eq=False)
class CudaProcess:
    """A process's allocations on ``gpu``. ``data``: new allocations carry bytes (zeros) for data mode."""

    gpu: Gpu
    name: str = "proc"
    data: bool = False
    hooks: list[FreeHook] = field(default_factory=list)
    """Memory hooks, called on every free before the driver frees."""
    live: dict[int, DeviceBuffer] = field(default_factory=dict)
    """By address."""
    freed: list[GpuAllocation] = field(default_factory=list)
    """Allocations freed so far, oldest first (their VRAM may still be held by a dma-buf)."""
    _free_ranges: list[tuple[int, int]] = field(default_factory=list)
    _peer_mrs: dict[str, list[MemoryRegion]] = field(default_factory=dict)
    _next_id: int = 1
    _count: int = 0

    def install_free_hook(self, hook: FreeHook) -> None:
        """Intercept cudaFree (UCM's memory hooks): ``hook`` runs before every free."""
        self.hooks.append(hook)

    def malloc(self, size: int) -> DeviceBuffer:
        """cudaMalloc: VRAM from the GPU's allocator, at the lowest recycled address it fits, else a new one.

        :raises GpuOutOfMemory: no room in VRAM.
        """
        alloc = self.gpu.malloc(f"{self.name}.alloc{self._count}", size)
        self._count += 1
        span = alloc.vram.size
        for i, (start, length) in enumerate(self._free_ranges):
            if length >= span:
                alloc.addr = start
                self._free_ranges[i:i + 1] = [(start + span, length - span)] if length > span else []
                break
        if self.data:
            alloc.data = np.zeros(size, dtype=np.uint8)
        buf = DeviceBuffer(alloc, self._next_id)
        self._next_id += 1
        self.live[alloc.addr] = buf
        return buf

    def free(self, buf: DeviceBuffer) -> FreeOutcome:
        """cudaFree, in the order the module docstring gives."""
        for hook in self.hooks:
            hook(buf.addr, buf.size)
        torn = [mr for mr in self._peer_mrs.pop(buf.alloc.name, []) if mr.registered]
        for mr in torn:
            peermem_reclaim(mr, mr.pd.context.env.now)
        del self.live[buf.addr]
        self.gpu.free(buf.alloc)
        self.freed.append(buf.alloc)
        self._free_ranges.append((buf.addr, buf.alloc.vram.size))
        self._free_ranges.sort()
        return FreeOutcome(len(self.hooks), len(torn), bool(buf.alloc.exports))

    def buffer_at(self, addr: int) -> DeviceBuffer | None:
        """The live allocation containing ``addr`` (``cuPointerGetAttribute``), or None."""
        for buf in self.live.values():
            if buf.addr <= addr < buf.addr + buf.size:
                return buf
        return None

    def buffer_id_at(self, addr: int) -> int | None:
        """``CU_POINTER_ATTRIBUTE_BUFFER_ID`` of ``addr``; None where nothing is allocated."""
        buf = self.buffer_at(addr)
        return None if buf is None else buf.buffer_id

    def track_peer_mr(self, buf: DeviceBuffer, mr: MemoryRegion) -> None:
        """The driver records a peer-memory registration of ``buf`` (``nvidia_p2p_get_pages`` with a free
        callback), to tear it down when ``buf`` is freed."""
        self._peer_mrs.setdefault(buf.alloc.name, []).append(mr)
