"""``ibv_reg_mr_ex``: one verb for every kind of registration rdma-core's ``ibv_reg_mr``, ``ibv_reg_mr_iova``
and ``ibv_reg_dmabuf_mr`` make, with a DMA handle (:mod:`models.verbs.dmah`).

The request's fields are the ones given (``comp_mask`` as pyverbs' ``MREx`` builds it: ``IBV_REG_MR_MASK_ADDR``
with an address, ``_IOVA`` with an iova, ``_FD`` and ``_FD_OFFSET`` with a dma-buf, ``_DMAH`` with a handle). The
checks are ``ibv_cmd_reg_mr_ex``'s (libibverbs/cmd_mr.c, rdma-core 691953d8d), then the ``REG_MR`` ioctl's
(``UVERBS_HANDLER(UVERBS_METHOD_REG_MR)``, drivers/infiniband/core/uverbs_std_types_mr.c) and mlx5's
(``mlx5_ib_reg_user_mr``: no DMA handle with ODP); a kernel without the ioctl (before 6.17) serves an address-based
request through the legacy ``REG_MR`` command and refuses the rest with EOPNOTSUPP, as rdma-core's fallback does.
"""

from __future__ import annotations

from models.ib.implicit_odp import SIZE_MAX
from models.nic.wqe import Access
from models.verbs.device import ProtectionDomain
from models.verbs.dmabuf import ib_uverbs_reg_dmabuf_mr
from models.verbs.dmah import DmaHandle
from models.verbs.mr import MemoryRegion, ibv_reg_mr
from models.versions import RDMA_CORE_REG_MR_EX, Version
from sim.core import VerbsError

REG_MR_MASK_IOVA, REG_MR_MASK_ADDR, REG_MR_MASK_FD, REG_MR_MASK_FD_OFFSET, REG_MR_MASK_DMAH = 1, 2, 4, 8, 16
"""``enum ibv_reg_mr_init_attr_mask``."""


def ibv_reg_mr_ex(pd: ProtectionDomain, length: int, access: Access, *, addr: int | None = None,
                  iova: int | None = None, fd: int | None = None, fd_offset: int | None = None,
                  dmah: DmaHandle | None = None, invariants: str = "raise") -> MemoryRegion:
    """Register host memory at ``addr`` or ``fd``'s dma-buf from ``fd_offset``, keyed at ``iova`` (default:
    ``addr``), with ``dmah``'s hints.

    :raises VerbsError: ``EOPNOTSUPP`` for an rdma-core before v59, a DMA handle with ON_DEMAND (mlx5), or a dma-buf
        or DMA handle on a kernel before 6.17; ``EINVAL`` for a dma-buf request without its offset or iova or with
        an address, an address-based one without its address or with an offset, an implicit ODP request that names
        an address, a freed DMA handle or one of another device; what the registration itself raises.
    """
    call = "ibv_reg_mr_ex"
    node = pd.context.node
    if Version.parse(node.rdma_core) < RDMA_CORE_REG_MR_EX:
        raise VerbsError("EOPNOTSUPP", f"rdma-core v{node.rdma_core} has no {call} (v59)", call=call)
    ibv_cmd_reg_mr_ex(addr, length, access, iova, fd, fd_offset, call)
    if dmah is not None and (dmah.freed or dmah.context is not pd.context):
        raise VerbsError("EINVAL", "the DMA handle was freed or belongs to another device context "
                         "(uverbs_attr_get_obj)", call=call)
    if not node.kernel.config.behaviour.has_reg_mr_ioctl and (fd is not None or dmah is not None):
        raise VerbsError("EOPNOTSUPP", f"kernel {node.kernel.config.version} has no REG_MR ioctl (6.17), and the "
                         "legacy REG_MR command takes neither a dma-buf nor a DMA handle", call=call)
    if dmah is not None and access & Access.ON_DEMAND:
        raise VerbsError("EOPNOTSUPP", "a DMA handle cannot be used with an ON_DEMAND MR (mlx5_ib_reg_user_mr)",
                         call=call)
    if fd is not None:
        mr = ib_uverbs_reg_dmabuf_mr(pd, fd_offset, length, iova, fd, access, None, invariants, call)
    else:
        mr = ibv_reg_mr(pd, addr, length, access, iova, call=call)
    if dmah is not None:
        mr.dmah = dmah
        dmah.usecnt += 1
    return mr


def ibv_cmd_reg_mr_ex(addr: int | None, length: int, access: Access, iova: int | None, fd: int | None,
                      fd_offset: int | None, call: str) -> None:
    """rdma-core's request checks: a dma-buf request needs its offset and an iova and takes no address; an
    address-based one needs its address and takes no offset; an ON_DEMAND one of ``SIZE_MAX`` bytes (implicit ODP)
    names no address.

    :raises VerbsError: ``EINVAL``.
    """
    if fd is not None:
        if fd_offset is None or addr is not None:
            raise VerbsError("EINVAL", "a dma-buf registration needs fd_offset and takes no address", call=call)
        if iova is None:
            raise VerbsError("EINVAL", "a dma-buf registration needs an iova (IBV_REG_MR_MASK_IOVA)", call=call)
        return
    if addr is None or fd_offset is not None:
        raise VerbsError("EINVAL", "an address-based registration needs its address and takes no fd_offset",
                         call=call)
    if access & Access.ON_DEMAND and length == SIZE_MAX and addr:
        raise VerbsError("EINVAL", "an implicit ODP registration (length SIZE_MAX) names no address", call=call)
