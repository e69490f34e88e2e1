"""After an error completion the QP flushes: the failing request's completion comes first, then the flushed ones
(rxe_comp.c ``rxe_completer``, ``case COMPST_ERROR: do_complete(qp, wqe); rxe_qp_error(qp);``; mlx5 writes the
error CQE, then moves the QP to ERR and flushes its queues with WR_FLUSH_ERR CQEs)."""

from __future__ import annotations

from sim.api import (CQ, MR, PD, QP, SGE, Context, Opcode, QPAttr, QpAttrMask, QPCap, QPInitAttr, QpState, RecvWR, SendWR,
                     Testbed, WcOpcode, WcStatus)
from tests.sim.api.test_api import rc_pair, write_wr
from tests.sim.api.test_api_recv import RW, connect, poll_n

MR_BYTES = 1 << 16


def _pair(bed: Testbed, one_cq: bool):
    """Nodes a and b, each with a PD, a 64 KiB MR and an RC QP connected to the other; a's QP sends and receives
    on one CQ (``one_cq``) or on two."""
    sides = []
    for name in "ab":
        ctx = Context(bed, name)
        pd = PD(ctx)
        scq = CQ(ctx, 16)
        rcq = scq if one_cq and name == "a" else CQ(ctx, 16)
        mr = MR(pd, MR_BYTES, RW)
        qp = QP(pd, QPInitAttr(scq=scq, rcq=rcq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
        sides.append((ctx, mr, qp, scq, rcq))
    (actx, _, qa, _, _), (bctx, _, qb, _, _) = sides
    connect(qa, qb, bctx)
    connect(qb, qa, actx)
    return sides


def _fail_a_send(bed: Testbed, one_cq: bool):
    """a posts a receive of its own, then a SEND that b's receive cannot take (its scatter entry runs past b's
    MR: LOC_PROT_ERR on b, a Remote Operational Error NAK to a)."""
    (_, amr, qa, ascq, arcq), (_, bmr, qb, _, brcq) = _pair(bed, one_cq)
    qa.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(amr.buf, 64, amr.lkey)]))
    qb.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(bmr.buf + MR_BYTES - 8, 64, bmr.lkey)]))
    qa.post_send(SendWR(wr_id=3, opcode=Opcode.SEND, num_sge=1, sg=[SGE(amr.buf, 64, amr.lkey)]))
    return ascq, arcq, brcq


def test_the_failed_request_completes_before_its_qp_flushes_its_receives():
    ascq, _, brcq = _fail_a_send(Testbed(), one_cq=True)
    (recv,) = poll_n(brcq, 1)
    assert recv.status is WcStatus.LOC_PROT_ERR
    first, second = poll_n(ascq, 2)
    assert (first.wr_id, first.status, first.opcode) == (3, WcStatus.REM_OP_ERR, WcOpcode.SEND)
    assert (second.wr_id, second.status, second.opcode) == (1, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV)
    assert second.completed_ps >= first.completed_ps


def test_on_separate_cqs_the_flush_is_not_earlier_than_the_error():
    ascq, arcq, _ = _fail_a_send(Testbed(), one_cq=False)
    (error,) = poll_n(ascq, 1)
    (flushed,) = poll_n(arcq, 1)
    assert (error.status, flushed.status) == (WcStatus.REM_OP_ERR, WcStatus.WR_FLUSH_ERR)
    assert flushed.completed_ps >= error.completed_ps


def test_a_local_error_stops_the_send_queue_before_its_completion_comes_until_reset():
    """A WRITE whose scatter entry runs past its MR fails at the requester (IBV_WC_LOC_PROT_ERR), and its send queue
    stops there (rxe_req.c: ``err:`` calls ``rxe_qp_error``; mlx5 moves the QP to ERR as it completes the WQE in
    error): the valid WRITE posted right behind it, taken up before that completion came, is flushed, and its data
    never reaches the responder. Moved through RESET back to RTS, the QP sends again."""
    bed = Testbed()
    (_, _, cq, src, qp), (peer_ctx, _, _, dst, peer) = rc_pair(bed)
    src.write(b"rdmasim", 7)
    bad = write_wr(src, dst, 64, wr_id=1)
    bad.sg = [SGE(src.buf + 4096 - 8, 64, src.lkey)]  # 56 bytes past the 4 KiB MR
    qp.post_send(bad)
    qp.post_send(write_wr(src, dst, 7, wr_id=2))
    first, second = poll_n(cq, 2)
    assert (first.wr_id, first.status, second.wr_id, second.status) == (1, WcStatus.LOC_PROT_ERR, 2,
                                                                        WcStatus.WR_FLUSH_ERR)
    assert dst.read(7, 0) == bytes(7)
    qp.modify(QPAttr(qp_state=QpState.RESET), QpAttrMask.STATE)  # RESET starts the send queue afresh
    connect(qp, peer, peer_ctx)
    qp.post_send(write_wr(src, dst, 7, wr_id=3))
    assert [(wc.wr_id, wc.status) for wc in poll_n(cq, 1)] == [(3, WcStatus.SUCCESS)]
    assert dst.read(7, 0) == b"rdmasim"
