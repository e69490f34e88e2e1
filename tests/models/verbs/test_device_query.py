"""ibv_query_device / ibv_query_port report what the model enforces, and ib_check_mr_access's bit checks."""

from dataclasses import replace

import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.ib.mr_checks import IB_ACCESS_SUPPORTED
from models.nic.datapath import rd_atomic_slots
from models.nic.device import AtomicCap, DeviceCap
from models.nic.nic import NicParams
from models.nic.wqe import Access
from models.node import Node
from models.pcie.link import PcieParams
from models.presets import NIC_PRESETS, NIC_RATE
from models.verbs.qp_state import PathMtu
from models.verbs.query import (LinkLayer, OdpGeneralCaps, OdpTransportCaps, ibv_query_device,
                                ibv_query_device_ex, ibv_query_port)
from models.verbs.cq import ibv_create_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp
from sim.core import Environment, VerbsError
from sim.core.units import parse_rate


def _context(nic: NicParams, fabric: FabricParams = FabricParams(), name: str = "a"):
    node = Node.create(name, HostParams(), PcieParams(), nic)
    fab = Fabric(fabric)
    fab.attach(node.nic.name)
    return ibv_open_device(node, Environment(1), fab)


@pytest.mark.parametrize("preset", sorted(NIC_PRESETS))
def test_query_device_reports_the_presets_parameters(preset):
    params = NicParams(**NIC_PRESETS[preset])
    attr = ibv_query_device(_context(params))
    assert (attr.max_mr_size, attr.max_qp_wr, attr.max_qp_init_rd_atom, attr.max_qp_rd_atom) == (
        params.max_mr_size, params.max_qp_wr, params.max_rd_atomic, params.max_rd_atomic)
    dev = params.device
    assert (attr.vendor_id, attr.vendor_part_id, attr.fw_ver, attr.max_sge, attr.atomic_cap) == (
        dev.vendor_id, dev.vendor_part_id, dev.fw_ver, dev.max_sge, dev.atomic_cap)
    assert attr.device_cap_flags == int(dev.cap_flags) & 0xFFFFFFFF


@pytest.mark.parametrize("preset, vendor_id, part, atomics, odp", [
    ("connectx7", 0x02C9, 4129, AtomicCap.ATOMIC_HCA, True),
    ("connectx6", 0x02C9, 4123, AtomicCap.ATOMIC_HCA, True),
    ("connectx5", 0x02C9, 4119, AtomicCap.ATOMIC_HCA, True),
    ("efa", 0x1D0F, 0xEFA0, AtomicCap.ATOMIC_NONE, False),
])
def test_each_preset_is_the_device_it_names(preset, vendor_id, part, atomics, odp):
    ex = ibv_query_device_ex(_context(NicParams(**NIC_PRESETS[preset])))
    assert (ex.orig_attr.vendor_id, ex.orig_attr.vendor_part_id, ex.orig_attr.atomic_cap) == (vendor_id, part, atomics)
    assert bool(ex.odp_caps.general_caps & OdpGeneralCaps.SUPPORT) is odp
    assert bool(ex.odp_caps.rc_odp_caps & OdpTransportCaps.WRITE) is odp


def test_reported_max_mr_size_is_the_registration_limit():
    ctx = _context(replace(NicParams(), max_mr_size=16384))
    limit = ibv_query_device(ctx).max_mr_size
    pd = ibv_alloc_pd(ctx)
    buf = ctx.node.host.allocate("buf", 64 * 1024)
    assert ibv_reg_mr(pd, buf.addr, limit, Access.LOCAL_WRITE).length == limit
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(pd, buf.addr, limit + 1, Access.LOCAL_WRITE)
    assert info.value.errno == "EINVAL" and "max_mr_size" in str(info.value)


@pytest.mark.parametrize("preset", sorted(NIC_PRESETS))
def test_reported_max_qp_wr_and_rd_atom_are_what_qps_get(preset):
    ctx_a = _context(NicParams(**NIC_PRESETS[preset]))
    ctx_b = _context(NicParams(**NIC_PRESETS[preset]), name="b")
    attr = ibv_query_device(ctx_a)
    qps = [ibv_create_qp(ibv_alloc_pd(c), ibv_create_cq(c, 4), attr.max_qp_wr) for c in (ctx_a, ctx_b)]
    qps[0].connect(qps[1])
    assert rd_atomic_slots(qps[0]) == attr.max_qp_init_rd_atom
    with pytest.raises(VerbsError) as info:
        ibv_create_qp(ibv_alloc_pd(ctx_a), ibv_create_cq(ctx_a, 4), attr.max_qp_wr + 1)
    assert info.value.errno == "EINVAL"


def test_odp_caps_say_whether_on_demand_registration_works():
    for preset in NIC_PRESETS:
        ctx = _context(NicParams(**NIC_PRESETS[preset]))
        buf = ctx.node.host.allocate("buf", 8192)
        supported = bool(ibv_query_device_ex(ctx).odp_caps.general_caps & OdpGeneralCaps.SUPPORT)
        try:
            ibv_reg_mr(ibv_alloc_pd(ctx), buf.addr, 8192, Access.LOCAL_WRITE | Access.ON_DEMAND)
            registered = True
        except VerbsError as err:
            assert err.errno == "EOPNOTSUPP"
            registered = False
        assert registered is supported, preset


@pytest.mark.parametrize("rate, transport, mtu, width, speed, link", [
    ("400Gb/s", "ib", 4096, 2, 128, LinkLayer.INFINIBAND),
    ("200Gb/s", "roce", 1024, 2, 64, LinkLayer.ETHERNET),
    ("100Gb/s", "ib", 2048, 2, 32, LinkLayer.INFINIBAND),
    ("25Gb/s", "roce", 256, 1, 32, LinkLayer.ETHERNET),
    ("123Gb/s", "ib", 4096, 0, 0, LinkLayer.INFINIBAND),
])
def test_query_port_follows_the_fabric(rate, transport, mtu, width, speed, link):
    fabric = FabricParams(rate_Bps=parse_rate(rate), mtu=mtu, transport=transport)
    port = ibv_query_port(_context(NicParams(), fabric), 1)
    assert (port.active_width, port.active_speed, port.link_layer) == (width, speed, link)
    assert port.active_mtu.nbytes == mtu and port.max_mtu is PathMtu.MTU_4096
    if width:
        assert port.rate_Gbps * 1e9 / 8 == fabric.rate_Bps


@pytest.mark.parametrize("preset", sorted(NIC_PRESETS))
def test_port_of_each_preset_at_its_rate(preset):
    fabric = FabricParams(rate_Bps=parse_rate(NIC_RATE[preset]))
    assert ibv_query_port(_context(NicParams(**NIC_PRESETS[preset]), fabric), 1).rate_Gbps * 1e9 / 8 == fabric.rate_Bps


@pytest.mark.parametrize("port_num", [0, 2, -1, 255])
def test_query_port_other_than_1_is_einval(port_num):
    with pytest.raises(VerbsError) as info:
        ibv_query_port(_context(NicParams()), port_num)
    assert info.value.errno == "EINVAL" and info.value.call == "ibv_query_port"


LW = Access.LOCAL_WRITE


@pytest.mark.parametrize("access, caps, errno", [
    (LW | (1 << 10), DeviceCap(0), "EINVAL"),
    (LW | (1 << 19), DeviceCap(0), "EINVAL"),
    (LW | (1 << 30), DeviceCap(0), "EINVAL"),
    (LW | (1 << 31), DeviceCap.FLUSH_GLOBAL, "EINVAL"),
    (Access.REMOTE_WRITE | (1 << 10), DeviceCap(0), "EINVAL"),
    (LW | Access.FLUSH_GLOBAL, DeviceCap(0), "EOPNOTSUPP"),
    (LW | Access.FLUSH_PERSISTENT, DeviceCap(0), "EOPNOTSUPP"),
    (LW | Access.FLUSH_PERSISTENT, DeviceCap.FLUSH_GLOBAL, "EOPNOTSUPP"),
    (LW | Access.FLUSH_GLOBAL, DeviceCap.FLUSH_PERSISTENT, "EOPNOTSUPP"),
    (LW | Access.FLUSH_GLOBAL | Access.FLUSH_PERSISTENT, DeviceCap.FLUSH_GLOBAL | DeviceCap.FLUSH_PERSISTENT, None),
    (LW | Access.FLUSH_GLOBAL, DeviceCap.FLUSH_GLOBAL, None),
    (LW | Access.RELAXED_ORDERING | (1 << 29), DeviceCap(0), None),
    (LW | Access.HUGETLB, DeviceCap(0), None),
])
def test_reg_mr_access_bits(access, caps, errno):
    params = NicParams()
    ctx = _context(replace(params, device=replace(params.device, cap_flags=caps)))
    buf = ctx.node.host.allocate("buf", 8192)
    pd = ibv_alloc_pd(ctx)
    if errno is None:
        assert ibv_reg_mr(pd, buf.addr, 8192, access).access == access
        return
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(pd, buf.addr, 8192, access)
    assert info.value.errno == errno and "ib_check_mr_access" in str(info.value)
    assert ctx.node.host.pinned_pages == 0 and not ctx.node.nic.mrs


def test_supported_mask_is_the_kernels():
    assert IB_ACCESS_SUPPORTED == 0x3FF003FF
