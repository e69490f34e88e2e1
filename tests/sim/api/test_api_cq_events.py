"""Completion channels and CQ events on the simulated clock, and ``CQ.resize``: libibverbs' and the kernel's checks
(``ibv_create_comp_channel``, ``ibv_destroy_comp_channel``, ``ibv_req_notify_cq``, ``ibv_get_cq_event``,
``ibv_ack_cq_events``, ``ibv_cmd_destroy_cq``, uverbs ``create_cq``, ``mlx5_ib_resize_cq``) and rdma-core's
tests/test_cq.py."""

from __future__ import annotations

import pytest

from models.verbs.cq_events import ibv_destroy_comp_channel
from sim.api import (CQ, MR, PD, QP, SGE, CompChannel, Context, DeadlockError, Opcode, ProtocolError, QPCap,
                     QPInitAttr, RecvWR, SendFlags, SendWR, Testbed, WcStatus)
from tests.sim.api.test_api_recv import RW, connect, errno_of


class Side:
    """A node's context, PD, 64 KiB MR and one QP whose send and receive CQs report to one channel."""

    def __init__(self, bed: Testbed, name: str) -> None:
        self.ctx = Context(bed, name)
        self.pd = PD(self.ctx)
        self.channel = CompChannel(self.ctx)
        self.cq = CQ(self.ctx, 16, None, self.channel, 0)
        self.mr = MR(self.pd, 1 << 16, RW)
        self.qp = QP(self.pd, QPInitAttr(scq=self.cq, rcq=self.cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))

    def send(self, flags: int = SendFlags.SIGNALED) -> None:
        self.qp.post_send(SendWR(wr_id=1, opcode=Opcode.SEND, num_sge=1, sg=[SGE(self.mr.buf, 64, self.mr.lkey)],
                                 send_flags=flags))

    def recv(self, length: int = 4096) -> None:
        self.qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(self.mr.buf, length, self.mr.lkey)]))


def sides(bed: Testbed | None = None):
    bed = bed or Testbed()
    a, b = Side(bed, "a"), Side(bed, "b")
    connect(a.qp, b.qp, b.ctx)
    connect(b.qp, a.qp, a.ctx)
    return bed, a, b


def test_comp_vector_must_be_below_num_comp_vectors():
    """uverbs ``create_cq``: ``comp_vector >= num_comp_vectors`` is EINVAL; the last vector is accepted
    (rdma-core ``test_create_cq``, ``test_create_cq_bad_flow``)."""
    ctx = Context(Testbed(), "a")
    last = ctx.num_comp_vectors - 1
    assert CQ(ctx, 8, None, None, last).comp_vector == last
    for bad in (ctx.num_comp_vectors, ctx.num_comp_vectors + 1, -1):
        assert errno_of(CQ, ctx, 8, None, None, bad) == "EINVAL"


def test_a_channel_is_busy_while_a_cq_made_with_it_exists():
    """libibverbs ``ibv_destroy_comp_channel``: EBUSY while ``channel->refcnt`` (raised by each CQ made with it,
    lowered by its ``ibv_destroy_cq``); pyverbs' ``CompChannel.close`` closes its CQs first; a CQ cannot be made
    with a closed channel."""
    ctx = Context(Testbed(), "a")
    channel = CompChannel(ctx)
    cqs = [CQ(ctx, 4, None, channel, 0) for _ in range(2)]
    cqs[0].close()
    assert channel.channel.refcnt == 1
    assert errno_of(ibv_destroy_comp_channel, channel.channel) == "EBUSY"
    channel.close()
    assert channel.closed and cqs[1].closed
    assert errno_of(ibv_destroy_comp_channel, channel.channel) == "EINVAL"
    with pytest.raises(ProtocolError):
        CQ(ctx, 4, None, channel, 0)


def test_an_armed_cq_raises_one_event_when_its_next_completion_is_written():
    """``ibv_req_notify_cq`` arms for the next completion, once: the event is read at the simulated time the
    completion reached the CQ; a second completion without re-arming raises none."""
    bed, a, b = sides()
    b.recv()
    a.cq.req_notify()
    a.send()
    a.channel.get_cq_event(a.cq)
    at = bed.now_ps
    (wc,) = a.cq.poll(1, timeout=0)[1]
    assert wc.status is WcStatus.SUCCESS and wc.completed_ps == at > 0
    a.cq.ack_events(1)
    b.recv()
    a.send()
    a.cq.poll(1)                                                  # the second completion came
    assert errno_of(a.channel.get_cq_event, a.cq, timeout=0) == "EAGAIN"
    a.cq.req_notify()                                             # armed again: the next one raises an event
    b.recv()
    a.send()
    a.channel.get_cq_event(a.cq)
    a.cq.ack_events(1)


def test_solicited_only_raises_nothing_for_a_plain_send():
    """The IB spec's solicited notification (mlx5 ``MLX5_CQ_DB_REQ_NOT_SOL``): the receiver's CQ armed
    solicited-only raises nothing for the receive of a SEND posted without ``IBV_SEND_SOLICITED``."""
    bed, a, b = sides()
    b.cq.req_notify(solicited_only=True)
    b.recv()
    a.send()
    assert b.cq.poll(1)[1][0].status is WcStatus.SUCCESS
    assert errno_of(b.channel.get_cq_event, b.cq, timeout="100us") == "EAGAIN"


@pytest.mark.parametrize("flags, length, status", [
    (SendFlags.SIGNALED | SendFlags.SOLICITED, 4096, WcStatus.SUCCESS),
    (SendFlags.SIGNALED, 8, WcStatus.LOC_LEN_ERR),
])
def test_solicited_only_raises_an_event_for_a_solicited_or_unsuccessful_completion(flags, length, status):
    """A SEND posted with ``IBV_SEND_SOLICITED`` raises the solicited-only event; so does a receive too short for a
    plain SEND, which completes LOC_LEN_ERR (unsuccessful)."""
    bed, a, b = sides()
    b.cq.req_notify(solicited_only=True)
    b.recv(length)
    a.send(flags)
    b.channel.get_cq_event(b.cq)
    assert b.cq.poll(1, timeout=0)[1][0].status is status
    b.cq.ack_events(1)


def test_get_cq_event_checks_the_cq_and_says_when_no_event_can_come():
    """pyverbs' ``get_cq_event(expected_cq)`` refuses another CQ's event; with nothing armed and nothing in
    flight a blocking read would never return."""
    bed, a, b = sides()
    other = CQ(a.ctx, 4, None, a.channel, 0)
    with pytest.raises(DeadlockError):
        a.channel.get_cq_event(a.cq)
    b.recv()
    a.cq.req_notify()
    a.send()
    with pytest.raises(ProtocolError):
        a.channel.get_cq_event(other)
    a.cq.ack_events(1)


def test_destroying_a_cq_waits_for_every_event_read_to_be_acknowledged():
    """``ibv_cmd_destroy_cq`` waits while ``comp_events_completed != comp_events_reported``: an event read and not
    acknowledged (or one acknowledged too many) would block it for ever; once equal it returns. Closing the
    context destroys the CQ regardless (the kernel's cleanup of the device file waits for nothing)."""
    for ack in (0, 2, None):
        bed, a, b = sides()
        b.recv()
        a.cq.req_notify()
        a.send()
        a.channel.get_cq_event(a.cq)
        if ack is None:
            a.ctx.close()
            assert a.cq.closed and a.channel.closed
            continue
        a.cq.ack_events(ack)
        a.qp.close()
        with pytest.raises(DeadlockError, match="ibv_ack_cq_events"):
            a.cq.close()
        assert not a.cq.closed
        a.cq.ack_events(1 - ack)
        a.cq.close()
        a.channel.close()


def test_resize_keeps_completions_and_refuses_fewer_entries_than_it_holds():
    """rdma-core ``test_resize_cq``: shrink, grow (``cqe`` at least what was asked), then EINVAL for fewer entries
    than the completions unpolled (``rxe_cq_chk_attr``); ``mlx5_ib_resize_cq``: EINVAL outside 1..max_cqe."""
    bed, a, b = sides()
    a.cq.resize(1)
    assert a.cq.cqe >= 1
    a.cq.resize(7)
    assert a.cq.cqe >= 7
    for _ in range(3):
        b.recv()
        a.send()
    bed.env.run()
    assert errno_of(a.cq.resize, 1) == "EINVAL"
    max_cqe = a.ctx.query_device().max_cqe
    assert errno_of(a.cq.resize, 0) == errno_of(a.cq.resize, max_cqe + 1) == "EINVAL"
    a.cq.resize(3)
    assert [wc.status for wc in a.cq.poll(3, timeout=0)[1]] == [WcStatus.SUCCESS] * 3
