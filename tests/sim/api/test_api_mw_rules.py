"""The rules a memory window's bind, invalidation and use follow, each from its source: rxe_mw.c
``rxe_check_bind_mw`` (the IB specification's rule numbers), ``rxe_invalidate_mw``, ``rxe_lookup_mw``, rxe_req.c
``rxe_do_local_ops`` (a failed bind completes IBV_WC_MW_BIND_ERR, a failed local invalidation IBV_WC_LOC_QP_OP_ERR,
and the QP moves to ERR, flushing what follows), rxe_resp.c ``check_rkey`` (a refused window key is a NAK Remote
Access Error), mlx5's window mkey (``set_umr_mkey_seg``: start address, length and rights of its own)."""

from __future__ import annotations

import pytest

from types import SimpleNamespace

from sim.api import (CQ, MR, MW, PD, QP, SGE, Access, AHAttr, Context, MWBind, MWBindInfo, Opcode, QPAttr, QPCap,
                     QPInitAttr, QpState, QpType, RecvWR, SendWR, Testbed, VerbsError, WcStatus)
from tests.sim.api.test_api_mw import SIZE, WINDOW_RW, bind_type1, bind_type2, connect, pair, rdma
from tests.sim.api.test_api_recv import poll_n

LW, RW, RR, MWB = Access.LOCAL_WRITE, Access.REMOTE_WRITE, Access.REMOTE_READ, Access.MW_BIND


def _second_qps(a, b, b_pd=None):
    """Another connected pair of QPs between a and b (b's on ``b_pd``, default b's PD)."""
    qp_a = QP(a.pd, QPInitAttr(scq=a.cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    qp_b = QP(b_pd or b.pd, QPInitAttr(scq=b.cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    connect(SimpleNamespace(qp=qp_a, ctx=a.ctx), SimpleNamespace(qp=qp_b, ctx=b.ctx))
    return qp_a, qp_b


def _flushed_after(side) -> WcStatus:
    """The status of a WRITE side posts after a failed local operation (its QP is in ERR: flushed)."""
    wr = SendWR(wr_id=99, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(side.mr.buf, 8, side.mr.lkey)])
    wr.set_wr_rdma(side.mr.rkey, side.mr.buf)
    side.qp.post_send(wr)
    return poll_n(side.cq, 1)[0].status


@pytest.mark.parametrize("mr_access, addr, length, rights, rule", [
    (LW, 0, SIZE, WINDOW_RW, "C10-73: the MR has no IBV_ACCESS_MW_BIND"),
    (MWB, 0, SIZE, RW, "C10-74: a writable window on an MR without LOCAL_WRITE"),
    (LW | MWB, 64, SIZE, WINDOW_RW, "C10-75: the window ends beyond the MR"),
])
def test_a_type_1_bind_that_breaks_a_rule_completes_mw_bind_err_and_the_qp_flushes(mr_access, addr, length, rights,
                                                                                   rule):
    a, b = pair(mr_access)
    mw = MW(b.pd, 1)
    wc = bind_type1(b, mw, b.mr.buf + addr, length, rights)
    assert wc.status is WcStatus.MW_BIND_ERR, rule
    assert b.qp.qp_state is QpState.ERR and _flushed_after(b) is WcStatus.WR_FLUSH_ERR


def test_a_window_with_only_read_rights_on_an_mr_without_local_write_binds():
    """C10-74 asks LOCAL_WRITE of the MR only for a window with remote write or atomic rights."""
    a, b = pair(MWB)
    a.mr = MR(a.pd, SIZE, LW)  # where the READ's response lands
    mw = MW(b.pd, 1)
    assert bind_type1(b, mw, b.mr.buf, SIZE, RR).status is WcStatus.SUCCESS
    assert rdma(a, Opcode.RDMA_READ, mw.rkey, b.mr.buf) is WcStatus.SUCCESS
    assert rdma(a, Opcode.RDMA_WRITE, mw.rkey, b.mr.buf) is WcStatus.REM_ACCESS_ERR   # rxe_lookup_mw: no right


def test_binding_a_bound_type_2_window_again_is_a_bind_error():
    """o10-37.2.30: a type 2 window binds only from the free state."""
    a, b = pair()
    mw = MW(b.pd, 2)
    assert bind_type2(b, mw, b.mr.buf, SIZE)[0].status is WcStatus.SUCCESS
    assert bind_type2(b, mw, b.mr.buf, SIZE)[0].status is WcStatus.MW_BIND_ERR


def test_a_type_2_bind_of_length_0_is_a_bind_error():
    """o10-37.2.40: a type 2 window is not invalidated by a bind with no MR or length 0."""
    a, b = pair()
    assert bind_type2(b, MW(b.pd, 2), b.mr.buf, 0)[0].status is WcStatus.MW_BIND_ERR


def test_a_type_2_bind_through_a_qp_of_another_pd_is_a_bind_error():
    """C10-72: the binding QP's PD must be the window's."""
    a, b = pair()
    _, other_qp = _second_qps(a, b, PD(b.ctx))
    wc, _ = bind_type2(b, MW(b.pd, 2), b.mr.buf, SIZE, qp=other_qp)
    assert wc.status is WcStatus.MW_BIND_ERR and other_qp.qp_state is QpState.ERR


def test_a_type_2_window_answers_only_requests_reaching_the_qp_that_bound_it():
    """rxe_lookup_mw: ``mw->ibmw.type == IB_MW_TYPE_2 && mw->qp != qp`` refuses the key (type 2B)."""
    a, b = pair()
    mw = MW(b.pd, 2)
    _, rkey = bind_type2(b, mw, b.mr.buf, SIZE)
    second_a, _ = _second_qps(a, b)
    wr = SendWR(wr_id=8, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_rdma(rkey, b.mr.buf)
    second_a.post_send(wr)
    assert poll_n(a.cq, 1)[0].status is WcStatus.REM_ACCESS_ERR
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf) is WcStatus.SUCCESS   # the binding QP's peer still may


def test_a_zero_based_type_2_window_takes_offsets_from_its_start():
    """rxe_resp.c ``check_rkey``: ``if (mw->access & IB_ZERO_BASED) qp->resp.offset = mw->addr``; mlx5 writes the
    window's mkey with start address 0 (``set_umr_mkey_seg``)."""
    a, b = pair()
    _, rkey = bind_type2(b, MW(b.pd, 2), b.mr.buf + 1024, 512, WINDOW_RW | Access.ZERO_BASED)
    a.mr.write(b"zero-based", 10)
    assert rdma(a, Opcode.RDMA_WRITE, rkey, 100, length=10) is WcStatus.SUCCESS
    assert b.mr.read(10, 1124) == b"zero-based"
    assert rdma(a, Opcode.RDMA_WRITE, rkey, 510, length=10) is WcStatus.REM_ACCESS_ERR   # past its 512 bytes


@pytest.mark.parametrize("what", ["type 1 window", "MR key", "unknown key"])
def test_a_local_invalidation_it_cannot_make_completes_loc_qp_op_err(what):
    """rxe_req.c ``rxe_do_local_ops``: LOCAL_INV's failure is IBV_WC_LOC_QP_OP_ERR; ``rxe_invalidate_mw`` refuses a
    type 1 window (o10-37.2.26), ``rxe_invalidate_mr`` an MR that is not a fast-registration MR."""
    a, b = pair()
    keys = {"type 1 window": lambda: MW(b.pd, 1).rkey, "MR key": lambda: b.mr.rkey, "unknown key": lambda: 0x7F00}
    inv = SendWR(wr_id=13, opcode=Opcode.LOCAL_INV)
    inv.imm_data = keys[what]()
    b.qp.post_send(inv)
    assert poll_n(b.cq, 1)[0].status is WcStatus.LOC_QP_OP_ERR
    assert b.qp.qp_state is QpState.ERR


def test_a_window_holds_its_pd_and_the_verbs_refuse_its_deallocation_twice():
    """ib_uverbs_alloc_mw: ``atomic_inc(&pd->usecnt)``, so ``ibv_dealloc_pd`` is EBUSY while a window lives."""
    from models.verbs.destroy import ibv_dealloc_pd
    from models.verbs.mw import ibv_dealloc_mw

    a, b = pair()
    pd = PD(b.ctx)
    mw = MW(pd, 1)
    with pytest.raises(VerbsError) as err:
        ibv_dealloc_pd(pd.pd)
    assert err.value.errno == "EBUSY"
    mw.close()
    with pytest.raises(VerbsError) as err:
        ibv_dealloc_mw(mw.mw)
    assert err.value.errno == "EINVAL"
    pd.close()


def test_deregistering_the_mr_under_a_bound_window_refuses_requests_through_it():
    """mlx5 does not refuse ``ibv_dereg_mr`` of an MR windows are bound to (rxe does, EINVAL: ``num_mw``); the
    window's KLM then points to a destroyed mkey, and a request through it is a NAK Remote Access Error."""
    a, b = pair()
    mr = MR(b.pd, SIZE, LW | MWB)
    mw = MW(b.pd, 1)
    b.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf, SIZE, int(WINDOW_RW)), 0))  # the QP signals every request
    assert poll_n(b.cq, 1)[0].status is WcStatus.SUCCESS
    assert rdma(a, Opcode.RDMA_WRITE, mw.rkey, mr.buf) is WcStatus.SUCCESS
    address = mr.buf
    mr.close()
    assert rdma(a, Opcode.RDMA_WRITE, mw.rkey, address) is WcStatus.REM_ACCESS_ERR


def test_a_uc_qp_binds_and_invalidates_a_window_and_its_peer_is_then_dropped():
    """UC carries BIND_MW, LOCAL_INV and SEND_WITH_INV (mlx5 ``MLX5_SUPPORTED_SEND_OPS_FLAGS_UC``); a UC responder
    refuses a key without a word back (rxe_resp.c ``RESPST_ERR_RKEY_VIOLATION``: UC, class E: the message is
    dropped), so the WRITE completes at the requester and nothing lands."""
    bed = Testbed()
    sides = []
    for name in "ab":
        ctx = Context(bed, name)
        pd, cq = PD(ctx), CQ(ctx, 16)
        mr = MR(pd, SIZE, LW | MWB)
        qp = QP(pd, QPInitAttr(qp_type=QpType.UC, scq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
        sides.append(SimpleNamespace(ctx=ctx, pd=pd, cq=cq, mr=mr, qp=qp))
    a, b = sides
    for me, peer in ((a, b), (b, a)):
        me.qp.to_rts(QPAttr(qp_access_flags=int(LW | RW), dest_qp_num=peer.qp.qp_num,
                            ah_attr=AHAttr(dlid=peer.ctx.lid)))
    mw = MW(b.pd, 2)
    wc, rkey = bind_type2(b, mw, b.mr.buf, SIZE)
    assert wc.status is WcStatus.SUCCESS
    a.mr.write(b"first", 5)
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf, length=5) is WcStatus.SUCCESS
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b.mr.buf + 1024, 64, b.mr.lkey)]))
    send = SendWR(wr_id=2, opcode=Opcode.SEND_WITH_INV, num_sge=1, sg=[SGE(a.mr.buf, 5, a.mr.lkey)])
    send.imm_data = rkey
    a.qp.post_send(send)
    assert poll_n(a.cq, 1)[0].status is WcStatus.SUCCESS
    assert poll_n(b.cq, 1)[0].imm_data == rkey
    a.mr.write(b"again", 5)
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf, length=5) is WcStatus.SUCCESS   # sent, never acknowledged
    bed.run("100us")
    assert b.mr.read(5, 0) == b"first"
