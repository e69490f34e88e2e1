"""The responder's receive side of the data path: which receive a SEND (or RDMA WRITE with immediate) takes, the
checks it must pass, data mode's scatter into its buffers and its completion on the responder's receive CQ.

The requester's side and the steps of the path are :mod:`models.nic.datapath`'s; this module decides only what the
responder does with a receive, reading the verbs layer's QP (``receives``, ``deliver_receive``) without importing it.
"""

from __future__ import annotations

import numpy as np

from models.nic.memory_window import remote_region
from models.nic.remote_access import remote_status
from models.nic.translation import lookup_mr, write_payload
from models.nic.transport import QpType, grh, port_gid, receive_overhead, sent_qkey
from models.nic.wqe import (Access, Opcode, QpState, RecvWR, SendFlags, SendWR, WcFlags, WcStatus, WorkCompletion,
                            receive_wc_opcode)

_LOCAL_WRITE, _REMOTE_WRITE = int(Access.LOCAL_WRITE), int(Access.REMOTE_WRITE)

_SOLICITED = int(SendFlags.SOLICITED)
"""``IBV_SEND_SOLICITED`` as a plain int (the per-message path)."""


def receive_mr(responder):
    """The MR the responder's next receive scatters into first (None: no receive posted, or a bad key); a SEND
    posted now is planned to land there (a later receive elsewhere in the node's topology is not re-routed)."""
    recv = responder.receives.peek()
    if recv is None or not recv.sg_list:
        return None
    return responder.node.nic.lookup(recv.sg_list[0].lkey)


RECEIVING = (QpState.RTR, QpState.RTS, QpState.SQD, QpState.SQE)
"""States in which a QP's receive side takes incoming requests."""


def receive_problem(responder, recv: RecvWR, wr: SendWR) -> tuple[WcStatus, WcStatus] | None:
    """Why ``recv`` cannot take the message of ``wr``: ``(responder's status, requester's status)``, or None.

    A message longer than the receive's buffers: IBV_WC_LOC_LEN_ERR on the responder, whose NAK (Invalid Request)
    the requester completes as IBV_WC_REM_INV_REQ_ERR (mlx5 cq.c: MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR and
    REMOTE_INVAL_REQ_ERR). A scatter entry the message reaches whose lkey is not a local MR with LOCAL_WRITE over
    it (:func:`~models.nic.translation.lookup_mr`: an MR of the responder QP's PD): IBV_WC_LOC_PROT_ERR on the
    responder, IBV_WC_REM_OP_ERR (Remote Operational Error NAK) on the requester.
    A WRITE with immediate writes through its rkey: it only needs a receive, whatever its buffers. A UD receive
    holds the 40-byte GRH before the payload."""
    if wr.opcode.writes_remote:
        return None
    needed = wr.message_bytes + receive_overhead(responder.qp_type)
    if needed > recv.capacity:
        return WcStatus.LOC_LEN_ERR, WcStatus.REM_INV_REQ_ERR
    left = needed
    for sge in recv.sg_list:
        if left <= 0:
            break
        mr = lookup_mr(responder, sge.lkey)
        if mr is None or not mr.allows(sge.addr, sge.length, _LOCAL_WRITE):
            return WcStatus.LOC_PROT_ERR, WcStatus.REM_OP_ERR
        left -= sge.length
    return None


def landing_buffer(responder, recv: RecvWR, wr: SendWR):
    """``(mr, addr, length)`` of the first bytes of ``wr`` at the responder: through its rkey for a WRITE with
    immediate, else the receive's first scatter entry (mr None: it has none, or its key is unknown)."""
    if wr.opcode.writes_remote:
        mr, addr = remote_region(responder, wr.rkey, wr.remote_addr, wr.message_bytes, _REMOTE_WRITE) or (None, 0)
        return mr, addr, wr.message_bytes
    if not recv.sg_list:
        return None, 0, 0
    first = recv.sg_list[0]
    needed = wr.message_bytes + receive_overhead(responder.qp_type)
    return responder.node.nic.lookup(first.lkey), first.addr, min(needed, first.length)


def unacknowledged_refusal(qp, wr: SendWR, recv: RecvWR | None) -> str | None:
    """Why the responder of a UC or UD ``qp`` drops ``wr``, a request that consumes a receive (``recv``, the one
    it would take: None when none is posted), without a word back (see :mod:`models.nic.transport`), or None when
    it takes it: the QP does not receive, a UD Q_Key that is not the QP's, a WRITE with immediate the responder
    refuses (:func:`remote_status`), no receive posted; a datagram to a QP number with no QP behind it (a destroyed
    or never created one: ``responder.destroyed``)."""
    responder = qp.remote
    if responder.destroyed:
        return f"no QP {responder.qp_num}"
    if responder.state not in RECEIVING:
        return f"QP {responder.qp_num} is in {responder.state.name}"
    if responder.qp_type is QpType.UD and sent_qkey(wr.remote_qkey, qp.attr.qkey) != responder.attr.qkey:
        return "Q_Key mismatch"
    if wr.opcode.writes_remote and (refused := remote_status(qp, wr)) is not None:
        return refused.ibv_name
    if recv is None:
        return "no receive posted"
    return None


def with_grh(qp, wr: SendWR, payload):
    """Data mode: the bytes a UD datagram of ``wr`` from ``qp`` scatters: its GRH (when its AH has one; else 40 zero
    bytes, an absent GRH's content being undefined) and then ``payload``; other services' payload unchanged."""
    if payload is None or qp.qp_type is not QpType.UD:
        return payload
    fabric = qp.pd.context.fabric
    header = bytes(40)
    if wr.ah.attr.is_global:
        header = grh(port_gid(fabric.lid(qp.node.nic.name)), wr.ah.attr.dgid, wr.message_bytes, wr.opcode.carries_imm)
    return np.concatenate([np.frombuffer(header, np.uint8), payload])


def scatter(nic, recv: RecvWR, payload) -> None:
    """Data mode: the message's bytes into the receive's scatter entries, in order."""
    if payload is None:
        return
    at = 0
    for sge in recv.sg_list:
        if at >= len(payload):
            break
        piece = payload[at:at + sge.length]
        write_payload(nic.lookup(sge.lkey), sge.addr, piece)
        at += len(piece)


def complete_receive(env, responder, queue, recv: RecvWR, wr: SendWR, status: WcStatus, src_qp: int,
                      at: int) -> None:
    """The responder's completion of ``recv`` (consumed for ``wr``) reaches its receive CQ at ``at`` (now, before
    anything else happens, when ``at`` is not later)."""
    ok = status is WcStatus.SUCCESS
    flags = WcFlags.WITH_IMM if ok and wr.opcode.carries_imm else WcFlags(0)
    if ok and wr.opcode is Opcode.SEND_WITH_INV:
        flags = WcFlags.WITH_INV
    if ok and responder.qp_type is QpType.UD and wr.ah.attr.is_global:
        flags |= WcFlags.GRH
    byte_len = wr.message_bytes + receive_overhead(responder.qp_type) if ok else 0
    wc = WorkCompletion(recv.wr_id, status, receive_wc_opcode(wr.opcode), byte_len, responder.qp_num, at, at,
                        flags, wr.imm_data if flags & (WcFlags.WITH_IMM | WcFlags.WITH_INV) else 0, src_qp,
                        solicited=bool(wr.send_flags & _SOLICITED))
    if at <= env.now:
        responder.deliver_receive(queue, wc)
    else:
        env.timeout(at - env.now).callbacks.append(lambda _event: responder.deliver_receive(queue, wc))


