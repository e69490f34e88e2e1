"""The rules of each QP transport service (RC, UC, UD) that the data path applies to a work request.

Read in the IB specification (vol. 1: the transport layer's services, the responder's rules, Q_Keys and the GRH),
rdma-core's providers/mlx5/qp.c (``_mlx5_post_send``) and libibverbs/man/ibv_post_send.3:

* RC carries every opcode; UC carries RDMA WRITE (with or without immediate) and SEND; UD carries SEND only.
  mlx5 does not refuse another opcode when it is posted (``_mlx5_post_send`` only builds no remote-address
  segment for it); the NIC completes the WQE with ``IBV_WC_LOC_QP_OP_ERR`` (a QP operation its service does
  not have), which :func:`opcode_problem` names.
* UC and UD are unacknowledged: the requester's completion is written once its message is sent, and nothing
  comes back. A request the responder cannot take (no receive posted, a bad R_Key, a QP not ready, a Q_Key that
  does not match, a QP number with no QP behind it) is dropped silently: no RNR NAK, no retry, no error at the
  requester. Nor is a message a link outage loses sent again: it never arrives (UC drops the rest of a message a
  packet of which was lost, rxe_resp.c ``check_psn``'s ``drop_msg``; a UD datagram is gone).
* A UD message is one packet: more than the path MTU completes ``IBV_WC_LOC_LEN_ERR`` at the requester. At the
  responder the first 40 bytes of the receive buffer take the Global Routing Header (present or not), so a
  receive must hold the payload plus :data:`GRH_BYTES` and its completion counts them in ``byte_len``.
* A Q_Key with the high bit set in a UD work request is a controlled Q_Key: the QP's own Q_Key is sent instead
  (the IB specification's controlled Q_Keys).

RC's recovery from lost frames, as Soft-RoCE reads the specification (linux drivers/infiniband/sw/rxe):

* The responder checks each request's PSN against the one it expects (``rxe_resp.c`` ``check_psn``). The first
  request of a gap (its PSN ahead) answers a NAK *PSN sequence error* naming the expected PSN and sets
  ``sent_psn_nak``; later requests of the same gap are dropped without a word (``RESPST_CLEANUP``); the flag
  clears when the expected PSN arrives: one NAK per gap (:func:`sequence_nak`).
* An acknowledgement, or that NAK, acknowledges every PSN before its own (``rxe_comp.c`` ``check_psn``: "a nak
  implicitly acks all packets with psns before"): a WRITE or SEND whose own acknowledgement was lost completes;
  a READ or atomic whose response was lost goes again (its data comes only in a response, ``COMPST_ERROR_RETRY``).
* On the NAK the requester goes back to the NAK's PSN at once (``COMPST_ERROR_RETRY`` -> ``req.need_retry``) and
  sends every request from there again, go-back-N, without waiting for its timer. That retry spends one of
  ``retry_cnt`` as a timeout does (``qp->comp.retry_cnt--``; none left: ``IBV_WC_RETRY_EXC_ERR``), once per retry
  sequence (``comp.started_retry``), so the requests behind the NAK'd one go again without spending one
  (:func:`after_acknowledgement`). A request sent after the requester went back that reaches the responder
  before the NAK'd one's copy (go-back-N would have sent it after that copy; the model's queues let it overtake)
  goes again once the gap closes, a one-way trip later than go-back-N sends it (:func:`after_gap_closed`).
  (rxe alone never spends a ``retry_cnt`` of 7; the specification and this model count seven.)
"""

from __future__ import annotations

import enum

from models.fabric import DETH
from models.nic.wqe import Opcode, VerbsEnum, WcStatus


class QpType(VerbsEnum):
    """``enum ibv_qp_type`` (the services modelled), with rdma-core's values."""

    RC = 2
    UC = 3
    UD = 4
    XRC_SEND = 9
    """XRC initiator (``IBV_QPT_XRC_SEND``, the kernel's ``IB_QPT_XRC_INI``): a send queue only."""
    XRC_RECV = 10
    """XRC target (``IBV_QPT_XRC_RECV``, ``IB_QPT_XRC_TGT``): a responder only, receiving into the XRC SRQs of its
    domain (:mod:`models.verbs.xrc`)."""


def qp_type_of(service: str) -> QpType:
    """The requester's QP type for a workload's ``transport`` (``rc``, ``uc``, ``ud``; ``xrc``: an XRC initiator)."""
    return QpType.XRC_SEND if service.upper() == "XRC" else QpType[service.upper()]


QP_RC, QP_UD = QpType.RC, QpType.UD
_ACKNOWLEDGED = frozenset({QpType.RC, QpType.XRC_SEND, QpType.XRC_RECV})
"""The services the per-message path tells apart, bound to module names: an Enum class's member lookup is slow on
Python 3.11 (EnumType's ``__getattr__`` hook)."""

_CARRIES = {QpType.RC: frozenset(Opcode),
            QpType.UC: frozenset({Opcode.RDMA_WRITE, Opcode.RDMA_WRITE_WITH_IMM, Opcode.SEND, Opcode.SEND_WITH_IMM,
                                  Opcode.BIND_MW, Opcode.LOCAL_INV, Opcode.SEND_WITH_INV}),
            QpType.UD: frozenset({Opcode.SEND, Opcode.SEND_WITH_IMM}),
            QpType.XRC_SEND: frozenset(Opcode), QpType.XRC_RECV: frozenset()}
"""The opcodes each service carries: UC no READ or atomic, UD only SENDs; a memory window's bind, a local
invalidation and a SEND with invalidate on RC and UC (mlx5's ``MLX5_SUPPORTED_SEND_OPS_FLAGS_RC`` and ``_UC``;
rxe_opcode.c ``rxe_wr_opcode_info`` for the first two); an XRC initiator what RC carries
(``MLX5_SUPPORTED_SEND_OPS_FLAGS_XRC`` is ``_RC``), an XRC target nothing (it has no send queue)."""

GRH_BYTES = 40
"""The Global Routing Header a UD receive buffer starts with (bytes)."""
CONTROLLED_QKEY = 0x80000000
"""The high bit of a Q_Key: a work request's Q_Key with it set sends the QP's own."""


PSN_MASK = 0xFFFFFF
"""PSNs are 24 bits."""
PSN_WINDOW = 1 << 23
"""How far behind the expected PSN a request is a duplicate (IB spec vol. 1 9.7.5.1.2); further is ahead."""


def psn_before(psn: int, other: int) -> bool:
    """Whether ``psn`` comes before ``other`` in 24-bit PSN order (``psn_compare`` < 0)."""
    return 0 < (other - psn) & PSN_MASK <= PSN_WINDOW


def sequence_nak(nak_sent: bool) -> bool:
    """Whether a request that reaches an RC responder ahead of its expected PSN answers a NAK PSN sequence error
    (``nak_sent``: one was sent for this gap already): see the module docstring."""
    return not nak_sent


class Waiting(enum.Enum):
    """Why an RC request waits for its requester's ACK timer."""

    REQUEST = "request"
    """Its request was lost (or the responder dropped it out of sequence): never executed."""
    BEHIND = "behind"
    """The responder dropped it behind a lost request (go-back-N)."""
    REPLY = "reply"
    """It was executed and its acknowledgement or response was lost."""


class Outcome(enum.Enum):
    """What an acknowledgement or NAK does to a request waiting for its timer."""

    COMPLETE = "complete"
    """Acknowledged: it completes successfully."""
    AGAIN = "again"
    """It is sent again now, spending no retry."""
    RETRY = "retry"
    """It is sent again now, spending one of ``retry_cnt`` (the NAK'd request); none left: IBV_WC_RETRY_EXC_ERR."""
    FLUSH = "flush"
    """The NAK'd request ahead of it has no retry left: it completes IBV_WC_WR_FLUSH_ERR (the QP goes to ERR)."""


def after_acknowledgement(psn: int, waiting: Waiting, reads_remote: bool, ack_psn: int, nak: bool,
                          retry_left: bool = True) -> Outcome | None:
    """What an acknowledgement (``nak`` False) or a NAK PSN sequence error (``nak`` True) for ``ack_psn`` does to a
    request with first PSN ``psn`` waiting for its timer because of ``waiting`` (see the module docstring);
    ``retry_left``: the NAK'd request has a retry left (else it fails and the requests after it flush, as
    ``COMPST_ERROR`` -> ``rxe_qp_error`` does). None: it goes on waiting."""
    if psn_before(psn, ack_psn):
        if waiting is not Waiting.REPLY:
            return None
        return Outcome.AGAIN if reads_remote else Outcome.COMPLETE
    if not nak:
        return None
    if psn == ack_psn:
        return Outcome.RETRY
    return Outcome.AGAIN if retry_left else Outcome.FLUSH


def after_gap_closed(waiting: Waiting) -> Outcome | None:
    """What the missing request's arrival at the responder does to a request of the same QP waiting for its timer
    because of ``waiting`` (see the module docstring); None: it goes on waiting."""
    return Outcome.AGAIN if waiting is Waiting.BEHIND else None


def carries(qp_type: QpType, opcode: Opcode) -> bool:
    """Whether a ``qp_type`` QP carries ``opcode``."""
    return opcode in _CARRIES[qp_type]


def acknowledged(qp_type: QpType) -> bool:
    """Whether the responder acknowledges requests (RC, and XRC, RC's transport between an initiator and a
    target): else the requester completes once it has sent."""
    return qp_type in _ACKNOWLEDGED


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


XRCETH = 4
"""The XRC extended transport header every request packet of an XRC initiator carries after the BTH: the number of
the XRC SRQ the request is for (IBA vol. 1 annex A14; mlx5's ``mlx5_wqe_xrc_seg`` holds it in the WQE) (bytes)."""


def packet_headers(qp_type: QpType) -> int:
    """Extension header bytes every packet of a ``qp_type`` QP's requests carries after the BTH: UD's DETH (its
    Q_Key and source QP), an XRC initiator's XRCETH, none for RC and UC (IBA vol. 1, 9.2-9.3, annex A14)."""
    if qp_type is QpType.UD:
        return DETH
    return XRCETH if qp_type is QpType.XRC_SEND else 0


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
