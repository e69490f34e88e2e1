"""The GPU driver as a dma-buf importer: another device's memory (a NIC's device memory, a peer's BAR) mapped for the
GPU, as GPU-initiated networking does to let GPU threads reach a NIC's queues and buffers.

Modelled on the dma-buf contract, not on a GPU driver's code (the import path of NVIDIA's UVM was not read): a
dynamic, peer-to-peer importer whose ``invalidate_mappings`` drops the GPU's mapping and unmaps at once, so
``dma_buf_attach_revocable`` holds; the next GPU access re-maps under the reservation lock, and after a revocation
that map fails with the exporter's errno. ``broken=True`` keeps the mapping when told to let go (the importer that
breaks the bounded-time promise).
"""

from __future__ import annotations

from sim.core import SimError

from models.dmabuf.core import DmaBufAttachment, DmaBufAttachOps, DmaDataDirection, SgTable, check_dma
from models.dmabuf.fd import FdTable
from models.dmabuf.ops import (dma_buf_detach, dma_buf_dynamic_attach, dma_buf_get, dma_buf_map_attachment,
                               dma_buf_put, dma_buf_unmap_attachment)


class GpuDmabufImport:
    """One dma-buf imported by a GPU.

    :param dev: the GPU (its context).
    :param fdtable: the process's fds.
    :param fd: the dma-buf's fd.
    :param broken: ignore ``invalidate_mappings`` (keep the mapping).
    :raises VerbsError: the fd's errors (``dma_buf_get``), the exporter's attach errno.
    """

    def __init__(self, dev: str, fdtable: FdTable, fd: int, *, broken: bool = False) -> None:
        self.dev = dev
        self.broken = broken
        self.sgt: SgTable | None = None
        self.invalidations = 0
        self.dmabuf = dma_buf_get(fdtable, fd, caller=dev)
        try:
            self.attach = dma_buf_dynamic_attach(self.dmabuf, dev, DmaBufAttachOps(self._invalidate, True), self)
        except SimError:
            dma_buf_put(self.dmabuf, caller=dev)
            raise

    def _invalidate(self, attach: DmaBufAttachment) -> None:
        """Drop the GPU's page-table entries for the buffer and unmap (in the exporter's task, lock held)."""
        self.invalidations += 1
        if self.broken or self.sgt is None:
            return
        dma_buf_unmap_attachment(attach, self.sgt)
        self.sgt = None

    def access(self) -> SgTable:
        """A GPU access to the buffer: map it first if it is not mapped (under the lock); return the mapping used.

        :raises VerbsError: the exporter's map errno (``ENODEV`` once revoked).
        :raises InvariantViolation: the access goes through a stale mapping (``broken``).
        """
        core = self.dmabuf.core
        if self.sgt is None:
            self.dmabuf.resv.lock(self.dev)
            try:
                self.sgt = dma_buf_map_attachment(self.attach, DmaDataDirection.BIDIRECTIONAL, caller=self.dev)
            finally:
                self.dmabuf.resv.unlock(self.dev)
        check_dma(self.sgt, core.now_ps(self.dev))
        return self.sgt

    def release(self) -> None:
        """Unmap (if mapped), detach and drop the reference."""
        if self.sgt is not None:
            self.dmabuf.resv.lock(self.dev)
            try:
                dma_buf_unmap_attachment(self.attach, self.sgt)
            finally:
                self.dmabuf.resv.unlock(self.dev)
            self.sgt = None
        dma_buf_detach(self.dmabuf, self.attach, caller=self.dev)
        dma_buf_put(self.dmabuf, caller=self.dev)
