"""Extended QPs through the API, as rdma-core's tests/test_qpex.py uses them (``create_qp_ex``, ``post_send_ex`` in
tests/utils.py), with the providers' rules (providers/mlx5/qp.c ``mlx5_qp_fill_wr_pfns``,
``MLX5_SUPPORTED_SEND_OPS_FLAGS_*``, ``mlx5_send_wr_complete``, ``_common_wqe_init_op``; providers/efa/verbs.c
``efa_check_qp_attr``, ``efa_qp_fill_wr_pfns``)."""

from __future__ import annotations

import pytest

from sim.api import (AH, CQ, MR, MW, PD, QPEx, SGE, AHAttr, Access, Context, MWBindInfo, QPAttr, QPCap, QPInitAttrEx,
                     QpInitAttrMask, QpType, RecvWR, SendFlags, SendOps, Testbed, VerbsError, WcOpcode, WcStatus)
from sim.core import ProtocolError
from tests.sim.api.test_api_recv import poll_n

RIGHTS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
MASK = QpInitAttrMask.PD | QpInitAttrMask.SEND_OPS_FLAGS


class Side:
    def __init__(self, bed: Testbed, name: str, ops: int, max_send_wr: int, mr_access: int) -> None:
        self.ctx = Context(bed, name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 32)
        self.mr = MR(self.pd, 4096, mr_access)
        self.qp = QPEx(self.ctx, QPInitAttrEx(scq=self.cq, cap=QPCap(max_send_wr=max_send_wr),
                                              comp_mask=MASK, pd=self.pd, send_ops_flags=ops))


def pair(ops: int, max_send_wr: int = 8, nic=None, mr_access=RIGHTS | Access.MW_BIND):
    """Two connected RC QPs made by ``ibv_create_qp_ex`` with ``ops``."""
    nodes = {"a": {"nic": nic or {"preset": "connectx7"}}, "b": {"nic": nic or {"preset": "connectx7"}}}
    bed = Testbed(nodes)
    a, b = (Side(bed, name, ops, max_send_wr, mr_access) for name in "ab")
    for me, peer in ((a, b), (b, a)):
        me.qp.to_rts(QPAttr(qp_access_flags=int(RIGHTS), dest_qp_num=peer.qp.qp_num,
                            ah_attr=AHAttr(dlid=peer.ctx.lid), max_dest_rd_atomic=4, min_rnr_timer=12, timeout=14,
                            retry_cnt=7, rnr_retry=7, max_rd_atomic=4))
    return a, b


def test_a_batch_of_every_rc_opcode_posts_with_one_wr_complete():
    """post_send_ex's opcodes on an RC QP: each completes with its own opcode, in order (``wr_id`` and
    ``wr_flags`` as set before each builder call)."""
    a, b = pair(int(SendOps.SEND | SendOps.RDMA_WRITE | SendOps.RDMA_READ | SendOps.ATOMIC_FETCH_AND_ADD))
    b.qp.post_recv(RecvWR(wr_id=50, num_sge=1, sg=[SGE(b.mr.buf, 64, b.mr.lkey)]))
    a.mr.write(b"builder!", 8)
    q = a.qp
    q.wr_start()
    q.wr_id, q.wr_flags = 1, SendFlags.SIGNALED
    q.wr_rdma_write(b.mr.rkey, b.mr.buf + 128)
    q.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    q.wr_id = 2
    q.wr_rdma_read(b.mr.rkey, b.mr.buf + 128)
    q.wr_set_sge(SGE(a.mr.buf + 256, 8, a.mr.lkey))
    q.wr_id = 3
    q.wr_atomic_fetch_add(b.mr.rkey, b.mr.buf + 512, 5)
    q.wr_set_sge(SGE(a.mr.buf + 512, 8, a.mr.lkey))
    q.wr_id = 4
    q.wr_send()
    q.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    assert a.cq.poll(timeout="50us") == (0, [])            # nothing is posted before wr_complete
    q.wr_complete()
    wcs = poll_n(a.cq, 4)
    assert [(wc.wr_id, wc.opcode, wc.status) for wc in wcs] == [
        (1, WcOpcode.RDMA_WRITE, WcStatus.SUCCESS), (2, WcOpcode.RDMA_READ, WcStatus.SUCCESS),
        (3, WcOpcode.FETCH_ADD, WcStatus.SUCCESS), (4, WcOpcode.SEND, WcStatus.SUCCESS)]
    assert a.mr.read(8, 256) == b"builder!" and b.mr.read(8, 512) == (5).to_bytes(8, "little")
    assert poll_n(b.cq, 1)[0].byte_len == 8


def test_wr_abort_posts_nothing():
    """``mlx5_send_wr_abort`` rolls ``cur_post`` back."""
    a, b = pair(int(SendOps.RDMA_WRITE))
    a.qp.wr_start()
    a.qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
    a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    a.qp.wr_abort()
    assert a.cq.poll(timeout="100us") == (0, [])


def test_a_batch_that_overflows_the_send_queue_posts_none_of_it():
    """``_common_wqe_init_op``: ``mlx5_wq_overflow`` sets ``mqp->err = ENOMEM``; ``mlx5_send_wr_complete`` returns
    it and rolls the whole batch back."""
    a, b = pair(int(SendOps.RDMA_WRITE), max_send_wr=2)
    a.qp.wr_start()
    for wr_id in range(3):
        a.qp.wr_id = wr_id
        a.qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
        a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    with pytest.raises(VerbsError) as err:
        a.qp.wr_complete()
    assert err.value.errno == "ENOMEM"
    assert a.cq.poll(timeout="100us") == (0, [])
    a.qp.wr_start()                                         # the queue is still empty: two fit
    for wr_id in range(2):
        a.qp.wr_rdma_write(b.mr.rkey, b.mr.buf)
        a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    a.qp.wr_complete()
    assert len(poll_n(a.cq, 2)) == 2


@pytest.mark.parametrize("nic, qp_type, ops", [
    ({"preset": "connectx7"}, QpType.UD, SendOps.RDMA_WRITE),                  # MLX5_SUPPORTED_SEND_OPS_FLAGS_UD
    ({"preset": "connectx7"}, QpType.UC, SendOps.RDMA_READ),                   # ..._UC: no READ
    ({"preset": "connectx7"}, QpType.RC, SendOps.FLUSH),                       # no FLUSH on mlx5
    ({"preset": "connectx7"}, QpType.RC, SendOps.ATOMIC_WRITE),                # no ATOMIC_WRITE on mlx5
    ({"preset": "efa"}, QpType.RC, SendOps.ATOMIC_FETCH_AND_ADD),              # efa_check_qp_attr (SRD)
    ({"preset": "efa"}, QpType.UD, SendOps.RDMA_WRITE),
])
def test_send_ops_the_provider_does_not_support_are_refused(nic, qp_type, ops):
    bed = Testbed({"a": {"nic": nic}})
    ctx = Context(bed, "a")
    pd, cq = PD(ctx), CQ(ctx, 8)
    with pytest.raises(VerbsError) as err:
        QPEx(ctx, QPInitAttrEx(qp_type=qp_type, scq=cq, comp_mask=MASK, pd=pd, send_ops_flags=int(ops)))
    assert err.value.errno == "EOPNOTSUPP"


def test_mlx5_sets_every_builder_its_qp_type_supports_efa_only_those_asked_for():
    """mlx5_qp_fill_wr_pfns: "Set all supported micro-functions regardless user request"; efa_qp_fill_wr_pfns sets
    ``wr_rdma_read`` only with ``IBV_QP_EX_WITH_RDMA_READ``."""
    a, b = pair(int(SendOps.SEND))
    a.qp.wr_start()
    a.qp.wr_rdma_read(b.mr.rkey, b.mr.buf)                  # not asked for, set anyway
    a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    a.qp.wr_complete()
    assert poll_n(a.cq, 1)[0].status is WcStatus.SUCCESS
    e, f = pair(int(SendOps.SEND), nic={"preset": "efa"},
                mr_access=Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
    e.qp.wr_start()
    with pytest.raises(VerbsError) as err:
        e.qp.wr_rdma_read(f.mr.rkey, f.mr.buf)
    assert err.value.errno == "EOPNOTSUPP"


def test_a_type_2_window_bound_by_the_builder():
    """test_qpex.py's BIND_MW case: ``wr_bind_mw(mw, rkey, bind_info)`` then a SEND in the same batch."""
    a, b = pair(int(SendOps.BIND_MW | SendOps.RDMA_WRITE))
    mw = MW(b.pd, 2)
    b.qp.wr_start()
    b.qp.wr_flags = SendFlags.SIGNALED
    b.qp.wr_bind_mw(mw, mw.rkey + 12, MWBindInfo(b.mr, b.mr.buf, 4096, Access.REMOTE_WRITE))
    b.qp.wr_complete()
    (bound,) = poll_n(b.cq, 1)
    assert (bound.opcode, bound.status) == (WcOpcode.BIND_MW, WcStatus.SUCCESS)
    a.qp.wr_start()
    a.qp.wr_rdma_write(mw.rkey + 12, b.mr.buf)
    a.qp.wr_set_sge(SGE(a.mr.buf, 8, a.mr.lkey))
    a.qp.wr_complete()
    assert poll_n(a.cq, 1)[0].status is WcStatus.SUCCESS


def test_flush_and_atomic_write_have_no_builder_on_the_modelled_devices():
    a, b = pair(int(SendOps.SEND))
    a.qp.wr_start()
    for build in (lambda: a.qp.wr_flush(b.mr.rkey, b.mr.buf, 8, 1, 1),
                  lambda: a.qp.wr_atomic_write(b.mr.rkey, b.mr.buf, bytes(8))):
        with pytest.raises(VerbsError) as err:
            build()
        assert err.value.errno == "EOPNOTSUPP"
    a.qp.wr_abort()


def test_builder_calls_outside_a_batch_are_refused():
    a, b = pair(int(SendOps.SEND))
    with pytest.raises(ProtocolError):
        a.qp.wr_send()
    with pytest.raises(ProtocolError):
        a.qp.wr_complete()
    a.qp.wr_start()
    with pytest.raises(ProtocolError):
        a.qp.wr_start()


def test_a_ud_datagram_through_the_builder():
    """post_send_ex on UD: ``wr_send`` and ``wr_set_ud_addr(ah, qpn, qkey)``."""
    bed = Testbed(["a", "b"])
    ctx = {name: Context(bed, name) for name in "ab"}
    pd = {name: PD(c) for name, c in ctx.items()}
    cq = {name: CQ(c, 8) for name, c in ctx.items()}
    mr = {name: MR(pd[name], 4096, Access.LOCAL_WRITE) for name in "ab"}
    qp = {name: QPEx(ctx[name], QPInitAttrEx(qp_type=QpType.UD, scq=cq[name], cap=QPCap(max_send_wr=4, max_recv_wr=4),
                                            comp_mask=MASK, pd=pd[name], send_ops_flags=int(SendOps.SEND)),
                     QPAttr(qkey=0x1234)) for name in "ab"}
    qp["b"].post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr["b"].buf, 40 + 64, mr["b"].lkey)]))
    mr["a"].write(b"via builder", 11)
    ah = AH(pd["a"], AHAttr(dlid=ctx["b"].lid))
    qp["a"].wr_start()
    qp["a"].wr_send()
    qp["a"].wr_set_sge(SGE(mr["a"].buf, 11, mr["a"].lkey))
    qp["a"].wr_set_ud_addr(ah, qp["b"].qp_num, 0x1234)
    qp["a"].wr_complete()
    (received,) = poll_n(cq["b"], 1)
    assert (received.status, received.byte_len, received.src_qp) == (WcStatus.SUCCESS, 40 + 11, qp["a"].qp_num)
    assert mr["b"].read(11, 40) == b"via builder"


def test_inline_data_through_the_builder_is_copied_when_it_is_set():
    """``ibv_wr_set_inline_data(_list)``: mlx5 memcpys the buffers into the WQE at the call (no MR, no L_Key); more
    than the QP's max_inline_data fails the batch at wr_complete with ENOMEM (``mlx5_send_wr_set_inline_data``
    records the error, ``mlx5_send_wr_complete`` returns it)."""
    from sim.api import DataBuffer

    nodes = {"a": {}, "b": {}}
    bed = Testbed(nodes)
    sides = {}
    for name in "ab":
        ctx = Context(bed, name)
        pd, cq = PD(ctx), CQ(ctx, 32)
        qp = QPEx(ctx, QPInitAttrEx(scq=cq, cap=QPCap(max_send_wr=8, max_inline_data=32), comp_mask=MASK, pd=pd,
                                    send_ops_flags=int(SendOps.RDMA_WRITE)))
        sides[name] = (ctx, cq, MR(pd, 4096, RIGHTS), qp)
    for me, peer in (("a", "b"), ("b", "a")):
        sides[me][3].to_rts(QPAttr(qp_access_flags=int(RIGHTS), dest_qp_num=sides[peer][3].qp_num,
                                   ah_attr=AHAttr(dlid=sides[peer][0].lid), max_dest_rd_atomic=4, min_rnr_timer=12,
                                   timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=4))
    (_, cq, src, q), (_, _, dst, _) = sides["a"], sides["b"]
    src.write(b"set now, ", 9)
    src.write(b"and this", 8, 100)
    q.wr_start()
    q.wr_id, q.wr_flags = 1, SendFlags.SIGNALED
    q.wr_rdma_write(dst.rkey, dst.buf)
    q.wr_set_inline_data_list(2, [DataBuffer(src.buf, 9), DataBuffer(src.buf + 100, 8)])
    src.write(b"XXXXXXXXX", 9)  # after the set: the WQE holds the bytes already
    q.wr_complete()
    assert poll_n(cq, 1)[0].status is WcStatus.SUCCESS and dst.read(17, 0) == b"set now, and this"
    q.wr_start()
    q.wr_rdma_write(dst.rkey, dst.buf)
    q.wr_set_inline_data(src.buf, 33)
    with pytest.raises(VerbsError) as info:
        q.wr_complete()
    assert info.value.errno == "ENOMEM"
