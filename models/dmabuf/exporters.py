"""Two reference exporters: a dynamic one that moves buffers (amdgpu/xe-like) and a static one (NVIDIA-like).

Both keep the buffer's backing storage state (``dmabuf.placement``, ``dmabuf.generation``) up to date,
which is what :func:`~models.dmabuf.core.check_dma` compares mappings against. Neither charges CPU time
for its callbacks beyond what the core charges; only the copy of a move takes time, on the copy engine.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sim.core import ProtocolError, VerbsError

from models.dmabuf.core import (DmaBuf, DmaBufAttachment, DmaBufCore, DmaBufOps, DmaDataDirection,
                                Placement, Segments, SgTable)
from models.dmabuf.ops import dma_buf_export, dma_buf_move_notify
from models.gpu.bar1 import Bar1Aperture, Bar1Exhausted
from models.gpu.copy_engine import CopyEngines
from models.dmabuf.resv import DmaFence, DmaResvUsage, dma_resv_add_fence, dma_resv_wait_timeout
from models.versions import Version

_BASE = {Placement.VRAM: 0x3800_0000_0000, Placement.SYSTEM: 0x1_0000_0000}
"""First DMA address of each placement (VRAM through the GPU BAR, system memory through the IOMMU)."""
_COHERENT_BASE = 0x40_0000_0000_0000
"""First DMA address of GPU memory reached as pages over a coherent link (C2C) rather than through BAR1."""


class MappingType(enum.IntEnum):
    """``NV_DMABUF_EXPORT_MAPPING_TYPE_*`` (kernel-open/common/inc/nv-ioctl.h): how NVIDIA's dma-buf hands the
    memory to importers."""

    DEFAULT = 0
    """BAR1 PFNs mapped for the peer, or on a coherent platform the memory's own pages over C2C."""
    FORCE_PCIE = 1
    """BAR1 PFNs even on a coherent platform, the IOMMU mapping skipped (``skip_iommu``)."""


@dataclass(frozen=True, slots=True)
class CopyParams:
    """Copy-engine timing of a move, from the calibrated H200 copy engines (:mod:`models.gpu.copy_engine`)."""

    engines: CopyEngines = field(default_factory=CopyEngines)

    def copy_ps(self, nbytes: int, src: Placement, dst: Placement) -> int:
        """Time to copy ``nbytes`` from ``src`` to ``dst`` on an idle engine (ps)."""
        if src is dst is Placement.VRAM:
            return self.engines.copy_ps(nbytes, "d2d")
        return self.engines.copy_ps(nbytes, "d2h" if src is Placement.VRAM else "h2d")


class _Exporter:
    """Shared parts: export at construction, contiguous segments per placement, release counting."""

    bar1_bytes = 0
    """Bytes of the GPU's BAR1 the buffer's mapping holds (NVIDIA's exporter maps into BAR1)."""

    def __init__(self, core: DmaBufCore, size: int, ops: DmaBufOps, name: str, placement: Placement) -> None:
        self.core = core
        self.name = name
        self.release_calls = 0
        """How many times the core called ``release`` (must end at exactly 1)."""
        self.on_release: Callable[[], None] | None = None
        """What the exporter's release also undoes (the GPU driver drops the memory handles the export took)."""
        self.dmabuf: DmaBuf = dma_buf_export(core, ops, size, priv=self, exp_name=name)
        self.dmabuf.placement = placement
        self.storage: dict[int, np.ndarray] = {}
        """Data mode: the bytes of each placement generation the buffer has had (empty when off). A stale
        mapping still reaches its generation's array, whatever now lives there."""

    def _map(self, attach: DmaBufAttachment, direction: DmaDataDirection) -> Segments:
        buf = self.dmabuf
        return ((_BASE[buf.placement] + buf.generation * buf.size, buf.size),)

    def _unmap(self, attach: DmaBufAttachment, sgt: SgTable, direction: DmaDataDirection) -> None:
        """Nothing to undo: the segments are views of the placement."""

    def _release(self, dmabuf: DmaBuf) -> None:
        self.release_calls += 1
        if self.on_release is not None:
            self.on_release()


class MovableExporter(_Exporter):
    """A dynamic exporter: pinnable, and movable between placements while unpinned.

    :param core: the dma-buf core to export through.
    :param size: buffer size in bytes.
    :param name: the exporter's context (lock holder, trace track).
    :param placement: initial placement.
    :param copy: copy-engine timing of moves.
    :param attach: the exporter's attach op (none by default).
    """

    def __init__(self, core: DmaBufCore, size: int, *, name: str = "gpu0",
                 placement: Placement = Placement.VRAM, copy: CopyParams = CopyParams(),
                 attach: Callable[[DmaBuf, DmaBufAttachment], None] | None = None) -> None:
        self.pin_count = 0
        """Pins held by all attachments (explicit and on map)."""
        self.copy = copy
        ops = DmaBufOps(map_dma_buf=self._map, unmap_dma_buf=self._unmap, release=self._release,
                        pin=self._pin, unpin=self._unpin, attach=attach)
        super().__init__(core, size, ops, name, placement)

    def _pin(self, attach: DmaBufAttachment) -> None:
        self.pin_count += 1

    def _unpin(self, attach: DmaBufAttachment) -> None:
        """``ttm_bo_unpin``: an unpin of an unpinned buffer WARNs and changes nothing; any other drops a pin,
        whichever attachment took it."""
        if not self.pin_count:
            self.core.warn(attach.dev, f"ttm_bo_unpin: WARN_ON_ONCE: {self.dmabuf.name} is not pinned")
            return
        self.pin_count -= 1

    def move(self, dst: Placement) -> DmaFence:
        """Move the storage to ``dst`` (the same placement relocates it) and return the copy's KERNEL fence.

        Takes the lock, calls :func:`dma_buf_move_notify`, switches placement, publishes the fence, unlocks.
        The copy starts once every fence already on the buffer has signaled. A pinned buffer is refused
        with an error rather than ``False`` so a caller cannot mistake a refusal for a move.

        :raises VerbsError: ``EBUSY`` when the buffer is pinned (nothing is notified).
        :raises DeadlockError: the lock is held.
        :raises ProtocolError: the buffer was released.
        """
        buf, ctx = self.dmabuf, self.name
        if buf.released:
            raise ProtocolError(f"{ctx}.move: use after release: {buf.name} was released")
        with self.core.call(ctx, "MovableExporter.move", dmabuf=buf.name, dst=dst.value):
            buf.resv.lock(ctx)
            try:
                if self.pin_count:
                    raise VerbsError("EBUSY", f"{buf.name} is pinned {self.pin_count} time(s); pinned "
                                     "buffers never move", call=f"{ctx}.move")
                return self._relocate(dst, ctx)
            finally:
                buf.resv.unlock(ctx)

    def _relocate(self, dst: Placement, ctx: str) -> DmaFence:
        """Move the unpinned storage to ``dst`` with the lock held by ``ctx``: notify, switch placement, publish
        the copy's fence; return it."""
        buf = self.dmabuf
        dma_buf_move_notify(buf, caller=ctx)
        src = buf.placement
        start = dma_resv_wait_timeout(buf.resv, DmaResvUsage.BOOKKEEP, now_ps=self.core.now_ps(ctx))
        if buf.generation in self.storage:  # data mode: the copy engine moves the bytes
            self.storage[buf.generation + 1] = self.storage[buf.generation].copy()
        buf.placement, buf.generation = dst, buf.generation + 1
        fence = DmaFence(f"{self.name}.move", buf.generation, start + self.copy.copy_ps(buf.size, src, dst))
        usage = DmaResvUsage.KERNEL if self.core.config.behaviour.waits_kernel_fences else DmaResvUsage.WRITE
        dma_resv_add_fence(buf.resv, fence, usage, holder=ctx)  # before 5.19: the exclusive fence
        self.core.instant(ctx, "BufferMoved", dmabuf=buf.name, src=src.value, dst=dst.value,
                          copy_done_ps=fence.signaled_at_ps)
        return fence


NVIDIA_DMABUF_ATTACH_OP = Version.parse("580")
"""The first open-gpu-kernel-modules branch whose ``nv_dma_buf_ops`` has an attach op: every 580 release read
(580.65.06 to 580.95.05) has it, no 575 one (575.51.02 to 575.64.05) does."""


class StaticExporter(_Exporter):
    """A static exporter (no pin/unpin, never moves): NVIDIA's ``nv_dma_buf`` (kernel-open/nvidia/nv-dmabuf.c, read
    at the 515.43.04, 575.64.05 and 580.65.06 tags and at 595.45.04).

    From the 580 branch ``nv_dma_buf_attach`` refuses (ENOTSUPP) a peer whose PCI topology the driver does not support
    (``nv_grdma_pci_topology_supported``: always supported on coherent platforms; on a chipset without P2P
    support only behind a common PCIe switch), then a *dynamic* importer without peer2peer when the memory has no
    struct pages (not coherent); a static importer is accepted. Before, there is no attach op: ``nv_dma_buf_map``
    returns NULL for a dynamic importer without peer2peer, which the core reports as ENOMEM. Maps are BAR1 PFNs
    (peer MMIO), or the memory's pages on a coherent platform. An export of mapping type FORCE_PCIE replaces the
    topology check by ``nv_pci_is_valid_topology_for_direct_pci`` (ENOTSUPP: "topology not supported for mapping
    type FORCE_PCIE") and maps BAR1 PFNs, without an IOMMU mapping, on a coherent platform too. The first BAR1 map
    maps the buffer into BAR1 and the last unmap gives it back (``phys_refcount``); a map that does not fit returns
    NULL (ENOMEM from the core).

    :param core: the dma-buf core to export through.
    :param size: buffer size in bytes.
    :param name: the exporter's context.
    :param placement: fixed placement.
    :param driver: the driver version (selects the attach op).
    :param coherent: a coherent platform (GPU memory with struct pages, reached over C2C): no peer2peer needed.
    :param pci_topology_supported: the driver's topology verdict for a peer (by device name).
    :param mapping_type: what the export asked for (``cuMemGetHandleForAddressRange``'s flags).
    :param direct_pci_topology: the driver's verdict for a FORCE_PCIE peer (by device name).
    :param bar1: the GPU's BAR1 aperture (:class:`~models.gpu.bar1.Bar1Aperture`); None: not accounted.
    """

    def __init__(self, core: DmaBufCore, size: int, *, name: str = "nvidia0",
                 placement: Placement = Placement.VRAM, driver: str = "580", coherent: bool = False,
                 pci_topology_supported: Callable[[str], bool] = lambda dev: True,
                 mapping_type: MappingType = MappingType.DEFAULT,
                 direct_pci_topology: Callable[[str], bool] = lambda dev: False,
                 bar1: Bar1Aperture | None = None) -> None:
        self.coherent = coherent
        self.pci_topology_supported = pci_topology_supported
        self.mapping_type = mapping_type
        self.direct_pci_topology = direct_pci_topology
        self.skip_iommu = False
        """A FORCE_PCIE attachment was accepted: maps are not IOMMU-mapped for the peer."""
        self.maps_pages = coherent and mapping_type is MappingType.DEFAULT
        """Maps hand out the memory's own pages (over C2C), not BAR1 PFNs, so no BAR1 is held."""
        self.bar1 = None if self.maps_pages else bar1
        self.maps = 0
        """Live mappings of the buffer: BAR1 is held while there is one."""
        has_attach = Version.parse(driver) >= NVIDIA_DMABUF_ATTACH_OP
        ops = DmaBufOps(map_dma_buf=self._map if has_attach else self._map_checking_peer2peer,
                        unmap_dma_buf=self._unmap, release=self._release,
                        attach=self._attach if has_attach else None)
        super().__init__(core, size, ops, name, placement)

    def _needs_peer2peer(self, attach: DmaBufAttachment) -> bool:
        """A dynamic importer without peer2peer cannot take memory without struct pages."""
        return (self.dmabuf.placement is Placement.VRAM and not self.coherent and attach.importer_ops is not None
                and not attach.peer2peer)

    def _attach(self, dmabuf: DmaBuf, attach: DmaBufAttachment) -> None:
        """``nv_dma_buf_attach`` (580 and later)."""
        call = "nv_dma_buf_attach"
        if self.mapping_type is MappingType.FORCE_PCIE:
            if not self.direct_pci_topology(attach.dev):
                raise VerbsError("ENOTSUPP", f"topology not supported for mapping type FORCE_PCIE between "
                                 f"{self.name} and {attach.dev} (nv_pci_is_valid_topology_for_direct_pci: another "
                                 "IOMMU group)", call=call)
            self.skip_iommu = True
        elif not self.coherent and not self.pci_topology_supported(attach.dev):
            raise VerbsError("ENOTSUPP", f"PCI topology not supported for dma-buf between {self.name} and "
                             f"{attach.dev}", call=call)
        if self._needs_peer2peer(attach):
            raise VerbsError("ENOTSUPP", f"{attach.dev} cannot handle MMIO without struct page "
                             "(a dynamic importer without allow_peer2peer)", call=call)

    def _map_checking_peer2peer(self, attach: DmaBufAttachment, direction: DmaDataDirection) -> Segments | None:
        """``nv_dma_buf_map`` before 580: NULL for a dynamic importer without peer2peer."""
        return None if self._needs_peer2peer(attach) else self._map(attach, direction)

    def _map(self, attach: DmaBufAttachment, direction: DmaDataDirection) -> Segments:
        """BAR1 PFNs (peer MMIO), mapped into BAR1 by the first map, or on a coherent platform with the default
        mapping the memory's own pages.

        :raises VerbsError: ``ENOMEM`` when the buffer does not fit in what is left of BAR1.
        """
        if self.maps_pages:
            return ((_COHERENT_BASE + self.dmabuf.generation * self.dmabuf.size, self.dmabuf.size),)
        if self.bar1 is not None and not self.maps:
            try:
                self.bar1_bytes = self.bar1.map(self.dmabuf.name, self.dmabuf.size, call="nv_dma_buf_map")
            except Bar1Exhausted as exc:  # NULL, which the core reports as ENOMEM: raised so the error says why
                raise VerbsError("ENOMEM", f"nv_dma_buf_map: {exc.rule}", call="nv_dma_buf_map") from exc
        self.maps += 1
        return super()._map(attach, direction)

    def _unmap(self, attach: DmaBufAttachment, sgt: SgTable, direction: DmaDataDirection) -> None:
        """The last unmap gives the buffer's BAR1 mapping back."""
        self.maps -= 1
        if self.bar1 is not None and not self.maps:
            self.bar1.unmap(self.dmabuf.name)
            self.bar1_bytes = 0
