"""UC and UD on a link that loses frames: nothing retries, so a message an outage meets never arrives (UC drops the
rest of a message a packet of which was lost; a UD datagram is gone), while its requester completes successfully,
UC and UD send completions not waiting for the remote side; the receive it would have taken stays posted."""

from __future__ import annotations

import pytest

from sim.api import AH, AHAttr, Opcode, QPAttr, QpType, RecvWR, SendWR, Testbed, WcOpcode, WcStatus
from sim.core import PS_PER_NS
from tests.sim.api.test_api_recv import RW, Side, poll_n

QKEY = 0x1234
LENGTH = 3000
"""A UC message of one packet or (``path_mtu`` 1024) three."""


def _pair(qp_type: QpType, mtu: int):
    bed = Testbed(["a", "b"], {"mtu": mtu})
    a, b = Side(bed, "a"), Side(bed, "b")
    qa, qb = a.qp(qp_type=qp_type), b.qp(qp_type=qp_type)
    if qp_type is QpType.UD:
        for qp in (qa, qb):
            qp.to_rts(QPAttr(qkey=QKEY))
    else:
        for qp, peer, ctx in ((qa, qb, b.ctx), (qb, qa, a.ctx)):
            qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=ctx.lid)))
    return bed, a, qa, b, qb


def _message(qp_type: QpType, opcode: Opcode, a: Side, b: Side, qb, wr_id: int, length: int) -> SendWR:
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[a.sge(0, length)])
    if qp_type is QpType.UD:
        wr.set_wr_ud(AH(a.pd, AHAttr(dlid=b.ctx.lid)), qb.qp_num, QKEY)
    elif opcode is Opcode.RDMA_WRITE:
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf + 8192)
    return wr


@pytest.mark.parametrize("qp_type, opcode, mtu", [
    (QpType.UC, Opcode.RDMA_WRITE, 4096), (QpType.UC, Opcode.RDMA_WRITE, 1024), (QpType.UC, Opcode.SEND, 1024),
    (QpType.UC, Opcode.SEND_WITH_IMM, 4096), (QpType.UD, Opcode.SEND, 4096)])
@pytest.mark.parametrize("node", ["a", "b"])
def test_a_message_an_outage_meets_never_arrives_and_its_requester_completes(qp_type, opcode, mtu, node):
    bed, a, qa, b, qb = _pair(qp_type, mtu)
    length = LENGTH if qp_type is QpType.UC else 1000
    a.mr.write(b"L" * length, length)
    receives = opcode is not Opcode.RDMA_WRITE
    if receives:
        qb.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[b.sge(0, 8192)]))
    bed.bed.nodes[node].nic.link_down(bed.now_ps, 2000 * PS_PER_NS)
    qa.post_send(_message(qp_type, opcode, a, b, qb, 1, length))
    [wc] = poll_n(a.scq, 1)
    assert wc.status is WcStatus.SUCCESS and qa.qp.frames_lost == 1
    bed.run("20us")
    assert b.rcq.poll(1, timeout=0)[1] == [] and b.mr.read(length, 8192) == bytes(length)
    a.mr.write(b"K" * length, length)  # after the outage: it arrives, into the receive still posted
    qa.post_send(_message(qp_type, opcode, a, b, qb, 2, length))
    assert poll_n(a.scq, 1)[0].status is WcStatus.SUCCESS
    bed.run("20us")
    if receives:
        [got] = poll_n(b.rcq, 1)
        assert got.wr_id == 7 and got.opcode is WcOpcode.RECV
    at = 40 if qp_type is QpType.UD else 0  # the GRH first
    assert b.mr.read(length, at if receives else 8192) == b"K" * length
    assert qa.qp.frames_lost == 1 and qb.qp.sequence_naks == 0
