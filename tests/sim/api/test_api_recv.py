"""The public API's receive side, SRQs, atomics, SGE lists, send flags, async events and ODP advice: the same errno
as the free functions underneath, the kernel's destroy rules for SRQs and receive CQs, and the bytes that move."""

from __future__ import annotations

import pandas as pd
import pytest

from models.nic.wqe import RecvWR as ReceiveRequest
from models.nic.wqe import Sge
from models.verbs.advise import ibv_advise_mr
from models.verbs.destroy import ibv_dealloc_pd, ibv_destroy_cq, ibv_destroy_qp, ibv_destroy_srq
from models.verbs.recv import (SrqAttr as FreeSrqAttr, ibv_create_srq, ibv_get_async_event, ibv_modify_srq,
                               ibv_post_recv, ibv_post_srq_recv)
from models.verbs.cq import ibv_create_cq
from models.verbs.mr import ibv_reg_mr
from models.verbs.qp import ibv_create_qp, ibv_post_send
from sim.api import (ADVISE_MR_FLAG_FLUSH, CQ, MR, PD, QP, SGE, SRQ, SRQ_LIMIT, SRQ_MAX_WR, AdviseMrAdvice, AHAttr,
                     Access, AsyncEventType, Context, Opcode, ProtocolError, QPAttr, QPCap, QPInitAttr, QpState,
                     RecvWR, SendFlags, SendWR, SrqAttr, SrqInitAttr, Testbed, VerbsError, WcFlags, WcOpcode,
                     WcStatus)

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC


def errno_of(call, *args, **kwargs) -> str:
    """The errno name ``call`` fails with (the test fails when it succeeds)."""
    with pytest.raises(VerbsError) as info:
        call(*args, **kwargs)
    return info.value.errno


def connect(qp: QP, peer: QP, peer_ctx: Context) -> None:
    qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=peer_ctx.lid),
                     max_dest_rd_atomic=4, min_rnr_timer=12, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=4))


class Side:
    """One node's context, PD, send CQ, receive CQ and 64 KiB MR (``access``: RW)."""

    def __init__(self, bed: Testbed, name: str, access: Access = RW) -> None:
        self.ctx = Context(bed, name)
        self.pd = PD(self.ctx)
        self.scq, self.rcq = CQ(self.ctx, 64), CQ(self.ctx, 64)
        self.mr = MR(self.pd, 1 << 16, access)

    def qp(self, cap: QPCap | None = None, **init) -> QP:
        return QP(self.pd, QPInitAttr(scq=self.scq, rcq=self.rcq, cap=cap or QPCap(max_send_wr=16), **init))

    def sge(self, offset: int, length: int) -> SGE:
        return SGE(self.mr.buf + offset, length, self.mr.lkey)


def pair(bed: Testbed, cap: QPCap | None = None, **init):
    """Sides a and b with one connected QP each."""
    a, b = Side(bed, "a"), Side(bed, "b")
    qa, qb = a.qp(cap, **init), b.qp(cap, **init)
    connect(qa, qb, b.ctx)
    connect(qb, qa, a.ctx)
    return a, qa, b, qb


def poll_n(cq: CQ, n: int) -> list:
    wcs = []
    while len(wcs) < n:
        got = cq.poll(n - len(wcs), timeout="1ms")[1]
        assert got, f"only {len(wcs)} of {n} completions came"
        wcs += got
    return wcs


# --- the same illegal call gets the same errno through the API and through the free functions ---

def test_srq_errors_match_the_free_functions():
    bed = Testbed({"a": {}, "b": {"nic": {"preset": "efa"}}})
    pd, free_pd = PD(Context(bed, "a")), bed.bed.pds["a"]
    max_sge = bed.bed.nodes["a"].nic.params.device.max_srq_sge
    for attr in (SrqAttr(max_wr=0), SrqAttr(max_wr=1 << 20), SrqAttr(max_sge=max_sge + 1)):
        assert errno_of(SRQ, pd, SrqInitAttr(attr)) == errno_of(ibv_create_srq, free_pd, attr) == "EINVAL"
    assert errno_of(SRQ, PD(Context(bed, "b")), SrqInitAttr()) \
        == errno_of(ibv_create_srq, bed.bed.pds["b"], SrqAttr()) == "EOPNOTSUPP"     # EFA has no SRQs
    srq, free_srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=1))), ibv_create_srq(free_pd, SrqAttr(max_wr=1))
    assert errno_of(srq.modify, SrqAttr(max_wr=8), SRQ_MAX_WR) \
        == errno_of(ibv_modify_srq, free_srq, SrqAttr(max_wr=8), SRQ_MAX_WR) == "EINVAL"   # no resizing
    assert errno_of(srq.modify, SrqAttr(srq_limit=1), SRQ_LIMIT) \
        == errno_of(ibv_modify_srq, free_srq, SrqAttr(srq_limit=1), SRQ_LIMIT) == "EINVAL"  # not below max_wr
    mr = MR(pd, 4096, RW)
    wide = RecvWR(num_sge=2, sg=[SGE(mr.buf, 8, mr.lkey)] * 2)
    free_sge = Sge(mr.buf, 8, mr.lkey)
    assert errno_of(srq.post_recv, wide) == errno_of(ibv_post_srq_recv, free_srq, ReceiveRequest(0, (free_sge,) * 2)) \
        == "EINVAL"
    srq.post_recv(RecvWR(num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))
    ibv_post_srq_recv(free_srq, ReceiveRequest(0, (free_sge,)))
    one = RecvWR(num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)])
    assert errno_of(srq.post_recv, one) == errno_of(ibv_post_srq_recv, free_srq, ReceiveRequest(0, (free_sge,))) \
        == "ENOMEM"                                                                  # one slot, held


def test_qp_creation_and_receive_errors_match_the_free_functions():
    bed = Testbed()
    ctx, free_pd = Context(bed, "a"), bed.bed.pds["a"]
    pd, cq = PD(ctx), CQ(ctx, 8)
    free_cq = ibv_create_cq(bed.bed.contexts["a"], 8)
    nic = bed.bed.nodes["a"].nic.params
    dev = nic.device
    for cap, free in ((QPCap(max_recv_wr=nic.max_qp_wr + 1), {"max_recv_wr": nic.max_qp_wr + 1}),
                      (QPCap(max_recv_sge=dev.max_sge + 1), {"max_recv_sge": dev.max_sge + 1}),
                      (QPCap(max_send_sge=dev.max_sge + 1), {"max_send_sge": dev.max_sge + 1})):
        assert errno_of(QP, pd, QPInitAttr(scq=cq, cap=cap)) \
            == errno_of(ibv_create_qp, free_pd, free_cq, 1, **free) == "EINVAL"
    other = SRQ(PD(Context(bed, "b")), SrqInitAttr())
    assert errno_of(QP, pd, QPInitAttr(scq=cq, srq=other)) \
        == errno_of(ibv_create_qp, free_pd, free_cq, 1, srq=other.srq) == "EINVAL"   # SRQ of another device
    assert errno_of(QP, pd, QPInitAttr(scq=cq, rcq=CQ(Context(bed, "b"), 8))) == "EINVAL"
    mr = MR(pd, 4096, RW)
    qp, free_qp = QP(pd, QPInitAttr(scq=cq, cap=QPCap(max_recv_wr=1))), ibv_create_qp(free_pd, free_cq, 1,
                                                                                       max_recv_wr=1)
    one, free_one = RecvWR(num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]), ReceiveRequest(0, (Sge(mr.buf, 8, mr.lkey),))
    assert errno_of(qp.post_recv, one) == errno_of(ibv_post_recv, free_qp, free_one) == "EINVAL"   # RESET
    on_srq = QP(pd, QPInitAttr(scq=cq, srq=SRQ(pd, SrqInitAttr())))
    on_srq.to_init(QPAttr(qp_access_flags=int(RW)))
    assert errno_of(on_srq.post_recv, one) == errno_of(ibv_post_recv, on_srq.qp, free_one) == "EINVAL"


def test_post_send_errors_match_ibv_post_send():
    bed = Testbed({"a": {}, "b": {"nic": {"preset": "efa"}}})
    a, b = Side(bed, "a"), Side(bed, "b", Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    qa, qb = a.qp(QPCap(max_send_wr=1, max_send_sge=1, max_inline_data=16)), b.qp(QPCap(max_send_wr=1))
    for qp, peer, ctx in ((qa, qb, b.ctx), (qb, qa, a.ctx)):
        qp.to_rts(QPAttr(qp_access_flags=int(Access.REMOTE_WRITE), dest_qp_num=peer.qp_num,
                         ah_attr=AHAttr(dlid=ctx.lid), timeout=14, retry_cnt=7, rnr_retry=7))

    def both(qp: QP, wr: SendWR) -> str:
        return errno_of(qp.post_send, wr) if errno_of(qp.post_send, wr) == errno_of(
            ibv_post_send, qp.qp, wr._request("test")) else "differs"

    two = SendWR(opcode=Opcode.RDMA_WRITE, num_sge=2, sg=[a.sge(0, 8), a.sge(8, 8)])
    assert both(qa, two) == "ENOMEM"                                         # beyond max_send_sge
    big_inline = SendWR(opcode=Opcode.SEND, num_sge=1, sg=[a.sge(0, 64)],
                        send_flags=SendFlags.SIGNALED | SendFlags.INLINE)
    assert both(qa, big_inline) == "ENOMEM"                                  # beyond max_inline_data
    inline_read = SendWR(opcode=Opcode.RDMA_READ, num_sge=1, sg=[a.sge(0, 8)], send_flags=SendFlags.INLINE)
    assert both(qa, inline_read) == "EINVAL"                                 # inline data only for sends
    wide_imm = SendWR(opcode=Opcode.SEND_WITH_IMM, num_sge=1, sg=[a.sge(0, 8)], imm_data=1 << 32)
    assert both(qa, wide_imm) == "EINVAL"                                    # imm_data is 32 bits
    atomic = SendWR(opcode=Opcode.ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[b.sge(0, 8)])
    atomic.set_wr_atomic(a.mr.rkey, a.mr.buf, 1)
    assert both(qb, atomic) == "EOPNOTSUPP"                                  # EFA: atomic_cap NONE


def test_advise_and_implicit_mr_errors_match_the_free_functions():
    bed = Testbed({"a": {}, "b": {"nic": {"preset": "efa"}}})
    a = Side(bed, "a")
    pinned = [SGE(a.mr.buf, 4096, a.mr.lkey)]
    free = [Sge(a.mr.buf, 4096, a.mr.lkey)]
    advice = AdviseMrAdvice.PREFETCH
    assert errno_of(a.pd.advise_mr, advice, 0, pinned) == errno_of(ibv_advise_mr, a.pd.pd, advice, 0, free) \
        == "ENOENT"                                                              # not an ODP MR
    assert errno_of(a.pd.advise_mr, advice, 1 << 5, pinned) == errno_of(ibv_advise_mr, a.pd.pd, advice, 1 << 5, free) \
        == "EINVAL"                                                              # unknown flag
    assert errno_of(a.pd.advise_mr, advice, 0, []) == errno_of(ibv_advise_mr, a.pd.pd, advice, 0, []) == "EINVAL"
    efa_pd = PD(Context(bed, "b"))
    odp = Access.LOCAL_WRITE | Access.ON_DEMAND
    assert errno_of(MR, efa_pd, 0, odp, implicit=True) \
        == errno_of(ibv_reg_mr, bed.bed.pds["b"], 0, 2**64 - 1, odp) == "EOPNOTSUPP"  # EFA has no ODP
    assert errno_of(efa_pd.advise_mr, advice, 0, pinned) == "EOPNOTSUPP"


def test_async_event_errors_match_ibv_get_async_event():
    bed = Testbed()
    ctx = Context(bed, "a")
    assert errno_of(ctx.get_async_event) == errno_of(ibv_get_async_event, ctx.ctx) == "EAGAIN"
    start = bed.now_ps
    assert errno_of(ctx.get_async_event, timeout="2us") == "EAGAIN" and bed.now_ps == start + 2_000_000


# --- destroy rules ---

def test_an_srq_in_use_closes_its_qps_and_a_pd_its_srq():
    """pyverbs' ``SRQ.close`` closes the QPs on it, ``PD.close`` the SRQ (``close_weakrefs``); the destroy verbs
    alone are EBUSY (``ib_destroy_srq_user``, ``uverbs_free_pd``)."""
    bed = Testbed()
    a = Side(bed, "a")
    srq = SRQ(a.pd, SrqInitAttr())
    qp = a.qp(srq=srq)
    other = a.qp()
    assert errno_of(ibv_destroy_srq, srq.srq) == errno_of(ibv_dealloc_pd, a.pd.pd) == "EBUSY"
    srq.close()
    assert srq.closed and qp.closed and not other.closed
    with pytest.raises(ProtocolError, match="SRQ used after close"):
        srq.post_recv(RecvWR(num_sge=1, sg=[SGE(0, 8, 0)]))
    srq = SRQ(a.pd, SrqInitAttr())
    a.pd.close()
    assert srq.closed and other.closed and a.mr.closed and not a.scq.closed


def test_a_cq_in_use_closes_the_qps_on_it():
    """pyverbs' ``CQ.close`` closes its QPs first; ``ibv_destroy_cq`` alone is EBUSY (``ib_destroy_cq_user``)."""
    bed = Testbed()
    a = Side(bed, "a")
    qp = a.qp()
    assert errno_of(ibv_destroy_cq, a.rcq.cq) == errno_of(ibv_destroy_cq, a.scq.cq) == "EBUSY"
    a.rcq.close()
    assert a.rcq.closed and qp.closed and not a.scq.closed
    a.scq.close()
    assert a.scq.closed


def test_free_ibv_destroy_srq_refuses_in_use_and_twice():
    bed = Testbed()
    pd = bed.bed.pds["a"]
    cq = ibv_create_cq(bed.bed.contexts["a"], 4)
    srq = ibv_create_srq(pd, FreeSrqAttr(max_wr=4))
    qp = ibv_create_qp(pd, cq, 1, srq=srq)
    assert errno_of(ibv_destroy_srq, srq) == errno_of(ibv_dealloc_pd, pd) == "EBUSY"
    ibv_destroy_qp(qp)
    ibv_destroy_srq(srq)
    assert errno_of(ibv_destroy_srq, srq) == "EINVAL"
    ibv_dealloc_pd(pd)


def test_a_destroyed_qp_leaves_no_receive_completion():
    bed = Testbed()
    a, qa, b, qb = pair(bed)
    qb.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[b.sge(0, 64)]))
    qa.post_send(SendWR(wr_id=6, num_sge=1, sg=[a.sge(0, 64)]))
    bed.run("100us")
    assert len(b.rcq.cq.entries) == 1
    qb.close()                                                     # its receive's completion goes with it
    assert b.rcq.poll(timeout=0) == (0, [])
    b.rcq.close()


def test_context_close_destroys_srqs_and_receive_cqs():
    bed = Testbed()
    a = Side(bed, "a")
    srq = SRQ(a.pd, SrqInitAttr())
    qp = a.qp(srq=srq)
    a.ctx.close()
    assert all(obj.closed for obj in (srq, qp, a.rcq, a.scq, a.pd)) and a.pd.pd.destroyed


# --- bytes that move ---

def test_send_gathers_and_the_receive_scatters_into_the_receive_cq():
    bed = Testbed()
    a, qa, b, qb = pair(bed, QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=3, max_recv_sge=2))
    qb.post_recv(RecvWR(wr_id=70, num_sge=2, sg=[b.sge(0, 5), b.sge(1000, 100)]))
    for offset, piece in ((0, b"zero-"), (200, b"copy "), (400, b"send")):
        a.mr.write(piece, len(piece), offset)
    qa.post_send(SendWR(wr_id=71, opcode=Opcode.SEND, num_sge=3, sg=[a.sge(0, 5), a.sge(200, 5), a.sge(400, 4)]))
    (recv,) = poll_n(b.rcq, 1)
    (sent,) = poll_n(a.scq, 1)
    assert (recv.wr_id, recv.status, recv.opcode, recv.byte_len) == (70, WcStatus.SUCCESS, WcOpcode.RECV, 14)
    assert recv.src_qp == qa.qp_num and recv.qp_num == qb.qp_num and not recv.wc_flags & WcFlags.WITH_IMM
    assert b.mr.read(5, 0) + b.mr.read(9, 1000) == b"zero-copy send"
    assert (sent.wr_id, sent.opcode) == (71, WcOpcode.SEND)
    assert a.rcq.poll(timeout=0) == (0, []) and b.scq.poll(timeout=0) == (0, [])   # nothing in the wrong CQ


def test_write_with_immediate_lands_and_consumes_a_receive():
    bed = Testbed()
    a, qa, b, qb = pair(bed)
    qb.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge(0, 8)]))
    a.mr.write(b"written", 7)
    wr = SendWR(wr_id=2, opcode=Opcode.RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=0xBEEF, sg=[a.sge(0, 7)])
    wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 4096)
    qa.post_send(wr)
    (recv,) = poll_n(b.rcq, 1)
    assert recv.opcode is WcOpcode.RECV_RDMA_WITH_IMM and recv.wc_flags & WcFlags.WITH_IMM
    assert recv.imm_data == 0xBEEF and recv.byte_len == 7
    assert b.mr.read(7, 4096) == b"written" and b.mr.read(7, 0) == bytes(7)    # not in the receive's buffer
    (sent,) = poll_n(a.scq, 1)
    assert sent.opcode is WcOpcode.RDMA_WRITE


@pytest.mark.parametrize("compare, expect_old, expect_new", [(7, 7, 99), (8, 7, 7)])
def test_compare_and_swap(compare, expect_old, expect_new):
    bed = Testbed()
    a, qa, b, _ = pair(bed)
    b.mr.write((7).to_bytes(8, "little"), 8, 64)
    wr = SendWR(wr_id=3, opcode=Opcode.ATOMIC_CMP_AND_SWP, num_sge=1, sg=[a.sge(128, 8)])
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf + 64, compare_add=compare, swap=99)
    qa.post_send(wr)
    (wc,) = poll_n(a.scq, 1)
    assert wc.status is WcStatus.SUCCESS and wc.opcode is WcOpcode.COMP_SWAP and wc.byte_len == 8
    assert int.from_bytes(a.mr.read(8, 128), "little") == expect_old
    assert int.from_bytes(b.mr.read(8, 64), "little") == expect_new


def test_fetch_and_adds_accumulate():
    bed = Testbed()
    a, qa, b, _ = pair(bed)
    for i in range(5):
        wr = SendWR(wr_id=i, opcode=Opcode.ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[a.sge(8 * i, 8)])
        wr.set_wr_atomic(b.mr.rkey, b.mr.buf, compare_add=i + 1)
        qa.post_send(wr)
    assert [wc.opcode for wc in poll_n(a.scq, 5)] == [WcOpcode.FETCH_ADD] * 5
    olds = [int.from_bytes(a.mr.read(8, 8 * i), "little") for i in range(5)]
    assert olds == [0, 1, 3, 6, 10] and int.from_bytes(b.mr.read(8, 0), "little") == 15


def test_unsignaled_work_requests_complete_silently_and_results_keep_the_sends_sizes(tmp_path):
    bed = Testbed()
    a, qa, b, qb = pair(bed, sq_sig_all=0)
    sizes = [64, 128, 256, 512]
    for i, size in enumerate(sizes):
        wr = SendWR(wr_id=i, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(0, size)],
                    send_flags=SendFlags.SIGNALED if i % 2 else 0)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        qa.post_send(wr)
    qb.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[b.sge(0, 64)]))
    qa.post_send(SendWR(wr_id=4, num_sge=1, sg=[a.sge(0, 32)], send_flags=SendFlags.SIGNALED))
    assert [wc.wr_id for wc in poll_n(a.scq, 3)] == [1, 3, 4]
    assert a.scq.poll(timeout="100us") == (0, [])
    poll_n(b.rcq, 1)
    ops = pd.read_parquet(bed.write_results(tmp_path / "out", name="lab") / "metrics.parquet")
    assert list(zip(ops["wr_id"], ops["kind"], ops["bytes"])) == [
        (1, "RDMA_WRITE", 128), (3, "RDMA_WRITE", 512), (4, "SEND", 32)]     # a receive has no latency


def test_fenced_read_after_write_sees_the_write():
    bed = Testbed()
    a, qa, b, _ = pair(bed)
    a.mr.write(b"fenced", 6)
    write = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(0, 6)])
    write.set_wr_rdma(b.mr.rkey, b.mr.buf + 256)
    read = SendWR(wr_id=2, opcode=Opcode.RDMA_READ, num_sge=1, sg=[a.sge(512, 6)],
                  send_flags=SendFlags.SIGNALED | SendFlags.FENCE)
    read.set_wr_rdma(b.mr.rkey, b.mr.buf + 256)
    qa.post_send(write)
    qa.post_send(read)
    assert [(wc.wr_id, wc.opcode) for wc in poll_n(a.scq, 2)] == [(1, WcOpcode.RDMA_WRITE), (2, WcOpcode.RDMA_READ)]
    assert a.mr.read(6, 512) == b"fenced"


# --- SRQs and their events ---

def test_srq_receives_go_to_whichever_qp_and_the_limit_event_runs_the_clock():
    bed = Testbed()
    a, b = Side(bed, "a"), Side(bed, "b")
    srq = SRQ(b.pd, SrqInitAttr(SrqAttr(max_wr=16)))
    on_srq = [b.qp(srq=srq) for _ in range(2)]
    senders = [a.qp() for _ in range(2)]
    for qp, peer in zip(senders, on_srq):
        connect(qp, peer, b.ctx)
        connect(peer, qp, a.ctx)
    for i in range(10):
        srq.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[b.sge(64 * i, 64)]))
    srq.modify(SrqAttr(srq_limit=7), SRQ_LIMIT)
    for i in range(4):
        a.mr.write(bytes([65 + i]) * 4, 4, 8 * i)
        senders[i % 2].post_send(SendWR(wr_id=i, num_sge=1, sg=[a.sge(8 * i, 4)]))
    event = b.ctx.get_async_event(timeout="1ms")                 # runs the simulation to the event
    assert event.event_type is AsyncEventType.SRQ_LIMIT_REACHED and event.element is srq
    assert event.time_ps <= bed.now_ps and srq.query().srq_limit == 0
    received = poll_n(b.rcq, 4)
    assert sorted(wc.wr_id for wc in received) == [100, 101, 102, 103]
    assert {wc.qp_num for wc in received} == {qp.qp_num for qp in on_srq}
    assert {wc.src_qp for wc in received} == {qp.qp_num for qp in senders}
    landed = {b.mr.read(4, 64 * (wc.wr_id - 100)) for wc in received}
    assert landed == {b"AAAA", b"BBBB", b"CCCC", b"DDDD"}
    assert errno_of(b.ctx.get_async_event) == "EAGAIN"


def test_srq_query_reports_what_mlx5_allocates():
    srq = SRQ(PD(Context(Testbed(), "a")), SrqInitAttr(SrqAttr(max_wr=100, max_sge=3)))
    got = srq.query()
    assert isinstance(got, SrqAttr) and (got.max_wr, got.max_sge, got.srq_limit) == (127, 3, 0)


def test_a_receive_in_error_state_flushes():
    bed = Testbed()
    a, qa, b, qb = pair(bed)
    qb.modify(QPAttr(qp_state=QpState.ERR), 1)
    qb.post_recv(RecvWR(wr_id=11, num_sge=1, sg=[b.sge(0, 8)]))
    (wc,) = poll_n(b.rcq, 1)
    assert (wc.wr_id, wc.status, wc.opcode) == (11, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV)


# --- ODP advice and implicit ODP ---

def test_advise_mr_advances_the_clock_by_its_cost():
    bed = Testbed(trace=True)
    a = Side(bed, "a")
    odp = MR(a.pd, 1 << 20, RW | Access.ON_DEMAND)
    for flags in (ADVISE_MR_FLAG_FLUSH, 0):
        before = bed.now_ps
        a.pd.advise_mr(AdviseMrAdvice.PREFETCH_WRITE, flags, [SGE(odp.buf, 1 << 20, odp.lkey)])
        (slice_,) = [e for e in bed.env.trace.events if e.name == "ibv_advise_mr" and e.args["flush"] == bool(flags)]
        assert bed.now_ps - before == slice_.dur_ps > 0
    synchronous, asynchronous = [e.dur_ps for e in bed.env.trace.events if e.name == "ibv_advise_mr"]
    assert synchronous > asynchronous


def test_an_implicit_mr_carries_rdma_into_memory_it_never_registered():
    bed = Testbed()
    a, qa, b, _ = pair(bed)
    implicit = MR(b.pd, 0, RW | Access.ON_DEMAND, implicit=True)
    assert (implicit.buf, implicit.length) == (0, 2**64 - 1) and implicit.mr.lkey != b.mr.lkey
    a.mr.write(b"implicit", 8)
    wr = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(0, 8)])
    wr.set_wr_rdma(implicit.rkey, b.mr.buf + 8192)               # the pinned MR's memory, through the implicit key
    qa.post_send(wr)
    (wc,) = poll_n(a.scq, 1)
    assert wc.status is WcStatus.SUCCESS and b.mr.read(8, 8192) == b"implicit"
