"""A work request and its completion as the NIC executes them: libibverbs' opcodes, access flags, QP states,
completion status and opcodes (rdma-core's values), ``struct ibv_sge``, ``struct ibv_send_wr``, ``struct ibv_recv_wr``
and ``struct ibv_wc``."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import simpy


class Access(enum.IntFlag):
    """``enum ibv_access_flags`` (libibverbs/verbs.h)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 1 << 1
    REMOTE_READ = 1 << 2
    REMOTE_ATOMIC = 1 << 3
    MW_BIND = 1 << 4
    ZERO_BASED = 1 << 5
    ON_DEMAND = 1 << 6
    HUGETLB = 1 << 7
    FLUSH_GLOBAL = 1 << 8
    FLUSH_PERSISTENT = 1 << 9
    RELAXED_ORDERING = 1 << 20
    """The first of the optional bits (``IBV_ACCESS_OPTIONAL_FIRST``): a driver may ignore them."""


class VerbsEnum(enum.IntEnum):
    """An ``enum ibv_*``: usable as its C value wherever an int is (pyverbs' enums are ints), printed as an Enum
    (``WcStatus.SUCCESS``), not as the number."""

    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__


class WcStatus(VerbsEnum):
    """``enum ibv_wc_status`` (libibverbs/verbs.h), with rdma-core's values."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21
    TM_ERR = 22
    TM_RNDV_INCOMPLETE = 23

    @property
    def ibv_name(self) -> str:
        """The C enumerator's name, e.g. ``IBV_WC_WR_FLUSH_ERR``."""
        return f"IBV_WC_{self.name}"


WC_SUCCESS = WcStatus.SUCCESS
"""IBV_WC_SUCCESS bound to a module name: an Enum class's member lookup is slow on Python 3.11 (EnumType's
``__getattr__`` hook), and every work request's completion compares with it."""
WC_STATUS_NAMES = [s.ibv_name for s in WcStatus]
"""Every status's C name, indexed by its value (the values run 0..23 without gaps)."""


class Opcode(VerbsEnum):
    """Send-queue opcodes modelled so far: ``enum ibv_wr_opcode`` without its ``IBV_WR_`` prefix, with rdma-core's
    values (traces print the names)."""

    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1
    SEND = 2
    SEND_WITH_IMM = 3
    RDMA_READ = 4
    ATOMIC_CMP_AND_SWP = 5
    ATOMIC_FETCH_AND_ADD = 6
    LOCAL_INV = 7
    BIND_MW = 8
    SEND_WITH_INV = 9

    def __init__(self, value: int) -> None:
        # What each opcode does, as plain attributes: they are read on every work request.
        name = self._name_
        self.is_atomic = name.startswith("ATOMIC_")
        """A 64-bit atomic: it travels like an 8-byte READ and takes a READ/atomic slot."""
        self.reads_remote = self.is_atomic or name == "RDMA_READ"
        """A response comes back and lands in the local buffer (READ and atomics): it takes a READ/atomic slot."""
        self.consumes_receive = name in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE_WITH_IMM", "SEND_WITH_INV")
        """The responder takes a receive WQE for it."""
        self.carries_imm = name.endswith("_WITH_IMM")
        """The request carries 4 bytes of immediate data."""
        self.writes_remote = name.startswith("RDMA_WRITE")
        """The payload goes through an rkey into the responder's memory (RDMA WRITE, with or without immediate)."""
        self.is_local = name in ("LOCAL_INV", "BIND_MW")
        """A memory operation the requester's NIC executes itself (a UMR on mlx5): nothing goes on the wire."""


ATOMICS = frozenset(op for op in Opcode if op.is_atomic)
"""The 64-bit atomic opcodes."""
FETCH_AND_ADD = Opcode.ATOMIC_FETCH_AND_ADD
"""The opcode bound to a module name (see :data:`WC_SUCCESS`): every work request a workload builds is compared
with it."""
ATOMIC_BYTES = 8
"""An atomic's operand and result (mlx5 ``MLX5_ATOMIC_SIZE``: the data segment says 8 whatever the SGE's
length)."""


class SendFlags(enum.IntFlag):
    """``enum ibv_send_flags`` (libibverbs/verbs.h)."""

    FENCE = 1 << 0
    SIGNALED = 1 << 1
    SOLICITED = 1 << 2
    INLINE = 1 << 3


SEND_FENCE, SEND_SIGNALED, SEND_INLINE = int(SendFlags.FENCE), int(SendFlags.SIGNALED), int(SendFlags.INLINE)
"""The flags as plain ints: IntFlag arithmetic is slow on the per-message path."""


class WcOpcode(enum.IntEnum):
    """``enum ibv_wc_opcode`` (libibverbs/verbs.h), with rdma-core's values: receive completions have bit 7 set
    (``opcode & IBV_WC_RECV``)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    TSO = 7
    FLUSH = 8
    ATOMIC_WRITE = 9
    RECV = 1 << 7
    RECV_RDMA_WITH_IMM = (1 << 7) + 1

    @property
    def ibv_name(self) -> str:
        """The C enumerator's name, e.g. ``IBV_WC_RECV``."""
        return f"IBV_WC_{self.name}"


_SEND_WC = {Opcode.RDMA_WRITE: WcOpcode.RDMA_WRITE, Opcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
            Opcode.RDMA_READ: WcOpcode.RDMA_READ, Opcode.SEND: WcOpcode.SEND, Opcode.SEND_WITH_IMM: WcOpcode.SEND,
            Opcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP, Opcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
            Opcode.LOCAL_INV: WcOpcode.LOCAL_INV, Opcode.BIND_MW: WcOpcode.BIND_MW, Opcode.SEND_WITH_INV: WcOpcode.SEND}


def send_wc_opcode(opcode: Opcode) -> WcOpcode:
    """The requester's completion opcode of a work request (mlx5: WRITE_WITH_IMM completes as RDMA_WRITE,
    SEND_WITH_IMM and SEND_WITH_INV as SEND; ``_mlx5_post_send`` sets ``IBV_WC_BIND_MW`` and ``IBV_WC_LOCAL_INV``
    for its UMR work requests)."""
    return _SEND_WC[opcode]


def receive_wc_opcode(opcode: Opcode) -> WcOpcode:
    """The responder's completion opcode of a request that consumed a receive."""
    return WcOpcode.RECV_RDMA_WITH_IMM if opcode is Opcode.RDMA_WRITE_WITH_IMM else WcOpcode.RECV


class WcFlags(enum.IntFlag):
    """``enum ibv_wc_flags``."""

    GRH = 1 << 0
    WITH_IMM = 1 << 1
    IP_CSUM_OK = 1 << 2
    WITH_INV = 1 << 3
    TM_SYNC_REQ = 1 << 4
    TM_MATCH = 1 << 5
    TM_DATA_VALID = 1 << 6


class QpState(VerbsEnum):
    """``enum ibv_qp_state``, with rdma-core's values."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6

    def __init__(self, value: int) -> None:
        # A plain attribute: it is read on every work request, and an Enum class's member lookup is slow on
        # Python 3.11 (EnumType's __getattr__ hook).
        self.flushes = self._name_ in ("ERR", "SQE")
        """The send queue's work requests complete with IBV_WC_WR_FLUSH_ERR (mlx5 in ERR and SQE)."""


QP_RTS, QP_SQD = QpState.RTS, QpState.SQD
"""States the per-message path compares with, bound to module names (see :data:`WC_SUCCESS`)."""


RNR_RETRY_INFINITE = 7
"""``rnr_retry`` value meaning unlimited retries (IB spec)."""


@dataclass(slots=True)
class WorkCompletion:
    """``struct ibv_wc`` plus the simulated times the workload measures with (ps)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    byte_len: int
    qp_num: int
    posted_ps: int
    completed_ps: int
    wc_flags: WcFlags = WcFlags(0)
    imm_data: int = 0
    """The sender's immediate data (valid with ``IBV_WC_WITH_IMM``); with ``IBV_WC_WITH_INV``, the rkey a SEND with
    invalidate invalidated (``ibv_wc``'s union of ``imm_data`` and ``invalidated_rkey``)."""
    src_qp: int = 0
    """The sending QP's number (receive completions)."""
    solicited: bool = field(default=False, repr=False, compare=False)
    """The CQE's solicited-event bit (not in ``ibv_wc``): a receive for a request posted with ``IBV_SEND_SOLICITED``
    (a SEND or WRITE with immediate); what a CQ armed solicited-only raises its event for."""
    release: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    """Frees the queue slots the completion covers when it is polled or cleaned from its CQ: a receive's
    receive queue slot; a send's send queue slot and those of the unsignaled work requests before it."""


@dataclass(frozen=True, slots=True)
class Sge:
    """``struct ibv_sge``: one buffer of a work request's gather or scatter list."""

    addr: int
    length: int
    lkey: int


@dataclass(slots=True)
class RecvWR:
    """``struct ibv_recv_wr``: a receive buffer for one incoming SEND (or RDMA WRITE with immediate)."""

    wr_id: int
    sg_list: tuple[Sge, ...] = ()

    @property
    def capacity(self) -> int:
        """Bytes its scatter list holds."""
        return sum(sge.length for sge in self.sg_list)


@dataclass(slots=True)
class SendWR:
    """``struct ibv_send_wr`` for one RDMA operation: ``local_addr``/``length``/``lkey`` are its single SGE unless
    ``sg_list`` gives several; ``compare_add``/``swap`` are the atomics' operands (``wr.atomic``)."""

    wr_id: int
    opcode: Opcode
    local_addr: int
    length: int
    lkey: int
    remote_addr: int
    rkey: int
    inline: bool = False
    landed: simpy.Event | None = None
    """Optional event fired when the payload is visible in the destination memory."""
    order: tuple[int, int] | None = None
    """Operation number and step-position offset under the data path's ordering rule (None: the next number,
    offset 0); a ping-pong's two WRITEs share one number (:func:`models.verbs.workloads.ping_pong`)."""
    sg_list: tuple[Sge, ...] | None = None
    """The gather (WRITE) or scatter (READ) list when there is more than one SGE; None: the single SGE above."""
    send_flags: int = 0
    """``IBV_SEND_*`` bits (:class:`SendFlags`); ``inline`` True is the same as ``IBV_SEND_INLINE``."""
    compare_add: int = 0
    """CMP_AND_SWP: the value compared with; FETCH_AND_ADD: the value added (unsigned 64-bit)."""
    swap: int = 0
    """CMP_AND_SWP: the value written when the comparison holds."""

    imm_data: int = 0
    """Immediate data of ``*_WITH_IMM`` (32 bits; the responder's completion carries it); for LOCAL_INV and
    SEND_WITH_INV the rkey to invalidate (``ibv_send_wr``'s union of ``imm_data`` and ``invalidate_rkey``)."""
    bind_mw: object = None
    """BIND_MW (``wr.bind_mw``): the :class:`~models.nic.memory_window.MwBind` of the window, its new rkey and the
    bind's ``ibv_mw_bind_info``."""
    ah: object = None
    """UD (``wr.ud``): the address handle of the destination port (:class:`~models.verbs.ah.AddressHandle`)."""
    remote_qpn: int = 0
    """UD: the destination QP's number."""
    remote_qkey: int = 0
    """UD: the Q_Key the destination QP must have (high bit set: the sending QP's own, a controlled Q_Key)."""
    remote_srqn: int = 0
    """XRC (``wr.qp_type.xrc.remote_srqn``, ``ibv_wr_set_xrc_srqn``): the XRC SRQ at the target the request is
    for."""
    inline_data: object = None
    """Data mode: inline bytes already copied into the WQE (``ibv_wr_set_inline_data`` copies when it is called);
    None: copied when the work request is posted."""

    @property
    def invalidate_rkey(self) -> int:
        """LOCAL_INV, SEND_WITH_INV: the rkey to invalidate (the same 32 bits as ``imm_data``)."""
        return self.imm_data

    @property
    def num_sge(self) -> int:
        """How many SGEs the work request has (``num_sge``), without building them."""
        return 1 if self.sg_list is None else len(self.sg_list)

    @property
    def sges(self) -> tuple[Sge, ...]:
        """The SGEs of the work request, in order."""
        return self.sg_list if self.sg_list is not None else (Sge(self.local_addr, self.length, self.lkey),)

    @property
    def is_inline(self) -> bool:
        """The payload travels in the WQE (``IBV_SEND_INLINE``)."""
        return self.inline or bool(self.send_flags & SEND_INLINE)

    @property
    def message_bytes(self) -> int:
        """Bytes the operation moves: 8 for an atomic, else the sum of its SGEs' lengths."""
        if self.opcode.is_atomic:
            return ATOMIC_BYTES
        return self.length if self.sg_list is None else sum(sge.length for sge in self.sg_list)
