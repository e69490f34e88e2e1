"""What a work request's run decides when its request or reply does not get through: RNR NAKs and their retries,
PSN checks and sequence NAKs, frames a link loses, the requester's ACK timer and ``retry_cnt`` (the rules of each
service are :mod:`models.nic.transport`'s)."""

from __future__ import annotations

import dataclasses

from models.nic.datapath import ACK_TIMER, COMPLETION, REPLY_WIRE, REQUEST_WIRE, SEQUENCE_NAK, Path, check_index
from models.nic.nic import Nic
from models.nic.transport import (PSN_MASK, PSN_WINDOW, Outcome, Waiting, acknowledged, after_acknowledgement,
                                  sequence_nak)
from models.nic.wqe import RNR_RETRY_INFINITE, WcStatus
from sim.core.interpreter import compile_steps
from sim.core.steps import Check, Claim, Delay, Fork, Rebase, Step

_AWAIT_TIMER = compile_steps((Check(ACK_TIMER),))


def resent(found: Path, before: tuple[Step, ...]) -> tuple[Step, ...]:
    """A request's own program when it goes again (after an RNR NAK, a lost frame or a NAK PSN sequence error):
    ``before`` (the NAK's way back and the wait), then its path from the send engine on again (go-back-N: its
    payload read again), the responder's check of it, and the steps after that check."""
    return (*_to_responder(found, before), *found.after["responder"])


def _to_responder(found: Path, before: tuple[Step, ...]) -> tuple[Step, ...]:
    """:func:`resent` as far as the responder's check."""
    return (*before, *found.forward, Check("responder", 0))


def rnr_wait(found: Path, min_rnr_timer_ps: int) -> tuple[Step, ...]:
    """What an RNR NAK costs before the request goes again: the NAK's way back to the requester, then the
    responder's min_rnr_timer (ps) from its arrival."""
    return (*found.reply[:-1], Rebase(False), Delay(min_rnr_timer_ps))


def rnr_retried(found: Path, retries: int, min_rnr_timer_ps: int) -> tuple[Step, ...]:
    """The steps of a work request of path ``found`` that the responder answers with ``retries`` RNR NAKs before
    it takes the request: the path up to the responder's check, then each time the program the event engine's run
    puts in place of the rest (:func:`resent` after :func:`rnr_wait`, from the check's tail, numbered from its own
    start; :func:`_passed`)."""
    if not retries:
        return found.steps
    steps = found.steps
    k = check_index(steps, "responder")
    retry = (Rebase(True, renumber=0), *_passed(_to_responder(found, rnr_wait(found, min_rnr_timer_ps)), steps[:k]))
    return (*steps[:k + 1], *retry * retries, *found.after["responder"])


def timed_out(found: Path, frame: str, latency_ps: int, timeout_ps: int) -> tuple[Step, ...]:
    """The steps of a work request of path ``found`` whose request (``frame`` :data:`REQUEST_WIRE`) or
    acknowledgement (:data:`REPLY_WIRE`) a link outage lost, sent again when the requester's ACK timer fires with
    nothing woken it sooner: the path up to that frame's check on the wire, then what the event engine's run puts in
    place of the rest (:meth:`Retransmission._lost`): the timer runs from when the frame left, ``latency_ps`` before
    its last bit reached the far port, and the request waits for it to fire ``timeout_ps`` later (that program
    numbered from its own start, the check its first step), then goes again from then (:func:`resent`, numbered from
    its own start; :func:`_passed`). A request the responder executed already is acknowledged again there, not
    executed (:meth:`WorkRequestRun._responder <models.nic.work_request.WorkRequestRun._responder>`: the path's
    ``rejected``, from the check's tail)."""
    steps = found.steps
    k = check_index(steps, frame)
    again = _passed(resent(found, ()), steps[:k]) if frame == REQUEST_WIRE else (
        *_passed(_to_responder(found, ()), steps[:k]), Rebase(True, renumber=0), *found.reply, *COMPLETION)
    return (*steps[:k + 1], Rebase(True, timeout_ps - latency_ps, renumber=0), Check(ACK_TIMER, 0),
            Rebase(False, renumber=0), *again)


def woken(found: Path, frame: str, latency_ps: int, at_ps: int) -> tuple[Step, ...]:
    """The steps of a work request of path ``found`` whose request (``frame`` :data:`REQUEST_WIRE`) or
    acknowledgement (:data:`REPLY_WIRE`) a link outage lost, and which a NAK PSN sequence error wakes at ``at_ps``
    before its timer fires (:meth:`Retransmission._wake`): as :func:`timed_out` up to the ACK timer's check, held
    there until then, and then as ``_ack_timer`` goes on: the request again, or completed (the NAK acknowledges a
    request before the one it asks for: its acknowledgement's loss costs nothing more, the path's ``failure``)."""
    steps = found.steps
    k = check_index(steps, frame)
    rest = found.failure if frame == REPLY_WIRE else _passed(resent(found, ()), steps[:k])
    return (*steps[:k + 1], Rebase(True, -latency_ps, renumber=0),
            Check(ACK_TIMER, holds=((0, at_ps),), restarts=True), Rebase(False, renumber=0), *rest)


def out_of_sequence(found: Path, nak: bool, at_ps: int = 0) -> tuple[Step, ...]:
    """The steps of a work request of path ``found`` that reaches the responder while an earlier one a link outage
    lost is missing (:meth:`Retransmission._out_of_sequence`): the first (``nak``) carries a NAK PSN sequence error
    back (the path's reply up to its CQE write, then the :data:`SEQUENCE_NAK` check) and goes again from there
    (:meth:`Retransmission._sequence_nak`); the others wait for their timers from their arrival until the NAK or
    the missing request's arrival wakes them at ``at_ps``, then go again. Each program is numbered from its own
    start; :func:`_passed`."""
    steps = found.steps
    k = check_index(steps, "responder")
    wait = (*found.reply[:-1], Check(SEQUENCE_NAK, 0)) if nak else (
        Check(ACK_TIMER, holds=((0, at_ps),), restarts=True),)
    return (*steps[:k + 1], Rebase(True, renumber=0), *wait, Rebase(False, renumber=0),
            *_passed(resent(found, ()), steps[:k]))


def _passed(steps: tuple[Step, ...], before: tuple[Step, ...]) -> tuple[Step, ...]:
    """``steps`` of a request going again, whose claims in the turns the operation claimed in ``before`` are plain
    claims: its ticket there has passed (the interpreter finds the turn gone from the operation's)."""
    passed = {s.turn for s in before if isinstance(s, Claim) and s.turn is not None}
    return tuple(dataclasses.replace(s, turn=None) if isinstance(s, Claim) and s.turn in passed else s for s in steps)


class Retransmission:
    """The retransmission half of :class:`~models.nic.work_request.WorkRequestRun` (its state is the run's)."""

    __slots__ = ()

    def _rnr_nak(self, tail: int, **why):
        """The responder is not ready (a page fault, or no receive posted; ``why`` goes to the trace): an RNR NAK
        goes back and the request is sent again after the responder's min_rnr_timer, up to rnr_retry times (7: for
        ever), then the requester completes IBV_WC_RNR_RETRY_EXC_ERR."""
        qp = self.qp
        qp.pd.context.env.trace.instant(f"{qp.remote.node.nic.name}.hw", "RnrNakSent", **why)
        qp.rnr_naks += 1
        if self.retries == 0:
            return self._fail(WcStatus.RNR_RETRY_EXC_ERR, tail, self.path.rejected)
        self.retries -= 1 if qp.rnr_retry != RNR_RETRY_INFINITE else 0
        return self._sent_again(tail)

    def _sent_again(self, tail: int):
        """The request goes again once the responder's NAK is back and its min_rnr_timer has passed."""
        return self._send_again(tail, self.qp.remote.min_rnr_timer_ps)

    def _send_again(self, at: int, min_rnr_timer_ps: int | None = None):
        """Every retry's rule: from ``at``, after an RNR NAK its way back and the responder's ``min_rnr_timer_ps``
        (:func:`rnr_wait`; None: nothing), then the request's path from the send engine on again (:func:`resent`),
        compiled once per path and timer (:attr:`Path.again`)."""
        again = self.path.again
        program = again.get(min_rnr_timer_ps)
        if program is None:
            before = () if min_rnr_timer_ps is None else rnr_wait(self.path, min_rnr_timer_ps)
            program = again[min_rnr_timer_ps] = compile_steps(resent(self.path, before))
        return program, at, at

    def _first_psns(self, tail: int):
        """The responder checks the PSN of each request until one arrives with the PSN it expects (``rq_psn``):
        one behind it is a duplicate, acknowledged and not executed (a READ is read again); one ahead is out of
        sequence (:meth:`_out_of_sequence`), and its requester, which never sent the PSN the responder's NAK asks
        for, sends it again then and at each ACK timer until ``retry_cnt`` runs out (IBV_WC_RETRY_EXC_ERR): what
        mismatched ``sq_psn``/``rq_psn`` do. None: the request goes on."""
        responder = self.qp.remote
        behind = (responder.expected_psn - self.psn) & PSN_MASK
        if behind == 0:
            responder.psn_synced = True
            return None
        self.qp.pd.context.env.trace.instant(f"{responder.node.nic.name}.hw", "PsnSequenceError", psn=self.psn,
                                             expected=responder.expected_psn)
        if behind <= PSN_WINDOW:
            self.executed = True
            return None if self.wr.opcode.reads_remote and not self.wr.opcode.is_atomic else (
                self.path.rejected, tail, tail)
        return self._out_of_sequence(tail, Waiting.REQUEST if responder.missing is None else Waiting.BEHIND)

    def _request_wire(self, now: int, head: int, tail: int):
        """The request's first bit reached the responder's port at ``head`` and its last at ``tail``: when either
        link was down meanwhile the responder never sees it, and waits for it again (:meth:`_lost`); a UC or UD
        message is simply gone (:meth:`_lost_unacknowledged`)."""
        qp = self.qp
        latency = qp.pd.context.fabric.params.latency_ps
        if not frame_lost(qp.node.nic, qp.remote.node.nic, latency, head, tail):
            return None
        if not acknowledged(qp.qp_type):
            return self._lost_unacknowledged(head, tail)
        if qp.remote.missing is None and not self.executed:
            qp.remote.missing = self
        return self._lost(tail - latency, "request")

    def _reply_wire(self, now: int, head: int, tail: int):
        """The same for the acknowledgement, NAK or READ response on its way back. One that arrives acknowledges
        the requests before it whose own were lost (:meth:`_acknowledged`)."""
        qp = self.qp
        latency = qp.pd.context.fabric.params.latency_ps
        if not frame_lost(qp.remote.node.nic, qp.node.nic, latency, head, tail):
            if self.executed and qp.awaiting:
                self._acknowledged(tail, self.psn, nak=False)
            return None
        return self._lost(tail - latency, "reply")

    def _lost(self, sent: int, frame: str):
        """A frame of the request, sent by ``sent``, was lost: the requester's transport timer fires ``timeout``
        later and it sends the request again, up to ``retry_cnt`` times; then the work request completes
        IBV_WC_RETRY_EXC_ERR (and the QP's later ones flush). A lost NAK PSN sequence error leaves its request
        dropped behind the lost one. With timeout 0 the timer never fires: the work request never completes."""
        self._count_lost(frame)
        if frame == "request":
            return self._await_timer(sent, Waiting.REQUEST)
        if self.nak_psn is not None:  # the NAK it carried back: it waits as the responder left it
            self.nak_psn = None
            return self._await_timer(sent, self.waiting)
        return self._await_timer(sent, Waiting.REPLY if self.executed else Waiting.REQUEST)

    def _lost_unacknowledged(self, head: int, tail: int):
        """A UC or UD message met an outage: nothing retries it (:mod:`models.nic.transport`), so it never reaches
        the responder (UC drops the rest of a message a packet of which was lost; the model drops the whole
        message, the packets before the lost one included) and consumes no receive there, while the requester
        completes as it would have, its completion not waiting for the remote side."""
        self._count_lost("request")
        self._never_lands()
        rest = tuple(step for step in self.path.after[REQUEST_WIRE] if not isinstance(step, Fork))
        return compile_steps(rest), head, tail

    def _count_lost(self, frame: str) -> None:
        """One more frame of the QP lost on a link (``frame``: the request, or its reply), counted and traced."""
        qp = self.qp
        qp.frames_lost += 1
        qp.pd.context.env.trace.instant(f"{qp.node.nic.name}.hw", "FrameLost", qp=qp.qp_num, frame=frame,
                                        wr_id=self.wr.wr_id)

    def _out_of_sequence(self, tail: int, why: Waiting):
        """The responder drops a request that arrives (at ``tail``) ahead of the PSN it expects: behind one the link
        lost (go-back-N), or one the requester never sent. The first of the gap carries a NAK PSN sequence error
        for the expected PSN back (:func:`sequence_nak`); the others wait for their timers, or for the requester
        to go back, as ``why`` says."""
        responder = self.qp.remote
        if not sequence_nak(responder.nak_sent):
            return self._await_timer(tail, why)
        responder.nak_sent, self.nak_psn, self.waiting = True, responder.expected_psn, why
        responder.sequence_naks += 1
        self.qp.pd.context.env.trace.instant(f"{responder.node.nic.name}.hw", "PsnSequenceNak", qp=responder.qp_num,
                                             psn=self.nak_psn)
        return compile_steps((*self.path.reply[:-1], Check(SEQUENCE_NAK, 0))), tail, tail

    def _sequence_nak(self, now: int, head: int, tail: int):
        """The NAK PSN sequence error is back: the requester goes back to its PSN (:meth:`_acknowledged`) and this
        request goes again behind the NAK'd one."""
        psn, self.nak_psn, self.waiting = self.nak_psn, None, None
        if not self._acknowledged(now, psn, nak=True):
            return self._fail(WcStatus.WR_FLUSH_ERR, now, self.path.failed[None])
        return self._send_again(now)

    def _acknowledged(self, at: int, psn: int, *, nak: bool) -> bool:
        """An acknowledgement (or, ``nak``, a NAK PSN sequence error) for ``psn`` reaches the requester at ``at``:
        the QP's requests waiting for their timers that it decides (:func:`after_acknowledgement`) end their wait
        then, in posting order. False: the NAK'd request has no retry left (the later requests flush)."""
        nakd = [run for run in self.qp.awaiting if nak and run.psn == psn]
        left = not nakd or nakd[0].transport_retries > 0
        self._wake(at, lambda run: after_acknowledgement(run.psn, run.waiting, run.wr.opcode.reads_remote, psn, nak,
                                                         left))
        return left

    def _wake(self, at: int, decide) -> None:
        """The QP's requests waiting for their timers for which ``decide(run)`` is an :class:`Outcome` end their wait
        at ``at`` with it."""
        qp = self.qp
        runner = qp.pd.context.env.step_runner
        for run in list(qp.awaiting):
            outcome = decide(run)
            if outcome is not None:
                qp.awaiting.remove(run)
                run.woken = outcome
                runner.ask_sooner(run.op, at)

    def _await_timer(self, sent: int, why: Waiting):
        """The requester's ACK timer runs from ``sent``: the request waits for it at :data:`ACK_TIMER` (for ever
        with timeout 0), unless an acknowledgement or NAK ends the wait sooner."""
        timeout = self.qp.ack_timeout_ps
        if timeout is None:
            return (), sent, sent
        self.waiting, self.timer_at, self.woken = why, sent + timeout, None
        self.qp.awaiting.append(self)
        return _AWAIT_TIMER, sent, sent

    def _ack_timer(self, now: int, head: int, tail: int):
        """Held until the timer fires (or sooner, :meth:`_acknowledged`), then: completed when acknowledged; sent
        again; or, for a lost request or the NAK'd one, sent again spending a retry, IBV_WC_RETRY_EXC_ERR once
        ``retry_cnt`` is spent."""
        woken, why = self.woken, self.waiting
        if woken is None and now < self.timer_at:
            return self.timer_at
        if woken is None:
            self.qp.awaiting.remove(self)
        self.waiting = self.woken = self.op = None
        if woken is Outcome.COMPLETE:
            return self.path.failed[None], now, now
        if woken is Outcome.FLUSH:
            return self._fail(WcStatus.WR_FLUSH_ERR, now, self.path.failed[None])
        if woken is Outcome.AGAIN or (woken is None and why is Waiting.BEHIND):
            return self._send_again(now)
        if self.transport_retries == 0:
            return self._fail(WcStatus.RETRY_EXC_ERR, now, self.path.failed[None])
        self.transport_retries -= 1
        return self._send_again(now)


def frame_lost(sender: Nic, receiver: Nic, latency_ps: int, head, tail):
    """Whether a frame whose first bit reached ``receiver``'s port at ``head`` and last at ``tail``, ``latency_ps``
    after leaving ``sender``'s, met an outage of either link on its way (for arrays of frames, each one's answer)."""
    return sender.link_lost(head - latency_ps, tail - latency_ps) | receiver.link_lost(head, tail)
