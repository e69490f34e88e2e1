"""``ibv_reg_dmabuf_mr``: register a dma-buf range, with the kernel's order of checks and errno values.

Order (uverbs REG_DMABUF_MR handler, then the driver): no driver support -> EOPNOTSUPP; page offset of
``offset`` and ``iova`` differ -> EINVAL; access bits outside LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ,
REMOTE_ATOMIC, RELAXED_ORDERING -> EINVAL; REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE -> EINVAL; mlx5:
no ODP -> EOPNOTSUPP, too large -> EINVAL; ``ib_umem_dmabuf_get``: overflow -> EINVAL, bad fd -> EBADF, not a
dma-buf -> EINVAL, past the buffer or length 0 -> EINVAL, the exporter's attach errno; then the first map's
errno. dma-buf MRs are not charged to RLIMIT_MEMLOCK. rdma-core sets ``mr.addr`` to the offset.
"""

from __future__ import annotations

from models.dmabuf_mr import ALLOWED_ACCESS, register_dmabuf
from models.verbs import Access, MemoryRegion, ProtectionDomain
from sim.core import VerbsError

PAGE_MASK = 4096 - 1


def ibv_reg_dmabuf_mr(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                      *, invariants: str = "raise") -> MemoryRegion:
    """Register ``[offset, offset+length)`` of the dma-buf behind ``fd`` in the process's fd table.

    ``invariants="record"`` keeps DMA-safety violations in ``mr.backing.violations`` instead of raising.

    :raises VerbsError: see the module docstring for the order of checks.
    """
    call = "ibv_reg_dmabuf_mr"
    node = pd.context.node
    nic = node.nic
    if nic.params.dmabuf is None:
        raise VerbsError("EOPNOTSUPP", "the device has no reg_user_mr_dmabuf (rdma-core: 'OFED stack does not "
                         "support DMA-BUF')", call=call)
    if offset & PAGE_MASK != iova & PAGE_MASK:
        raise VerbsError("EINVAL", f"offset 0x{offset:x} and iova 0x{iova:x} have different page offsets", call=call)
    if int(access) & ~ALLOWED_ACCESS:
        raise VerbsError("EINVAL", f"access {Access(access)!r}: only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, "
                         "REMOTE_ATOMIC and RELAXED_ORDERING are allowed for dma-buf MRs", call=call)
    if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not access & Access.LOCAL_WRITE:
        raise VerbsError("EINVAL", "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE (ib_check_mr_access)",
                         call=call)
    if nic.params.dmabuf == "dynamic" and nic.params.odp is None:
        raise VerbsError("EOPNOTSUPP", "mlx5 dynamic dma-buf MRs need on-demand paging", call=call)
    if length > nic.params.max_mr_size:
        raise VerbsError("EINVAL", f"length {length} exceeds the device's max_mr_size", call=call)
    start = max(pd.context.env.now, node.kernel.now_ps(nic.name)) if node.kernel else pd.context.env.now
    backing, done = register_dmabuf(nic, nic.params.dmabuf, nic.params.umr, node.fds, offset, length, fd,
                                    bool(access & Access.LOCAL_WRITE), invariants)
    key = nic.new_key()
    mr = MemoryRegion(pd, offset, length, Access(access), key, key, nic.params.umr.reg_ioctl_ps + done - start,
                      backing=backing, iova=iova, mr_type="DMABUF_MR")
    nic.mrs[key] = mr
    return mr

