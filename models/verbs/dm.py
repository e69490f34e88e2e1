"""NIC device memory (``ibv_alloc_dm``, ``ibv_free_dm``), the process's copies into and out of it
(``ibv_memcpy_to_dm``, ``ibv_memcpy_from_dm``) and its export as a dma-buf (``ibv_dm_export_dmabuf_fd``) for another
device; its registration as an MR is :mod:`models.verbs.dm_mr`.

rdma-core (providers/mlx5/verbs.c at 691953d8d): ``mlx5_alloc_dm`` reaches ``_mlx5dv_alloc_dm``, which refuses a
``comp_mask`` (EINVAL), then ``alloc_dm_memic`` a length above the device's ``max_dm_size`` (EINVAL); a provider
without device memory answers ``EOPNOTSUPP`` (libibverbs' dummy op). The kernel's MEMIC rules
(drivers/infiniband/hw/mlx5/dm.c, ``handle_alloc_dm_memic``, ``mlx5_cmd_alloc_memic``) follow: no MEMIC
capability EOPNOTSUPP, length 0 or an alignment above the device's EINVAL, no free run of pages ENOMEM
(:class:`~models.nic.memic.Memic`). ``ibv_free_dm`` is refused while an MR is registered on the memory
(``uverbs_free_dm``: ``ib_destroy_usecnt``, EBUSY) and revokes every dma-buf exported from it (the kernel removes
the memory's mmap entry and revokes its dma-bufs, then waits for their unmaps). ``ibv_dm_export_dmabuf_fd`` (v62)
asks the kernel's ``UVERBS_OBJECT_DMABUF`` (7.0; before, the object is unknown: ``EPROTONOSUPPORT``, as for every
ioctl object the kernel lacks) for a dma-buf of the memory: a :class:`~models.dmabuf.revoke.UverbsDmabufExporter`,
which only peer-to-peer importers may attach and no pinned one may pin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.dmabuf import dma_buf_fd
from models.dmabuf.revoke import Revocation, UverbsDmabufExporter
from models.ib.mr_checks import MELLANOX_VENDOR_ID
from models.nic.memic import LOG_MAX_MEMIC_ADDR_ALIGNMENT, MLX5_MEMIC_BASE_ALIGN, memic_size
from models.verbs.device import Context
from models.versions import RDMA_CORE_DM_DMABUF, Version
from sim.core import VerbsError


@dataclass(eq=False)
class DeviceMemoryAllocation:
    """``struct ibv_dm``: device memory on the NIC, ``length`` bytes as asked (the kernel's ``dm->length``)."""

    context: Context
    length: int
    offset: int = 0
    """Where its pages start in the NIC's MEMIC (bytes)."""
    exports: list[UverbsDmabufExporter] = field(default_factory=list)
    """The dma-bufs exported from it, oldest first."""
    usecnt: int = 0
    """MRs registered on it (``atomic_inc(&dm->usecnt)`` in the ``DM_MR_REG`` handler)."""
    freed: bool = False
    data: np.ndarray = field(init=False, repr=False)
    """Its bytes (the memory the NIC and the process's copies reach)."""

    def __post_init__(self) -> None:
        self.data = np.zeros(self.length, np.uint8)


def ibv_alloc_dm(context: Context, length: int, log_align_req: int = 0, comp_mask: int = 0) -> DeviceMemoryAllocation:
    """Allocate ``length`` bytes of the NIC's device memory, aligned to ``2**log_align_req`` bytes.

    :raises VerbsError: ``EOPNOTSUPP`` from a provider without device memory (every device but mlx5) or a device
        without MEMIC; ``EINVAL`` for a ``comp_mask``, a length above ``max_dm_size`` (a negative one: a ``size_t``
        that C would wrap to above it) or 0, or an alignment above the device's; ``ENOMEM`` when no run of free
        pages holds it.
    """
    call = "ibv_alloc_dm"
    nic = context.node.nic
    limit = nic.params.max_dm_size
    if nic.params.device.vendor_id != MELLANOX_VENDOR_ID:
        raise VerbsError("EOPNOTSUPP", f"{nic.name} has no device memory (the provider has no alloc_dm)", call=call)
    if comp_mask:
        raise VerbsError("EINVAL", f"comp_mask {comp_mask:#x}: mlx5 knows no field of it (_mlx5dv_alloc_dm)",
                         call=call)
    if not 0 <= length <= limit:  # a size_t: a negative length is above every limit
        raise VerbsError("EINVAL", f"length {length} is outside 0..max_dm_size {limit} (alloc_dm_memic)", call=call)
    if not limit:
        raise VerbsError("EOPNOTSUPP", f"{nic.name} has no MEMIC (handle_alloc_dm_memic)", call=call)
    if not length:
        raise VerbsError("EINVAL", "length 0 (mlx5_cmd_alloc_memic)", call=call)
    if max(0, log_align_req - MLX5_MEMIC_BASE_ALIGN) > LOG_MAX_MEMIC_ADDR_ALIGNMENT:
        raise VerbsError("EINVAL", f"log_align_req {log_align_req} is above the device's "
                         f"{MLX5_MEMIC_BASE_ALIGN + LOG_MAX_MEMIC_ADDR_ALIGNMENT} (mlx5_cmd_alloc_memic)", call=call)
    offset = nic.memic.alloc(memic_size(length))
    if offset is None:
        used = sum(memic_size(dm.length) for dm in nic.device_memory)
        raise VerbsError("ENOMEM", f"no free run of MEMIC pages holds {length} bytes ({used} of {limit} bytes are "
                         "allocated; mlx5_cmd_alloc_memic)", call=call)
    dm = DeviceMemoryAllocation(context, length, offset)
    nic.device_memory.append(dm)
    return dm


def ibv_memcpy_to_dm(dm: DeviceMemoryAllocation, dm_offset: int, data: np.ndarray) -> None:
    """Copy ``data`` (bytes) into ``dm`` at ``dm_offset`` (``mlx5_memcpy_to_dm``: the CPU's 4-byte stores to the
    mapped memory; they take no simulated time).

    :raises VerbsError: as :func:`mlx5_access_dm`.
    """
    mlx5_access_dm(dm, dm_offset, len(data), "ibv_memcpy_to_dm")
    dm.data[dm_offset:dm_offset + len(data)] = data


def ibv_memcpy_from_dm(dm: DeviceMemoryAllocation, dm_offset: int, length: int) -> np.ndarray:
    """A copy of ``length`` bytes of ``dm`` from ``dm_offset`` (``mlx5_memcpy_from_dm``, 4-byte loads).

    :raises VerbsError: as :func:`mlx5_access_dm`.
    """
    mlx5_access_dm(dm, dm_offset, length, "ibv_memcpy_from_dm")
    return dm.data[dm_offset:dm_offset + length].copy()


def mlx5_access_dm(dm: DeviceMemoryAllocation, dm_offset: int, length: int, call: str) -> None:
    """``mlx5_access_dm``'s checks, in its order: the range must lie inside the memory, then offset and length must
    be multiples of 4 bytes (a hardware limit, the copy moves 4-byte words).

    :raises VerbsError: ``EFAULT`` past the end (or negative); ``EINVAL`` unaligned.
    """
    if dm_offset < 0 or length < 0 or dm_offset + length > dm.length:
        raise VerbsError("EFAULT", f"offset {dm_offset} + length {length} is past the {dm.length} bytes of the "
                         "device memory", call=call)
    if length & 3 or dm_offset & 3:
        raise VerbsError("EINVAL", f"offset {dm_offset} and length {length} must be multiples of 4 bytes "
                         "(mlx5_access_dm: device memory is accessed in 4-byte words)", call=call)


def ibv_dm_export_dmabuf_fd(dm: DeviceMemoryAllocation, *, invariants: str = "raise") -> int:
    """Export ``dm`` as a dma-buf and return its fd in the process's fd table.

    :raises VerbsError: ``EOPNOTSUPP`` when rdma-core predates v62 or the provider has no such op;
        ``EPROTONOSUPPORT`` when the kernel predates 7.0; ``EINVAL`` for freed memory; ``EMFILE`` from the fd table.
    """
    call = "ibv_dm_export_dmabuf_fd"
    node = dm.context.node
    if Version.parse(node.rdma_core) < RDMA_CORE_DM_DMABUF:
        raise VerbsError("EOPNOTSUPP", f"rdma-core v{node.rdma_core} has no {call}", call=call)
    if not node.kernel.config.behaviour.has_uverbs_dmabuf_export:
        raise VerbsError("EPROTONOSUPPORT", f"kernel {node.kernel.config.version} has no UVERBS_OBJECT_DMABUF "
                         "(dma-buf export of device memory arrived in 7.0)", call=call)
    if dm.freed:
        raise VerbsError("EINVAL", "the device memory was freed (pgoff_to_mmap_entry finds no entry)", call=call)
    exporter = UverbsDmabufExporter(node.kernel, dm.length, name=node.nic.name, invariants=invariants)
    dm.exports.append(exporter)
    return dma_buf_fd(exporter.dmabuf, node.fds)


def ibv_free_dm(dm: DeviceMemoryAllocation) -> list[Revocation]:
    """Free ``dm``: its pages go back to the MEMIC and every dma-buf exported from it is revoked (invalidated, its
    fences waited for); returns the revocations, whose waits for the importers' unmaps the caller follows with
    :meth:`~models.dmabuf.revoke.RevocableExporter.wait_unmapped` (the kernel blocks in them).

    :raises VerbsError: ``EINVAL`` when already freed; ``EBUSY`` while an MR is registered on it
        (``uverbs_free_dm``: ``ib_destroy_usecnt``).
    """
    call = "ibv_free_dm"
    if dm.freed:
        raise VerbsError("EINVAL", "the device memory was already freed", call=call)
    if dm.usecnt:
        raise VerbsError("EBUSY", f"{dm.usecnt} MR(s) are registered on the device memory (uverbs_free_dm)",
                         call=call)
    dm.freed = True
    nic = dm.context.node.nic
    nic.device_memory.remove(dm)
    nic.memic.free(dm.offset, memic_size(dm.length))
    return [exporter.start_revocation() for exporter in dm.exports
            if not exporter.revoked and not exporter.dmabuf.released]
