"""NIC device memory (``ibv_alloc_dm``) and its export as a dma-buf (``ibv_dm_export_dmabuf_fd``) for another device.

rdma-core (providers/mlx5/verbs.c at v62): ``ibv_alloc_dm`` allocates MEMIC, refusing a length above the device's
``max_dm_size`` with ``EINVAL``; a provider without device memory answers ``EOPNOTSUPP`` (libibverbs' dummy op).
``ibv_dm_export_dmabuf_fd`` (v62) asks the kernel's ``UVERBS_OBJECT_DMABUF`` (7.0; before, the object is unknown:
``EPROTONOSUPPORT``, as for every ioctl object the kernel lacks) for a dma-buf of the memory: a
:class:`~models.dmabuf.revoke.UverbsDmabufExporter`, which only peer-to-peer importers may attach and no pinned one
may pin. ``ibv_free_dm`` revokes every dma-buf exported from the memory (the kernel removes the memory's mmap entry
and revokes its dma-bufs, then waits for their unmaps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models.dmabuf import dma_buf_fd
from models.dmabuf.revoke import Revocation, UverbsDmabufExporter
from models.verbs.device import Context
from models.versions import RDMA_CORE_DM_DMABUF, Version
from sim.core import VerbsError


@dataclass(eq=False)
class DeviceMemoryAllocation:
    """``struct ibv_dm``: device memory on the NIC."""

    context: Context
    length: int
    exports: list[UverbsDmabufExporter] = field(default_factory=list)
    """The dma-bufs exported from it, oldest first."""
    freed: bool = False


def ibv_alloc_dm(context: Context, length: int) -> DeviceMemoryAllocation:
    """Allocate ``length`` bytes of the NIC's device memory.

    :raises VerbsError: ``EOPNOTSUPP`` when the device has none; ``EINVAL`` above ``max_dm_size`` or negative (a
        ``size_t`` that C would wrap to above it); ``ENOMEM`` when the allocations made so far leave too little.
    """
    call = "ibv_alloc_dm"
    nic = context.node.nic
    limit = nic.params.max_dm_size
    if not limit:
        raise VerbsError("EOPNOTSUPP", f"{nic.name} has no device memory (the provider has no alloc_dm)", call=call)
    if not 0 <= length <= limit:  # a size_t: a negative length is above every limit
        raise VerbsError("EINVAL", f"length {length} is outside 0..max_dm_size {limit}", call=call)
    used = sum(dm.length for dm in nic.device_memory)
    if used + length > limit:
        raise VerbsError("ENOMEM", f"{used} of {limit} bytes of device memory are allocated", call=call)
    dm = DeviceMemoryAllocation(context, length)
    nic.device_memory.append(dm)
    return dm


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
    """Free ``dm``: every dma-buf exported from it is revoked (invalidated, its fences waited for); returns the
    revocations, whose waits for the importers' unmaps the caller follows with
    :meth:`~models.dmabuf.revoke.RevocableExporter.wait_unmapped` (the kernel blocks in them).

    :raises VerbsError: ``EINVAL`` when already freed.
    """
    if dm.freed:
        raise VerbsError("EINVAL", "the device memory was already freed", call="ibv_free_dm")
    dm.freed = True
    dm.context.node.nic.device_memory.remove(dm)
    return [exporter.start_revocation() for exporter in dm.exports
            if not exporter.revoked and not exporter.dmabuf.released]
