"""A QP's remembered work-request paths: a later work request of the same kind takes them only while what they
depend on is unchanged (its own SGE's address, the links' outages)."""

import numpy as np
import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.datapath import LOST_FRAMES, REQUEST_WIRE, RESPONSES, TRANSMIT, work_request_path
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
from sim.core.steps import Check, Claim, walk_order

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


def test_the_responder_takes_a_qps_reads_up_in_their_order(pair):
    """IB spec vol. 1 9.7.5.1: a responder answers a QP's requests in PSN order. The requester's transmit claim is
    made in the send queue's turn; the responder's first access after its check of a READ (its payload read) in
    the turn of the QP's READs at the responder, so that a READ whose translation missed holds the later ones
    there."""
    env, (qa, qb), (src, dst) = pair
    steps = work_request_path(qa, SendWR(0, Opcode.RDMA_READ, src.iova, 4096, src.lkey, dst.iova, dst.rkey),
                              env.now).steps
    turns = [(s.server, s.turn) for s in steps if isinstance(s, Claim) and s.turn in (TRANSMIT, RESPONSES)]
    checked = next(k for k, s in enumerate(steps) if isinstance(s, Check) and s.name == "responder")
    first = next(s for s in steps[checked:] if isinstance(s, Claim))
    assert turns == [(qa.node.nic.tx_port, TRANSMIT), (first.server, RESPONSES)]
    assert first.server is qb.node.pcie.tags or first.server in vars(qb.node.pcie).values()
