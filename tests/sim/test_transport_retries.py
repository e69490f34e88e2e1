"""RC transport retries: frames a link loses while it is down are sent again when the requester's ACK timer fires
(``timeout``), up to ``retry_cnt`` times, then IBV_WC_RETRY_EXC_ERR; the responder drops the requests behind a lost
one (go-back-N) and acknowledges a duplicate without executing it again."""

from __future__ import annotations

import pytest

from models.verbs.qp_state import ack_timeout_ps
from sim.api import AHAttr, Opcode, QPAttr, RecvWR, SendFlags, SendWR, Testbed, WcOpcode, WcStatus
from sim.core import PS_PER_NS, PS_PER_US
from tests.sim.test_api_recv import RW, Side, poll_n

TIMEOUT = 1
"""The ``timeout`` encoding of these tests' QPs: 8.192 us."""


class Link:
    """Two sides with a connected QP each (``timeout``, ``retry_cnt`` as asked) and the clock when they were."""

    def __init__(self, timeout: int = TIMEOUT, retry_cnt: int = 3) -> None:
        self.bed = Testbed()
        self.a, self.b = Side(self.bed, "a"), Side(self.bed, "b")
        self.qa, self.qb = self.a.qp(), self.b.qp()
        for qp, peer, ctx in ((self.qa, self.qb, self.b.ctx), (self.qb, self.qa, self.a.ctx)):
            qp.to_rts(QPAttr(qp_access_flags=int(RW), dest_qp_num=peer.qp_num, ah_attr=AHAttr(dlid=ctx.lid),
                             max_dest_rd_atomic=4, min_rnr_timer=12, timeout=timeout, retry_cnt=retry_cnt,
                             rnr_retry=7, max_rd_atomic=4))
        self.t0 = self.bed.now_ps

    def flap(self, node: str, start_ps: int, duration_ps: int) -> None:
        """``node``'s link loses every frame ``start_ps`` after the QPs were connected, for ``duration_ps`` (known
        in advance, as a scenario's events are: before the work requests it should reach are posted)."""
        self.bed.bed.nodes[node].nic.link_down(self.t0 + start_ps, duration_ps)

    def write(self, wr_id: int, data: bytes, offset: int = 0) -> None:
        """Post an RDMA WRITE of ``data`` (staged at 4096 * wr_id) to the responder's MR at ``offset``."""
        self.a.mr.write(data, len(data), 4096 * wr_id)
        wr = SendWR(wr_id=wr_id, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[self.a.sge(4096 * wr_id, len(data))],
                    send_flags=SendFlags.SIGNALED)
        wr.set_wr_rdma(self.b.mr.rkey, self.b.mr.buf + offset)
        self.qa.post_send(wr)

    def elapsed_ps(self) -> int:
        return self.bed.now_ps - self.t0


def _calm_write_ps() -> int:
    link = Link()
    link.write(0, b"x" * 64)
    poll_n(link.a.scq, 1)
    return link.elapsed_ps()


@pytest.mark.parametrize("encoding, ps", [(0, None), (1, 8192 * PS_PER_NS), (14, 67_108_864 * PS_PER_NS),
                                          (31, 4096 * PS_PER_NS * 2**31)])
def test_ack_timeout_encodings(encoding, ps):
    assert ack_timeout_ps(encoding) == ps


@pytest.mark.parametrize("node, timeout", [("a", 1), ("b", 1), ("a", 3)])
def test_a_lost_request_is_sent_again_when_the_ack_timer_fires(node, timeout):
    calm = _calm_write_ps()
    link = Link(timeout)
    link.flap(node, 0, 1500 * PS_PER_NS)  # the requester's or the responder's link loses the first request
    link.write(0, b"retried!")
    [wc] = poll_n(link.a.scq, 1)
    assert wc.status is WcStatus.SUCCESS and link.qa.qp.frames_lost == 1
    assert link.b.mr.read(8, 0) == b"retried!"
    assert calm + ack_timeout_ps(timeout) < link.elapsed_ps() < 2 * calm + ack_timeout_ps(timeout)


@pytest.mark.parametrize("retry_cnt", [0, 3, 7])
def test_retries_run_out_after_retry_cnt_and_the_rest_flush(retry_cnt):
    link = Link(retry_cnt=retry_cnt)
    link.flap("a", 0, 10**6 * PS_PER_US)  # down for a second: every try is lost
    for wr_id in range(3):
        link.write(wr_id, b"lost" * 2, 8 * wr_id)
    wcs = poll_n(link.a.scq, 3)
    assert [wc.status for wc in wcs] == [WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR, WcStatus.WR_FLUSH_ERR]
    tries = retry_cnt + 1  # 7 is seven retries, not for ever
    assert tries * ack_timeout_ps(TIMEOUT) < link.elapsed_ps() < (tries + 1) * ack_timeout_ps(TIMEOUT)
    assert link.qa.qp_state.name == "ERR" and link.b.mr.read(24, 0) == bytes(24)


def test_timeout_zero_waits_for_ever():
    link = Link(timeout=0)
    link.flap("a", 0, 1500 * PS_PER_NS)
    link.write(0, b"never!!!")
    assert link.a.scq.poll(1, timeout="10ms")[1] == [] and link.qa.qp.frames_lost == 1


def test_requests_behind_a_lost_one_are_dropped_and_sent_again_after_it():
    """Go-back-N: the second WRITE reaches the responder while the first is missing, so it is dropped and sent
    again after the first: the bytes they both write end as the second's, as without the loss."""
    link = Link()
    link.flap("a", 0, 1000 * PS_PER_NS)  # loses the first request only
    link.write(0, b"first!!!")
    assert link.a.scq.poll(1, timeout="600ns")[1] == []
    link.write(1, b"second!!")  # leaves after the outage, reaches the responder before the first is sent again
    wcs = poll_n(link.a.scq, 2)
    assert [wc.status for wc in wcs] == [WcStatus.SUCCESS] * 2
    assert link.qa.qp.frames_lost == 1 and link.b.mr.read(8, 0) == b"second!!"
    assert wcs[1].completed_ps - link.t0 > 600 * PS_PER_NS + ack_timeout_ps(TIMEOUT)  # it waited for its own timer


def _flap_starts(step_ps: int = 50 * PS_PER_NS) -> range:
    """Outage starts across a calm operation's whole life."""
    return range(0, _calm_write_ps() + 2 * PS_PER_US, step_ps)


def test_a_lost_acknowledgement_gets_the_duplicate_send_acknowledged_not_received_twice():
    replies_lost = 0
    for start in _flap_starts():
        link = Link()
        for wr_id in (10, 11):
            link.qb.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[link.b.sge(64 * wr_id, 64)]))
        link.a.mr.write(b"once", 4, 0)
        link.flap("a", start, 50 * PS_PER_NS)
        link.qa.post_send(SendWR(wr_id=1, opcode=Opcode.SEND, num_sge=1, sg=[link.a.sge(0, 4)],
                                 send_flags=SendFlags.SIGNALED))
        [wc] = poll_n(link.a.scq, 1)
        received = link.b.rcq.poll(4, timeout="1ms")[1]
        assert wc.status is WcStatus.SUCCESS and [r.wr_id for r in received] == [10]
        assert link.b.mr.read(4, 640) == b"once" and link.b.mr.read(4, 704) == bytes(4)
        replies_lost += link.qa.qp.frames_lost == 1 and received[0].completed_ps < wc.completed_ps - 8 * PS_PER_US
    assert replies_lost  # some outage lost the acknowledgement only: the SEND went again as a duplicate


def test_a_duplicate_atomic_answers_its_first_result_without_adding_again():
    outcomes = set()
    for start in _flap_starts():
        link = Link()
        link.b.mr.write((40).to_bytes(8, "little"), 8, 0)
        wr = SendWR(wr_id=1, opcode=Opcode.ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[link.a.sge(64, 8)],
                    send_flags=SendFlags.SIGNALED)
        wr.set_wr_atomic(link.b.mr.rkey, link.b.mr.buf, 2)
        link.flap("b", start, 50 * PS_PER_NS)
        link.qa.post_send(wr)
        [wc] = poll_n(link.a.scq, 1)
        assert wc.status is WcStatus.SUCCESS and wc.opcode is WcOpcode.FETCH_ADD
        assert link.b.mr.read(8, 0) == (42).to_bytes(8, "little")
        assert link.a.mr.read(8, 64) == (40).to_bytes(8, "little")
        outcomes.add(link.qa.qp.frames_lost)
    assert outcomes == {0, 1}
