"""The dma-buf core: export, fds, attach (static/dynamic), pin/unpin, map/unmap, move_notify, detach, put,
the reservation lock and its fences, with the kernel's argument checks, errnos and locking rules.

Modules: :mod:`~models.dmabuf.resv` (lock and fences), :mod:`~models.dmabuf.core` (config, costs, objects,
``check_dma``), :mod:`~models.dmabuf.ops` (the kernel calls), :mod:`~models.dmabuf.fd` (fd tables),
:mod:`~models.dmabuf.exporters` (reference exporters), :mod:`~models.dmabuf.revoke` (the revocation contract and the
revocable exporters: VFIO, NIC device memory), :mod:`~models.dmabuf.faults` (a fault-injecting exporter),
:mod:`~models.dmabuf.gpu_import` (a GPU as importer).

Examples
--------
>>> from sim.core import Environment
>>> core = DmaBufCore(Environment(), KernelConfig(move_notify_enabled=True))
>>> gpu = MovableExporter(core, 2 << 20)
>>> attach = dma_buf_dynamic_attach(gpu.dmabuf, "mlx5_0", DmaBufAttachOps(move_notify=lambda a: None))
>>> gpu.dmabuf.resv.lock("mlx5_0"); sgt = dma_buf_map_attachment(attach); gpu.dmabuf.resv.unlock("mlx5_0")
>>> fence = gpu.move(Placement.SYSTEM)
>>> check_dma(sgt)
Traceback (most recent call last):
...
sim.core.errors.InvariantViolation: DMA by mlx5_0 through a mapping of dmabuf1: stale mapping: made for placement generation 0 (VRAM), the buffer moved to generation 1 (SYSTEM); the importer must re-map after move_notify
"""

from models.dmabuf.core import (DmaBuf, DmaBufAttachment, DmaBufAttachOps, DmaBufCore, DmaBufCosts, DmaBufOps,
                                DmaDataDirection, KernelConfig, Placement, SgTable, check_dma)
from models.dmabuf.exporters import CopyParams, MovableExporter, StaticExporter
from models.dmabuf.fd import FdTable, PlainFile
from models.dmabuf.ops import (dma_buf_attach, dma_buf_attachment_is_dynamic, dma_buf_detach,
                               dma_buf_dynamic_attach, dma_buf_export, dma_buf_fd, dma_buf_get,
                               dma_buf_is_dynamic, dma_buf_map_attachment, dma_buf_map_attachment_unlocked,
                               dma_buf_move_notify, dma_buf_pin, dma_buf_pin_on_map, dma_buf_put,
                               dma_buf_unmap_attachment, dma_buf_unmap_attachment_unlocked, dma_buf_unpin,
                               get_dma_buf)
from models.dmabuf.resv import (DmaFence, DmaResv, DmaResvUsage, dma_resv_add_fence, dma_resv_assert_held,
                                dma_resv_wait_timeout)

__all__ = [
    "CopyParams", "DmaBuf", "DmaBufAttachment", "DmaBufAttachOps", "DmaBufCore", "DmaBufCosts", "DmaBufOps",
    "DmaDataDirection", "DmaFence", "DmaResv", "DmaResvUsage", "FdTable", "KernelConfig", "MovableExporter",
    "Placement", "PlainFile", "SgTable", "StaticExporter", "check_dma", "dma_buf_attach",
    "dma_buf_attachment_is_dynamic", "dma_buf_detach", "dma_buf_dynamic_attach", "dma_buf_export",
    "dma_buf_fd", "dma_buf_get", "dma_buf_is_dynamic", "dma_buf_map_attachment",
    "dma_buf_map_attachment_unlocked", "dma_buf_move_notify", "dma_buf_pin", "dma_buf_pin_on_map",
    "dma_buf_put", "dma_buf_unmap_attachment", "dma_buf_unmap_attachment_unlocked", "dma_buf_unpin",
    "dma_resv_add_fence", "dma_resv_assert_held", "dma_resv_wait_timeout", "get_dma_buf",
]
