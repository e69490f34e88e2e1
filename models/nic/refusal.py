"""What refuses a work request, in the run's order: the requester's own checks, then the responder's.

The event engine's run (:class:`~models.nic.work_request.WorkRequestRun`) asks these as the request reaches each
side; the vectorized core's planner asks :func:`refusal` once per stream and size before it solves.
"""

from __future__ import annotations

from collections.abc import Sequence

from models.nic.datapath import local_sges
from models.nic.receive import RECEIVING, receive_problem, unacknowledged_refusal
from models.nic.remote_access import remote_status
from models.nic.translation import lookup_mr
from models.nic.transport import QP_RC, acknowledged, opcode_problem
from models.nic.wqe import Access, RecvWR, SendWR, WcStatus

_LOCAL_WRITE = int(Access.LOCAL_WRITE)
"""Access bits as plain ints: IntFlag arithmetic is slow on the per-message path."""


def local_status(qp, wr: SendWR, local: Sequence[tuple]) -> WcStatus | None:
    """The requester's own checks of ``wr`` on ``qp``, ``local`` being ``(mr, addr, length)`` of each SGE: an
    opcode or message its UC or UD service does not carry (:func:`~models.nic.transport.opcode_problem`), then an
    SGE whose lkey names no MR of the QP's PD (``mr`` None: :func:`~models.nic.translation.lookup_mr`) or whose MR
    does not cover it with the access the opcode needs (LOCAL_WRITE where a
    READ's or atomic's response lands): IBV_WC_LOC_PROT_ERR. None when they pass. An inline work request's SGEs
    name no MR the NIC reads: their L_Keys are not checked (ibv_post_send(3): "The L_Key will not be checked")."""
    if qp.qp_type is not QP_RC and (problem := opcode_problem(qp.qp_type, wr.opcode, wr.message_bytes,
                                                                   qp.path_mtu_bytes)) is not None:
        return problem
    if wr.is_inline:
        return None
    needed = _LOCAL_WRITE if wr.opcode.reads_remote else 0
    for mr, addr, length in local:
        if mr is None or not mr.allows(addr, length, needed):
            return WcStatus.LOC_PROT_ERR
    return None


def refusal(qp, wr: SendWR, recv: RecvWR | None = None) -> str | None:
    """What refuses ``wr`` on ``qp`` when nothing changes while it runs (the status of its error completion, or
    why a UC or UD responder drops it), None when it succeeds: the requester's :func:`local_status`, then the
    responder's: the R_Key of a request that takes no receive (:func:`remote_status`), or for one that takes the
    receive ``recv``, :func:`receive_refusal`."""
    problem = local_status(qp, wr, [(lookup_mr(qp, sge.lkey), sge.addr, sge.length) for sge in local_sges(wr)])
    if problem is not None:
        return problem.ibv_name
    if not wr.opcode.consumes_receive:
        refused = remote_status(qp, wr)
        return None if refused is None else refused.ibv_name
    kind, why = receive_refusal(qp, wr, recv)
    if kind is None:
        return None
    if kind is RECEIVE_PROBLEM:
        return why[1].ibv_name
    return why if isinstance(why, str) else why.ibv_name


DROPPED, NAK, NOT_RECEIVING, NO_RECEIVE, RECEIVE_PROBLEM = "dropped", "nak", "not receiving", "no receive", "receive"
"""What :func:`receive_refusal` found."""


def receive_refusal(qp, wr: SendWR, recv: RecvWR | None) -> tuple[str | None, object]:
    """The responder's checks of ``wr``, a request on ``qp`` that consumes a receive (``recv``, the one it would
    take: None when none is posted), in their order: ``(None, None)`` when it takes ``recv``, else ``(what, why)``:
    :data:`DROPPED` and the reason, a UC or UD responder dropping it (:func:`unacknowledged_refusal`); on RC and
    XRC, :data:`NAK` and the status, a WRITE with immediate's R_Key (:func:`remote_status`);
    :data:`NOT_RECEIVING` and IBV_WC_RETRY_EXC_ERR, a responder that does not receive; :data:`NAK` and
    IBV_WC_REM_ACCESS_ERR, an XRC request naming no XRC SRQ of the target's domain (:mod:`models.verbs.xrc_path`);
    :data:`NO_RECEIVE` and "no receive posted" (an RNR NAK); then, on every service, :data:`RECEIVE_PROBLEM` and
    :func:`receive_problem`'s statuses, what ``recv`` cannot take."""
    if not acknowledged(qp.qp_type):
        dropped = unacknowledged_refusal(qp, wr, recv)
        if dropped is not None:
            return DROPPED, dropped
    else:
        refused = remote_status(qp, wr) if wr.opcode.writes_remote else None
        if refused is not None:
            return NAK, refused
        if qp.remote.state not in RECEIVING:
            return NOT_RECEIVING, WcStatus.RETRY_EXC_ERR
        if not qp.remote.xrc_srq_valid:
            return NAK, WcStatus.REM_ACCESS_ERR
        if recv is None:
            return NO_RECEIVE, "no receive posted"
    problem = receive_problem(qp.remote, recv, wr)
    return (None, None) if problem is None else (RECEIVE_PROBLEM, problem)
