"""A work request's completion: delivered in posting order, an error moving the QP to its error state and flushing
the later ones, an unsignaled success freeing its send-queue slot with the next completion polled."""

from __future__ import annotations

from functools import partial

import simpy

from models.nic.transport import acknowledged
from models.nic.wqe import WC_SUCCESS, SendWR, WcStatus, WorkCompletion, send_wc_opcode


def complete_at(env, qp, wr: SendWR, status: WcStatus, posted: int, seen: int, sig: bool) -> None:
    """Finish a work request whose CQE the polling CPU would notice at ``seen``.

    RC completions are delivered in posting order: a completion waits for every earlier one. The first
    error completion moves the QP to the error state; every later one is delivered as WR_FLUSH_ERR, and the QP's
    receives flush once the error completion is in the CQ. An unsignaled work request that succeeds delivers
    nothing and keeps its send-queue slot until the next completion the QP delivers is polled (the CQE's WQE
    counter covers every earlier WQE).
    """
    if wr.landed is not None and not wr.landed.triggered and status is not WC_SUCCESS:
        wr.landed.succeed(None)  # the payload never landed: waiters learn it from the None value
    seq = qp.seq_of.pop(id(wr))
    if seq != qp.next_completion:
        qp.finished[seq] = (wr, status, posted, seen, sig)
        return
    while True:
        number = qp.next_completion
        qp.next_completion += 1
        seen = max(seen, qp.last_completion_ps)
        qp.last_completion_ps = seen
        moved_to_error = False
        if qp.state.flushes:
            status = WcStatus.WR_FLUSH_ERR
        elif status is not WC_SUCCESS:
            if acknowledged(qp.qp_type):
                qp.to_error(completing=True)
                moved_to_error = True
            else:
                qp.to_send_queue_error()
        if env.trace.enabled:
            env.trace.slice(f"{qp.node.name}.qp{qp.qp_num}", wr.opcode.name, posted, seen, wr_id=wr.wr_id,
                            bytes=wr.message_bytes, status=status.name)
        if status is WC_SUCCESS and not sig:
            qp.unsignaled += 1
        else:
            wc = WorkCompletion(wr.wr_id, status, send_wc_opcode(wr.opcode), wr.message_bytes if status is WC_SUCCESS
                                else 0, qp.qp_num, posted, seen)
            freed, qp.unsignaled = qp.unsignaled + 1, 0
            simpy.Timeout(env, seen - env.now).callbacks.append(partial(_deliver, qp, wc, freed, number,
                                                                        moved_to_error))
        if qp.next_completion not in qp.finished:
            return
        wr, status, posted, seen, sig = qp.finished.pop(qp.next_completion)


def _deliver(qp, wc: WorkCompletion, freed: int, number: int, moved_to_error: bool, _event) -> None:
    """The CQE of work request ``number`` (its posting number) reaches the CQ (a simpy callback): it and the
    unsignaled ones before it are no longer outstanding; their send queue slots are free once it is polled. The
    error that moved the QP to ERR (``moved_to_error``) is followed by the flush of its receives."""
    qp.outstanding -= freed
    if number < qp.sq_reset_seq:  # posted before the QP was reset, which discarded its WQEs
        return
    wc.release = partial(_free_send_slots, qp, freed)
    qp.send_cq.push(wc)
    if moved_to_error:
        qp.error_completed()


def _free_send_slots(qp, freed: int) -> None:
    """A send completion covering ``freed`` work requests was polled (or cleaned from its CQ)."""
    qp.sq_used -= freed
