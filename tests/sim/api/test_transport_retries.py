"""RC transport retries: frames a link loses while it is down are sent again when the requester's ACK timer fires
(``timeout``), up to ``retry_cnt`` times, then IBV_WC_RETRY_EXC_ERR; the responder drops the requests behind a lost
one (go-back-N) and acknowledges a duplicate without executing it again."""

from __future__ import annotations

import pytest

from models.verbs.qp_state import ack_timeout_ps
from sim.api import AHAttr, Opcode, QPAttr, RecvWR, SendFlags, SendWR, Testbed, WcOpcode, WcStatus
from sim.core import PS_PER_NS, PS_PER_US
from sim.core.errors import DeadlockError
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.sim.api.test_api_recv import RW, Side, poll_n

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


@pytest.mark.parametrize("retry_cnt, statuses", [
    (0, [WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR]),  # the NAK's retry is one of retry_cnt: none left
    (1, [WcStatus.SUCCESS, WcStatus.SUCCESS]),
    (7, [WcStatus.SUCCESS, WcStatus.SUCCESS])])
def test_a_request_behind_a_lost_one_draws_a_sequence_nak_and_both_go_again_at_once(retry_cnt, statuses):
    """Go-back-N on a NAK PSN sequence error: the second WRITE reaches the responder while the first is missing;
    the responder NAKs, and the requester sends the first again, spending a retry, and the second after it, long
    before the ACK timer would: the bytes they both write end as the second's, as without the loss."""
    link = Link(retry_cnt=retry_cnt)
    link.flap("a", 0, 1000 * PS_PER_NS)  # loses the first request only
    link.write(0, b"first!!!")
    assert link.a.scq.poll(1, timeout="600ns")[1] == []
    link.write(1, b"second!!")  # leaves after the outage, reaches the responder before the first is sent again
    wcs = poll_n(link.a.scq, 2)
    assert [wc.status for wc in wcs] == statuses
    assert link.qa.qp.frames_lost == 1 and link.qb.qp.sequence_naks == 1
    assert link.b.mr.read(8, 0) == (b"second!!" if retry_cnt else bytes(8))
    assert wcs[1].completed_ps - link.t0 < ack_timeout_ps(TIMEOUT)  # neither waited for its timer


def test_one_sequence_nak_per_gap():
    """Several requests behind one lost request: the first of them draws the NAK, the rest are dropped without one
    and go again with it; a second gap later draws a second NAK."""
    link = Link()
    link.flap("a", 0, 1000 * PS_PER_NS)
    link.write(0, b"lost....")
    assert link.a.scq.poll(1, timeout="600ns")[1] == []
    for wr_id in (1, 2, 3):
        link.write(wr_id, bytes([48 + wr_id]) * 8, 8 * wr_id)
    assert [wc.status for wc in poll_n(link.a.scq, 4)] == [WcStatus.SUCCESS] * 4
    assert link.qb.qp.sequence_naks == 1 and link.elapsed_ps() < ack_timeout_ps(TIMEOUT)
    flap_at = link.elapsed_ps() + 200 * PS_PER_NS
    link.flap("a", flap_at, 1000 * PS_PER_NS)
    link.bed.run(link.t0 + flap_at - link.bed.now_ps)
    link.write(4, b"lost2...", 32)
    assert link.a.scq.poll(1, timeout="600ns")[1] == []
    link.write(5, b"after...", 40)
    assert [wc.status for wc in poll_n(link.a.scq, 2)] == [WcStatus.SUCCESS] * 2
    assert link.qb.qp.sequence_naks == 2 and link.qa.qp.frames_lost == 2
    assert link.b.mr.read(48, 0) == b"lost...." + b"1" * 8 + b"2" * 8 + b"3" * 8 + b"lost2..." + b"after..."


def test_a_lone_lost_request_still_waits_for_its_timer():
    """Nothing follows it, so no NAK comes: the timer sends it again."""
    link = Link()
    link.flap("a", 0, 1000 * PS_PER_NS)
    link.write(0, b"alone...")
    [wc] = poll_n(link.a.scq, 1)
    assert wc.status is WcStatus.SUCCESS and link.qb.qp.sequence_naks == 0
    assert link.elapsed_ps() > ack_timeout_ps(TIMEOUT)


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


def test_a_later_acknowledgement_completes_a_request_whose_own_was_lost():
    """Acknowledgements are cumulative: whatever a short outage loses of two back-to-back WRITEs (a request, an
    acknowledgement), the third WRITE's acknowledgement or the NAK completes them without their timers."""
    kinds, starts = set(), _flap_starts()
    for start in starts:
        link = Link(timeout=4)  # 65 us: longer than the sweep
        link.flap("a", start, 50 * PS_PER_NS)
        link.write(0, b"zero....", 0)
        link.write(1, b"one.....", 8)
        link.bed.run(link.t0 + starts[-1] + PS_PER_US - link.bed.now_ps)  # past every outage of the sweep
        link.write(2, b"two.....", 16)
        wcs = poll_n(link.a.scq, 3)
        assert [wc.status for wc in wcs] == [WcStatus.SUCCESS] * 3
        assert link.b.mr.read(24, 0) == b"zero....one.....two....."
        assert all(wc.completed_ps - wc.posted_ps < ack_timeout_ps(4) for wc in wcs)
        kinds.add((link.qa.qp.frames_lost, link.qb.qp.sequence_naks))
    assert {(2, 0), (2, 1)} <= kinds  # some outage lost both acknowledgements only, some both requests (a NAK)


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


def test_a_stream_that_loses_frames_with_timeout_zero_is_reported_as_waiting_for_ever_on_its_timeout():
    """With qp_timeout 0 nothing sends a lost frame again: the run's deadlock names the QP's lost frames and its
    timeout as the cause."""
    work = {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": 400, "tx_depth": 128,
            "qp_timeout": 0}
    flap = {"at": "20us", "kind": "link-flap", "node": "b", "duration": "300us"}
    data = scenario_dict(workload=[work], events=[flap], engine="event")
    with pytest.raises(DeadlockError, match=r"of its frames were lost and its ACK timeout \(qp_timeout, perftest -u\) "
                                            r"is 0, which never sends them again"):
        run_scenario(Scenario.model_validate(data))
    data["workload"][0]["qp_timeout"] = 8
    assert run_scenario(Scenario.model_validate(data)).counters["frames_lost"] > 0
