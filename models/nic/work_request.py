"""One work request's run in the event engine: started at its post, it decides at each check of its path what only
run time knows (key and state checks, translations and their page faults, data mode's bytes, landing), its
retransmissions coming from :class:`~models.nic.retransmit.Retransmission` and its completion from
:mod:`models.nic.completion`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.nic.atomics import apply_atomic
from models.nic.completion import complete_at
from models.nic.datapath import (ACK_TIMER, READ_SLOT, RECEIVED, REPLY_WIRE, REQUEST_WIRE, SEQUENCE_NAK, Path,
                                 posted_path, rd_atomic_slots)
from models.nic.memory_window import invalidate_rkey, local_operation, remote_region
from models.nic.odp_caps import gated_translate, mlx5_ib_odp_opcode_cap
from models.nic.receive import complete_receive, landing_buffer, scatter, with_grh
from models.nic.refusal import DROPPED, NAK, NO_RECEIVE, NOT_RECEIVING, local_status, receive_refusal
from models.nic.remote_access import remote_right, remote_status
from models.nic.retransmit import Retransmission
from models.nic.stages import translation_stages
from models.nic.translated import RESPONDER, RESPONSE, SOURCE, translation_writes
from models.nic.translation import Fault, lookup_mr, mr_bytes, write_payload
from models.nic.transport import PSN_MASK, Outcome, Waiting, acknowledged, after_gap_closed
from models.nic.wqe import WC_SUCCESS, Opcode, QpState, SendWR, Sge, WcStatus
from sim.core.interpreter import Operation, Semaphore, compile_steps
from sim.core import ProtocolError
from sim.core.steps import Check, Detour


def start_work_request(qp, wr: SendWR, seq: int, offset: int = 0, listed: bool = False,
                       posted_ps: int | None = None) -> None:
    """Start carrying one work request from doorbell to the polled completion on ``qp`` (a connected
    :class:`~models.verbs.qp.QueuePair`, the verbs layer's object this module reads and updates); ``seq``
    and ``offset`` are its operation number and position offset under the ordering rule; ``listed``: posted in
    a list of several; ``posted_ps``: when it was posted, if earlier than now (it waited in SQD)."""
    env = qp.pd.context.env
    if qp.gates is None:  # counted at the first post, when the responder's max_dest_rd_atomic is known
        qp.gates = {READ_SLOT: Semaphore(rd_atomic_slots(qp))}
    now = env.now
    sges, sig, found = posted_path(qp, wr, now, listed)
    run = WorkRequestRun(qp, wr, found, now if posted_ps is None else posted_ps, sges, sig)
    program = found.program if wr.landed is not None else found.unmarked
    env.step_runner.start(Operation(program, seq, run, {"poll": qp.poll_delays.next()}, qp.gates,
                                    offset, qp.turns, qp.seq_of[id(wr)]))


Piece = tuple
"""One local access of a work request: ``(mr, addr, length)``."""


class WorkRequestRun(Retransmission):
    """What the model decides while one work request runs: key and state checks, translations (page faults
    stall the send queue; a responder-side fault sends an RNR NAK), PSNs, frames a link loses and the retries
    after them, data mode's bytes, landing and completion."""

    __slots__ = ("qp", "wr", "path", "posted", "sges", "signaled", "status", "payload", "retries", "local",
                 "received", "transport_retries", "executed", "psn", "packets", "op", "waiting", "timer_at", "woken",
                 "nak_psn")

    def __init__(self, qp, wr: SendWR, path: Path, posted: int, sges: Sequence[Sge], sig: bool) -> None:
        self.qp, self.wr, self.path, self.posted = qp, wr, path, posted
        self.sges, self.signaled = sges, sig
        """The work request's :func:`~models.nic.datapath.local_sges` and whether it is
        :func:`~models.nic.datapath.signaled`, as posted."""
        self.status = WC_SUCCESS
        self.payload = None
        self.retries = qp.rnr_retry
        self.transport_retries = qp.attr.retry_cnt
        """Sends again left after lost frames (``retry_cnt``; 7 is seven, not for ever)."""
        self.executed = False
        """The responder has executed the request (a copy sent again is then a duplicate)."""
        self.psn, self.packets = qp.next_psn, path.packets
        qp.next_psn = (qp.next_psn + self.packets) & PSN_MASK
        self.local: list[Piece] = []
        """The local SGEs' MRs as the requester found them when it took up the WQE, with address and length."""
        if wr.is_inline and qp.pd.context.env.data_mode:
            self.payload = wr.inline_data if wr.inline_data is not None else inline_payload(qp.node.host, sges)
        self.received: tuple | None = None
        """The receive the responder consumed: its queue and :class:`~models.nic.wqe.RecvWR`."""
        self.op: Operation | None = None
        """Its operation while it waits at :data:`ACK_TIMER` (an acknowledgement may end the wait sooner), else None:
        the operation refers to the run, and a reference back for its whole life would make every work request a
        cycle for the garbage collector."""
        self.waiting: Waiting | None = None
        """Why it waits for its ACK timer (None: it does not), until ``timer_at`` (ps)."""
        self.timer_at = 0
        self.woken: Outcome | None = None
        """What an acknowledgement or NAK that ended its wait early decided."""
        self.nak_psn: int | None = None
        """The PSN of the NAK PSN sequence error it carries back, while it does."""

    def check(self, op: Operation, name: str, now: int, head: int, tail: int):
        """See :class:`sim.core.interpreter.Model`."""
        if name == ACK_TIMER:
            self.op = op
        return _CHECKS[name](self, now, head, tail)

    def _fail(self, status: WcStatus, at: int, program: tuple):
        """End with ``status``: the rest replaced by ``program`` (the path's ``failed`` or ``rejected``) from
        ``at``."""
        self.status = status
        return program, at, at

    def _requester(self, now: int, head: int, tail: int):
        qp, wr = self.qp, self.wr
        if not wr.is_inline:  # inline data was copied into the WQE at the post: the NIC reads no MR for it
            self.local = [(lookup_mr(qp, sge.lkey), sge.addr, sge.length) for sge in self.sges]
        if qp.state.flushes or qp.sq_failed:
            return self._fail(WcStatus.WR_FLUSH_ERR, head, self.path.failed["requester"])
        problem = local_status(qp, wr, self.local)
        if problem is None and wr.opcode.is_local:
            problem = local_operation(qp, wr)
        if problem is not None:
            return self._local_error(problem, head, "requester")
        return None

    def _local_error(self, status: WcStatus, at: int, check: str):
        """The requester found a local error at ``check``: the work request ends with ``status`` from ``at``, and
        its send queue stops there (:attr:`~models.verbs.qp.QueuePair.sq_failed`)."""
        self.qp.sq_failed = True
        return self._fail(status, at, self.path.failed[check])

    def _own_access(self, now: int, check: str, write: bool):
        """The requester's access of its own memory at ``check`` (the payload's read, a response's write) through
        its backed MRs: None when it goes on, the time a page fault holds it until, or the program that ends it
        (flushed after an earlier local error, its access not made; failed, a local error of its own)."""
        if self.qp.sq_failed:
            return self._fail(WcStatus.WR_FLUSH_ERR, now, self.path.failed[check])
        for mr, addr, length in self.local:
            if mr.backing is not None:
                held = self._translated(mr, addr, length, now, write=write)
                if isinstance(held, WcStatus):
                    return self._local_error(held, now, check)
                if held is not None:
                    return held
        return None

    def _source(self, now: int, head: int, tail: int):
        qp = self.qp
        backed = any(mr.backing is not None for mr, _, _ in self.local)
        if backed and not qp.sq_failed and qp.sq_stalled_until > now:
            return qp.sq_stalled_until  # a page fault stalls the send queue: later WQEs wait behind it
        ended = self._own_access(now, "source", write=False)
        if ended is not None:
            return ended
        if backed:
            qp.sq_stalled_until = now
        if not self.wr.is_inline:
            self.payload = _gather(qp.pd.context.env, self.local)
        return self._translation(qp.node, self.local, now, head, tail, SOURCE)

    def _responder(self, now: int, head: int, tail: int):
        qp, wr = self.qp, self.wr
        if not qp.remote.psn_synced and acknowledged(qp.qp_type):  # UC and UD requests are not sequence-checked
            unsynced = self._first_psns(tail)
            if unsynced is not None:
                return unsynced
        if self.executed:  # a duplicate, whatever is missing: acknowledged again (a READ read again), not executed
            if not wr.opcode.reads_remote:
                return self.path.rejected, tail, tail
        elif qp.remote.missing not in (None, self):
            return self._out_of_sequence(tail, Waiting.BEHIND)
        else:
            if qp.remote.missing is self and qp.awaiting:
                self._wake(now, lambda run: after_gap_closed(run.waiting))
            qp.remote.missing, qp.remote.nak_sent = None, False
        if wr.opcode.consumes_receive:
            return self._receive(now, head, tail)
        refused = remote_status(qp, wr)
        unacked = not acknowledged(qp.qp_type)
        if refused is not None:
            if unacked:
                return self._dropped(tail, refused.ibv_name)
            qp.remote.to_error()  # the responder drops everything after the NAK
            return self._fail(refused, tail, self.path.rejected)
        peer, n = qp.remote.node, wr.message_bytes
        mr, addr = remote_region(qp.remote, wr.rkey, wr.remote_addr, n, remote_right(wr.opcode))
        if mr.backing is not None:
            need = mlx5_ib_odp_opcode_cap(wr.opcode)
            answer = gated_translate(qp.remote, mr, need, now, addr - mr.iova, n)
            if unacked and answer is not None:
                return self._dropped(tail, "page fault" if isinstance(answer, Fault) else "translation refused")
            if isinstance(answer, Fault):
                return self._rnr_nak(tail, mr=mr.lkey, retry_at_ps=answer.ready_ps)
            if answer is not None:
                qp.remote.to_error()
                return self._fail(WcStatus.REM_ACCESS_ERR, tail, self.path.rejected)
        env, target = qp.pd.context.env, [(mr, addr, n)]
        if wr.opcode.writes_remote:  # (a WRITE with immediate took its receive above)
            write_payload(mr, addr, self.payload)
        elif wr.opcode.is_atomic:  # the read-modify-write happens as the responder accepts it, once
            if env.data_mode and not self.executed:
                self.payload = apply_atomic(mr_bytes(mr, addr, n), wr.opcode, wr.compare_add, wr.swap)
        else:
            self.payload = _gather(env, target)
        self._executed()
        return self._translation(peer, target, now, head, tail, RESPONDER)

    def _dropped(self, tail: int, why: str):
        """An unacknowledged (UC, UD) responder drops the request (``why`` goes to the trace): nothing comes back
        and the requester, which completed when it sent it, never learns; a waiter on its landing learns it never
        landed."""
        qp = self.qp
        qp.pd.context.env.trace.instant(f"{qp.remote.node.nic.name}.hw", "RequestDropped", qp=qp.remote.qp_num,
                                        reason=why)
        self._never_lands()
        return (), tail, tail

    def _never_lands(self) -> None:
        """A waiter on the work request's landing learns that its payload never lands (the value None)."""
        landed = self.wr.landed
        if landed is not None and not landed.triggered:
            landed.succeed(None)

    def _executed(self) -> None:
        """The responder executed the request: it expects the PSN after it next (a duplicate changes nothing)."""
        if not self.executed:
            self.executed = True
            self.qp.remote.expected_psn = (self.psn + self.packets) & PSN_MASK

    def _receive(self, now: int, head: int, tail: int):
        """A request that consumes a receive reached the responder. On UC and UD, one the responder cannot take
        (:func:`receive_refusal`, a faulting buffer) is dropped. On RC, without a receive posted (or with its
        buffer faulting) an RNR NAK, and the responder drops the QP's later requests until this one comes again (they
        follow it, go-back-N, each after the same timer from its own arrival); a receive that cannot take the
        message (:func:`~models.nic.receive.receive_problem`) completes in error on the responder and the requester
        gets the NAK's error; else the payload lands in the receive's buffers (or, for a WRITE with immediate,
        through the rkey) and the receive completes when its CQE is written."""
        qp, wr = self.qp, self.wr
        responder, env = qp.remote, qp.pd.context.env
        if acknowledged(qp.qp_type):
            if qp.state is QpState.ERR:  # sent again behind a request that failed: flushed
                return self._fail(WcStatus.WR_FLUSH_ERR, tail, self.path.rejected)
            if responder.rnr_blocked not in (None, self):
                return self._sent_again(tail)  # go-back-N: dropped behind an RNR-NAKed request, sent again after it
        queue = responder.receives
        recv = queue.peek()
        kind, why = receive_refusal(qp, wr, recv)
        if kind is DROPPED:
            return self._dropped(tail, why)
        if kind is NAK:
            responder.to_error()
            return self._fail(why, tail, self.path.rejected)
        if kind is NOT_RECEIVING:  # the responder drops it: the requester's retries run out
            return self._fail(why, tail, self.path.rejected)
        if kind is NO_RECEIVE:
            responder.rnr_blocked = self  # (for good when its retries run out: the later ones are flushed)
            return self._rnr_nak(tail, qp=responder.qp_num, reason=why)
        responder.rnr_blocked = None
        mr, addr, length = landing_buffer(responder, recv, wr)
        problem = why
        if problem is None and mr is not None and mr.backing is not None:
            need = mlx5_ib_odp_opcode_cap(wr.opcode, receive=True, srq=responder.srq is not None)
            answer = gated_translate(responder, mr, need, now, addr - mr.iova, length)
            if isinstance(answer, Fault):
                if not acknowledged(qp.qp_type):
                    return self._dropped(tail, "page fault")
                return self._rnr_nak(tail, mr=mr.lkey, retry_at_ps=answer.ready_ps)
            if answer is not None:
                problem = (WcStatus.LOC_PROT_ERR, WcStatus.REM_ACCESS_ERR if wr.opcode.writes_remote
                           else WcStatus.REM_OP_ERR)
        queue.take()
        if problem is not None:
            complete_receive(env, responder, queue, recv, wr, problem[0], qp.qp_num, now)
            responder.to_error()
            if not acknowledged(qp.qp_type):
                return self._dropped(tail, problem[0].ibv_name)
            return self._fail(problem[1], tail, self.path.rejected)
        # A SEND with invalidate invalidates its key once the message is in (rxe_resp.c: invalidate_rkey); when it
        # cannot, the receive completes IBV_WC_REM_INV_REQ_ERR and the responder moves to ERR
        # (RESPST_ERR_INVALIDATE_RKEY, class J), the request itself being acknowledged.
        invalidated = wr.opcode is not Opcode.SEND_WITH_INV or invalidate_rkey(responder, wr.invalidate_rkey)
        self.received = (queue, recv, WC_SUCCESS if invalidated else WcStatus.REM_INV_REQ_ERR)
        self._executed()
        if wr.opcode.writes_remote:
            write_payload(mr, addr, self.payload)
        else:
            scatter(responder.node.nic, recv, with_grh(qp, wr, self.payload))
        return self._translation(responder.node, [(mr, addr, length)], now, head, tail, RESPONDER)

    def _response(self, now: int, head: int, tail: int):
        qp = self.qp
        ended = self._own_access(now, "response", write=True)  # (rxe_comp.c: a failed copy is COMPST_ERROR)
        if ended is not None:
            return ended
        _scatter(self.local, self.payload)
        return self._translation(qp.node, self.local, now, head, tail, RESPONSE)

    def _translated(self, mr, addr: int, length: int, now: int, *, write: bool):
        """A requester-side NIC access of ``length`` bytes through ``mr`` at ``now``: None when it goes on, the
        time a page fault holds it until, or the error status."""
        answer = gated_translate(self.qp, mr, mlx5_ib_odp_opcode_cap(self.wr.opcode), now, addr - mr.iova, length)
        if answer is None:
            return None
        if not isinstance(answer, Fault):
            return answer
        self.qp.pd.context.env.trace.instant(f"{self.qp.node.nic.name}.hw", "AccessStalled", mr=mr.lkey,
                                             until_ps=answer.ready_ps, write=write)
        return answer.ready_ps

    def _translation(self, node, pieces: list[Piece], now: int, head: int, tail: int, check: str):
        """After an access is allowed at ``now``, at the check named ``check``: the NIC's translation-cache and
        IO-TLB stages of each piece (when the node models them), looked up then, run as a detour from ``head``
        before the steps after the check (:class:`~sim.core.steps.Detour`: the data goes on once they are done, its
        tail no earlier than then), numbered on from the check. None when there are none."""
        rest = self.path.after.get(check)
        if rest is None or not pieces or (node.nic.mtt is None and node.iommu is None):
            return None
        extra = tuple(s for mr, addr, length in pieces
                      for s in translation_stages(node, mr, addr, length, now,
                                                      write=translation_writes(check, self.wr.opcode)))
        if not extra:
            return None
        return compile_steps((Detour(extra), *rest), self.path.at[check] + 1), head, tail

    def _received(self, now: int, head: int, tail: int):
        """The responder's receive CQE is in memory: the receive completes."""
        queue, recv, status = self.received
        complete_receive(self.qp.pd.context.env, self.qp.remote, queue, recv, self.wr, status, self.qp.qp_num, now)
        if status is not WC_SUCCESS:
            self.qp.remote.to_error()

    def mark(self, op: Operation, name: str, head: int, tail: int) -> None:
        """The payload has landed (``name`` is ``landed``): a waiter on the work request learns when."""
        if self.wr.landed is not None:
            landed, signal = tail - self.path.landed_back_ps, self.wr.landed
            env = self.qp.pd.context.env
            env.timeout(landed - env.now).callbacks.append(lambda _event: signal.succeed(landed))

    def wake(self, op: Operation, head: int) -> None:
        """The CPU sees the completion at ``head``."""
        complete_at(self.qp.pd.context.env, self.qp, self.wr, self.status, self.posted, head, self.signaled)


_CHECKS = {name: getattr(WorkRequestRun, "_" + name)
           for name in ("requester", "source", "responder", "response", RECEIVED, REQUEST_WIRE,
                        REPLY_WIRE, ACK_TIMER, SEQUENCE_NAK)}
"""The method deciding each :class:`~sim.core.steps.Check` of a work request's path, by the check's name."""


def _gather(env, pieces: list[Piece]):
    """Data mode: the bytes the NIC reads through each piece's MR translation now, one after the other (None when
    data mode is off)."""
    if not env.data_mode:
        return None
    if not pieces:
        return np.zeros(0, np.uint8)
    return np.concatenate([mr_bytes(mr, addr, length) for mr, addr, length in pieces])


def inline_payload(host, sges: Sequence[Sge]) -> np.ndarray:
    """Data mode: the bytes an inline work request carries, copied from the process's memory at the SGEs'
    addresses when it is posted (the provider's memcpy into the WQE; no MR is involved).

    :raises ProtocolError: an SGE's range is not the process's memory (the copy would fault the process).
    """
    parts = []
    for sge in sges:
        buf = host.buffer_at(sge.addr, sge.length)
        if buf is None or buf.name not in host.data:
            raise ProtocolError(f"ibv_post_send: inline data at 0x{sge.addr:x}+{sge.length} is not in the "
                                "process's memory (copying it into the WQE would fault)")
        parts.append(host.data[buf.name][sge.addr - buf.addr:sge.addr - buf.addr + sge.length].copy())
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def _scatter(pieces: list[Piece], payload) -> None:
    """Data mode: the NIC writes ``payload`` through the pieces' translations now, filling each in turn."""
    if payload is None:
        return
    at = 0
    for mr, addr, length in pieces:
        mr_bytes(mr, addr, length)[:] = payload[at:at + length]
        at += length
