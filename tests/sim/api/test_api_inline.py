"""Inline data (``IBV_SEND_INLINE``): the provider copies the bytes into the WQE when the work request is posted,
so the NIC reads no MR for them and their L_Key is not checked (ibv_post_send(3): "The L_Key will not be
checked"; mlx5's ``set_data_inl_seg`` memcpys from each SGE's address)."""

import pytest

from sim.api import (CQ, MR, PD, QP, SGE, Access, AHAttr, Context, Opcode, ProtocolError, QPAttr, QPCap, QPInitAttr,
                     SendFlags, SendWR, Testbed, WcStatus)

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
INLINE = SendFlags.INLINE | SendFlags.SIGNALED


def inline_pair(bed: Testbed):
    """Connected RC QPs on nodes a and b that carry up to 64 B inline, with a 4 KiB MR each."""
    ends = []
    for name in ("a", "b"):
        ctx = Context(bed, name)
        pd, cq = PD(ctx), CQ(ctx, 16)
        qp = QP(pd, QPInitAttr(scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_inline_data=64)))
        ends.append((ctx, cq, MR(pd, 4096, RW), qp))
    for (_, _, _, qp), (peer_ctx, _, _, peer) in ((ends[0], ends[1]), (ends[1], ends[0])):
        qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=peer_ctx.lid),
                         max_dest_rd_atomic=1, max_rd_atomic=1, min_rnr_timer=12, timeout=14, retry_cnt=7,
                         rnr_retry=7))
    (_, cq, src, qp), (_, _, dst, _) = ends
    return cq, src, qp, dst


def write(qp, addr: int, lkey: int, dst, length: int, flags=INLINE) -> SendWR:
    wr = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(addr, length, lkey)], send_flags=flags)
    wr.set_wr_rdma(dst.rkey, dst.buf)
    qp.post_send(wr)
    return wr


def test_inline_data_is_copied_at_the_post_and_its_lkey_is_not_checked():
    cq, src, qp, dst = inline_pair(Testbed(["a", "b"]))
    src.write(b"at post", 7)
    write(qp, src.buf, 0xDEAD, dst, 7)  # no MR has this key
    src.write(b"changed", 7)  # after the post: the WQE already holds the bytes
    assert cq.poll()[1][0].status is WcStatus.SUCCESS and dst.read(7, 0) == b"at post"


def test_the_same_bad_lkey_without_inline_is_a_local_protection_error():
    cq, src, qp, dst = inline_pair(Testbed(["a", "b"]))
    write(qp, src.buf, 0xDEAD, dst, 7, flags=SendFlags.SIGNALED)
    assert cq.poll()[1][0].status is WcStatus.LOC_PROT_ERR


def test_inline_data_outside_the_process_faults_at_the_post():
    cq, src, qp, dst = inline_pair(Testbed(["a", "b"]))
    with pytest.raises(ProtocolError, match="not in the process's memory"):
        write(qp, 0x1000, 0, dst, 7)
