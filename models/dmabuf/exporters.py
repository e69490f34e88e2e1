"""Two reference exporters: a dynamic one that moves buffers (amdgpu/xe-like) and a static one (NVIDIA-like).

Both keep the buffer's backing storage state (``dmabuf.placement``, ``dmabuf.generation``) up to date,
which is what :func:`~models.dmabuf.core.check_dma` compares mappings against. Neither charges CPU time
for its callbacks beyond what the core charges; only the copy of a move takes time, on the copy engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.core import ProtocolError, VerbsError

from models.dmabuf.core import (DmaBuf, DmaBufAttachment, DmaBufCore, DmaBufOps, DmaDataDirection,
                                Placement, Segments, SgTable)
from models.dmabuf.ops import dma_buf_export, dma_buf_move_notify
from models.gpu.copy_engine import CopyEngines
from models.dmabuf.resv import DmaFence, DmaResvUsage, dma_resv_add_fence, dma_resv_wait_timeout

_BASE = {Placement.VRAM: 0x3800_0000_0000, Placement.SYSTEM: 0x1_0000_0000}
"""First DMA address of each placement (VRAM through the GPU BAR, system memory through the IOMMU)."""


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

    def __init__(self, core: DmaBufCore, size: int, ops: DmaBufOps, name: str, placement: Placement) -> None:
        self.core = core
        self.name = name
        self.release_calls = 0
        """How many times the core called ``release`` (must end at exactly 1)."""
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


class MovableExporter(_Exporter):
    """A dynamic exporter: pinnable, and movable between placements while unpinned.

    :param core: the dma-buf core to export through.
    :param size: buffer size in bytes.
    :param name: the exporter's context (lock holder, trace track).
    :param placement: initial placement.
    :param copy: copy-engine timing of moves.
    """

    def __init__(self, core: DmaBufCore, size: int, *, name: str = "gpu0",
                 placement: Placement = Placement.VRAM, copy: CopyParams = CopyParams()) -> None:
        self.pin_count = 0
        """Pins held by all attachments (explicit and on map)."""
        self.copy = copy
        ops = DmaBufOps(map_dma_buf=self._map, unmap_dma_buf=self._unmap, release=self._release,
                        pin=self._pin, unpin=self._unpin)
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
                dma_buf_move_notify(buf)
                src = buf.placement
                start = dma_resv_wait_timeout(buf.resv, DmaResvUsage.BOOKKEEP, now_ps=self.core.now_ps(ctx))
                if buf.generation in self.storage:  # data mode: the copy engine moves the bytes
                    self.storage[buf.generation + 1] = self.storage[buf.generation].copy()
                buf.placement, buf.generation = dst, buf.generation + 1
                fence = DmaFence(f"{ctx}.move", buf.generation, start + self.copy.copy_ps(buf.size, src, dst))
                usage = DmaResvUsage.KERNEL if self.core.config.behaviour.waits_kernel_fences else DmaResvUsage.WRITE
                dma_resv_add_fence(buf.resv, fence, usage, holder=ctx)  # before 5.19: the exclusive fence
                self.core.instant(ctx, "BufferMoved", dmabuf=buf.name, src=src.value, dst=dst.value,
                                            copy_done_ps=fence.signaled_at_ps)
            finally:
                buf.resv.unlock(ctx)
        return fence


class StaticExporter(_Exporter):
    """A static exporter (no pin/unpin, never moves), like NVIDIA's ``nv_dma_buf``.

    Its attach refuses an importer that cannot reach peer memory while the buffer is in VRAM.

    :param core: the dma-buf core to export through.
    :param size: buffer size in bytes.
    :param name: the exporter's context.
    :param placement: fixed placement.
    """

    def __init__(self, core: DmaBufCore, size: int, *, name: str = "nvidia0",
                 placement: Placement = Placement.VRAM) -> None:
        ops = DmaBufOps(map_dma_buf=self._map, unmap_dma_buf=self._unmap, release=self._release,
                        attach=self._attach)
        super().__init__(core, size, ops, name, placement)

    def _attach(self, dmabuf: DmaBuf, attach: DmaBufAttachment) -> None:
        if dmabuf.placement is Placement.VRAM and not attach.peer2peer:
            raise VerbsError("ENOTSUPP", f"{attach.dev} cannot handle MMIO without struct page "
                             "(allow_peer2peer unset)", call="nv_dma_buf_attach")
