"""rdma-core errno semantics and RC access checking."""

import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import NicParams, UmrParams
from models.node import Node
from models.pcie.link import PcieParams
from models.nic.wqe import Access, Opcode, QpState, SendWR, WcStatus
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from sim.core import Environment, VerbsError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


@pytest.fixture
def bed():
    env = Environment(1)
    fabric = Fabric(FabricParams())
    nodes = [Node.create(n, HostParams(memlock_limit=1 << 20), PcieParams(), NicParams()) for n in "ab"]
    pds, bufs = [], []
    for node in nodes:
        fabric.attach(node.nic.name)
        pds.append(ibv_alloc_pd(ibv_open_device(node, env, fabric)))
        bufs.append(node.host.allocate("buf", 64 * 1024))
    return env, nodes, pds, bufs


@pytest.mark.parametrize("addr_off, length, access, errno, words", [
    (0, 0, Access.LOCAL_WRITE, "EINVAL", "length 0"),
    (0, 4096, Access.REMOTE_WRITE, "EINVAL", "requires LOCAL_WRITE"),
    (0, 4096, Access.REMOTE_ATOMIC | Access.REMOTE_READ, "EINVAL", "requires LOCAL_WRITE"),
    (60 * 1024, 8192, Access.LOCAL_WRITE, "EFAULT", "not mapped"),
    (0, 2**64, Access.LOCAL_WRITE, "EINVAL", "overflows"),
])
def test_reg_mr_errno(bed, addr_off, length, access, errno, words):
    _, _, pds, bufs = bed
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(pds[0], bufs[0].addr + addr_off, length, access)
    assert info.value.errno == errno and words in str(info.value) and info.value.call == "ibv_reg_mr"


def test_reg_mr_past_memlock_is_enomem_and_dereg_gives_it_back(bed):
    _, nodes, pds, _ = bed
    big = nodes[0].host.allocate("big", 1 << 20)
    mr = ibv_reg_mr(pds[0], big.addr, big.size, Access.LOCAL_WRITE)
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(pds[0], big.addr, 4096, Access.LOCAL_WRITE)
    assert info.value.errno == "ENOMEM"
    assert ibv_dereg_mr(mr) > 0
    assert ibv_reg_mr(pds[0], big.addr, 4096, Access.LOCAL_WRITE).lkey != mr.lkey
    with pytest.raises(VerbsError) as again:
        ibv_dereg_mr(mr)
    assert again.value.errno == "EINVAL"


def test_registration_cost_grows_with_pages(bed):
    _, nodes, pds, _ = bed
    small = ibv_reg_mr(pds[1], nodes[1].host.buffers["buf"].addr, 4096, Access.LOCAL_WRITE)
    large = ibv_reg_mr(pds[1], nodes[1].host.buffers["buf"].addr, 64 * 1024, Access.LOCAL_WRITE)
    host, entry_ps = HostParams(), UmrParams().pinned_entry_ps  # 16 entries against 1, each beyond pinning
    assert large.reg_ps - small.reg_ps == host.pin_cost_ps(64 * 1024) - host.pin_cost_ps(4096) + 15 * entry_ps > 0


def _pair(bed, depth=8):
    env, nodes, pds, bufs = bed
    qps = []
    for pd in pds:
        cq = ibv_create_cq(pd.context, 64)
        qps.append(ibv_create_qp(pd, cq, depth))
    qps[0].connect(qps[1])
    return qps


def test_queue_creation_checks(bed):
    _, _, pds, _ = bed
    with pytest.raises(VerbsError) as info:
        ibv_create_cq(pds[0].context, 0)
    assert info.value.errno == "EINVAL"
    ibv_create_cq(pds[0].context, 4194303)
    with pytest.raises(VerbsError) as info:
        ibv_create_cq(pds[0].context, 4194304)
    assert info.value.errno == "EINVAL" and "max_cqe (4194303)" in str(info.value)
    cq = ibv_create_cq(pds[0].context, 4)
    with pytest.raises(VerbsError) as info:
        ibv_create_qp(pds[0], cq, 10**6)
    assert info.value.errno == "EINVAL" and "max_qp_wr" in str(info.value)
    qp = ibv_create_qp(pds[0], cq, 4)
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qp, SendWR(0, Opcode.RDMA_WRITE, 0, 1, 0, 0, 0))
    assert info.value.errno == "ENOMEM" and "RTS" in str(info.value)


def test_post_send_checks_queue_depth_and_inline(bed):
    env, _, pds, bufs = bed
    qa, qb = _pair(bed, depth=2)
    la = ibv_reg_mr(pds[0], bufs[0].addr, 4096, RW)
    rb = ibv_reg_mr(pds[1], bufs[1].addr, 4096, RW)
    wr = lambda i, **kw: SendWR(i, Opcode.RDMA_WRITE, la.addr, 64, la.lkey, rb.addr, rb.rkey, **kw)
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, SendWR(0, Opcode.RDMA_READ, la.addr, 64, la.lkey, rb.addr, rb.rkey, inline=True))
    assert info.value.errno == "EINVAL"
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, SendWR(0, Opcode.RDMA_WRITE, la.addr, 4096, la.lkey, rb.addr, rb.rkey, inline=True))
    assert info.value.errno == "ENOMEM"  # mlx5's set_data_inl_seg: more than max_inline_data
    ibv_post_send(qa, wr(0))
    ibv_post_send(qa, wr(1))
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, wr(2))
    assert info.value.errno == "ENOMEM"
    env.run()
    assert [wc.status for wc in ibv_poll_cq(qa.send_cq, 8)] == [WcStatus.SUCCESS] * 2


def _run_one(bed, opcode, *, local_access=RW, remote_access=RW, remote_off=0, length=4096, lkey_valid=True):
    env, _, pds, bufs = bed
    qa, qb = _pair(bed)
    la = ibv_reg_mr(pds[0], bufs[0].addr, 8192, local_access)
    rb = ibv_reg_mr(pds[1], bufs[1].addr, 8192, remote_access)
    lkey = la.lkey if lkey_valid else la.lkey + 1
    ibv_post_send(qa, SendWR(0, opcode, la.addr, length, lkey, rb.addr + remote_off, rb.rkey))
    ibv_post_send(qa, SendWR(1, opcode, la.addr, length, la.lkey, rb.addr, rb.rkey))
    env.run()
    return qa, qb, ibv_poll_cq(qa.send_cq, 8)


@pytest.mark.parametrize("opcode", [Opcode.RDMA_WRITE, Opcode.RDMA_READ])
def test_valid_operations_complete_successfully_in_order(bed, opcode):
    qa, _, wcs = _run_one(bed, opcode)
    assert [(w.wr_id, w.status, w.byte_len) for w in wcs] == [(0, WcStatus.SUCCESS, 4096), (1, WcStatus.SUCCESS, 4096)]
    assert wcs[0].completed_ps > wcs[0].posted_ps and qa.state is QpState.RTS


@pytest.mark.parametrize("opcode, kwargs", [
    (Opcode.RDMA_WRITE, {"remote_access": Access.LOCAL_WRITE | Access.REMOTE_READ}),
    (Opcode.RDMA_READ, {"remote_access": Access.LOCAL_WRITE | Access.REMOTE_WRITE}),
    (Opcode.RDMA_WRITE, {"remote_off": 6000}),
    (Opcode.RDMA_READ, {"remote_off": 8192}),
])
def test_remote_violation_completes_with_rem_access_err_then_flushes(bed, opcode, kwargs):
    qa, qb, wcs = _run_one(bed, opcode, **kwargs)
    assert [w.status for w in wcs] == [WcStatus.REM_ACCESS_ERR, WcStatus.WR_FLUSH_ERR]
    assert all(w.byte_len == 0 for w in wcs)
    assert qa.state is QpState.ERR and qb.state is QpState.ERR


@pytest.mark.parametrize("kwargs", [{"lkey_valid": False}, {"length": 8193}])
def test_local_violation_completes_with_loc_prot_err(bed, kwargs):
    qa, _, wcs = _run_one(bed, Opcode.RDMA_WRITE, **kwargs)
    assert [w.status for w in wcs] == [WcStatus.LOC_PROT_ERR, WcStatus.WR_FLUSH_ERR]


def test_read_into_mr_without_local_write_is_loc_prot_err(bed):
    _, _, wcs = _run_one(bed, Opcode.RDMA_READ, local_access=Access.REMOTE_READ)
    assert wcs[0].status is WcStatus.LOC_PROT_ERR


def test_deregistered_rkey_is_rejected(bed):
    env, _, pds, bufs = bed
    qa, _ = _pair(bed)
    la = ibv_reg_mr(pds[0], bufs[0].addr, 4096, RW)
    rb = ibv_reg_mr(pds[1], bufs[1].addr, 4096, RW)
    ibv_dereg_mr(rb)
    ibv_post_send(qa, SendWR(0, Opcode.RDMA_WRITE, la.addr, 64, la.lkey, rb.addr, rb.rkey))
    env.run()
    assert ibv_poll_cq(qa.send_cq, 1)[0].status is WcStatus.REM_ACCESS_ERR


def test_nic_translation_table_capacity_is_enomem_and_freed_on_dereg():
    env = Environment(1)
    fabric = Fabric(FabricParams())
    node = Node.create("a", HostParams(), PcieParams(), NicParams(max_translations=64))
    fabric.attach(node.nic.name)
    pd = ibv_alloc_pd(ibv_open_device(node, env, fabric))
    buf = node.host.allocate("b", 1 << 20)
    first = ibv_reg_mr(pd, buf.addr, 48 * 4096, RW)
    with pytest.raises(VerbsError) as info:
        ibv_reg_mr(pd, buf.addr, 17 * 4096, RW)
    assert info.value.errno == "ENOMEM" and "translation table full" in str(info.value)
    assert node.host.pinned_pages == 48  # the failed registration pinned nothing
    ibv_dereg_mr(first)
    ibv_reg_mr(pd, buf.addr, 64 * 4096, RW)
    assert node.nic.translations == 64
