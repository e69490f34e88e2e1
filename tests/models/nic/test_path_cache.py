"""A QP's remembered work-request paths: a later work request of the same kind takes them only while what they
depend on is unchanged (its own SGE's address, the links' outages)."""

import numpy as np
import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.datapath import LOST_FRAMES, REQUEST_WIRE, work_request_path
from models.nic.nic import NicParams
from models.nic.translation import mr_bytes
from models.nic.wqe import Access, Opcode, SendWR, WcStatus
from models.node import Node
from models.pcie.link import PcieParams
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from sim.core import Environment
from sim.core.steps import Check, walk_order

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


@pytest.fixture
def pair():
    """Two connected RC QPs in data mode, each with a registered 8 KiB buffer of distinct bytes."""
    env = Environment(1, data=True)
    fabric = Fabric(FabricParams())
    qps, mrs = [], []
    for name in "ab":
        node = Node.create(name, HostParams(memlock_limit=1 << 20), PcieParams(), NicParams())
        fabric.attach(node.nic.name)
        pd = ibv_alloc_pd(ibv_open_device(node, env, fabric))
        buf = node.host.allocate("buf", 8192)
        node.host.fill("buf", lambda: (np.arange(8192) % 251).astype(np.uint8))
        mrs.append(ibv_reg_mr(pd, buf.addr, 8192, RW))
        qps.append(ibv_create_qp(pd, ibv_create_cq(pd.context, 64), 8))
    qps[0].connect(qps[1])
    return env, qps, mrs


def test_a_write_from_another_address_of_the_same_mr_sends_its_own_bytes(pair):
    env, (qa, _), (src, dst) = pair
    for k, (at, to) in enumerate(((0, 0), (64, 1024))):  # same opcode, length and keys: the second is remembered
        ibv_post_send(qa, SendWR(k, Opcode.RDMA_WRITE, src.iova + at, 64, src.lkey, dst.iova + to, dst.rkey))
    env.run()
    assert [wc.status for wc in ibv_poll_cq(qa.send_cq, 8)] == [WcStatus.SUCCESS] * 2
    sent, landed = mr_bytes(src, src.iova, 8192), mr_bytes(dst, dst.iova, 8192)
    assert np.array_equal(landed[1024:1088], sent[64:128]) and not np.array_equal(sent[0:64], sent[64:128])


def test_a_write_after_a_link_outage_is_scheduled_checks_for_lost_frames(pair):
    env, (qa, _), (src, dst) = pair
    wr = SendWR(0, Opcode.RDMA_WRITE, src.iova, 64, src.lkey, dst.iova, dst.rkey)
    before = work_request_path(qa, wr, env.now)
    qa.node.nic.link_down(10**9, 10**6)
    after = work_request_path(qa, wr, env.now)
    lost = Check(REQUEST_WIRE, decides=LOST_FRAMES)
    assert lost not in walk_order(before.steps) and lost in walk_order(after.steps)
