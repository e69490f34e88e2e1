"""The public API's UC and UD QPs and AH objects: the same errno as the free functions underneath, pyverbs' masks
per QP type, the kernel's destroy rule for a PD an AH holds, and the bytes a datagram delivers."""

from __future__ import annotations

import pytest

from models.nic.transport import GRH_BYTES
from models.verbs.ah import ibv_create_ah
from models.verbs.destroy import ibv_dealloc_pd
from models.verbs.qp_state import AhAttr as FreeAhAttr
from sim.api import (AH, PD, QP, AHAttr, Context, Opcode, ProtocolError, QPAttr, QPCap, QPInitAttr, QpAttrMask as M,
                     QpState, QpType, RecvWR, SendWR, Testbed, WcFlags, WcOpcode, WcStatus)
from tests.sim.api.test_api_recv import RW, Side, errno_of

QKEY = 0x1234


def ud_pair(bed: Testbed):
    a, b = Side(bed, "a"), Side(bed, "b")
    qps = [side.qp(qp_type=QpType.UD) for side in (a, b)]
    for qp in qps:
        qp.to_rts(QPAttr(qkey=QKEY))
    return a, qps[0], b, qps[1]


def datagram(side: Side, ah: AH, dest: QP, length: int, opcode: Opcode = Opcode.SEND, qkey: int = QKEY) -> SendWR:
    wr = SendWR(wr_id=length, opcode=opcode, num_sge=1, sg=[side.sge(0, length)])
    wr.set_wr_ud(ah, dest.qp_num, qkey)
    return wr


@pytest.mark.parametrize("fabric, attr, errno", [
    ({}, FreeAhAttr(dlid=2, port_num=2), "EINVAL"),
    ({"transport": "roce"}, FreeAhAttr(dlid=2), "EINVAL"),
])
def test_ah_errno_is_the_free_functions(fabric, attr, errno):
    bed = Testbed(["a", "b"], fabric)
    pd = PD(Context(bed, "a"))
    assert errno_of(AH, pd, AHAttr(**vars(attr))) == errno_of(ibv_create_ah, pd.pd, attr) == errno


def test_a_pd_with_an_open_ah_closes_it_first():
    """pyverbs' ``PD.close`` closes its AHs (``close_weakrefs``); ``ibv_dealloc_pd`` alone is EBUSY
    (``mlx5_create_ah`` holds ``pd->usecnt``)."""
    bed = Testbed(["a", "b"])
    ctx = Context(bed, "a")
    pd = PD(ctx)
    ah = AH(pd, AHAttr(dlid=2))
    assert errno_of(ibv_dealloc_pd, pd.pd) == "EBUSY"
    pd.close()
    assert ah.closed and pd.closed
    with pytest.raises(ProtocolError):
        AH(pd, AHAttr(dlid=2))


def test_ud_qp_with_qp_attr_goes_to_rts_and_delivers_grh_then_payload_on_roce():
    bed = Testbed(["a", "b"], {"transport": "roce", "mtu": 1024})
    a, b = Side(bed, "a"), Side(bed, "b")
    init = {"qp_type": QpType.UD, "cap": QPCap(max_send_wr=4, max_recv_wr=4)}
    qa = QP(a.pd, QPInitAttr(scq=a.scq, rcq=a.rcq, **init), QPAttr(qkey=QKEY))
    qb = QP(b.pd, QPInitAttr(scq=b.scq, rcq=b.rcq, **init), QPAttr(qkey=QKEY))
    assert qa.qp_state is qb.qp_state is QpState.RTS and qa.query(0)[0].qkey == QKEY
    qb.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge(0, 1024 + GRH_BYTES)]))
    a.mr.write(b"x" * 1000, 1000)
    ah = AH(a.pd, AHAttr(is_global=True, dgid=b.ctx.query_gid()))
    qa.post_send(datagram(a, ah, qb, 1000, Opcode.SEND_WITH_IMM))
    npolled, (wc,) = b.rcq.poll(timeout="1ms")
    assert (wc.status, wc.opcode, wc.byte_len, wc.src_qp) == (WcStatus.SUCCESS, WcOpcode.RECV, 1040, qa.qp_num)
    assert wc.wc_flags & WcFlags.GRH and wc.wc_flags & WcFlags.WITH_IMM
    grh = b.mr.read(GRH_BYTES, 0)
    assert grh[8:24] == a.ctx.query_gid() and grh[24:40] == b.ctx.query_gid()
    assert b.mr.read(1000, GRH_BYTES) == b"x" * 1000
    npolled, (sent,) = a.scq.poll(timeout="1ms")
    assert sent.status is WcStatus.SUCCESS
    qa.post_send(datagram(a, ah, qb, 1025))  # one packet of the 1024-byte MTU at most
    npolled, (wc,) = a.scq.poll(timeout="1ms")
    assert wc.status is WcStatus.LOC_LEN_ERR and qa.qp_state is QpState.SQE


def test_a_ud_datagram_to_a_wrong_qkey_or_no_qp():
    bed = Testbed(["a", "b"])
    a, qa, b, qb = ud_pair(bed)
    qb.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[b.sge(0, 4096)]))
    ah = AH(a.pd, AHAttr(dlid=b.ctx.lid))
    qa.post_send(datagram(a, ah, qb, 64, qkey=QKEY + 1))
    npolled, (sent,) = a.scq.poll(timeout="1ms")
    assert sent.status is WcStatus.SUCCESS and b.rcq.poll(timeout="20us") == (0, [])  # dropped without a word
    stray = SendWR(wr_id=9, opcode=Opcode.SEND, num_sge=1, sg=[a.sge(0, 8)])
    stray.set_wr_ud(ah, 4242, QKEY)  # no QP 4242 on b: b's port drops it, the sender completes
    qa.post_send(stray)
    npolled, (sent,) = a.scq.poll(timeout="1ms")
    assert (sent.wr_id, sent.status) == (9, WcStatus.SUCCESS) and b.rcq.poll(timeout="20us") == (0, [])
    ah.close()
    with pytest.raises(ProtocolError):
        qa.post_send(datagram(a, ah, qb, 8))


def test_uc_qp_connects_with_ucs_masks_writes_and_completes_a_read_loc_qp_op_err():
    bed = Testbed(["a", "b"])
    a, b = Side(bed, "a"), Side(bed, "b")
    qa, qb = a.qp(qp_type=QpType.UC), b.qp(qp_type=QpType.UC)
    for qp, peer, ctx in ((qa, qb, b.ctx), (qb, qa, a.ctx)):
        qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=ctx.lid)))
    assert qa.qp_type is QpType.UC and qa.qp_state is QpState.RTS
    a.mr.write(b"unacked", 7)
    write = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(0, 7)])
    write.set_wr_rdma(b.mr.rkey, b.mr.buf + 100)
    qa.post_send(write)
    npolled, (wc,) = a.scq.poll(timeout="1ms")
    assert wc.status is WcStatus.SUCCESS
    bed.run("10us")
    assert b.mr.read(7, 100) == b"unacked"
    read = SendWR(wr_id=2, opcode=Opcode.RDMA_READ, num_sge=1, sg=[a.sge(0, 7)])
    read.set_wr_rdma(b.mr.rkey, b.mr.buf)
    qa.post_send(read)  # mlx5 posts it
    npolled, (wc,) = a.scq.poll(timeout="1ms")
    assert wc.status is WcStatus.LOC_QP_OP_ERR and qa.qp_state is QpState.SQE
    qa.post_send(write)  # accepted in SQE, as mlx5 accepts it, and flushed
    npolled, (wc,) = a.scq.poll(timeout="1ms")
    assert wc.status is WcStatus.WR_FLUSH_ERR and qa.qp_state is QpState.SQE


def test_rc_masks_are_refused_on_uc():
    bed = Testbed(["a", "b"])
    a = Side(bed, "a")
    qa = a.qp(qp_type=QpType.UC)
    qa.to_init(QPAttr(qp_access_flags=int(RW)))
    attr = QPAttr(qp_state=QpState.RTR, dest_qp_num=1, ah_attr=AHAttr(dlid=2), min_rnr_timer=12)
    mask = M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER
    assert errno_of(qa.modify, attr, mask) == "EINVAL"
