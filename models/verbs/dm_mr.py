"""Device memory registered as a memory region (``ibv_reg_dm_mr``): a zero-based MR over part of an
``ibv_alloc_dm`` allocation, whose accesses the NIC serves from its own memory (:mod:`models.nic.memic`).

The checks are rdma-core's (providers/mlx5/verbs.c ``mlx5_reg_dm_mr``: access bits outside
``MLX5_DM_ALLOWED_ACCESS``; libibverbs/cmd_dm.c ``ibv_cmd_reg_dm_mr``: no ``IBV_ACCESS_ZERO_BASED``, as DM MRs are
always zero based), then the kernel's ``UVERBS_METHOD_DM_MR_REG`` handler (drivers/infiniband/core/
uverbs_std_types_mr.c: flags outside ``IB_ACCESS_SUPPORTED``, no ZERO_BASED, :func:`ib_check_mr_access`, an offset or
length beyond the memory) and mlx5's (drivers/infiniband/hw/mlx5/mr.c ``mlx5_ib_reg_dm_mr``: bits outside
``MLX5_IB_DM_MEMIC_ALLOWED_ACCESS``), each EINVAL. The handler raises the memory's and the PD's use counts, so the
memory cannot be freed while the MR lives (:func:`~models.verbs.dm.ibv_free_dm`: EBUSY).
"""

from __future__ import annotations

from models.ib.mr_checks import IB_ACCESS_OPTIONAL, IB_ACCESS_SUPPORTED, MELLANOX_VENDOR_ID, ib_check_mr_access
from models.nic.wqe import Access
from models.verbs.device import ProtectionDomain
from models.verbs.dm import DeviceMemoryAllocation
from models.verbs.mr import REG_MR_FIXED_PS, MemoryRegion, reg_create
from sim.core import VerbsError

MLX5_IB_DM_MEMIC_ALLOWED_ACCESS = (Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
                                   | Access.REMOTE_ATOMIC | Access.ZERO_BASED)
"""The rights mlx5 gives a MEMIC MR (drivers/infiniband/hw/mlx5/mlx5_ib.h)."""
MLX5_DM_ALLOWED_ACCESS = MLX5_IB_DM_MEMIC_ALLOWED_ACCESS | IB_ACCESS_OPTIONAL
"""rdma-core's (providers/mlx5/verbs.c): the kernel's set and ``IBV_ACCESS_OPTIONAL_RANGE`` (the same bits as the
kernel's ``IB_ACCESS_OPTIONAL``), which the kernel then refuses."""


def ibv_reg_dm_mr(pd: ProtectionDomain, dm: DeviceMemoryAllocation, dm_offset: int, length: int,
                  access: Access) -> MemoryRegion:
    """Register ``length`` bytes of ``dm`` from ``dm_offset`` with ``access``: a zero-based MR (its iova 0, its
    address NULL), the cost of the ioctl and the mkey (no page is pinned or mapped).

    :raises VerbsError: ``EOPNOTSUPP`` from a provider without device memory (every device but mlx5); ``ENOENT``
        for freed memory (the handle names no object); ``EINVAL`` for the checks above.
    """
    call = "ibv_reg_dm_mr"
    node, access = pd.context.node, Access(access)
    if node.nic.params.device.vendor_id != MELLANOX_VENDOR_ID:
        raise VerbsError("EOPNOTSUPP", f"{node.nic.name}'s provider has no reg_dm_mr (libibverbs' dummy op)",
                         call=call)
    if access & ~MLX5_DM_ALLOWED_ACCESS:
        raise VerbsError("EINVAL", f"access bits {int(access & ~MLX5_DM_ALLOWED_ACCESS):#x} are not allowed on a DM "
                         "MR (mlx5_reg_dm_mr: MLX5_DM_ALLOWED_ACCESS)", call=call)
    if not access & Access.ZERO_BASED:
        raise VerbsError("EINVAL", "a DM MR needs IBV_ACCESS_ZERO_BASED: it is always zero based (ibv_cmd_reg_dm_mr)",
                         call=call)
    if dm.freed or dm.context is not pd.context:
        raise VerbsError("ENOENT", "the device memory was freed or belongs to another device context (the handle "
                         "names no object of this context: lookup_get_idr_uobject)", call=call)
    uverbs_dm_mr_reg(pd, dm, dm_offset, length, access)
    mr = reg_create(pd, 0, length, access, lambda: (REG_MR_FIXED_PS, None), call, iova=0)
    mr.dm, mr.dm_offset = dm, dm_offset
    dm.usecnt += 1
    return mr


def uverbs_dm_mr_reg(pd: ProtectionDomain, dm: DeviceMemoryAllocation, offset: int, length: int,
                     access: Access) -> None:
    """The kernel's checks of ``UVERBS_METHOD_DM_MR_REG`` and mlx5's ``mlx5_ib_reg_dm_mr``, in their order.

    :raises VerbsError: ``EINVAL``.
    """
    call = "ibv_reg_dm_mr"
    if access & ~IB_ACCESS_SUPPORTED:
        raise VerbsError("EINVAL", f"access bits {int(access & ~IB_ACCESS_SUPPORTED):#x} outside IB_ACCESS_SUPPORTED "
                         "(uverbs_get_flags32)", call=call)
    ib_check_mr_access(pd.context.node.nic.params, access, call)
    if not 0 <= offset <= dm.length or not 0 <= length <= dm.length - offset:
        raise VerbsError("EINVAL", f"offset {offset} + length {length} is past the {dm.length} bytes of the device "
                         "memory (UVERBS_METHOD_DM_MR_REG)", call=call)
    if access & ~MLX5_IB_DM_MEMIC_ALLOWED_ACCESS:
        raise VerbsError("EINVAL", f"access bits {int(access & ~MLX5_IB_DM_MEMIC_ALLOWED_ACCESS):#x} are not allowed "
                         "on a MEMIC MR (mlx5_ib_reg_dm_mr)", call=call)
