"""Receive queues, SRQs and receive-consuming requests: rdma-core's errno values (mlx5_post_recv, mlx5_create_srq,
mlx5_ib_modify_srq), the receive completion's fields, RNR NAKs and retries, length and key errors, the SRQ limit
event as rdma-core's tests/test_srq.py drives it, and data mode's scatter."""

from __future__ import annotations

import numpy as np
import pytest

from models.fabric import Fabric, FabricParams
from models.host import HostParams
from models.nic.nic import NicParams
from models.nic.wqe import (RNR_RETRY_INFINITE, Access, Opcode, QpState, RecvWR, SendWR, Sge, WcFlags, WcOpcode,
                            WcStatus)
from models.node import Node
from models.pcie.link import PcieParams
from models.presets import NIC_PRESETS
from models.verbs.qp_state import AhAttr, PathMtu, QPAttr, QpAttrMask
from models.verbs.query import ibv_query_device
from models.verbs.receive_queue import AsyncEventType, rq_geometry
from models.verbs.recv import (SRQ_LIMIT, SRQ_MAX_WR, SrqAttr, ibv_create_srq, ibv_get_async_event,
                               ibv_modify_srq, ibv_post_recv, ibv_post_srq_recv, ibv_query_srq)
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import (PERFTEST_MIN_RNR_TIMER, PERFTEST_TO_INIT, PERFTEST_TO_RTR, PERFTEST_TO_RTS, ibv_create_qp,
                             ibv_modify_qp, ibv_post_send)
from sim.core import Environment, VerbsError

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
SIZE = 64 * 1024


class Bed:
    """Two nodes with a PD, a registered 64 KiB host buffer and a receive and a send CQ each."""

    def __init__(self, data: bool = False, nic: NicParams | None = None) -> None:
        self.env = Environment(1, data=data)
        fabric = Fabric(FabricParams())
        self.nodes = [Node.create(n, HostParams(memlock_limit=1 << 22), PcieParams(), nic or NicParams()) for n in "ab"]
        self.pds, self.mrs, self.scqs, self.rcqs = [], [], [], []
        for node in self.nodes:
            fabric.attach(node.nic.name)
            pd = ibv_alloc_pd(ibv_open_device(node, self.env, fabric))
            buf = node.host.allocate("buf", SIZE)
            if data:
                node.host.fill("buf", lambda: np.zeros(SIZE, dtype=np.uint8))
            self.pds.append(pd)
            self.mrs.append(ibv_reg_mr(pd, buf.addr, SIZE, RW))
            self.scqs.append(ibv_create_cq(pd.context, 256))
            self.rcqs.append(ibv_create_cq(pd.context, 256))

    def qp(self, side: int, **kw):
        return ibv_create_qp(self.pds[side], self.scqs[side], 16, recv_cq=self.rcqs[side], **kw)

    def pair(self, rnr_retry: int = RNR_RETRY_INFINITE, min_rnr_timer: int = PERFTEST_MIN_RNR_TIMER, **kw):
        """Connected QPs a -> b, both with receive queues (``kw``) unless given an ``srq``."""
        qa, qb = self.qp(0, max_recv_wr=8), self.qp(1, **({"max_recv_wr": 8} | kw))
        connect(qa, qb, rnr_retry, min_rnr_timer)
        return qa, qb

    def recv(self, side: int, wr_id: int, *pieces: tuple[int, int]) -> RecvWR:
        """A receive of ``(offset, length)`` pieces of side ``side``'s buffer."""
        mr = self.mrs[side]
        return RecvWR(wr_id, tuple(Sge(mr.addr + off, n, mr.lkey) for off, n in pieces))

    def send(self, wr_id: int, length: int, opcode: Opcode = Opcode.SEND, imm: int = 0, offset: int = 0) -> SendWR:
        a, b = self.mrs
        return SendWR(wr_id, opcode, a.addr + offset, length, a.lkey, b.addr, b.rkey, imm_data=imm)

    def run(self, ps: int = 5 * 10**9) -> None:
        self.env.run(until=self.env.now + ps)


def connect(qa, qb, rnr_retry: int, min_rnr_timer: int) -> None:
    """RESET -> INIT -> RTR -> RTS on both QPs with perftest's masks, ``rnr_retry`` on each requester."""
    for qp, peer in ((qa, qb), (qb, qa)):
        qp.remote = peer
        ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, port_num=1, qp_access_flags=int(RW)), PERFTEST_TO_INIT)
        ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTR, path_mtu=PathMtu.MTU_4096, dest_qp_num=peer.qp_num,
                                 max_dest_rd_atomic=1, min_rnr_timer=min_rnr_timer, ah_attr=AhAttr()),
                      PERFTEST_TO_RTR)
        ibv_modify_qp(qp, QPAttr(qp_state=QpState.RTS, timeout=14, retry_cnt=7, rnr_retry=rnr_retry,
                                 max_rd_atomic=1), PERFTEST_TO_RTS)


@pytest.fixture
def bed():
    return Bed()


# --- errno tables -------------------------------------------------------------------------------------------

def _full(bed, qp):
    for k in range(qp.rq.depth):
        ibv_post_recv(qp, bed.recv(1, k, (0, 64)))


@pytest.mark.parametrize("setup, wr, errno, words", [
    ("reset", [(0, 64)], "EINVAL", "RESET"),
    ("init", [(0, 64)] * 3, "EINVAL", "num_sge 3 exceeds the queue's max_sge 2"),
    ("full", [(0, 64)], "ENOMEM", "receive queue full"),
    ("full", [(0, 64)] * 3, "ENOMEM", "receive queue full"),  # mlx5_post_recv checks overflow first
    ("srq", [(0, 64)], "EINVAL", "ibv_post_srq_recv"),
])
def test_post_recv_errno(bed, setup, wr, errno, words):
    if setup == "srq":
        qp = bed.qp(1, srq=ibv_create_srq(bed.pds[1], SrqAttr(max_wr=4, max_sge=1)))
    else:
        qp = bed.qp(1, max_recv_wr=2, max_recv_sge=2)
    if setup != "reset":
        ibv_modify_qp(qp, QPAttr(qp_state=QpState.INIT, port_num=1), PERFTEST_TO_INIT)
    if setup == "full":
        _full(bed, qp)
    with pytest.raises(VerbsError) as info:
        ibv_post_recv(qp, bed.recv(1, 99, *wr))
    assert info.value.errno == errno and words in str(info.value) and info.value.call == "ibv_post_recv"


@pytest.mark.parametrize("kw, errno, words", [
    ({"max_recv_wr": 32769}, "EINVAL", "max_recv_wr 32769 outside 0..32768"),
    ({"max_recv_wr": -1}, "EINVAL", "max_recv_wr"),
    ({"max_recv_wr": 4, "max_recv_sge": 31}, "EINVAL", "max_recv_sge 31 outside 0..30"),
])
def test_create_qp_receive_caps_errno(kw, errno, words):
    bed = Bed(nic=NicParams(**NIC_PRESETS["connectx7"]))
    with pytest.raises(VerbsError) as info:
        bed.qp(0, **kw)
    assert info.value.errno == errno and words in str(info.value) and info.value.call == "ibv_create_qp"


@pytest.mark.parametrize("max_recv_wr, max_recv_sge, depth, sge", [
    (0, 1, 0, 0), (1, 1, 4, 1), (5, 1, 8, 1), (8, 2, 8, 2), (100, 3, 128, 4), (512, 1, 512, 1), (2, 16, 2, 16),
])
def test_receive_queue_geometry_is_mlx5s(bed, max_recv_wr, max_recv_sge, depth, sge):
    # mlx5_calc_rq_size: WQE = pow2(16 B x sge), count = max(pow2(max_recv_wr) x WQE, 64 B) / WQE
    assert rq_geometry(max_recv_wr, max_recv_sge) == (depth, sge)
    qp = bed.qp(1, max_recv_wr=max_recv_wr, max_recv_sge=max_recv_sge)
    assert (qp.rq.depth, qp.rq.max_sge) == (depth, sge)


@pytest.mark.parametrize("attr, nic, errno, words", [
    (SrqAttr(max_wr=0), None, "EINVAL", "max_wr 0 outside 1..32767"),
    (SrqAttr(max_wr=32768), None, "EINVAL", "device max_srq_wr"),
    (SrqAttr(max_wr=16, max_sge=32), None, "EINVAL", "max_sge 32 outside 0..31"),
    (SrqAttr(max_wr=16), "efa", "EOPNOTSUPP", "no shared receive queues"),
])
def test_create_srq_errno(attr, nic, errno, words):
    bed = Bed(nic=NicParams(**NIC_PRESETS[nic]) if nic else None)
    with pytest.raises(VerbsError) as info:
        ibv_create_srq(bed.pds[1], attr)
    assert info.value.errno == errno and words in str(info.value) and info.value.call == "ibv_create_srq"


def test_create_srq_gives_at_least_what_was_asked(bed):
    srq = ibv_create_srq(bed.pds[1], SrqAttr(max_wr=10, max_sge=2, srq_limit=5))
    # mlx5_alloc_srq_buf: pow2(max_wr + 1) WQEs, one kept back; 64-byte WQEs hold the next segment and 3 SGEs
    assert ibv_query_srq(srq) == SrqAttr(max_wr=15, max_sge=3, srq_limit=0)


@pytest.mark.parametrize("attr, mask, errno, words", [
    (SrqAttr(max_wr=64), SRQ_MAX_WR, "EINVAL", "does not resize"),
    (SrqAttr(srq_limit=15), SRQ_LIMIT, "EINVAL", "srq_limit 15 must be below max_wr 15"),
    (SrqAttr(srq_limit=1), 1 << 5, "EINVAL", "outside enum ibv_srq_attr_mask"),
])
def test_modify_srq_errno_changes_nothing(bed, attr, mask, errno, words):
    srq = ibv_create_srq(bed.pds[1], SrqAttr(max_wr=10))
    ibv_modify_srq(srq, SrqAttr(srq_limit=3), SRQ_LIMIT)
    with pytest.raises(VerbsError) as info:
        ibv_modify_srq(srq, attr, mask | SRQ_LIMIT if mask == SRQ_MAX_WR else mask)
    assert info.value.errno == errno and words in str(info.value) and info.value.call == "ibv_modify_srq"
    assert ibv_query_srq(srq).srq_limit == 3


@pytest.mark.parametrize("wr, errno, words", [
    ([(0, 8)] * 2, "EINVAL", "num_sge 2 exceeds the queue's max_sge 1"),
    ([(0, 8)], "ENOMEM", "receive queue full"),
])
def test_post_srq_recv_errno(bed, wr, errno, words):
    srq = ibv_create_srq(bed.pds[1], SrqAttr(max_wr=3, max_sge=0))
    assert srq.max_wr == 3 and srq.max_sge == 1
    for k in range(3 if errno == "ENOMEM" else 0):
        ibv_post_srq_recv(srq, bed.recv(1, k, (0, 8)))
    with pytest.raises(VerbsError) as info:
        ibv_post_srq_recv(srq, bed.recv(1, 9, *wr))
    assert info.value.errno == errno and words in str(info.value) and info.value.call == "ibv_post_srq_recv"


def test_async_event_queue_empty_is_eagain(bed):
    with pytest.raises(VerbsError) as info:
        ibv_get_async_event(bed.pds[0].context)
    assert info.value.errno == "EAGAIN" and info.value.call == "ibv_get_async_event"


def test_post_send_refuses_immediate_data_beyond_32_bits(bed):
    qa, _ = bed.pair()
    with pytest.raises(VerbsError) as info:
        ibv_post_send(qa, bed.send(0, 8, Opcode.SEND_WITH_IMM, imm=2**32))
    assert info.value.errno == "EINVAL" and "imm_data" in str(info.value)


# --- completions ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("opcode, wc_opcode, sent_as, flags", [
    (Opcode.SEND, WcOpcode.RECV, WcOpcode.SEND, WcFlags(0)),
    (Opcode.SEND_WITH_IMM, WcOpcode.RECV, WcOpcode.SEND, WcFlags.WITH_IMM),
    (Opcode.RDMA_WRITE_WITH_IMM, WcOpcode.RECV_RDMA_WITH_IMM, WcOpcode.RDMA_WRITE, WcFlags.WITH_IMM),
])
def test_receive_completion_fields(bed, opcode, wc_opcode, sent_as, flags):
    qa, qb = bed.pair()
    ibv_post_recv(qb, bed.recv(1, 41, (0, 4096)))
    ibv_post_send(qa, bed.send(7, 1000, opcode, imm=0xCAFE))
    bed.run()
    (sent,) = ibv_poll_cq(qa.send_cq, 8)
    (got,) = ibv_poll_cq(qb.recv_cq, 8)
    assert (sent.wr_id, sent.status, sent.opcode, sent.byte_len) == (7, WcStatus.SUCCESS, sent_as, 1000)
    assert (got.wr_id, got.status, got.opcode, got.byte_len, got.wc_flags) == (41, WcStatus.SUCCESS, wc_opcode,
                                                                                1000, flags)
    assert (got.qp_num, got.src_qp) == (qb.qp_num, qa.qp_num)
    assert got.imm_data == (0xCAFE if flags else 0)
    assert got.completed_ps < sent.completed_ps  # the receive CQE is written before the ACK gets back
    assert ibv_poll_cq(qb.send_cq, 8) == [] and ibv_poll_cq(qa.recv_cq, 8) == []
    assert wc_opcode & WcOpcode.RECV and not sent_as & WcOpcode.RECV


def test_wc_opcodes_have_rdma_cores_values():
    assert [int(WcOpcode[n]) for n in ("SEND", "RDMA_WRITE", "RDMA_READ", "RECV", "RECV_RDMA_WITH_IMM")] == [
        0, 1, 2, 128, 129]


def test_receives_complete_in_order_and_each_once(bed):
    qa, qb = bed.pair()
    for k in range(5):
        ibv_post_recv(qb, bed.recv(1, 100 + k, (0, 512)))
    for k in range(5):
        ibv_post_send(qa, bed.send(k, 64 * (k + 1)))
    bed.run()
    got = ibv_poll_cq(qb.recv_cq, 16)
    assert [(wc.wr_id, wc.byte_len) for wc in got] == [(100 + k, 64 * (k + 1)) for k in range(5)]
    assert qb.rq.consumed == 5 and qb.rq.held == 0 and not qb.rq.posted



def test_a_receive_slot_is_free_once_its_completion_is_polled(bed):
    # mlx5 advances the receive queue's tail in poll_cq: a delivered, unpolled completion still holds its slot.
    qa, qb = bed.pair()
    _full(bed, qb)
    ibv_post_send(qa, bed.send(0, 64))
    bed.run()
    assert qb.rq.consumed == 1 and len(qb.recv_cq.entries) == 1 and qb.rq.held == qb.rq.depth
    with pytest.raises(VerbsError) as err:
        ibv_post_recv(qb, bed.recv(1, 99, (0, 64)))
    assert err.value.errno == "ENOMEM"
    assert [wc.wr_id for wc in ibv_poll_cq(qb.recv_cq, 8)] == [0]
    ibv_post_recv(qb, bed.recv(1, 99, (0, 64)))
    assert qb.rq.held == qb.rq.depth


def test_a_completion_polled_after_a_reset_frees_no_slot(bed):
    qa, qb = bed.pair()
    ibv_post_recv(qb, bed.recv(1, 1, (0, 64)))
    ibv_post_send(qa, bed.send(0, 64))
    bed.run()
    ibv_modify_qp(qb, QPAttr(qp_state=QpState.RESET), 1)   # the reset emptied the queue and its slots
    ibv_modify_qp(qb, QPAttr(qp_state=QpState.INIT, port_num=1), PERFTEST_TO_INIT)
    ibv_post_recv(qb, bed.recv(1, 2, (0, 64)))
    ibv_poll_cq(qb.recv_cq, 8)
    assert qb.rq.held == 1

# --- RNR NAKs ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("retries", [0, 1, 3])
def test_no_receive_is_retried_rnr_retry_times_then_rnr_retry_exc_err(retries):
    bed = Bed()
    qa, qb = bed.pair(rnr_retry=retries, min_rnr_timer=1)  # 10 us
    ibv_post_send(qa, bed.send(0, 64))
    ibv_post_send(qa, bed.send(1, 64))
    bed.run()
    first, second = ibv_poll_cq(qa.send_cq, 8)
    assert first.status is WcStatus.RNR_RETRY_EXC_ERR and second.status is WcStatus.WR_FLUSH_ERR
    assert qa.rnr_naks == retries + 1 and qa.state is QpState.ERR and qb.state is QpState.RTS
    assert first.completed_ps - first.posted_ps >= retries * 10_000_000
    assert ibv_poll_cq(qb.recv_cq, 8) == []


def test_a_qp_without_receive_queue_answers_sends_with_rnr_naks():
    bed = Bed()
    qa, qb = bed.qp(0), bed.qp(1)
    connect(qa, qb, rnr_retry=1, min_rnr_timer=1)
    assert qb.rq.depth == 0
    ibv_post_send(qa, bed.send(0, 64))
    bed.run()
    assert ibv_poll_cq(qa.send_cq, 8)[0].status is WcStatus.RNR_RETRY_EXC_ERR and qa.rnr_naks == 2


def test_infinite_rnr_retry_waits_for_a_receive_and_keeps_order():
    bed = Bed()
    qa, qb = bed.pair(min_rnr_timer=1)
    for k in range(3):
        ibv_post_send(qa, bed.send(k, 64 * (k + 1)))
    bed.run(35_000_000)  # 35 us: three timers of 10 us, no receive yet
    assert qa.rnr_naks >= 3 and ibv_poll_cq(qa.send_cq, 8) == []
    posted_at = bed.env.now
    for k in range(3):
        ibv_post_recv(qb, bed.recv(1, k, (0, 4096)))
    bed.run()
    sent = ibv_poll_cq(qa.send_cq, 8)
    got = ibv_poll_cq(qb.recv_cq, 8)
    assert [wc.status for wc in sent] == [WcStatus.SUCCESS] * 3
    assert [(wc.wr_id, wc.byte_len) for wc in got] == [(0, 64), (1, 128), (2, 192)]  # go-back-N keeps the order
    assert all(wc.completed_ps > posted_at for wc in got)


def test_a_min_rnr_timer_changed_in_rts_is_the_wait_of_the_next_rnr_nak():
    """IB_QP_MIN_RNR_TIMER is an optional attribute of RTS -> RTS on an RC QP (the kernel's qp_state_table); the
    responder's NAKs carry the timer it holds when it sends them."""
    bed = Bed()
    qa, qb = bed.pair(min_rnr_timer=1)  # 10 us
    ibv_post_send(qa, bed.send(0, 64))
    bed.run(95_000_000)  # 95 us: ten NAKs at most, each 10 us apart
    ten_us = qa.rnr_naks
    ibv_modify_qp(qb, QPAttr(min_rnr_timer=12), QpAttrMask.MIN_RNR_TIMER)  # 0.64 ms
    bed.run(1_000_000_000)  # 1 ms more
    assert 8 <= ten_us <= 10 and ten_us + 1 <= qa.rnr_naks <= ten_us + 2
    ibv_post_recv(qb, bed.recv(1, 0, (0, 64)))
    bed.run()
    assert [wc.status for wc in ibv_poll_cq(qa.send_cq, 8)] == [WcStatus.SUCCESS]


# --- receive errors ---------------------------------------------------------------------------------------------

def test_receive_too_small_is_loc_len_err_on_the_responder_and_rem_inv_req_err_on_the_requester(bed):
    qa, qb = bed.pair(max_recv_sge=2)
    ibv_post_recv(qb, bed.recv(1, 1, (0, 100), (200, 100)))
    ibv_post_recv(qb, bed.recv(1, 2, (0, 4096)))
    ibv_post_send(qa, bed.send(0, 201))
    bed.run()
    (sent,) = ibv_poll_cq(qa.send_cq, 8)
    got = ibv_poll_cq(qb.recv_cq, 8)
    assert sent.status is WcStatus.REM_INV_REQ_ERR
    assert [(wc.wr_id, wc.status, wc.byte_len) for wc in got] == [(1, WcStatus.LOC_LEN_ERR, 0),
                                                                   (2, WcStatus.WR_FLUSH_ERR, 0)]
    assert qa.state is QpState.ERR and qb.state is QpState.ERR


def test_receive_into_an_unknown_key_is_loc_prot_err_and_rem_op_err(bed):
    qa, qb = bed.pair()
    mr = bed.mrs[1]
    ibv_post_recv(qb, RecvWR(5, (Sge(mr.addr, 4096, mr.lkey + 99),)))
    ibv_post_send(qa, bed.send(0, 64))
    bed.run()
    assert ibv_poll_cq(qa.send_cq, 8)[0].status is WcStatus.REM_OP_ERR
    assert ibv_poll_cq(qb.recv_cq, 8)[0].status is WcStatus.LOC_PROT_ERR


def test_post_recv_in_error_flushes_and_reset_empties(bed):
    qa, qb = bed.pair()
    ibv_post_recv(qb, bed.recv(1, 1, (0, 64)))
    ibv_modify_qp(qb, QPAttr(qp_state=QpState.ERR), 1)
    ibv_post_recv(qb, bed.recv(1, 2, (0, 64)))
    assert [(wc.wr_id, wc.status) for wc in ibv_poll_cq(qb.recv_cq, 8)] == [(1, WcStatus.WR_FLUSH_ERR),
                                                                             (2, WcStatus.WR_FLUSH_ERR)]
    ibv_modify_qp(qb, QPAttr(qp_state=QpState.RESET), 1)
    ibv_modify_qp(qb, QPAttr(qp_state=QpState.INIT, port_num=1), PERFTEST_TO_INIT)
    _full(bed, qb)
    assert len(qb.rq.posted) == qb.rq.depth


# --- SRQ --------------------------------------------------------------------------------------------------------

def test_srq_limit_event_as_rdma_cores_test_modify_srq_limit(bed):
    srq = ibv_create_srq(bed.pds[1], SrqAttr(max_wr=16, max_sge=1))
    qa, qb = bed.pair(srq=srq)
    for k in range(10):
        ibv_post_srq_recv(srq, bed.recv(1, k, (0, 4096)))
    ibv_modify_srq(srq, SrqAttr(srq_limit=7), SRQ_LIMIT)
    assert ibv_query_srq(srq).srq_limit == 7
    context = bed.pds[1].context
    for k in range(4):
        ibv_post_send(qa, bed.send(k, 64))
        bed.run()
        assert ibv_poll_cq(qb.recv_cq, 8)[0].wr_id == k
        if k < 3:  # 7 or more left: armed, no event yet
            assert not context.async_events
    event = ibv_get_async_event(context)
    assert event.event_type is AsyncEventType.SRQ_LIMIT_REACHED and event.element is srq
    assert ibv_query_srq(srq).srq_limit == 0  # fired once, disarmed
    ibv_post_send(qa, bed.send(9, 64))
    bed.run()
    assert not context.async_events


def test_qps_on_one_srq_share_its_receives(bed):
    srq = ibv_create_srq(bed.pds[1], SrqAttr(max_wr=8, max_sge=1))
    qa, qb = bed.pair(srq=srq)
    qc, qd = bed.qp(0, max_recv_wr=1), bed.qp(1, srq=srq)
    connect(qc, qd, RNR_RETRY_INFINITE, PERFTEST_MIN_RNR_TIMER)
    for k in range(2):
        ibv_post_srq_recv(srq, bed.recv(1, k, (0, 4096)))
    ibv_post_send(qa, bed.send(0, 64))
    bed.run()
    ibv_post_send(qc, bed.send(1, 128))
    bed.run()
    assert [(wc.wr_id, wc.qp_num, wc.src_qp) for wc in ibv_poll_cq(bed.rcqs[1], 8)] == [
        (0, qb.qp_num, qa.qp_num), (1, qd.qp_num, qc.qp_num)]
    assert srq.consumed == 2 and srq.held == 0 and srq.qps == [qb, qd]


# --- data mode --------------------------------------------------------------------------------------------------

def test_data_mode_send_scatters_across_sges_and_write_with_imm_writes_through_the_rkey():
    bed = Bed(data=True)
    qa, qb = bed.pair(max_recv_sge=3)
    src, dst = bed.nodes[0].host.data["buf"], bed.nodes[1].host.data["buf"]
    src[:] = np.random.default_rng(3).integers(0, 256, SIZE, dtype=np.uint8)
    dst[:] = 0
    ibv_post_recv(qb, bed.recv(1, 1, (1000, 100), (5000, 60), (9000, 500)))
    ibv_post_recv(qb, bed.recv(1, 2, (0, 16)))
    ibv_post_send(qa, bed.send(0, 300, Opcode.SEND_WITH_IMM, imm=77))
    ibv_post_send(qa, SendWR(1, Opcode.RDMA_WRITE_WITH_IMM, bed.mrs[0].addr + 2048, 256, bed.mrs[0].lkey,
                             bed.mrs[1].addr + 20000, bed.mrs[1].rkey, imm_data=5))
    bed.run()
    assert [wc.status for wc in ibv_poll_cq(qa.send_cq, 8)] == [WcStatus.SUCCESS] * 2
    first, second = ibv_poll_cq(qb.recv_cq, 8)
    assert (first.byte_len, first.imm_data, second.opcode, second.imm_data) == (300, 77, WcOpcode.RECV_RDMA_WITH_IMM, 5)
    assert np.array_equal(dst[1000:1100], src[0:100])
    assert np.array_equal(dst[5000:5060], src[100:160])
    assert np.array_equal(dst[9000:9140], src[160:300]) and not dst[9140:9500].any()
    assert np.array_equal(dst[20000:20256], src[2048:2304])
    assert not dst[:16].any()  # the WRITE with immediate took receive 2 but wrote through its rkey
    assert np.count_nonzero(dst) == np.count_nonzero(src[:300]) + np.count_nonzero(src[2048:2304])


@pytest.mark.parametrize("preset, limits", [("connectx7", (8388608, 32767, 31)), ("efa", (0, 0, 0))])
def test_query_device_reports_the_srq_limits_create_srq_enforces(preset, limits):
    bed = Bed(nic=NicParams(**NIC_PRESETS[preset]))
    attr = ibv_query_device(bed.pds[1].context)
    assert (attr.max_srq, attr.max_srq_wr, attr.max_srq_sge) == limits
    if attr.max_srq:
        assert ibv_create_srq(bed.pds[1], SrqAttr(max_wr=attr.max_srq_wr, max_sge=attr.max_srq_sge)).max_wr >= 32767
