"""What a device reports about itself and nothing in the model uses otherwise: identity, object limits and
capability bits (``struct ibv_device_attr``). Limits the model does enforce (``max_mr_size``, ``max_qp_wr``,
``max_rd_atomic``, ODP, dma-buf) live in :class:`~models.nic.nic.NicParams` and are reported from there."""

from __future__ import annotations

import enum
from dataclasses import dataclass


PORT_NUM = 1
"""The one port every modelled device has (InfiniBand ports are numbered from 1)."""


def rdma_is_port_valid(port_num: int) -> bool:
    """``rdma_is_port_valid`` (include/rdma/ib_verbs.h): whether the device has port ``port_num``."""
    return port_num == PORT_NUM

class DeviceCap(enum.IntFlag):
    """``enum ibv_device_cap_flags`` (libibverbs/verbs.h) and the 64-bit ``IB_UVERBS_DEVICE_*`` bits
    (include/uapi/rdma/ib_user_ioctl_verbs.h) that ``ibv_query_device_ex`` reports in ``device_cap_flags_ex``."""

    BAD_PKEY_CNTR = 1 << 1
    BAD_QKEY_CNTR = 1 << 2
    AUTO_PATH_MIG = 1 << 4
    CHANGE_PHY_PORT = 1 << 5
    PORT_ACTIVE_EVENT = 1 << 10
    SYS_IMAGE_GUID = 1 << 11
    RC_RNR_NAK_GEN = 1 << 12
    MEM_WINDOW = 1 << 17
    XRC = 1 << 20
    MEM_MGT_EXTENSIONS = 1 << 21
    MEM_WINDOW_TYPE_2A = 1 << 23
    MEM_WINDOW_TYPE_2B = 1 << 24
    FLUSH_GLOBAL = 1 << 38
    """``IB_UVERBS_DEVICE_FLUSH_GLOBAL`` (Linux 6.2): only rxe sets it."""
    FLUSH_PERSISTENT = 1 << 39
    """``IB_UVERBS_DEVICE_FLUSH_PERSISTENT`` (Linux 6.2): only rxe sets it."""


class AtomicCap(enum.IntEnum):
    """``enum ibv_atomic_cap``."""

    ATOMIC_NONE = 0
    ATOMIC_HCA = 1
    ATOMIC_GLOB = 2


MLX5_CAPS = (DeviceCap.BAD_PKEY_CNTR | DeviceCap.BAD_QKEY_CNTR | DeviceCap.AUTO_PATH_MIG | DeviceCap.CHANGE_PHY_PORT
             | DeviceCap.PORT_ACTIVE_EVENT | DeviceCap.SYS_IMAGE_GUID | DeviceCap.RC_RNR_NAK_GEN | DeviceCap.MEM_WINDOW
             | DeviceCap.XRC | DeviceCap.MEM_MGT_EXTENSIONS | DeviceCap.MEM_WINDOW_TYPE_2B)
"""The named ``device_cap_flags`` ``ibv_devinfo -v`` prints for a ConnectX-5 (vendor_part_id 4121, github.com/
ofiwg/libfabric/issues/8256); bits it prints as unknown are left out. ``mlx5_ib_query_device`` sets MEM_WINDOW and
MEM_WINDOW_TYPE_2B together (``MLX5_CAP_GEN(mdev, imaicl)``, which also gives the device its ``alloc_mw``)."""


@dataclass(frozen=True, slots=True)
class DeviceAttrs:
    """Identity and object limits of one device; the defaults are a ConnectX-5 as ``ibv_devinfo -v`` prints it
    (vendor_part_id 4119, fw 16.23, github.com/open-mpi/ompi/pull/6137)."""

    fw_ver: str = "16.23.1020"
    vendor_id: int = 0x02C9
    """PCI vendor (0x02c9 Mellanox, 0x1d0f Amazon)."""
    vendor_part_id: int = 4119
    """PCI device id (mlx5: 4119 ConnectX-5, 4123 ConnectX-6, 4129 ConnectX-7)."""
    hw_ver: int = 0
    page_size_cap: int = 0xFFFFFFFFFFFFF000
    """Page sizes the MTT accepts (bit n set: 2**n bytes)."""
    max_qp: int = 262144
    max_sge: int = 30
    max_sge_rd: int = 30
    max_cq: int = 16777216
    max_cqe: int = 4194303
    max_mr: int = 16777216
    max_pd: int = 16777216
    max_res_rd_atom: int = 4194304
    atomic_cap: AtomicCap = AtomicCap.ATOMIC_HCA
    cap_flags: DeviceCap = MLX5_CAPS
    """``device_cap_flags_ex``: the low 32 bits are ``ibv_device_attr.device_cap_flags``."""
    max_srq: int = 8388608
    max_srq_wr: int = 32767
    """Deepest SRQ ``ibv_create_srq`` accepts (EINVAL beyond)."""
    max_srq_sge: int = 31
    """Most scatter entries per SRQ receive."""
