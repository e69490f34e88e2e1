"""The rules of each QP transport service (RC, UC, UD) that the data path applies to a work request.

Read in the IB specification (vol. 1: the transport layer's services, the responder's rules, Q_Keys and the GRH),
rdma-core's providers/mlx5/qp.c (``_mlx5_post_send``) and libibverbs/man/ibv_post_send.3:

* RC carries every opcode; UC carries RDMA WRITE (with or without immediate) and SEND; UD carries SEND only.
  mlx5 does not refuse another opcode when it is posted (``_mlx5_post_send`` only builds no remote-address
  segment for it); the NIC completes the WQE with ``IBV_WC_LOC_QP_OP_ERR`` (a QP operation its service does
  not have), which :func:`opcode_problem` names.
* UC and UD are unacknowledged: the requester's completion is written once its message is sent, and nothing
  comes back. A request the responder cannot take (no receive posted, a bad R_Key, a QP not ready, a Q_Key that
  does not match) is dropped silently: no RNR NAK, no retry, no error at the requester.
* A UD message is one packet: more than the path MTU completes ``IBV_WC_LOC_LEN_ERR`` at the requester. At the
  responder the first 40 bytes of the receive buffer take the Global Routing Header (present or not), so a
  receive must hold the payload plus :data:`GRH_BYTES` and its completion counts them in ``byte_len``.
* A Q_Key with the high bit set in a UD work request is a controlled Q_Key: the QP's own Q_Key is sent instead
  (the IB specification's controlled Q_Keys).
"""

from __future__ import annotations

import enum

from models.nic.wqe import Opcode, WcStatus


class QpType(enum.Enum):
    """``enum ibv_qp_type`` (the services modelled)."""

    RC = "RC"
    UC = "UC"
    UD = "UD"


_CARRIES = {QpType.RC: frozenset(Opcode),
            QpType.UC: frozenset({Opcode.RDMA_WRITE, Opcode.RDMA_WRITE_WITH_IMM, Opcode.SEND, Opcode.SEND_WITH_IMM}),
            QpType.UD: frozenset({Opcode.SEND, Opcode.SEND_WITH_IMM})}
"""The opcodes each service carries."""

GRH_BYTES = 40
"""The Global Routing Header a UD receive buffer starts with (bytes)."""
CONTROLLED_QKEY = 0x80000000
"""The high bit of a Q_Key: a work request's Q_Key with it set sends the QP's own."""


def carries(qp_type: QpType, opcode: Opcode) -> bool:
    """Whether a ``qp_type`` QP carries ``opcode``."""
    return opcode in _CARRIES[qp_type]


def acknowledged(qp_type: QpType) -> bool:
    """Whether the responder acknowledges requests (RC only): else the requester completes once it has sent."""
    return qp_type is QpType.RC


def opcode_problem(qp_type: QpType, opcode: Opcode, message_bytes: int, mtu_bytes: int) -> WcStatus | None:
    """The error completion the NIC gives a work request of ``opcode`` and ``message_bytes`` on a ``qp_type`` QP
    whose path MTU is ``mtu_bytes``, or None: ``LOC_QP_OP_ERR`` for an opcode the service does not carry,
    ``LOC_LEN_ERR`` for a UD message longer than one packet."""
    if not carries(qp_type, opcode):
        return WcStatus.LOC_QP_OP_ERR
    if qp_type is QpType.UD and message_bytes > mtu_bytes:
        return WcStatus.LOC_LEN_ERR
    return None


def sent_qkey(wr_qkey: int, qp_qkey: int) -> int:
    """The Q_Key a UD datagram carries: the work request's, or the sending QP's for a controlled Q_Key."""
    return qp_qkey if wr_qkey & CONTROLLED_QKEY else wr_qkey


def receive_overhead(qp_type: QpType) -> int:
    """Bytes a receive buffer of a ``qp_type`` QP holds before the payload (the GRH of UD)."""
    return GRH_BYTES if qp_type is QpType.UD else 0


def port_gid(lid: int) -> bytes:
    """GID index 0 of the port with ``lid``: the link-local prefix fe80::/64 and an interface id naming the port
    (the model's stand-in for the port GUID or MAC address)."""
    return bytes.fromhex("fe80000000000000") + lid.to_bytes(8, "big")


def lid_of_gid(gid: bytes) -> int:
    """The LID :func:`port_gid` encodes in ``gid`` (0 when ``gid`` is not such a GID)."""
    if len(gid) != 16 or gid[:8] != bytes.fromhex("fe80000000000000"):
        return 0
    return int.from_bytes(gid[8:], "big")


def grh(sgid: bytes, dgid: bytes, payload_bytes: int, imm: bool) -> bytes:
    """The 40-byte Global Routing Header of a datagram: IP version 6, no traffic class or flow label, PayLen the
    bytes after it (BTH, DETH, ImmDt when ``imm``, ``payload_bytes``, ICRC), next header 0x1B (IBA transport),
    hop limit 0 (one subnet), then the source and destination GIDs."""
    pay_len = 12 + 8 + (4 if imm else 0) + payload_bytes + 4
    return bytes([0x60, 0, 0, 0]) + pay_len.to_bytes(2, "big") + bytes([0x1B, 0]) + sgid + dgid
