"""The full ``ibv_query_device_ex`` and ``ibv_query_port`` records per device family (``mlx5_ib_query_device``,
``mlx5_query_port``, ``efa_query_device``, ``efa_query_port``), compared with what ``ibv_devinfo -v`` prints for
mlx5 devices (github.com/open-mpi/ompi/pull/6137; github.com/openucx/ucx/issues/5376), and ``max_dm_size`` as the
limit ``ibv_alloc_dm`` enforces."""

from __future__ import annotations

import pytest

from models.fabric import FabricParams
from models.nic.nic import NicParams
from models.presets import NIC_PRESETS
from models.verbs.ah import ibv_query_gid
from models.verbs.dm import ibv_alloc_dm
from models.verbs.query import ibv_query_device, ibv_query_device_ex, ibv_query_port
from sim.core import VerbsError
from tests.models.verbs.test_device_query import _context

ROCE = FabricParams(transport="roce", rate_Bps=400e9 / 8)


@pytest.mark.parametrize("preset", ["connectx7", "connectx6", "connectx5"])
def test_an_mlx5_device_reports_what_ibv_devinfo_prints_for_one(preset):
    """The device fields of the ConnectX-5 dump (max_mw, multicast, max_ah INT_MAX, max_pkeys, ack delay) and the
    extended ones of the ConnectX-6 dump (timestamp mask, CQ moderation 65535 / 4095 us)."""
    ex = ibv_query_device_ex(_context(NicParams(**NIC_PRESETS[preset])))
    attr = ex.orig_attr
    assert (attr.max_mw, attr.max_mcast_grp, attr.max_mcast_qp_attach, attr.max_total_mcast_qp_attach) == (
        16777216, 2097152, 240, 503316480)
    assert (attr.max_ah, attr.max_pkeys, attr.local_ca_ack_delay, attr.max_ee, attr.max_rdd, attr.max_fmr) == (
        2**31 - 1, 128, 16, 0, 0, 0)
    assert ex.completion_timestamp_mask == 2**63 - 1 and ex.hca_core_clock > 0
    assert (ex.cq_mod_caps.max_cq_count, ex.cq_mod_caps.max_cq_period) == (65535, 4095)
    assert ex.phys_port_cnt_ex == attr.phys_port_cnt == 1


def test_raw_packet_capabilities_come_with_an_ethernet_port_only():
    """TSO and RSS serve raw-packet QPs, which an mlx5 port has on Ethernet (the ConnectX-6 dump: max_tso 262144,
    65536 indirection tables of 2048 entries, SUPPORT_RAW_PACKET); on InfiniBand they are 0."""
    nic = NicParams(**NIC_PRESETS["connectx7"])
    ib, eth = ibv_query_device_ex(_context(nic)), ibv_query_device_ex(_context(nic, ROCE))
    assert (ib.tso_caps.max_tso, ib.rss_caps.max_rwq_indirection_tables, ib.max_wq_type_rq) == (0, 0, 0)
    raw = 1 << 8
    assert (eth.tso_caps.max_tso, eth.tso_caps.supported_qpts) == (262144, raw)
    assert (eth.rss_caps.max_rwq_indirection_tables, eth.rss_caps.max_rwq_indirection_table_size,
            eth.rss_caps.supported_qpts, eth.max_wq_type_rq) == (65536, 2048, raw, 8388608)


def test_the_port_record_differs_by_link_layer():
    """``mlx5_query_port``: max_msg_sz 2**log_max_msg (0x40000000 in both dumps), phys_state LinkUp (5); on
    InfiniBand 128 P_Keys and GIDs, VL0-3, a subnet timeout and a subnet manager; on Ethernet one P_Key, the RoCE
    GID table (255 entries), port_cap_flags 0x04010000 and no VLs."""
    nic = NicParams(**NIC_PRESETS["connectx7"])
    ib, eth = ibv_query_port(_context(nic), 1), ibv_query_port(_context(nic, ROCE), 1)
    for port in (ib, eth):
        assert port.max_msg_sz == 0x40000000 and port.phys_state == 5 and port.bad_pkey_cntr == 0
    assert (ib.pkey_tbl_len, ib.gid_tbl_len, ib.max_vl_num, ib.subnet_timeout, ib.sm_lid) == (128, 128, 3, 18, 1)
    assert (eth.pkey_tbl_len, eth.gid_tbl_len, eth.port_cap_flags, eth.max_vl_num, eth.sm_lid) == (
        1, 255, 0x04010000, 0, 0)


def test_efa_reports_no_multicast_windows_or_moderation_and_one_gid():
    """``efa_query_device`` fills no multicast, MW, timestamp or CQ moderation fields; ``efa_query_port`` one GID
    and one P_Key."""
    ctx = _context(NicParams(**NIC_PRESETS["efa"]), ROCE)
    ex, port = ibv_query_device_ex(ctx), ibv_query_port(ctx, 1)
    assert (ex.orig_attr.max_mw, ex.orig_attr.max_mcast_grp, ex.completion_timestamp_mask) == (0, 0, 0)
    assert (ex.cq_mod_caps.max_cq_count, ex.max_dm_size, ex.tso_caps.max_tso) == (0, 0, 0)
    assert (port.gid_tbl_len, port.pkey_tbl_len) == (1, 1)


def test_node_guid_is_the_ports_gid_interface_id():
    """A port's GID 0 is the subnet prefix and its GUID; the node GUID of a one-port device is that GUID."""
    ctx = _context(NicParams())
    attr = ibv_query_device(ctx)
    assert attr.node_guid == attr.sys_image_guid == int.from_bytes(ibv_query_gid(ctx, 1, 0)[8:], "big") != 0


@pytest.mark.parametrize("preset", sorted(NIC_PRESETS))
def test_max_dm_size_is_what_ibv_alloc_dm_allows(preset):
    """rdma-core's DM tests skip unless ``max_dm_size`` is set; ``ibv_alloc_dm`` takes up to it (EINVAL above) and
    is EOPNOTSUPP on a device that reports 0."""
    ctx = _context(NicParams(**NIC_PRESETS[preset]))
    size = ibv_query_device_ex(ctx).max_dm_size
    if size == 0:
        with pytest.raises(VerbsError) as info:
            ibv_alloc_dm(ctx, 4096)
        assert info.value.errno == "EOPNOTSUPP"
        return
    with pytest.raises(VerbsError) as info:
        ibv_alloc_dm(ctx, size + 1)
    assert info.value.errno == "EINVAL"
    assert ibv_alloc_dm(ctx, size).length == size
