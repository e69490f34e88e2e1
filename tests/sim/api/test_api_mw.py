"""Memory windows through the API, as rdma-core's tests/test_mr.py ``MWTest`` uses them and as the kernel and
rdma-core decide each case (the source of each rule in its test: libibverbs/verbs.h ``ibv_bind_mw``,
providers/mlx5/qp.c ``mlx5_bind_mw``, uverbs_cmd.c ``ib_uverbs_alloc_mw``, drivers/infiniband/sw/rxe/rxe_mw.c,
rxe_req.c ``rxe_do_local_ops``, rxe_resp.c ``check_rkey`` and ``RESPST_ERR_INVALIDATE_RKEY``)."""

from __future__ import annotations

import pytest

from sim.api import (CQ, MR, MW, PD, QP, SGE, AHAttr, Access, Context, MWBind, MWBindInfo, Opcode, QPAttr, QPCap,
                     QPInitAttr, QpState, RecvWR, SendFlags, SendWR, Testbed, VerbsError, WcFlags, WcOpcode, WcStatus)
from tests.sim.api.test_api_recv import poll_n

QP_RIGHTS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
WINDOW_RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE
BIND_MR = Access.LOCAL_WRITE | Access.MW_BIND
"""test_mr.py ``MWRC``: the QP's rights, the window's, the MR's (no remote right of its own)."""
SIZE = 4096


class Side:
    """A node's context, PD, CQ, a 4 KiB MR that windows may open onto and an RC QP."""

    def __init__(self, bed: Testbed, name: str, mr_access=BIND_MR) -> None:
        self.ctx = Context(bed, name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 32)
        self.mr = MR(self.pd, SIZE, mr_access)
        self.qp = QP(self.pd, QPInitAttr(scq=self.cq, cap=QPCap(max_send_wr=16, max_recv_wr=8)))


def connect(a: Side, b: Side) -> None:
    for me, peer in ((a, b), (b, a)):
        me.qp.to_rts(QPAttr(qp_access_flags=int(QP_RIGHTS), dest_qp_num=peer.qp.qp_num,
                            ah_attr=AHAttr(dlid=peer.ctx.lid), max_dest_rd_atomic=4, min_rnr_timer=12, timeout=14,
                            retry_cnt=7, rnr_retry=7, max_rd_atomic=4))


def pair(mr_access=BIND_MR, nic=None):
    bed = Testbed({"a": {"nic": nic or {"preset": "connectx7"}}, "b": {"nic": nic or {"preset": "connectx7"}}})
    a, b = Side(bed, "a", mr_access), Side(bed, "b", mr_access)
    connect(a, b)
    return a, b


def rdma(a: Side, opcode: Opcode, rkey: int, addr: int, length: int = 8, wr_id: int = 7) -> WcStatus:
    """``opcode`` of ``length`` bytes from (to) a's MR to (from) ``addr`` through ``rkey``: its status."""
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(a.mr.buf, length, a.mr.lkey)])
    wr.set_wr_rdma(rkey, addr)
    a.qp.post_send(wr)
    (wc,) = poll_n(a.cq, 1)
    return wc.status


def bind_type1(side: Side, mw: MW, addr: int, length: int, rights=WINDOW_RW):
    side.qp.bind_mw(mw, MWBind(MWBindInfo(side.mr, addr, length, int(rights)), SendFlags.SIGNALED, wr_id=11))
    (wc,) = poll_n(side.cq, 1)
    return wc


def bind_type2(side: Side, mw: MW, addr: int, length: int, rights=WINDOW_RW, qp: QP | None = None):
    wr = SendWR(wr_id=12, opcode=Opcode.BIND_MW)
    wr.set_bind_wr(mw, MWBindInfo(side.mr, addr, length, int(rights)))
    (qp or side.qp).post_send(wr)
    (wc,) = poll_n(side.cq, 1)
    return wc, wr.rkey


def test_a_write_through_a_bound_type_1_window_lands_and_the_bind_advances_its_rkey():
    """test_mr.py ``test_mw_type1``; ``mlx5_bind_mw`` posts ``ibv_inc_rkey(mw->rkey)`` and sets ``mw->rkey``."""
    a, b = pair()
    mw = MW(b.pd, 1)
    before = mw.rkey
    wc = bind_type1(b, mw, b.mr.buf, SIZE)
    assert (wc.status, wc.opcode, wc.wr_id) == (WcStatus.SUCCESS, WcOpcode.BIND_MW, 11)
    assert mw.rkey == (before & ~0xFF) | ((before + 1) & 0xFF) != before
    a.mr.write(b"windowed", 8)
    assert rdma(a, Opcode.RDMA_WRITE, mw.rkey, b.mr.buf + 64) is WcStatus.SUCCESS
    assert b.mr.read(8, 64) == b"windowed"


def test_unbinding_a_type_1_window_with_length_0_refuses_later_requests():
    """test_mr.py ``test_invalidate_mw_type1``: a bind of length 0; rxe_mw.c ``rxe_lookup_mw`` (length 0) ->
    RESPST_ERR_RKEY_VIOLATION -> IBV_WC_REM_ACCESS_ERR."""
    a, b = pair()
    mw = MW(b.pd, 1)
    bind_type1(b, mw, b.mr.buf, SIZE)
    assert bind_type1(b, mw, b.mr.buf, 0, rights=0).status is WcStatus.SUCCESS
    assert rdma(a, Opcode.RDMA_WRITE, mw.rkey, b.mr.buf) is WcStatus.REM_ACCESS_ERR


def test_a_type_2_window_bound_by_a_work_request_then_invalidated_locally():
    """test_mr.py ``test_mw_type2_invalidate_local``: the bind's new rkey is the work request's
    (``set_bind_wr``: ``inc_rkey(mw.rkey)``), the window's own ``rkey`` unchanged; ``IBV_WR_LOCAL_INV`` frees it
    (``rxe_invalidate_mw``)."""
    a, b = pair()
    mw = MW(b.pd, 2)
    before = mw.rkey
    wc, rkey = bind_type2(b, mw, b.mr.buf, SIZE)
    assert (wc.status, wc.opcode) == (WcStatus.SUCCESS, WcOpcode.BIND_MW)
    assert mw.rkey == before != rkey
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf) is WcStatus.SUCCESS
    inv = SendWR(wr_id=13, opcode=Opcode.LOCAL_INV)
    inv.imm_data = rkey
    b.qp.post_send(inv)
    (wc,) = poll_n(b.cq, 1)
    assert (wc.status, wc.opcode) == (WcStatus.SUCCESS, WcOpcode.LOCAL_INV)
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf) is WcStatus.REM_ACCESS_ERR


def test_a_send_with_invalidate_frees_the_responders_window():
    """test_mr.py ``test_mw_type2_invalidate_remote``: the receive completes with ``IBV_WC_WITH_INV`` and the
    invalidated rkey (rxe_resp.c ``invalidate_rkey``, ``wc->ex.invalidate_rkey``)."""
    a, b = pair()
    mw = MW(b.pd, 2)
    _, rkey = bind_type2(b, mw, b.mr.buf, SIZE)
    b.qp.post_recv(RecvWR(wr_id=21, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    send = SendWR(wr_id=22, opcode=Opcode.SEND_WITH_INV, num_sge=1, sg=[SGE(a.mr.buf, 16, a.mr.lkey)])
    send.imm_data = rkey
    a.qp.post_send(send)
    (sent,) = poll_n(a.cq, 1)
    (received,) = poll_n(b.cq, 1)
    assert (sent.status, sent.opcode) == (WcStatus.SUCCESS, WcOpcode.SEND)
    assert (received.status, received.opcode, received.byte_len) == (WcStatus.SUCCESS, WcOpcode.RECV, 16)
    assert received.wc_flags & WcFlags.WITH_INV and received.imm_data == rkey
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf) is WcStatus.REM_ACCESS_ERR


def test_a_send_with_invalidate_of_a_key_it_cannot_invalidate_fails_the_receive_not_the_send():
    """rxe_resp.c: ``RESPST_ERR_INVALIDATE_RKEY`` (class J) completes the receive IBV_WC_REM_INV_REQ_ERR and moves
    the responder to ERR; the request was acknowledged. A type 1 window cannot be invalidated (o10-37.2.26)."""
    a, b = pair()
    mw = MW(b.pd, 1)
    bind_type1(b, mw, b.mr.buf, SIZE)
    b.qp.post_recv(RecvWR(wr_id=21, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    send = SendWR(wr_id=22, opcode=Opcode.SEND_WITH_INV, num_sge=1, sg=[SGE(a.mr.buf, 16, a.mr.lkey)])
    send.imm_data = mw.rkey
    a.qp.post_send(send)
    assert poll_n(a.cq, 1)[0].status is WcStatus.SUCCESS
    assert poll_n(b.cq, 1)[0].status is WcStatus.REM_INV_REQ_ERR
    assert b.qp.qp_state is QpState.ERR


def test_deallocating_a_bound_window_refuses_later_requests():
    """test_mr.py ``test_mw_type2_invalidate_dealloc``: ``ibv_dealloc_mw`` of a bound window succeeds
    (``mlx5_ib_dealloc_mw`` destroys the mkey) and its key is refused from then on."""
    a, b = pair()
    mw = MW(b.pd, 2)
    _, rkey = bind_type2(b, mw, b.mr.buf, SIZE)
    mw.close()
    assert rdma(a, Opcode.RDMA_WRITE, rkey, b.mr.buf) is WcStatus.REM_ACCESS_ERR


@pytest.mark.parametrize("nic, mw_type, errno", [
    ({"preset": "connectx7"}, 3, "EINVAL"),   # ib_uverbs_alloc_mw: only IB_MW_TYPE_1 and IB_MW_TYPE_2
    ({"preset": "efa"}, 1, "EOPNOTSUPP"),     # no alloc_mw: libibverbs' dummy op (test_reg_mw_wrong_type skips)
    ({"preset": "efa"}, 2, "EOPNOTSUPP"),
])
def test_allocating_a_window_the_device_cannot_make(nic, mw_type, errno):
    bed = Testbed({"a": {"nic": nic}})
    pd = PD(Context(bed, "a"))
    with pytest.raises(VerbsError) as err:
        MW(pd, mw_type)
    assert err.value.errno == errno


def test_device_capabilities_report_windows_where_the_device_has_them():
    """mlx5_ib_query_device: ``imaicl`` sets IB_DEVICE_MEM_WINDOW and IB_DEVICE_MEM_WINDOW_TYPE_2B together;
    EFA reports neither and max_mw 0."""
    bed = Testbed({"a": {"nic": {"preset": "connectx7"}}, "b": {"nic": {"preset": "efa"}}})
    mem_window, type_2b = 1 << 17, 1 << 24
    cx7, efa = Context(bed, "a").query_device(), Context(bed, "b").query_device()
    assert cx7.device_cap_flags & mem_window and cx7.device_cap_flags & type_2b and cx7.max_mw > 0
    assert not efa.device_cap_flags & (mem_window | type_2b) and efa.max_mw == 0


def test_ibv_bind_mw_argument_checks():
    """libibverbs ``ibv_bind_mw``: a type 2 window EINVAL, an MR of another PD EPERM; ``mlx5_bind_mw``: a
    zero-based type 1 window EINVAL. Nothing is posted."""
    a, b = pair()
    other = MR(PD(b.ctx), SIZE, BIND_MR)
    cases = [(MW(b.pd, 2), MWBindInfo(b.mr, b.mr.buf, SIZE, int(WINDOW_RW)), "EINVAL"),
             (MW(b.pd, 1), MWBindInfo(other, other.buf, SIZE, int(WINDOW_RW)), "EPERM"),
             (MW(b.pd, 1), MWBindInfo(b.mr, 0, SIZE, int(WINDOW_RW | Access.ZERO_BASED)), "EINVAL")]
    for mw, info, errno in cases:
        with pytest.raises(VerbsError) as err:
            b.qp.bind_mw(mw, MWBind(info, SendFlags.SIGNALED))
        assert err.value.errno == errno
    assert b.cq.poll(timeout="50us") == (0, [])


def test_a_window_beyond_one_klm_entry_is_refused_when_posted():
    """mlx5 ``set_bind_wr``: "check that len > 2GB because KLM support only 2GB" -> EOPNOTSUPP."""
    a, b = pair()
    wr = SendWR(opcode=Opcode.BIND_MW)
    wr.set_bind_wr(MW(b.pd, 2), MWBindInfo(b.mr, b.mr.buf, (1 << 31) + 1, int(WINDOW_RW)))
    with pytest.raises(VerbsError) as err:
        b.qp.post_send(wr)
    assert err.value.errno == "EOPNOTSUPP"
