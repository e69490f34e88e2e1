"""XRC through the public API in pyverbs' shape, as rdma-core's tests/base.py ``XRCResources`` builds it and
tests/utils.py ``xrc_traffic`` drives it: an XRC domain on a file, an XRC SRQ with its CQ, XRC_RECV and XRC_SEND QPs
made on the context, SENDs naming the peer's SRQ number both ways; the extended builder's ``wr_set_xrc_srqn``; and
the lifetimes pyverbs gives (closing the domain closes its SRQs and target QPs)."""

from __future__ import annotations

import pytest

from sim.api import (CQ, MR, PD, QP, SGE, SRQ, XRCD, Access, AHAttr, Context, O_CREAT, O_EXCL, Opcode, QPAttr, QPCap,
                     QPEx, QPInitAttrEx, QpInitAttrMask, QpState, QpType, RecvWR, SendOps, SendWR, SrqInitAttrEx,
                     SrqInitAttrMask, SrqType, Testbed, VerbsError, WcOpcode, WcStatus, XRCDInitAttr,
                     XrcdInitAttrMask)

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
MSG = 1024


class XrcSide:
    """``XRCResources`` of one node: the XRC domain on a file, PD, CQ, MR, an XRC SRQ, one XRC_RECV and one
    XRC_SEND QP (``send_ops``: made as a :class:`QPEx` with those builders)."""

    def __init__(self, bed: Testbed, name: str, send_ops: int = 0) -> None:
        self.ctx = Context(bed, name)
        self.fd = XRCD.open_file(self.ctx, "/tmp/xrc-test")
        self.xrcd = XRCD(self.ctx, XRCDInitAttr(XrcdInitAttrMask.FD | XrcdInitAttrMask.OFLAGS, O_CREAT, self.fd))
        self.pd, self.cq = PD(self.ctx), CQ(self.ctx, 64)
        self.mr = MR(self.pd, 1 << 16, RW)
        self.srq = SRQ(self.ctx, SrqInitAttrEx(max_wr=16, srq_type=SrqType.XRC, pd=self.pd, xrcd=self.xrcd,
                                               cq=self.cq, comp_mask=SrqInitAttrMask.TYPE | SrqInitAttrMask.PD
                                               | SrqInitAttrMask.CQ | SrqInitAttrMask.XRCD))
        qp_attr = QPAttr(qp_access_flags=int(RW))
        self.rqp = QP(self.ctx, QPInitAttrEx(qp_type=QpType.XRC_RECV, comp_mask=QpInitAttrMask.XRCD,
                                             xrcd=self.xrcd), qp_attr)
        send = QPInitAttrEx(qp_type=QpType.XRC_SEND, comp_mask=QpInitAttrMask.PD | QpInitAttrMask.SEND_OPS_FLAGS,
                            pd=self.pd, scq=self.cq, cap=QPCap(max_send_wr=16, max_recv_wr=0, max_recv_sge=0),
                            send_ops_flags=send_ops)
        self.sqp = (QPEx if send_ops else QP)(self.ctx, send, QPAttr(qp_access_flags=0))


def to_rts(qp: QP, dest: QP, dest_ctx: Context) -> None:
    qp.to_rts(QPAttr(dest_qp_num=dest.qp_num, ah_attr=AHAttr(dlid=dest_ctx.lid), max_rd_atomic=1,
                     max_dest_rd_atomic=1, min_rnr_timer=12, timeout=14, retry_cnt=7, rnr_retry=7))


def xrc_pair(send_ops: int = 0):
    """Two sides, each one's XRC_SEND connected to the other's XRC_RECV (``XRCResources.to_rts``)."""
    bed = Testbed(["a", "b"], data=True)
    a, b = XrcSide(bed, "a", send_ops), XrcSide(bed, "b", send_ops)
    for here, there in ((a, b), (b, a)):
        to_rts(here.rqp, there.sqp, there.ctx)
        to_rts(here.sqp, there.rqp, there.ctx)
    return bed, a, b


def test_xrc_traffic_both_ways_as_rdma_cores_xrc_traffic():
    """Each SEND lands in the SRQ its ``remote_srqn`` names and completes in that SRQ's CQ with the target QP's
    number; the bytes are the sender's."""
    bed, a, b = xrc_pair()
    for here, there in ((a, b), (b, a)):
        there.srq.post_recv(RecvWR(1, 1, [SGE(there.mr.buf + 4096, MSG, there.mr.lkey)]))
        here.mr.write(bytes([0x5A]) * MSG, MSG, 0)
        wr = SendWR(2, Opcode.SEND, 1, sg=[SGE(here.mr.buf, MSG, here.mr.lkey)])
        wr.set_qp_type_xrc(there.srq.get_srq_num())
        here.sqp.post_send(wr)
        (_, sent), (_, received) = here.cq.poll(1, timeout="1ms"), there.cq.poll(1, timeout="1ms")
        assert [(wc.wr_id, wc.status, wc.opcode) for wc in sent] == [(2, WcStatus.SUCCESS, WcOpcode.SEND)]
        assert [(wc.wr_id, wc.status, wc.byte_len, wc.qp_num) for wc in received] == [
            (1, WcStatus.SUCCESS, MSG, there.rqp.qp_num)]
        assert there.mr.read(MSG, 4096) == bytes([0x5A]) * MSG


def test_the_extended_builder_sets_the_srq_number():
    """tests/utils.py ``xrc_post_send``: ``wr_set_xrc_srqn`` after the opcode and SGE."""
    bed, a, b = xrc_pair(SendOps.SEND | SendOps.RDMA_WRITE)
    b.srq.post_recv(RecvWR(7, 1, [SGE(b.mr.buf, 64, b.mr.lkey)]))
    a.sqp.wr_start()
    a.sqp.wr_id = 3
    a.sqp.wr_send()
    a.sqp.wr_set_sge(SGE(a.mr.buf, 64, a.mr.lkey))
    a.sqp.wr_set_xrc_srqn(b.srq.get_srq_num())
    a.sqp.wr_complete()
    (_, received) = b.cq.poll(1, timeout="1ms")
    assert [(wc.wr_id, wc.status) for wc in received] == [(7, WcStatus.SUCCESS)]


def test_a_wrong_srq_number_is_a_remote_access_error_and_the_target_errs():
    """The rxe XRC series' ``check_resource``: no XRC SRQ of the target's domain with that number."""
    bed, a, b = xrc_pair()
    wr = SendWR(1, Opcode.RDMA_WRITE, 1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
    wr.set_qp_type_xrc(a.srq.get_srq_num() + 1000)
    a.sqp.post_send(wr)
    (_, sent) = a.cq.poll(1, timeout="1ms")
    assert [wc.status for wc in sent] == [WcStatus.REM_ACCESS_ERR]
    assert b.rqp.qp_state is QpState.ERR


def test_rdma_write_and_read_through_the_target():
    bed, a, b = xrc_pair()
    a.mr.write(b"xrc!" * 16, 64, 0)
    for opcode, wr_id in ((Opcode.RDMA_WRITE, 1), (Opcode.RDMA_READ, 2)):
        wr = SendWR(wr_id, opcode, 1, sg=[SGE(a.mr.buf + (wr_id - 1) * 4096, 64, a.mr.lkey)])
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 8192)
        wr.set_qp_type_xrc(b.srq.get_srq_num())
        a.sqp.post_send(wr)
        (_, sent) = a.cq.poll(1, timeout="1ms")
        assert [wc.status for wc in sent] == [WcStatus.SUCCESS]
    assert b.mr.read(64, 8192) == b"xrc!" * 16 and a.mr.read(64, 4096) == b"xrc!" * 16


def test_open_xrcd_errno_through_the_api():
    bed = Testbed(["a"])
    ctx = Context(bed, "a")
    fd = XRCD.open_file(ctx, "/tmp/one")
    with pytest.raises(VerbsError) as err:
        XRCD(ctx, XRCDInitAttr(oflags=0, fd=fd))
    assert err.value.errno == "EAGAIN"
    XRCD(ctx, XRCDInitAttr(oflags=O_CREAT, fd=fd))
    with pytest.raises(VerbsError) as err:
        XRCD(ctx, XRCDInitAttr(oflags=O_CREAT | O_EXCL, fd=fd))
    assert err.value.errno == "EINVAL"


def test_closing_the_domain_closes_its_srqs_and_target_qps_first():
    """pyverbs' ``close_weakrefs``: the XRCD's SRQ and XRC_RECV QP close before it (the verbs layer answers EBUSY
    to a close of a handle still in use)."""
    bed, a, b = xrc_pair()
    a.xrcd.close()
    assert a.srq.closed and a.rqp.closed and not a.sqp.closed
