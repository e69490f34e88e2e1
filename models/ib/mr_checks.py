"""The kernel's checks that every memory registration shares (``ibv_reg_mr``, ``ibv_rereg_mr``, peer memory and
``ibv_reg_dmabuf_mr``), each in one function named after its kernel counterpart."""

from __future__ import annotations

from models.nic.device import DeviceCap
from models.nic.nic import Nic, NicParams
from models.nic.wqe import Access
from sim.core import VerbsError

U64 = 2**64
PAGE_SIZE = 4096
"""The kernel's ``PAGE_SIZE`` on x86-64 (bytes)."""
IB_ACCESS_OPTIONAL = (((1 << 29) << 1) - 1) & ~((1 << 20) - 1)
"""``IB_UVERBS_ACCESS_OPTIONAL_RANGE``: bits 20..29 (OPTIONAL_FIRST..OPTIONAL_LAST), which a driver may ignore."""
IB_ACCESS_SUPPORTED = ((Access.FLUSH_PERSISTENT << 1) - 1) | IB_ACCESS_OPTIONAL
"""``IB_ACCESS_SUPPORTED`` (include/rdma/ib_verbs.h, Linux 6.2 and later): every bit up to FLUSH_PERSISTENT and
the optional range."""
FLUSH_CAPS = ((Access.FLUSH_GLOBAL, DeviceCap.FLUSH_GLOBAL), (Access.FLUSH_PERSISTENT, DeviceCap.FLUSH_PERSISTENT))
"""Each FLUSH access bit and the device capability it needs."""


def ib_check_mr_access(device: NicParams, access: int, call: str) -> None:
    """``ib_check_mr_access`` (include/rdma/ib_verbs.h, Linux 6.2): remote write or atomic rights need local
    write too; no bits outside ``IB_ACCESS_SUPPORTED``; ON_DEMAND needs ODP (``IBK_ON_DEMAND_PAGING``); FLUSH
    rights need the device's ``IB_DEVICE_FLUSH_*`` capability.

    :raises VerbsError: ``EINVAL`` for the first two, ``EOPNOTSUPP`` for the last two.
    """
    if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not access & Access.LOCAL_WRITE:
        raise VerbsError("EINVAL", "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE (ib_check_mr_access)",
                         call=call)
    if access & ~IB_ACCESS_SUPPORTED:
        raise VerbsError("EINVAL", f"access bits {access & ~IB_ACCESS_SUPPORTED:#x} outside IB_ACCESS_SUPPORTED "
                         f"({IB_ACCESS_SUPPORTED:#x}) (ib_check_mr_access)", call=call)
    if access & Access.ON_DEMAND and device.odp is None:
        raise VerbsError("EOPNOTSUPP", "ON_DEMAND registration on a device without ODP (no IBK_ON_DEMAND_PAGING)",
                         call=call)
    for bit, cap in FLUSH_CAPS:
        if access & bit and not device.device.cap_flags & cap:
            raise VerbsError("EOPNOTSUPP", f"IBV_ACCESS_{bit.name} on a device without IB_DEVICE_{cap.name} "
                             "(ib_check_mr_access)", call=call)


def check_max_mr_size(max_mr_size: int, length: int, call: str) -> None:
    """The device's ``max_mr_size`` (``ibv_device_attr``) bounds the length of one MR.

    :raises VerbsError: ``EINVAL``.
    """
    if length > max_mr_size:
        raise VerbsError("EINVAL", f"length {length} exceeds the device's max_mr_size {max_mr_size}", call=call)


MELLANOX_VENDOR_ID = 0x02C9
"""``PCI_VENDOR_ID_MELLANOX``: the devices the mlx5 driver and provider (and its ``mlx5dv_*`` calls) drive."""
EFA_VENDOR_ID = 0x1D0F
"""``PCI_VENDOR_ID_AMAZON``: the devices the efa driver drives."""


def efa_alloc_mr(device: NicParams, access: Access, call: str) -> Access:
    """``efa_alloc_mr`` (drivers/infiniband/hw/efa/efa_verbs.c, v5.16 onwards; ``efa_reg_mr`` made the same check
    before): drop the optional bits, then refuse rights beyond LOCAL_WRITE and the remote rights the device's
    RDMA_READ/RDMA_WRITE capabilities allow. Runs before the umem is got (for ``ibv_reg_mr`` and
    ``ibv_reg_dmabuf_mr``). Returns the rights the MR keeps.

    :raises VerbsError: ``EOPNOTSUPP``.
    """
    supported = int(Access.LOCAL_WRITE | device.remote_access)
    kept = int(access) & ~IB_ACCESS_OPTIONAL  # RELAXED_ORDERING is one of the optional bits
    if kept & ~supported:
        raise VerbsError("EOPNOTSUPP", f"access {Access(kept)!r}: EFA supports only {Access(supported)!r} "
                         "(efa_alloc_mr)", call=call)
    return Access(kept)


MLX5_MAX_UMR_PAGES = 1 << 16
"""``MLX5_MAX_UMR_PAGES``: without ``umr_extended_translation_offset`` a UMR reaches at most this many pages."""


def mlx5r_umr_can_load_pas(nic: Nic, length: int, call: str) -> None:
    """``mlx5r_umr_can_load_pas`` (drivers/infiniband/hw/mlx5/umr.c): without the HCA's
    ``umr_extended_translation_offset`` a UMR cannot load the page list of an MR of ``MLX5_MAX_UMR_PAGES`` pages
    or more, and dma-buf and ODP MRs need UMR.

    :raises VerbsError: ``EINVAL``.
    """
    if not nic.params.umr_extended_translation_offset and length >= MLX5_MAX_UMR_PAGES * 4096:
        raise VerbsError("EINVAL", f"length {length}: without umr_extended_translation_offset a UMR loads fewer "
                         f"than {MLX5_MAX_UMR_PAGES} pages (mlx5r_umr_can_load_pas)", call=call)
