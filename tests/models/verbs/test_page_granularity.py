"""Host mappings are whole pages, as mmap makes them: any part of a mapped page registers (the rest of a buffer's
last page too); one byte past the mapping is EFAULT for a pinned MR (pin_user_pages_fast) and registers for an ODP
MR, whose first NIC access there fails instead."""

import numpy as np
import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostMemory, HostParams
from models.nic.nic import NicParams
from models.nic.wqe import Access, Opcode, SendWR, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from sim.core import Environment, VerbsError

PAGE = 4096
SIZE = 3 * PAGE + 100
"""A buffer ending 100 bytes into its fourth page."""
LW = Access.LOCAL_WRITE
RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def _pd(env=None, fabric=None, name="a"):
    env = env or Environment(1)
    node = Node.create(name, HostParams(poll_period_ps=0), PcieParams(), NicParams())
    if fabric is not None:
        fabric.attach(node.nic.name)
    return ibv_alloc_pd(ibv_open_device(node, env, fabric))


def _errno(pd, addr, length, access):
    try:
        ibv_reg_mr(pd, addr, length, access)
        return "ok"
    except VerbsError as err:
        return err.errno


@pytest.mark.parametrize("case, offset, length, access, errno", [
    ("the buffer itself", 0, SIZE, LW, "ok"),
    ("the rest of the last page", SIZE, 4 * PAGE - SIZE, LW, "ok"),
    ("up to the last byte of the last page", 0, 4 * PAGE, LW, "ok"),
    ("the last byte of the last page alone", 4 * PAGE - 1, 1, LW, "ok"),
    ("one byte past the mapping", 0, 4 * PAGE + 1, LW, "EFAULT"),
    ("the guard page after it", 4 * PAGE, 1, LW, "EFAULT"),
    ("one byte before the mapping", -1, 2, LW, "EFAULT"),
    ("ODP one byte past the mapping registers", 0, 4 * PAGE + 1, LW | Access.ON_DEMAND, "ok"),
    ("ODP of the guard page registers", 4 * PAGE, PAGE, LW | Access.ON_DEMAND, "ok"),
])
def test_registration_is_page_granular(case, offset, length, access, errno):
    pd = _pd()
    buf = pd.context.node.host.allocate("buf", SIZE)
    assert _errno(pd, buf.addr + offset, length, access) == errno, case


def test_mapped_length_rounds_up_to_pages_and_data_mode_zero_fills_the_tail():
    mem = HostMemory("a", HostParams())
    buf = mem.allocate("b", SIZE)
    assert mem.mapped_length(buf) == 4 * PAGE and mem.is_mapped(buf.addr + 4 * PAGE - 1, 1)
    assert not mem.is_mapped(buf.addr + 4 * PAGE - 1, 2)
    mem.fill("b", lambda: np.full(SIZE, 7, dtype=np.uint8))
    data = mem.data["b"]
    assert len(data) == 4 * PAGE and (data[:SIZE] == 7).all() and not data[SIZE:].any()


def _pair():
    env, fabric = Environment(1), Fabric(FabricParams())
    pds = [_pd(env, fabric, name) for name in "ab"]
    bufs = [pd.context.node.host.allocate("buf", SIZE) for pd in pds]
    qps = [ibv_create_qp(pd, ibv_create_cq(pd.context, 8), 4) for pd in pds]
    qps[0].connect(qps[1])
    return env, pds, bufs, qps[0]


def _write(env, qp, src, src_addr, dst, dst_addr, length):
    ibv_post_send(qp, SendWR(1, Opcode.RDMA_WRITE, src_addr, length, src.lkey, dst_addr, dst.rkey))
    env.run()
    (wc,) = ibv_poll_cq(qp.send_cq, 1)
    return wc.status


def test_writing_the_tail_of_the_last_page_succeeds():
    env, pds, bufs, qp = _pair()
    src = ibv_reg_mr(pds[0], bufs[0].addr, 4 * PAGE, RW)
    dst = ibv_reg_mr(pds[1], bufs[1].addr, 4 * PAGE, RW)
    tail = 4 * PAGE - 8
    assert _write(env, qp, src, bufs[0].addr + tail, dst, bufs[1].addr + tail, 8) is WcStatus.SUCCESS


@pytest.mark.parametrize("side, status", [("requester", WcStatus.LOC_PROT_ERR), ("responder", WcStatus.REM_ACCESS_ERR)])
def test_an_odp_access_past_the_mapping_fails_when_the_nic_touches_it(side, status):
    env, pds, bufs, qp = _pair()
    over = 5 * PAGE  # registers the guard page too
    src = ibv_reg_mr(pds[0], bufs[0].addr, over if side == "requester" else 4 * PAGE,
                     RW | (Access.ON_DEMAND if side == "requester" else 0))
    dst = ibv_reg_mr(pds[1], bufs[1].addr, over if side == "responder" else 4 * PAGE,
                     RW | (Access.ON_DEMAND if side == "responder" else 0))
    inside = _write(env, qp, src, bufs[0].addr, dst, bufs[1].addr, 64)
    assert inside is WcStatus.SUCCESS
    if side == "requester":
        assert _write(env, qp, src, bufs[0].addr + 4 * PAGE, dst, bufs[1].addr, 64) is status
    else:
        assert _write(env, qp, src, bufs[0].addr, dst, bufs[1].addr + 4 * PAGE, 64) is status
