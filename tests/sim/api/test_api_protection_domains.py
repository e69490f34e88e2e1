"""A key names an MR only for QPs of the MR's protection domain: rxe_mr.c ``lookup_mr`` returns NULL when
``mr_pd(mr) != pd`` (the QP's PD), as mlx5 hardware refuses an mkey whose PD is not the QP's.

What each side then completes (rxe_req.c for the requester's own SGE; rxe_resp.c ``check_rkey`` ->
``RESPST_ERR_RKEY_VIOLATION`` -> ``do_class_ac_error(qp, AETH_NAK_REM_ACC_ERR, IB_WC_REM_ACCESS_ERR)`` for an R_Key;
``send_data_in`` -> ``copy_data(qp->pd, IB_ACCESS_LOCAL_WRITE, ...)`` fails -> a NAK Remote Operational Error for a
receive's scatter entry), with mlx5's CQE syndromes (cq.c ``mlx5_handle_error_cqe``: LOCAL_PROT_ERR ->
IBV_WC_LOC_PROT_ERR, REMOTE_ACCESS_ERR, REMOTE_OP_ERR):

* the requester's own lkey in another PD: IBV_WC_LOC_PROT_ERR, nothing reaches the responder;
* an rkey in another PD at the responder: NAK-Remote Access Error, IBV_WC_REM_ACCESS_ERR at the requester;
* a receive's scatter entry in another PD: IBV_WC_LOC_PROT_ERR on that receive, IBV_WC_REM_OP_ERR at the requester.
"""

from __future__ import annotations

from models.nic.refusal import refusal
from sim.api import (CQ, MR, PD, QP, SGE, AHAttr, Access, Context, Opcode, QPAttr, QPCap, QPInitAttr, RecvWR, SendWR,
                     Testbed, WcOpcode, WcStatus)
from tests.sim.api.test_api_recv import poll_n

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
CHANGE_PD = 2
"""``IBV_REREG_MR_CHANGE_PD``."""


class Side:
    """A node with two PDs: its QP and 64 KiB MR in the first, a second MR (or the first, moved) in the other."""

    def __init__(self, bed: Testbed, name: str) -> None:
        self.ctx = Context(bed, name)
        self.pd, self.other_pd = PD(self.ctx), PD(self.ctx)
        self.scq, self.rcq = CQ(self.ctx, 16), CQ(self.ctx, 16)
        self.mr = MR(self.pd, 1 << 16, RW)
        self.qp = QP(self.pd, QPInitAttr(scq=self.scq, rcq=self.rcq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))

    def sge(self, length: int = 64) -> SGE:
        return SGE(self.mr.buf, length, self.mr.lkey)



def _pair():
    bed = Testbed()
    a, b = Side(bed, "a"), Side(bed, "b")
    for me, peer in ((a, b), (b, a)):
        me.qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp.qp_num, ah_attr=AHAttr(dlid=peer.ctx.lid),
                            max_dest_rd_atomic=4, min_rnr_timer=12, timeout=14, retry_cnt=7, rnr_retry=7,
                            max_rd_atomic=4))
    return a, b


def _rdma(opcode: Opcode, a: Side, target: MR) -> SendWR:
    """Work request 3: ``opcode`` from a's MR to the start of ``target``."""
    wr = SendWR(wr_id=3, opcode=opcode, num_sge=1, sg=[a.sge()])
    wr.set_wr_rdma(target.rkey, target.buf)
    return wr


def _statuses(wcs) -> list:
    return [(wc.wr_id, wc.status) for wc in wcs]


def test_a_send_from_an_mr_moved_to_another_pd_is_a_local_protection_error():
    a, b = _pair()
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge()]))
    a.qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[a.sge()]))
    a.mr.rereg(CHANGE_PD, pd=a.other_pd)
    a.qp.post_send(SendWR(wr_id=3, opcode=Opcode.SEND, num_sge=1, sg=[a.sge()]))
    a.qp.post_send(SendWR(wr_id=4, opcode=Opcode.SEND, num_sge=1, sg=[a.sge()]))
    assert _statuses(poll_n(a.scq, 2)) == [(3, WcStatus.LOC_PROT_ERR), (4, WcStatus.WR_FLUSH_ERR)]
    assert _statuses(poll_n(a.rcq, 1)) == [(2, WcStatus.WR_FLUSH_ERR)]
    assert b.rcq.poll(timeout="100us") == (0, [])  # nothing was sent: b's receive is still posted


def test_a_write_through_an_rkey_of_another_pd_is_a_remote_access_error():
    a, b = _pair()
    foreign = MR(b.other_pd, 1 << 16, RW)
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge()]))
    a.qp.post_send(_rdma(Opcode.RDMA_WRITE, a, foreign))
    (error,) = poll_n(a.scq, 1)
    assert (error.wr_id, error.status, error.opcode) == (3, WcStatus.REM_ACCESS_ERR, WcOpcode.RDMA_WRITE)
    assert _statuses(poll_n(b.rcq, 1)) == [(1, WcStatus.WR_FLUSH_ERR)]  # the responder moved to ERR after its NAK


def test_a_read_through_an_rkey_moved_to_another_pd_is_a_remote_access_error():
    a, b = _pair()
    b.mr.rereg(CHANGE_PD, pd=b.other_pd)
    a.qp.post_send(_rdma(Opcode.RDMA_READ, a, b.mr))
    assert _statuses(poll_n(a.scq, 1)) == [(3, WcStatus.REM_ACCESS_ERR)]


def test_a_receive_scattering_into_another_pd_fails_on_both_sides():
    a, b = _pair()
    b.mr.rereg(CHANGE_PD, pd=b.other_pd)
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge()]))
    b.qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[b.sge()]))
    a.qp.post_send(SendWR(wr_id=3, opcode=Opcode.SEND, num_sge=1, sg=[a.sge()]))
    assert _statuses(poll_n(b.rcq, 2)) == [(1, WcStatus.LOC_PROT_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert _statuses(poll_n(a.scq, 1)) == [(3, WcStatus.REM_OP_ERR)]


def test_the_same_traffic_in_one_pd_succeeds():
    a, b = _pair()
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge()]))
    a.qp.post_send(SendWR(wr_id=3, opcode=Opcode.SEND, num_sge=1, sg=[a.sge()]))
    assert _statuses(poll_n(b.rcq, 1)) == [(1, WcStatus.SUCCESS)]
    assert _statuses(poll_n(a.scq, 1)) == [(3, WcStatus.SUCCESS)]


def test_the_vectorized_cores_refusal_names_the_same_statuses():
    """The planner asks :func:`models.nic.refusal.refusal` before it solves: a foreign-PD key sends the run to the
    event engine, with the status that engine completes."""
    a, b = _pair()
    send = SendWR(wr_id=3, opcode=Opcode.SEND, num_sge=1, sg=[a.sge()])
    write = _rdma(Opcode.RDMA_WRITE, a, b.mr)
    recv = RecvWR(wr_id=1, num_sge=1, sg=[b.sge()])._request("ibv_post_recv")
    assert refusal(a.qp.qp, write._request("ibv_post_send")) is None
    assert refusal(a.qp.qp, send._request("ibv_post_send"), recv) is None
    b.mr.rereg(CHANGE_PD, pd=b.other_pd)
    assert refusal(a.qp.qp, write._request("ibv_post_send")) == "IBV_WC_REM_ACCESS_ERR"
    assert refusal(a.qp.qp, send._request("ibv_post_send"), recv) == "IBV_WC_REM_OP_ERR"
    a.mr.rereg(CHANGE_PD, pd=a.other_pd)
    assert refusal(a.qp.qp, send._request("ibv_post_send"), recv) == "IBV_WC_LOC_PROT_ERR"
