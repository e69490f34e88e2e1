"""PSNs drive the responder: each request takes its packets' PSNs from ``sq_psn``, the responder checks them
against ``rq_psn``; mismatched PSNs at connect time show as duplicates (acknowledged, not executed) or as
out-of-sequence requests whose retries run out in IBV_WC_RETRY_EXC_ERR."""

from __future__ import annotations

import pytest

from models.verbs.qp_state import ack_timeout_ps
from sim.api import AHAttr, Opcode, QPAttr, SendFlags, SendWR, Testbed, WcStatus
from tests.sim.api.test_api_recv import RW, Side, poll_n

MASK = 0xFFFFFF


def _link(sq_psn: int, rq_psn: int, retry_cnt: int = 2):
    bed = Testbed()
    a, b = Side(bed, "a"), Side(bed, "b")
    qa, qb = a.qp(), b.qp()
    for qp, peer, ctx, psns in ((qa, qb, b.ctx, (0, sq_psn)), (qb, qa, a.ctx, (rq_psn, 0))):
        qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=ctx.lid),
                         max_dest_rd_atomic=4, min_rnr_timer=12, timeout=1, retry_cnt=retry_cnt, rnr_retry=7,
                         max_rd_atomic=4, rq_psn=psns[0], sq_psn=psns[1]))
    return bed, a, qa, b, qb


def _writes(a, qa, b, count: int, length: int = 8) -> None:
    """WRITE ``count`` distinct patterns of ``length`` bytes to consecutive places of b's MR."""
    for i in range(count):
        a.mr.write(bytes([i + 1]) * length, length, length * i)
        wr = SendWR(wr_id=i, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(length * i, length)],
                    send_flags=SendFlags.SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + length * i)
        qa.post_send(wr)


@pytest.mark.parametrize("sq_psn, rq_psn, executed", [
    (0, 0, [1, 2, 3, 4, 5, 6]),
    (0, 4, [0, 0, 0, 0, 5, 6]),                   # requester 4 behind: its first 4 are duplicates, acknowledged
    (MASK - 1, 1, [0, 0, 0, 4, 5, 6]),            # behind across the 24-bit wrap
])
def test_a_requester_behind_the_responder_gets_duplicates_acknowledged_unwritten(sq_psn, rq_psn, executed):
    bed, a, qa, b, qb = _link(sq_psn, rq_psn)
    _writes(a, qa, b, 6)
    assert [wc.status for wc in poll_n(a.scq, 6)] == [WcStatus.SUCCESS] * 6
    assert [b.mr.read(1, 8 * i)[0] for i in range(6)] == executed
    assert qa.query(0)[0].sq_psn == (sq_psn + 6) & MASK and qb.query(0)[0].rq_psn == (sq_psn + 6) & MASK


def test_a_duplicate_read_is_read_again_and_moves_no_psn():
    """With rq_psn 2, the READ (PSN 0) is read again as a duplicate, and the WRITE after it (PSN 1) is still one."""
    bed, a, qa, b, qb = _link(0, 2)
    b.mr.write(b"readable", 8, 64)
    read = SendWR(wr_id=0, opcode=Opcode.RDMA_READ, num_sge=1, sg=[a.sge(512, 8)], send_flags=SendFlags.SIGNALED)
    read.set_wr_rdma(b.mr.rkey, b.mr.buf + 64)
    qa.post_send(read)
    _writes(a, qa, b, 2)  # PSNs 1 and 2 (wr_ids 0 and 1)
    assert [wc.status for wc in poll_n(a.scq, 3)] == [WcStatus.SUCCESS] * 3
    assert a.mr.read(8, 512) == b"readable" and [b.mr.read(1, 8 * i)[0] for i in range(2)] == [0, 2]
    assert qb.query(0)[0].rq_psn == 3


@pytest.mark.parametrize("sq_psn, rq_psn", [(5, 0), (0, MASK - 3), (1 << 22, 0)])
def test_a_requester_ahead_of_the_responder_retries_until_retry_exc_err(sq_psn, rq_psn):
    bed, a, qa, b, qb = _link(sq_psn, rq_psn, retry_cnt=2)
    t0 = bed.now_ps
    _writes(a, qa, b, 3)
    assert [wc.status for wc in poll_n(a.scq, 3)] == [WcStatus.RETRY_EXC_ERR] + [WcStatus.WR_FLUSH_ERR] * 2
    assert 3 * ack_timeout_ps(1) < bed.now_ps - t0 < 4 * ack_timeout_ps(1)  # the first try and two retries
    assert b.mr.read(24, 0) == bytes(24) and qb.query(0)[0].rq_psn == rq_psn


def test_each_request_takes_one_psn_per_path_mtu_packet():
    bed, a, qa, b, qb = _link(100, 100)
    mtu = qa.query(0)[0].path_mtu
    packet = 128 << mtu
    for length in (1, packet, packet + 1, 3 * packet):
        wr = SendWR(wr_id=length, opcode=Opcode.RDMA_READ, num_sge=1, sg=[a.sge(0, length)],
                    send_flags=SendFlags.SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        qa.post_send(wr)
    atomic = SendWR(wr_id=9, opcode=Opcode.ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[a.sge(0, 8)],
                    send_flags=SendFlags.SIGNALED)
    atomic.set_wr_atomic(b.mr.rkey, b.mr.buf, 1)
    qa.post_send(atomic)
    assert all(wc.status is WcStatus.SUCCESS for wc in poll_n(a.scq, 5))
    assert qa.query(0)[0].sq_psn == qb.query(0)[0].rq_psn == 100 + 1 + 1 + 2 + 3 + 1
