"""``ibv_reg_dmabuf_mr``: register a dma-buf range, with the kernel's order of checks and errno values.

Order (uverbs REG_DMABUF_MR handler, then the driver): no driver support -> EOPNOTSUPP; page offset of
``offset`` and ``iova`` differ -> EINVAL; access bits outside LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ,
REMOTE_ATOMIC, RELAXED_ORDERING -> EINVAL; REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE -> EINVAL; mlx5:
no ODP -> EOPNOTSUPP, too large -> EINVAL; ``ib_umem_dmabuf_get``: overflow -> EINVAL, bad fd -> EBADF, not a
dma-buf -> EINVAL, past the buffer or length 0 -> EINVAL, the exporter's attach errno; then the first map's
errno. dma-buf MRs are not charged to RLIMIT_MEMLOCK. rdma-core sets ``mr.addr`` to the offset.
"""

from __future__ import annotations

from models.ib.dmabuf_mr import ALLOWED_ACCESS, register_dmabuf
from models.ib.mr_checks import check_max_mr_size, ib_check_mr_access
from models.nic.translation import DmabufImporter
from models.nic.wqe import Access
from models.verbs.verbs import MemoryRegion, ProtectionDomain
from models.versions import RDMA_CORE_DMABUF, RDMA_CORE_MLX5DV_DMABUF, Version
from sim.core import VerbsError

PAGE_MASK = 4096 - 1


MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT = 1
"""``mlx5dv_reg_dmabuf_mr`` access flag selecting the pinned (data-direct) path."""


def ibv_reg_dmabuf_mr(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                      *, invariants: str = "raise") -> MemoryRegion:
    """Register ``[offset, offset+length)`` of the dma-buf behind ``fd`` in the process's fd table, the way the
    device's driver does it (mlx5: dynamic; EFA-like: pinned).

    ``invariants="record"`` keeps DMA-safety violations in ``mr.backing.violations`` instead of raising.

    :raises VerbsError: see the module docstring for the order of checks.
    """
    return _reg_dmabuf(pd, offset, length, iova, fd, access, pd.context.node.nic.params.dmabuf, invariants,
                       "ibv_reg_dmabuf_mr")


def mlx5dv_reg_dmabuf_mr(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access,
                         mlx5_access: int, *, invariants: str = "raise") -> MemoryRegion:
    """mlx5 direct verb: ``mlx5_access`` 0 is :func:`ibv_reg_dmabuf_mr`; DATA_DIRECT pins the buffer.

    :raises VerbsError: ``EINVAL`` for unknown mlx5_access bits; with DATA_DIRECT, ``EOPNOTSUPP`` for an iova
        that is not page aligned; otherwise as :func:`ibv_reg_dmabuf_mr`.
    """
    call = "mlx5dv_reg_dmabuf_mr"
    if mlx5_access & ~MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT:
        raise VerbsError("EINVAL", f"unknown mlx5_access bits {mlx5_access:#x}", call=call)
    if not mlx5_access:
        return ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access, invariants=invariants)
    if iova & PAGE_MASK:
        raise VerbsError("EOPNOTSUPP", f"data-direct needs a page-aligned iova, got 0x{iova:x}", call=call)
    return _reg_dmabuf(pd, offset, length, iova, fd, access, "pinned", invariants, call)


def _reg_dmabuf(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access, mode: DmabufImporter,
                invariants: str, call: str) -> MemoryRegion:
    node = pd.context.node
    nic = node.nic
    if Version.parse(node.rdma_core) < (RDMA_CORE_MLX5DV_DMABUF if call.startswith("mlx5dv") else RDMA_CORE_DMABUF):
        raise VerbsError("EOPNOTSUPP", f"rdma-core v{node.rdma_core} has no {call}", call=call)
    if not node.kernel.config.behaviour.has_dmabuf_mr:
        raise VerbsError("EOPNOTSUPP", f"kernel {node.kernel.config.version} has no UVERBS_METHOD_REG_DMABUF_MR "
                         "(dma-buf MRs arrived in 5.12)", call=call)
    if nic.params.dmabuf is None:
        raise VerbsError("EOPNOTSUPP", "the device has no reg_user_mr_dmabuf (rdma-core: 'OFED stack does not "
                         "support DMA-BUF')", call=call)
    if offset & PAGE_MASK != iova & PAGE_MASK:
        raise VerbsError("EINVAL", f"offset 0x{offset:x} and iova 0x{iova:x} have different page offsets", call=call)
    if int(access) & ~ALLOWED_ACCESS:
        raise VerbsError("EINVAL", f"access {Access(access)!r}: only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, "
                         "REMOTE_ATOMIC and RELAXED_ORDERING are allowed for dma-buf MRs", call=call)
    ib_check_mr_access(nic.params, access, call)
    if mode == "dynamic" and nic.params.odp is None:
        raise VerbsError("EOPNOTSUPP", "mlx5 dynamic dma-buf MRs need on-demand paging", call=call)
    check_max_mr_size(nic.params.max_mr_size, length, call)
    nic.reserve_translations(length, call=call)
    try:
        return _register(pd, offset, length, iova, fd, access, mode, invariants, call)
    except BaseException:
        nic.release_translations(length)
        raise


def _register(pd: ProtectionDomain, offset: int, length: int, iova: int, fd: int, access: Access, mode: DmabufImporter,
              invariants: str, call: str) -> MemoryRegion:
    node = pd.context.node
    nic = node.nic
    start = node.kernel.now_ps(nic.name)
    with node.kernel.call(nic.name, call, offset=offset, length=length, fd=fd, mode=mode):
        node.kernel.spend(nic.name, nic.params.umr.reg_ioctl_ps)
        backing, done = register_dmabuf(nic, mode, nic.params.umr, node.fds, offset, length, fd,
                                        bool(access & Access.LOCAL_WRITE), invariants)
    key = nic.new_key()
    mr = MemoryRegion(pd, offset, length, Access(access), key, key, done - start,
                      backing=backing, iova=iova, mr_type="DMABUF_MR")
    nic.mrs[key] = mr
    return mr

