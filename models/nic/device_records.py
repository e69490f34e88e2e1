"""What a device reports beyond the limits the model enforces: the rest of ``ibv_query_device_ex`` and
``ibv_query_port`` per device family, chosen by the device's ``vendor_id`` (a firmware answer, like
:mod:`models.nic.odp_caps`, not a parameter of the model).

mlx5 (ConnectX-5, -6, -7): ``mlx5_ib_query_device`` and ``mlx5_query_port`` read these from the firmware; the values
are ``ibv_devinfo -v``'s of mlx5 devices (github.com/open-mpi/ompi/pull/6137, a ConnectX-5 on InfiniBand;
github.com/openucx/ucx/issues/5376 and 9727, ConnectX-6 family on Ethernet). The raw-packet capabilities (TSO,
RSS, WQs) exist only where the port is Ethernet. EFA (``efa_query_device``, ``efa_query_port``) reports no
multicast, memory windows, timestamps or moderation; its limits are not published, so its ``max_ah`` is an
assumption.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.nic.device import DeviceAttrs


@dataclass(frozen=True, slots=True)
class DeviceRecords:
    """The rest of a device family's ``ibv_devinfo -v``: device fields, then ``ibv_device_attr_ex``'s, then the
    port's (InfiniBand and Ethernet where they differ)."""

    max_mw: int
    max_mcast_grp: int
    max_mcast_qp_attach: int
    max_total_mcast_qp_attach: int
    max_ah: int
    max_pkeys: int
    local_ca_ack_delay: int
    completion_timestamp_mask: int
    hca_core_clock_khz: int
    max_tso_eth: int
    """``tso_caps.max_tso`` on an Ethernet port (bytes; 0 on InfiniBand)."""
    rss_eth: tuple[int, int, int, int]
    """``rss_caps`` on an Ethernet port: indirection tables, table size, hash functions, hash fields mask."""
    max_wq_type_rq_eth: int
    max_cq_count: int
    max_cq_period_us: int
    log_max_msg: int
    """``max_msg_sz`` is 2**this (bytes)."""
    gid_tbl_len: tuple[int, int]
    """(InfiniBand, Ethernet)."""
    pkey_tbl_len: tuple[int, int]
    port_cap_flags: tuple[int, int]
    max_vl_num: tuple[int, int]
    """``IBV_VL_*`` code (3: VL0-3; 0 on Ethernet, which ibv_devinfo calls an invalid value)."""
    subnet_timeout: tuple[int, int]


MLX5_RECORDS = DeviceRecords(
    max_mw=16777216, max_mcast_grp=2097152, max_mcast_qp_attach=240, max_total_mcast_qp_attach=503316480,
    max_ah=2147483647, max_pkeys=128, local_ca_ack_delay=16, completion_timestamp_mask=0x7FFFFFFFFFFFFFFF,
    hca_core_clock_khz=156250, max_tso_eth=262144, rss_eth=(65536, 2048, 0x1, 0x800000FF),
    max_wq_type_rq_eth=8388608, max_cq_count=65535, max_cq_period_us=4095, log_max_msg=30,
    gid_tbl_len=(128, 255), pkey_tbl_len=(128, 1), port_cap_flags=(0x2651E848, 0x04010000), max_vl_num=(3, 0),
    subnet_timeout=(18, 0))
"""mlx5's answers (see the module's sources)."""
EFA_RECORDS = DeviceRecords(
    max_mw=0, max_mcast_grp=0, max_mcast_qp_attach=0, max_total_mcast_qp_attach=0, max_ah=1024, max_pkeys=1,
    local_ca_ack_delay=0, completion_timestamp_mask=0, hca_core_clock_khz=0, max_tso_eth=0, rss_eth=(0, 0, 0, 0),
    max_wq_type_rq_eth=0, max_cq_count=0, max_cq_period_us=0, log_max_msg=30, gid_tbl_len=(1, 1),
    pkey_tbl_len=(1, 1), port_cap_flags=(0, 0), max_vl_num=(0, 0), subnet_timeout=(0, 0))
"""EFA's answers (``efa_query_port``: one GID, one P_Key)."""

_BY_VENDOR = {0x02C9: MLX5_RECORDS, 0x1D0F: EFA_RECORDS}


def device_records(device: DeviceAttrs) -> DeviceRecords:
    """The records of ``device``'s family (its ``vendor_id``; mlx5's for a vendor the table does not list)."""
    return _BY_VENDOR.get(device.vendor_id, MLX5_RECORDS)
