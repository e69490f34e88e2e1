"""The responder's checks of an incoming RDMA WRITE, READ or atomic request, and the error completion the
requester gets when one fails.

Order and outcomes follow the IB specification's responder rules (IBA vol. 1, 9.7.5.1: an operation the QP does
not enable, then a misaligned atomic, then the R_Key and bounds) as Soft-RoCE implements them (rxe_resp.c:
``check_op_valid``, then ``check_rkey``). What the NAK becomes at the requester is mlx5's: a right missing from
the responder QP's ``qp_access_flags`` or from the MR, an invalid R_Key or a range outside the MR answers
NAK-Remote Access Error (``IBV_WC_REM_ACCESS_ERR``); an atomic whose remote address is not 8-byte aligned answers
NAK-Invalid Request (``IBV_WC_REM_INV_REQ_ERR``, the class rxe also uses). An R_Key may name a memory window
(:func:`~models.nic.memory_window.remote_region`). The responder QP moves to the error
state after either NAK.
"""

from __future__ import annotations

from models.nic.memory_window import remote_region
from models.nic.wqe import ATOMIC_BYTES, ATOMICS, QP_RTS, Access, Opcode, SendWR, WcStatus

_RIGHT = {Opcode.RDMA_WRITE: int(Access.REMOTE_WRITE), Opcode.RDMA_WRITE_WITH_IMM: int(Access.REMOTE_WRITE),
          Opcode.RDMA_READ: int(Access.REMOTE_READ), **{op: int(Access.REMOTE_ATOMIC) for op in ATOMICS}}
"""The remote right each opcode needs, on the responder QP (``qp_access_flags``) and on the MR."""


def remote_right(opcode: Opcode) -> int:
    """The ``IBV_ACCESS_REMOTE_*`` bit an incoming request of ``opcode`` needs."""
    return _RIGHT[opcode]


def remote_status(qp, wr: SendWR) -> WcStatus | None:
    """Whether the responder of ``qp`` (a connected :class:`~models.verbs.qp.QueuePair`) accepts ``wr``: None,
    or the status of the requester's error completion."""
    responder, needed = qp.remote, _RIGHT[wr.opcode]
    if responder.state is not QP_RTS or not responder.attr.qp_access_flags & needed:
        return WcStatus.REM_ACCESS_ERR
    if wr.opcode.is_atomic and wr.remote_addr % ATOMIC_BYTES:
        return WcStatus.REM_INV_REQ_ERR
    if remote_region(responder, wr.rkey, wr.remote_addr, wr.message_bytes, needed) is None:
        return WcStatus.REM_ACCESS_ERR
    return None
