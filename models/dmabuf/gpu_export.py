"""GPU buffers and their dma-buf exporters as vendor profiles, and GPU memory pressure.

* ``nvidia``: a static exporter (``nv_dma_buf``): never moves memory; export rules measured on an H200
  (models/data/h200_dmabuf_export.json): start and size 4 KiB-aligned, nonzero, inside one allocation, device
  memory only, about 18 us per export; the mapping-type flag by platform (:meth:`Gpu.export_mapping_type`).
  Memory pressure cannot evict anything: the allocation fails.
* ``vfio``: the GPU bound to vfio-pci, a range of its BAR exported with ``VFIO_DEVICE_FEATURE_DMA_BUF``
  (:class:`~models.dmabuf.revoke.VfioExporter`): never moves, revocable (:meth:`Gpu.revoke`).
* ``amd``: a dynamic exporter (amdgpu/TTM-like): under memory pressure it evicts unpinned buffers from VRAM
  to system memory, least recently used first: lock, ``move_notify`` to every dynamic attachment, copy at
  the calibrated bandwidth, publish a fence. Pinned buffers cannot move: the allocation that needed the room
  evicts something else or fails. Where a pin lands follows ``amdgpu_dma_buf_pin`` (:func:`amdgpu_pin_domain`):
  VRAM only from 6.15, with ``CONFIG_DMABUF_MOVE_NOTIFY`` on and every attachment peer-to-peer; otherwise GTT,
  so the pin first migrates the buffer to system memory and gives its VRAM back.

VRAM is :class:`models.gpu.DeviceMemory` (2 MiB granularity, fragmentation, eviction hooks); a pin into VRAM
(``dma_buf_pin``, pin-on-map) or by a peer-memory registration pins the allocation there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sim.core import SimError, VerbsError

from models.dmabuf import (CopyParams, DmaBuf, DmaBufAttachment, DmaBufCore, DmaDataDirection, MovableExporter,
                           Placement, StaticExporter, dma_buf_fd, get_dma_buf)
from models.dmabuf.exporters import MappingType
from models.dmabuf.core import Segments
from models.dmabuf.revoke import VfioExporter
from models.gpu import COPY_PRESETS, Allocation, Bar1Aperture, CopyEngines, DeviceMemory, GpuOutOfMemory, GpuParams
from models.gpu.alloc_cost import ALLOC_PRESETS, AllocCosts
from models.gpu.managed import ManagedMemory
from models.gpu.scrub import SCRUB_PRESETS, ScrubQueue
from models.versions import AMDGPU_VRAM_PIN, NVIDIA_DMABUF_EXPORT, NVIDIA_PCIE_MAPPING, Version

EXPORT_PS = 15_400_000
"""The driver's part of an export; with the dma-buf core's export (2 us) and fd install (0.2 us) the call takes
17.6 us, regardless of size: cuMemGetHandleForAddressRange(DMA_BUF_FD) measured 17-20 us
(h200_dmabuf_export.json)."""
EXPORT_CALL = {"nvidia": "cuMemGetHandleForAddressRange", "amd": "hipMemGetHandleForAddressRange",
               "vfio": "VFIO_DEVICE_FEATURE_DMA_BUF"}
"""The user-space call that exports device memory as a dma-buf fd, per vendor."""
ALLOC_CALLS = {"nvidia": ("cudaMalloc", "cudaFree"), "amd": ("hipMalloc", "hipFree")}
"""The user-space calls that allocate and free device memory, per vendor (their cost: ``Gpu.alloc_costs``)."""
CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE = 0x1
"""``cuMemGetHandleForAddressRange`` flag: export for peers that reach the memory through BAR1 over PCIe
(``NV_DMABUF_EXPORT_MAPPING_TYPE_FORCE_PCIE``) rather than as the memory's pages over a coherent link."""
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
    """A cudaMalloc/hipMalloc allocation: a device virtual address range backed by a VRAM allocation."""

    name: str
    addr: int
    size: int
    vram: Allocation
    memory: DeviceMemory
    exporter: MovableExporter | StaticExporter | VfioExporter | None = None
    """The latest export. amdgpu exports a buffer object once (later exports share its dma-buf); NVIDIA
    makes a new static dma-buf per export, which never moves."""
    pinned_by: set[str] = field(default_factory=set)
    """Who pins it in VRAM (peer-memory registrations, dma-buf pins)."""
    data: np.ndarray | None = None
    """Data mode: the allocation's bytes (None when off)."""
    exports: int = 0
    """Exported dma-bufs not yet released: each holds the memory (NVIDIA duplicates its handles, amdgpu's
    dma-buf holds a reference on the buffer object)."""
    freed: bool = False
    """cudaFree/hipFree was called: the VRAM goes back once no export holds it."""
    bar1: Bar1Aperture | None = None
    """The GPU's BAR1, which a peer-memory registration of the allocation maps into; None: peers reach the memory
    without it (a coherent platform, or a GPU whose aperture the model does not track)."""
    vendor: str = "nvidia"
    """The driver profile of the GPU the memory is on (``nvidia``, ``amd``, ``vfio``)."""

    def pin(self, owner: str) -> None:
        """``owner`` pins the allocation in VRAM (it can no longer be evicted)."""
        self.memory.pin(self.vram)
        self.pinned_by.add(owner)

    def unpin(self, owner: str) -> None:
        """``owner`` drops its pin."""
        if owner in self.pinned_by:
            self.pinned_by.discard(owner)
            self.memory.unpin(self.vram)


@dataclass(frozen=True, slots=True)
class PinPlacement:
    """Where ``amdgpu_dma_buf_pin`` pins a buffer and the setting that decided it."""

    placement: Placement
    reason: str


def amdgpu_pin_domain(dmabuf: DmaBuf, prefers_vram: bool) -> PinPlacement:
    """``amdgpu_dma_buf_pin``'s domain: before 6.15 always GTT (``amdgpu_bo_pin(bo, AMDGPU_GEM_DOMAIN_GTT)``);
    from 6.15 (f5e7fabd1f5c) VRAM when the buffer prefers it and every attachment can do peer-to-peer, except
    while ``CONFIG_DMABUF_MOVE_NOTIFY`` is off (its fix, "Disable VRAM pinning if move notifiers are
    disabled"), which keeps GTT."""
    config = dmabuf.core.config
    if not config.behaviour.amdgpu_pins_into_vram:
        return PinPlacement(Placement.SYSTEM, f"kernel {config.version} predates {AMDGPU_VRAM_PIN} "
                            "(f5e7fabd1f5c): amdgpu_dma_buf_pin pins into GTT")
    if not config.move_notify_enabled:
        return PinPlacement(Placement.SYSTEM, "CONFIG_DMABUF_MOVE_NOTIFY is off: amdgpu_dma_buf_pin pins into GTT")
    refusing = [a.dev for a in dmabuf.attachments if not a.peer2peer]
    if refusing:
        return PinPlacement(Placement.SYSTEM, f"{', '.join(refusing)} cannot do peer-to-peer: "
                            "amdgpu_dma_buf_pin pins into GTT")
    if not prefers_vram:
        return PinPlacement(Placement.SYSTEM, "the buffer does not prefer VRAM: amdgpu_dma_buf_pin pins into GTT")
    return PinPlacement(Placement.VRAM, f"kernel {config.version} with CONFIG_DMABUF_MOVE_NOTIFY on and every "
                        "attachment peer-to-peer: amdgpu_dma_buf_pin pins into VRAM")


class AmdgpuExporter(MovableExporter):
    """A movable exporter whose pins pin the buffer where :func:`amdgpu_pin_domain` says: in VRAM memory pressure
    cannot evict it; in GTT its VRAM was given back when the pin migrated it. Its attach, pin and map follow
    drivers/gpu/drm/amd/amdgpu/amdgpu_dma_buf.c (before and after f5e7fabd1f5c).

    :param peer_distance: ``pci_p2pdma_distance`` from the GPU to an importing device (by name), negative when
        peer-to-peer DMA between them is not supported.
    """

    def __init__(self, core: DmaBufCore, alloc: GpuAllocation, size: int, *,
                 peer_distance: Callable[[str], int] = lambda dev: 0, **kwargs) -> None:
        self.alloc = alloc
        self.peer_distance = peer_distance
        self.prefers_vram = True
        """``preferred_domains`` includes VRAM (hipMalloc's device memory)."""
        self.pin_placement: PinPlacement | None = None
        """Where the first pin put the buffer and why (None while unpinned)."""
        self.pin_migrated = False
        """That pin moved the buffer from VRAM to system memory."""
        super().__init__(core, size, attach=self._attach, **kwargs)

    def _attach(self, dmabuf: DmaBuf, attach: DmaBufAttachment) -> None:
        """``amdgpu_dma_buf_attach``: no peer-to-peer for an importer the buffer is not reachable from over XGMI
        (never, for the model's importers: NICs) when ``pci_p2pdma_distance`` finds no path."""
        if self.peer_distance(attach.dev) < 0:
            attach.peer2peer = False

    def _map(self, attach: DmaBufAttachment, direction: DmaDataDirection) -> Segments:
        """``amdgpu_dma_buf_map``: an unpinned buffer is validated into GTT, or GTT or VRAM when it prefers VRAM
        and the attachment is peer-to-peer, so a VRAM buffer mapped for a non-peer-to-peer attachment moves to
        system memory first (notifying every dynamic importer) under the importer's lock. A pinned buffer stays
        where its pin put it."""
        if (not self.pin_count and self.dmabuf.placement is Placement.VRAM
                and not (self.prefers_vram and attach.peer2peer)):
            self._relocate(Placement.SYSTEM, self.core.context(None, attach.dev))
        return super()._map(attach, direction)

    def _pin(self, attach: DmaBufAttachment) -> None:
        """``amdgpu_dma_buf_pin`` (the caller holds the lock): ``amdgpu_bo_pin`` into the domain of
        :func:`amdgpu_pin_domain`; the first pin migrates a VRAM buffer that must go to GTT, a later pin whose
        domain excludes where the buffer is pinned fails as ``amdgpu_bo_pin`` does.

        :raises VerbsError: ``EINVAL`` for a pin into another domain than the buffer's pinned placement.
        """
        buf, chosen = self.dmabuf, amdgpu_pin_domain(self.dmabuf, self.prefers_vram)
        if self.pin_count and chosen.placement is Placement.SYSTEM and buf.placement is Placement.VRAM:
            raise VerbsError("EINVAL", f"{buf.name} is pinned in VRAM and this pin needs GTT ({chosen.reason})",
                             call="amdgpu_bo_pin")
        if not self.pin_count:
            ctx = self.core.context(None, attach.dev)
            self.pin_placement = chosen
            self.pin_migrated = chosen.placement is Placement.SYSTEM and buf.placement is Placement.VRAM
            if self.pin_migrated:
                self._relocate(Placement.SYSTEM, ctx)
                self.alloc.memory.vacate(self.alloc.vram)
            self.core.instant(ctx, "BufferPinnedIn", dmabuf=buf.name, placement=buf.placement.value,
                              migrated=self.pin_migrated, reason=chosen.reason)
        super()._pin(attach)
        if buf.placement is Placement.VRAM:
            self.alloc.pin(f"{attach.dev}:dma_buf_pin{self.pin_count}")

    def _unpin(self, attach: DmaBufAttachment) -> None:
        self.alloc.unpin(f"{attach.dev}:dma_buf_pin{self.pin_count}")
        super()._unpin(attach)
        if not self.pin_count:
            self.pin_placement = None


STATIC_OUTCOME = ("never moves: its exporter is static (nv_dma_buf has no pin op and never moves memory), so "
                  "move_notify never comes and even a dynamic MR holds its VRAM like a pinned one")
"""The registration outcome of a buffer a static exporter exported."""


def pin_outcome(alloc: GpuAllocation) -> str | None:
    """Where an amdgpu pin holds ``alloc``'s exported buffer now, whether it migrated it, and why; that it never
    moves when a static exporter exported it; None when neither holds it."""
    exporter = alloc.exporter
    if isinstance(exporter, StaticExporter):
        return STATIC_OUTCOME
    if not isinstance(exporter, AmdgpuExporter) or exporter.pin_placement is None:
        return None
    where = "VRAM" if exporter.dmabuf.placement is Placement.VRAM else "system memory (GTT)"
    moved = ", migrated from VRAM by the pin (its VRAM is free again)" if exporter.pin_migrated else ""
    return f"pinned in {where}{moved}: {exporter.pin_placement.reason}"


class Gpu:
    """One GPU: its VRAM allocator, copy engines, allocations and dma-buf exporter profile.

    :param name: '<node>.<gpu>', also the exporter's context.
    :param vendor: ``nvidia`` (static exporter) or ``amd`` (dynamic exporter).
    :param params: the GPU preset (capacity, granularity, copy calibration).
    :param core: the node's dma-buf core.
    :param capacity: usable VRAM override (bytes).
    :param driver: driver version (NVIDIA: dma-buf export needs 515+; the attach op arrives with 580).
    :param coherent: NVIDIA: a coherent platform (GPU memory with struct pages, reached over C2C).
    :param chipset_p2p: NVIDIA: the driver knows the chipset does PCIe peer-to-peer (else it needs a common switch).
    :param topology_check_override: NVIDIA: ``NVreg_GrdmaPciTopoCheckOverride`` (``default``, ``allow``, ``deny``).
    """

    def __init__(self, name: str, vendor: str, params: GpuParams, core: DmaBufCore, *, capacity: int | None = None,
                 driver: str = "580", coherent: bool = False, chipset_p2p: bool = True,
                 topology_check_override: str = "default") -> None:
        self.name, self.vendor, self.core, self.driver = name, vendor, core, driver
        self.coherent, self.chipset_p2p = coherent, chipset_p2p
        self.memory = DeviceMemory(capacity or params.hbm_bytes, granularity=params.alloc_granularity, name=name,
                                   trace=core.env.trace)
        self.copy = CopyParams(CopyEngines(COPY_PRESETS[params.copy_preset]))
        self.alloc_costs = AllocCosts(ALLOC_PRESETS[params.alloc_preset])
        """What the competing job's allocations and frees cost its thread (the calibrated H200 curve)."""
        self.scrub = ScrubQueue(SCRUB_PRESETS[params.scrub_preset]) if params.scrub_preset else None
        """Freed VRAM the driver is still clearing (None: not modeled for this GPU)."""
        self.memory.on_release = None if self.scrub is None else lambda n: self.scrub.freed(self._now_ps(), n)
        self.bar1 = Bar1Aperture(params.bar1_bytes)
        """BAR1 (:mod:`models.gpu.bar1`): NVIDIA's peer-memory pages and dma-buf maps hold it; on a coherent
        platform peers reach the memory's own pages instead."""
        self.allocations: dict[str, GpuAllocation] = {}
        self.pressure_allocations: list[tuple[Allocation, ...]] = []
        """The competing job's allocations, oldest first."""
        self.evictions = self.failed_allocations = 0
        self._next_addr = 0x7000_0000_0000
        self.invariants = "raise"
        """What a VFIO export does when an importer breaks the revocation contract: ``raise`` or ``record``."""
        self.peer_distance: Callable[[str], int] = lambda dev: 0
        """``pci_p2pdma_distance`` from this GPU to a device (by name): the node's topology sets it; 0 (a common
        switch) until then."""
        self.common_switch: Callable[[str], bool] = lambda dev: True
        """Whether this GPU and a device (by name) share a PCIe switch: the node's topology sets it; True until
        then."""
        self.topology_check_override = topology_check_override
        self.vertex = "gpu0"
        """This GPU's vertex in its node's PCIe topology (``gpu<i>`` on a server with several)."""

    @property
    def capacity(self) -> int:
        """Usable VRAM (bytes)."""
        return self.memory.capacity

    def pci_topology_supported(self, dev: str) -> bool:
        """``nv_grdma_pci_topology_supported`` past its coherent-platform check (which the exporter makes): any
        peer on a chipset the driver knows to do peer-to-peer, else only one under a common PCIe switch."""
        return self.chipset_p2p or self.common_switch(dev)

    def malloc(self, name: str, size: int) -> GpuAllocation:
        """Allocate ``size`` bytes of VRAM.

        :raises GpuOutOfMemory: no contiguous run is free.
        """
        vram = self.memory.malloc(size, tag=name)
        alloc = GpuAllocation(name, self._next_addr, size, vram, self.memory,
                              bar1=self.bar1 if self.vendor == "nvidia" and not self.coherent else None,
                              vendor=self.vendor)
        self._next_addr += vram.size + self.memory.granularity
        self.allocations[name] = alloc
        return alloc

    def export(self, alloc: GpuAllocation, fdtable, offset: int = 0, size: int | None = None,
               flags: int = 0, holders: tuple[GpuAllocation, ...] = ()) -> int:
        """Export ``[alloc.addr + offset, +size)`` as a dma-buf fd in ``fdtable``. ``holders``: the allocations
        whose VRAM the dma-buf keeps until its release (``alloc`` itself when empty; the VMM allocations mapped
        under a virtual address range, :mod:`models.libs.cuda_vmm`).

        :raises CudaError: the export rules (see the module docstring).
        """
        call = EXPORT_CALL[self.vendor]
        size = alloc.size - offset if size is None else size
        if self.vendor == "nvidia" and Version.parse(self.driver) < NVIDIA_DMABUF_EXPORT:
            raise CudaError("CUDA_ERROR_NOT_SUPPORTED", f"driver {self.driver} cannot export dma-bufs (needs the "
                            "open kernel modules 515+ and CUDA 11.7+)", call=call)
        if alloc.freed:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", f"{alloc.name} was freed: no allocation at that address",
                            call=call)
        if size == 0 or size % GPU_PAGE or offset % GPU_PAGE:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", "start and size must be nonzero multiples of 4 KiB", call=call)
        if offset + size > alloc.size:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", "the range runs past the allocation", call=call)
        mapping = self.export_mapping_type(flags, call)
        shown = {"mapping": mapping.name} if mapping else {}
        with self.core.call(self.name, call, allocation=alloc.name, bytes=size, **shown):
            if isinstance(alloc.exporter, AmdgpuExporter) and not alloc.exporter.dmabuf.released:
                get_dma_buf(alloc.exporter.dmabuf)  # the buffer object's dma-buf is exported again
                self.core.spend(self.name, EXPORT_PS)
                return dma_buf_fd(alloc.exporter.dmabuf, fdtable)
            if self.vendor == "nvidia":
                alloc.exporter = StaticExporter(self.core, size, name=self.name, placement=Placement.VRAM,
                                                driver=self.driver, coherent=self.coherent,
                                                pci_topology_supported=self.pci_topology_supported,
                                                mapping_type=mapping,
                                                direct_pci_topology=self.valid_topology_for_direct_pci,
                                                bar1=self.bar1)
            elif self.vendor == "vfio":
                alloc.exporter = VfioExporter(self.core, size, name=self.name, invariants=self.invariants)
            else:
                alloc.exporter = AmdgpuExporter(self.core, alloc, size, name=self.name, placement=Placement.VRAM,
                                                copy=self.copy, peer_distance=self.peer_distance)
                self.memory.register_evictable(alloc.vram, lambda _vram: self._evict(alloc))
            held = holders or (alloc,)
            for holder in held:
                holder.exports += 1
            alloc.exporter.on_release = lambda: self._exports_released(held)
            if alloc.data is not None:
                alloc.exporter.storage[0] = alloc.data[offset:offset + size]
            self.core.spend(self.name, EXPORT_PS)
            return dma_buf_fd(alloc.exporter.dmabuf, fdtable)

    def export_mapping_type(self, flags: int, call: str) -> MappingType:
        """The mapping type ``cuMemGetHandleForAddressRange`` asks ``nv_dma_buf_export`` for, from its flags.
        Measured on the H200 (x86, not coherent, driver 580.159.04; models/data/h200_dmabuf_export_rules.json,
        the same for cudaMalloc and every cuMemCreate variant): a flag other than
        ``CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`` is CUDA_ERROR_INVALID_VALUE, that flag
        CUDA_ERROR_NOT_SUPPORTED. The refusal is the driver's coherent-only rule for BAR1 mappings of dma-bufs
        (``nv_pci_is_valid_topology_for_direct_pci`` returns false unless the platform is coherent,
        kernel-open/nvidia/nv-pci.c); the flag arrives with CUDA 12.8 (the 570 branch: perftest refuses
        ``--use_cuda_pcie_mapping`` on an older driver), before which it is an unknown flag. Other vendors take
        no flags.

        :raises CudaError: the rules above.
        """
        if flags & ~CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE or (flags and self.vendor != "nvidia"):
            raise CudaError("CUDA_ERROR_INVALID_VALUE", f"flags {flags:#x}: not a CUmemRangeFlags value", call=call)
        if not flags:
            return MappingType.DEFAULT
        if Version.parse(self.driver) < NVIDIA_PCIE_MAPPING:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", f"driver {self.driver} predates "
                            "CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (CUDA 12.8, the 570 branch)", call=call)
        if not self.coherent:
            raise CudaError("CUDA_ERROR_NOT_SUPPORTED", "CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE: BAR1 mappings "
                            "of dma-bufs are for coherent platforms only (this one is not)", call=call)
        return MappingType.FORCE_PCIE

    def valid_topology_for_direct_pci(self, dev: str) -> bool:
        """``nv_pci_is_valid_topology_for_direct_pci`` (kernel-open/nvidia/nv-pci.c): on a coherent platform a peer
        may reach GPU memory through BAR1 when both sit in one IOMMU group, or whatever the topology when
        ``NVreg_GrdmaPciTopoCheckOverride`` allows access (deny refuses every peer). The model puts two devices in
        one IOMMU group when they share a PCIe switch (a switch whose downstream ports do not isolate them with
        ACS)."""
        if not self.coherent or self.topology_check_override == "deny":
            return False
        return self.topology_check_override == "allow" or self.common_switch(dev)

    def free(self, alloc: GpuAllocation) -> None:
        """cudaFree/hipFree of ``alloc``. An exported dma-buf keeps the memory: NVIDIA's export duplicates the
        allocation's memory handles and drops them only when the dma-buf is released (``nv_dma_buf_create`` /
        ``nv_dma_buf_release``, kernel-open/nvidia/nv-dmabuf.c at 595.45.04), so freeing the allocation neither
        invalidates nor moves an exported buffer; the VRAM goes back with the last release."""
        del self.allocations[alloc.name]
        alloc.freed = True
        if not alloc.exports:
            self.memory.free(alloc.vram)

    def _exports_released(self, held: tuple[GpuAllocation, ...]) -> None:
        """An exported dma-buf holding ``held`` was released: give back the VRAM of each freed allocation it was
        the last holder of."""
        for alloc in held:
            alloc.exports -= 1
            if alloc.freed and not alloc.exports:
                self.memory.free(alloc.vram)

    def _evict(self, alloc: GpuAllocation) -> int:
        """The allocator's eviction callback: move the buffer to system memory; return the copy's time (ps)."""
        exporter = alloc.exporter
        vacated = exporter.storage.get(exporter.dmabuf.generation)
        fence = exporter.move(Placement.SYSTEM)
        if vacated is not None:
            vacated[:] = NEW_OWNER_BYTE  # the memory's new owner writes its own data there
        self.evictions += 1
        return max(0, fence.signaled_at_ps - self.core.env.now)

    def _now_ps(self) -> int:
        """Now for the thread that calls: the context of the GPU call running (a competing job's, ahead of the
        clock by the calls it made), else the clock (a script's call)."""
        return self.core.now_ps(self.core.context(None, ""))

    def clearing_ps(self, nbytes: int, taken: int = 0) -> tuple[int, int]:
        """An allocation of ``nbytes`` asked now: its wait for freed VRAM to be cleared and its taking back of the VRAM
        cleared (ps each; :mod:`models.gpu.scrub`); ``taken``: the bytes it already holds (free before it)."""
        free = self.memory.capacity - self.memory.used + taken
        return (0, 0) if self.scrub is None else self.scrub.take(self._now_ps(), nbytes, free)

    def pressure(self, size: int) -> bool:
        """Another job allocates ``size`` bytes: evict movable buffers until it fits, then pay its allocation call
        (cudaMalloc/hipMalloc, after the room is made); False if it cannot fit."""
        with self.core.call(self.name, "gpu_memory_pressure", bytes=size):
            try:
                result = self.memory.apply_pressure(size)
            except GpuOutOfMemory:
                self.failed_allocations += 1
                self.core.instant(self.name, "AllocationFailed", bytes=size,
                                  free=self.memory.capacity - self.memory.used)
                return False
            with self.core.call(self.name, ALLOC_CALLS[self.vendor][0], bytes=size):
                wait, reclaim = self.clearing_ps(size, taken=sum(vram.size for vram in result.allocations))
                if wait:
                    with self.core.call(self.name, "wait for cleared memory", bytes=size):
                        self.core.spend(self.name, wait)
                self.core.spend(self.name, reclaim + self.alloc_costs.allocate_ps(size))
            self.pressure_allocations.append(result.allocations)
            self.core.instant(self.name, "MemoryAllocated", bytes=size, free=self.memory.capacity - self.memory.used)
            return True

    def managed(self, name: str, size: int) -> tuple[ManagedMemory, list[Allocation]]:
        """A cudaMallocManaged range of ``size`` bytes on this GPU. Its faults take VRAM from the allocator as
        they need it, in VA blocks, making room as any allocation does: the ``amd`` profile evicts movable
        (unpinned dma-buf) buffers, while on ``nvidia`` only free memory is taken and the range then evicts
        its own pages (UVM oversubscription). Returns the range and the list of its VRAM allocations, which
        grows as it faults (free them with :meth:`free_managed`)."""
        taken: list[Allocation] = []

        def grow(nbytes: int) -> tuple[int, int]:
            granted = spent = 0
            block = mm.params.va_block
            while granted < nbytes:
                try:
                    if self.memory.largest_free() >= block:
                        cost = 0
                    else:  # the faults need another owner's memory
                        with self.core.call(self.name, "managed_memory_pressure", range=name, bytes=block):
                            _, cost = self.memory.make_room(block, call=f"{self.name}: managed-memory fault")
                except GpuOutOfMemory:
                    break
                taken.append(self.memory.malloc(block, pinned=True, tag=name))
                granted, spent = granted + block, spent + cost
            if granted:
                self.core.instant(self.name, "ManagedMemoryGrew", range=name, bytes=granted,
                                  free=self.memory.capacity - self.memory.used)
            return granted, spent

        mm = ManagedMemory(size, gpu_capacity=0, grow=grow, name=f"{self.name}.{name}", trace=self.core.env.trace)
        return mm, taken

    def free_managed(self, taken: list[Allocation]) -> None:
        """cudaFree of a managed range: its VRAM goes back to the allocator."""
        for vram in taken:
            self.memory.free(vram)
        taken.clear()

    def release_pressure_after(self, hold_ps: int):
        """A process that frees the competing job's oldest allocation ``hold_ps`` from now (``gpu-memory-pressure``'s
        ``hold``)."""
        yield self.core.env.timeout(hold_ps)
        self.release_pressure()

    def release_pressure(self) -> None:
        """The competing job frees its oldest allocation (cudaFree/hipFree, which takes the calibrated time)."""
        if self.pressure_allocations:
            freed = self.pressure_allocations.pop(0)
            size = sum(vram.requested for vram in freed)
            with self.core.call(self.name, ALLOC_CALLS[self.vendor][1], bytes=size):
                self.core.spend(self.name, self.alloc_costs.free_ps(size))
                for vram in freed:
                    self.memory.free(vram)

    def swap_exported(self) -> tuple[int, int]:
        """The driver moves every movable exported buffer still exported (amdgpu) to the other placement, VRAM
        to system memory and back. Returns (moves, refusals: the buffer is pinned)."""
        moved = refused = 0
        for alloc in self.allocations.values():
            exporter = alloc.exporter
            if not isinstance(exporter, AmdgpuExporter) or exporter.dmabuf.released:
                continue
            target = Placement.SYSTEM if exporter.dmabuf.placement is Placement.VRAM else Placement.VRAM
            try:
                exporter.move(target)
                moved += 1
            except VerbsError:
                refused += 1
        return moved, refused
