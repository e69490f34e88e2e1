"""The QP state machine: ``ibv_modify_qp``'s attribute record, mask bits and legal transitions.

The transition table is ``qp_state_table`` with ``ib_modify_qp_is_ok`` from drivers/infiniband/core/verbs.c
(Linux as in gregkh/linux commit 253c2ed71a53), transcribed for RC, UC, UD and the XRC initiator and target QPs
(whose masks uverbs first strips of what the type ignores: :func:`modify_qp_mask`). Note that this table has
no RESET -> ERR entry: from RESET only RESET and INIT are legal. Attribute values are checked where the
kernel (``modify_qp`` in uverbs_cmd.c: port numbers, state enums) and mlx5 (``mlx5_ib_modify_qp``: path MTU,
``max_rd_atomic``/``max_dest_rd_atomic`` against the device's limits) check them; PSNs are masked to 24 bits
as ``_ib_modify_qp`` does.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from models.nic.device import PORT_NUM, rdma_is_port_valid
from models.nic.transport import CONTROLLED_QKEY, QpType
from models.nic.wqe import QP_SQD, QpState
from models.versions import KernelBehaviour
from sim.core import PS_PER_NS, PS_PER_US, VerbsError


class QpAttrMask(enum.IntFlag):
    """``enum ibv_qp_attr_mask`` (libibverbs/verbs.h)."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    EN_SQD_ASYNC_NOTIFY = 1 << 2
    ACCESS_FLAGS = 1 << 3
    PKEY_INDEX = 1 << 4
    PORT = 1 << 5
    QKEY = 1 << 6
    AV = 1 << 7
    PATH_MTU = 1 << 8
    TIMEOUT = 1 << 9
    RETRY_CNT = 1 << 10
    RNR_RETRY = 1 << 11
    RQ_PSN = 1 << 12
    MAX_QP_RD_ATOMIC = 1 << 13
    ALT_PATH = 1 << 14
    MIN_RNR_TIMER = 1 << 15
    SQ_PSN = 1 << 16
    MAX_DEST_RD_ATOMIC = 1 << 17
    PATH_MIG_STATE = 1 << 18
    CAP = 1 << 19
    DEST_QPN = 1 << 20
    RATE_LIMIT = 1 << 25


M = QpAttrMask
KNOWN_MASK_BITS = int(sum(QpAttrMask))
"""Every bit rdma-core defines; others are refused (uverbs: EOPNOTSUPP)."""


class PathMtu(enum.IntEnum):
    """``enum ibv_mtu``."""

    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5

    @property
    def nbytes(self) -> int:
        """The MTU in payload bytes."""
        return 128 << self.value

    @classmethod
    def at_most(cls, nbytes: int) -> PathMtu:
        """The largest MTU that fits in ``nbytes`` (a port's ``active_mtu`` for a link of that MTU)."""
        return max(m for m in cls if m.nbytes <= nbytes)


@dataclass
class AhAttr:
    """``struct ibv_ah_attr``: where the QP's packets go; with ``is_global`` its ``grh`` (``dgid``, ``sgid_index``,
    ``hop_limit``, the fields kept of ``struct ibv_global_route``) names the destination port by GID."""

    dlid: int = 0
    sl: int = 0
    src_path_bits: int = 0
    static_rate: int = 0
    is_global: bool = False
    port_num: int = 1
    dgid: bytes = bytes(16)
    sgid_index: int = 0
    hop_limit: int = 0


@dataclass
class QPAttr:
    """``struct ibv_qp_attr`` (the fields this simulator keeps); a QP holds one, :func:`ibv_query_qp` copies it.

    Timer fields use the IB encodings: ``min_rnr_timer`` 0..31 (see :func:`rnr_timer_ps`), ``timeout``
    4.096 us * 2**timeout (0 = infinite, see :func:`ack_timeout_ps`); ``rnr_retry`` 7 means retry forever,
    ``retry_cnt`` 7 means seven retries (it has no infinite value).
    """

    qp_state: QpState = QpState.RESET
    cur_qp_state: QpState = QpState.RESET
    path_mtu: int = 0
    qkey: int = 0
    rq_psn: int = 0
    sq_psn: int = 0
    dest_qp_num: int = 0
    qp_access_flags: int = 0
    ah_attr: AhAttr = field(default_factory=AhAttr)
    pkey_index: int = 0
    max_rd_atomic: int = 0
    max_dest_rd_atomic: int = 0
    min_rnr_timer: int = 0
    port_num: int = 0
    timeout: int = 0
    retry_cnt: int = 0
    rnr_retry: int = 0


FIELD_OF_BIT = {M.STATE: "qp_state", M.CUR_STATE: "cur_qp_state", M.ACCESS_FLAGS: "qp_access_flags",
                M.PKEY_INDEX: "pkey_index", M.PORT: "port_num", M.QKEY: "qkey", M.AV: "ah_attr",
                M.PATH_MTU: "path_mtu", M.TIMEOUT: "timeout", M.RETRY_CNT: "retry_cnt", M.RNR_RETRY: "rnr_retry",
                M.RQ_PSN: "rq_psn", M.MAX_QP_RD_ATOMIC: "max_rd_atomic", M.MIN_RNR_TIMER: "min_rnr_timer",
                M.SQ_PSN: "sq_psn", M.MAX_DEST_RD_ATOMIC: "max_dest_rd_atomic", M.DEST_QPN: "dest_qp_num"}
"""The QPAttr field each mask bit selects (bits without a field here are accepted but keep no value)."""


@dataclass(frozen=True)
class Transition:
    """One legal (current, next) entry of ``qp_state_table``: required and optional mask bits per QP type."""

    req: dict[QpType, QpAttrMask] = field(default_factory=dict)
    opt: dict[QpType, QpAttrMask] = field(default_factory=dict)


S = QpState
_RC, _UC, _UD, _XI, _XT = QpType.RC, QpType.UC, QpType.UD, QpType.XRC_SEND, QpType.XRC_RECV
_TO_INIT = M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS
_INIT_OPT = {_UD: M.PKEY_INDEX | M.PORT | M.QKEY, _UC: _TO_INIT, _RC: _TO_INIT, _XI: _TO_INIT, _XT: _TO_INIT}
_RTS_OPT = M.CUR_STATE | M.ALT_PATH | M.ACCESS_FLAGS | M.PATH_MIG_STATE
_TO_RTS_OPT = {_UD: M.CUR_STATE | M.QKEY, _UC: _RTS_OPT, _RC: _RTS_OPT | M.MIN_RNR_TIMER, _XI: _RTS_OPT,
               _XT: _RTS_OPT | M.MIN_RNR_TIMER}
_RTR_REQ = M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN
_RTR_OPT = M.ALT_PATH | M.ACCESS_FLAGS | M.PKEY_INDEX
_SQD_OPT = M.PORT | M.AV | M.TIMEOUT | M.ALT_PATH | M.ACCESS_FLAGS | M.PKEY_INDEX | M.PATH_MIG_STATE
_ANY = Transition()
QP_STATE_TABLE: dict[tuple[QpState, QpState], Transition] = {
    (S.RESET, S.RESET): _ANY,
    (S.RESET, S.INIT): Transition(req=_INIT_OPT),
    (S.INIT, S.RESET): _ANY, (S.INIT, S.ERR): _ANY,
    (S.INIT, S.INIT): Transition(opt=_INIT_OPT),
    (S.INIT, S.RTR): Transition(
        req={_UC: _RTR_REQ, _RC: _RTR_REQ | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER, _XI: _RTR_REQ,
             _XT: _RTR_REQ | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER},
        opt={_UD: M.PKEY_INDEX | M.QKEY, _UC: _RTR_OPT, _RC: _RTR_OPT, _XI: _RTR_OPT, _XT: _RTR_OPT}),
    (S.RTR, S.RESET): _ANY, (S.RTR, S.ERR): _ANY,
    (S.RTR, S.RTS): Transition(
        req={_UD: M.SQ_PSN, _UC: M.SQ_PSN,
             _RC: M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.SQ_PSN | M.MAX_QP_RD_ATOMIC,
             _XI: M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY | M.SQ_PSN | M.MAX_QP_RD_ATOMIC,
             _XT: M.TIMEOUT | M.SQ_PSN},
        opt=_TO_RTS_OPT),
    (S.RTS, S.RESET): _ANY, (S.RTS, S.ERR): _ANY,
    (S.RTS, S.RTS): Transition(opt=_TO_RTS_OPT),
    (S.RTS, S.SQD): Transition(opt={t: M.EN_SQD_ASYNC_NOTIFY for t in QpType}),
    (S.SQD, S.RESET): _ANY, (S.SQD, S.ERR): _ANY,
    (S.SQD, S.RTS): Transition(opt=_TO_RTS_OPT),
    (S.SQD, S.SQD): Transition(opt={
        _UD: M.PKEY_INDEX | M.QKEY,
        _UC: M.AV | M.ALT_PATH | M.ACCESS_FLAGS | M.PKEY_INDEX | M.PATH_MIG_STATE,
        _RC: (_SQD_OPT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC | M.MAX_DEST_RD_ATOMIC
              | M.MIN_RNR_TIMER),
        _XI: _SQD_OPT | M.RETRY_CNT | M.RNR_RETRY | M.MAX_QP_RD_ATOMIC,
        _XT: _SQD_OPT | M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER}),
    (S.SQE, S.RESET): _ANY, (S.SQE, S.ERR): _ANY,
    (S.SQE, S.RTS): Transition(opt={_UD: M.CUR_STATE | M.QKEY, _UC: M.CUR_STATE | M.ACCESS_FLAGS}),
    (S.ERR, S.RESET): _ANY, (S.ERR, S.ERR): _ANY,
}
"""``qp_state_table``: the legal (current, next) pairs; any pair absent here is illegal."""

_CUR_STATE_FROM = (S.RTR, S.RTS, S.SQD, S.SQE)
"""States from which IB_QP_CUR_STATE may be given (ib_modify_qp_is_ok)."""


def modify_qp_problem(cur: QpState, new: QpState, qp_type: QpType, mask: int) -> str | None:
    """Why ``ib_modify_qp_is_ok`` refuses moving a ``qp_type`` QP from ``cur`` to ``new`` with ``mask``;
    None when it allows it."""
    if mask & M.CUR_STATE and cur not in _CUR_STATE_FROM:
        return f"IB_QP_CUR_STATE is only accepted from RTR, RTS, SQD or SQE, not {cur.name}"
    entry = QP_STATE_TABLE.get((cur, new))
    if entry is None:
        return f"{cur.name} -> {new.name} is not a legal transition"
    req, opt = entry.req.get(qp_type, M(0)), entry.opt.get(qp_type, M(0))
    if missing := req & ~M(mask):
        return f"{cur.name} -> {new.name} on {qp_type.name} requires {_names(missing)}"
    if extra := M(mask) & ~(req | opt | M.STATE):
        return f"{cur.name} -> {new.name} on {qp_type.name} does not accept {_names(extra)}"
    return None


_IGNORED = {_XI: M.MAX_DEST_RD_ATOMIC | M.MIN_RNR_TIMER, _XT: M.MAX_QP_RD_ATOMIC | M.RETRY_CNT | M.RNR_RETRY}
"""The attributes uverbs drops from an XRC QP's mask before the transition is checked: an initiator has no
receive side, a target no send side."""


def modify_qp_mask(qp_type: QpType, mask: int) -> int:
    """``modify_qp_mask`` (drivers/infiniband/core/uverbs_cmd.c): ``mask`` without the bits ``ibv_modify_qp``
    ignores for ``qp_type`` (an XRC initiator's responder attributes, an XRC target's requester ones)."""
    return mask & ~_IGNORED.get(qp_type, 0)


def sq_holds_posts(state: QpState) -> bool:
    """Whether a work request posted to a QP in ``state`` waits before the NIC takes it up: in SQD, whose send queue
    takes up no new work request (IB spec vol. 1, 10.3.1, Send Queue Drain), until the QP is moved back to RTS.

    mlx5 posts in every state from RTS on: ``_mlx5_post_send`` (rdma-core providers/mlx5/qp.c) reads the state only
    through ``qp->sq.qp_state_max_gs``, which ``set_qp_operational_state`` (providers/mlx5/verbs.c) closes (-1) in
    RESET, opens at RTS and leaves as it is in SQD, SQE and ERR; in ERR and SQE the NIC completes what is posted
    ``IBV_WC_WR_FLUSH_ERR``."""
    return state is QP_SQD


def _names(mask: QpAttrMask) -> str:
    return " | ".join(f"IBV_QP_{bit.name}" for bit in QpAttrMask if bit & mask)


def check_modify_qp(qp_type: QpType, state: QpState, attr: QPAttr, mask: int, max_rd_atomic: int,
                    controlled_qkey: bool = True) -> QpState:
    """The checks of ``ibv_modify_qp`` on a QP now in ``state``, in the order the kernel makes them (``modify_qp``
    in uverbs_cmd.c: ports and state values, the Q_Key; then the driver: the transition, the other values); return
    the state it moves to.

    ``max_rd_atomic`` is the device's limit for both ``max_rd_atomic`` and ``max_dest_rd_atomic``;
    ``controlled_qkey``: the process may set a controlled Q_Key (:func:`controlled_qkey_allowed`).

    :raises VerbsError: ``EOPNOTSUPP`` for mask bits rdma-core does not define; ``EINVAL`` for an illegal
        transition, a missing required or unaccepted attribute, or an attribute value out of range; ``EPERM`` for
        a controlled Q_Key (high bit set) the process may not set.
    """
    call = "ibv_modify_qp"
    if mask & ~KNOWN_MASK_BITS:
        raise VerbsError("EOPNOTSUPP", f"attr_mask {mask:#x} has bits outside enum ibv_qp_attr_mask", call=call)
    if (problem := _port_problem(attr, mask)) is not None:
        raise VerbsError("EINVAL", problem, call=call)
    for bit in (M.STATE, M.CUR_STATE):
        if mask & bit and not isinstance(getattr(attr, FIELD_OF_BIT[bit]), QpState):
            raise VerbsError("EINVAL", f"{FIELD_OF_BIT[bit]} {getattr(attr, FIELD_OF_BIT[bit])!r} is not a QP state",
                             call=call)
    if mask & M.QKEY and attr.qkey & CONTROLLED_QKEY and not controlled_qkey:
        raise VerbsError("EPERM", f"qkey {attr.qkey:#x} is a controlled Q_Key (IB_QP_SET_QKEY): setting one needs "
                         "CAP_NET_RAW or the system's privileged-qkey mode (modify_qp, uverbs_cmd.c)", call=call)
    cur = attr.cur_qp_state if mask & M.CUR_STATE else state
    new = attr.qp_state if mask & M.STATE else cur
    if (problem := modify_qp_problem(cur, new, qp_type, mask)) is not None:
        raise VerbsError("EINVAL", problem + " (ib_modify_qp_is_ok)", call=call)
    if (problem := _value_problem(attr, mask, max_rd_atomic)) is not None:
        raise VerbsError("EINVAL", problem, call=call)
    return new


def controlled_qkey_allowed(kernel: KernelBehaviour, privileged: bool) -> bool:
    """Whether ``ibv_modify_qp`` lets a process set a controlled Q_Key on ``kernel``: always before 6.4; from 6.4
    only a ``privileged`` one (CAP_NET_RAW, or any process once the administrator has set the system's
    privileged-qkey mode, ``rdma system set privileged-qkey on``, 6.5+) (:mod:`models.versions`)."""
    return privileged or not kernel.restricts_controlled_qkey


def _port_problem(attr: QPAttr, mask: int) -> str | None:
    """A port number ``modify_qp`` refuses (``rdma_is_port_valid``), or None."""
    if mask & M.PORT and not rdma_is_port_valid(attr.port_num):
        return f"port_num {attr.port_num}: the device has port {PORT_NUM} only (rdma_is_port_valid)"
    if mask & M.AV and not rdma_is_port_valid(attr.ah_attr.port_num):
        return f"ah_attr.port_num {attr.ah_attr.port_num}: the device has port {PORT_NUM} only (rdma_is_port_valid)"
    return None


def _value_problem(attr: QPAttr, mask: int, max_rd_atomic: int) -> str | None:
    """The first attribute value mlx5 refuses, or None."""
    if mask & M.PATH_MTU and attr.path_mtu not in set(PathMtu):
        return f"path_mtu {attr.path_mtu} is not an enum ibv_mtu value (1..5 for 256..4096 bytes)"
    if mask & M.MAX_QP_RD_ATOMIC and not 0 <= attr.max_rd_atomic <= max_rd_atomic:
        return f"max_rd_atomic {attr.max_rd_atomic} outside 0..{max_rd_atomic} (device max_qp_rd_atom)"
    if mask & M.MAX_DEST_RD_ATOMIC and not 0 <= attr.max_dest_rd_atomic <= max_rd_atomic:
        return (f"max_dest_rd_atomic {attr.max_dest_rd_atomic} outside 0..{max_rd_atomic} "
                "(device max_qp_init_rd_atom)")
    return None


def apply_attrs(kept: QPAttr, attr: QPAttr, mask: int, new: QpState) -> QPAttr:
    """The attributes a QP keeps after a successful modify: ``kept`` with the masked fields of ``attr`` (PSNs
    masked to 24 bits), in state ``new``; moving to RESET returns the QP to its created, zeroed attributes."""
    if new is QpState.RESET:
        return QPAttr()
    changes = {name: getattr(attr, name) for bit, name in FIELD_OF_BIT.items() if mask & bit}
    for psn in ("rq_psn", "sq_psn"):
        if psn in changes:
            changes[psn] &= 0xFFFFFF
    if "ah_attr" in changes:
        changes["ah_attr"] = dataclasses.replace(changes["ah_attr"])
    changes["qp_state"] = changes["cur_qp_state"] = new
    return dataclasses.replace(kept, **changes)


RNR_TIMER_US = (655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
                5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680,
                491520)
"""The IB specification's RNR NAK timer field (Table 45 of vol. 1): encoding -> microseconds."""


def rnr_timer_ps(encoding: int) -> int:
    """How long a requester waits after an RNR NAK from a responder with ``min_rnr_timer`` ``encoding`` (ps)."""
    return RNR_TIMER_US[encoding & 0x1F] * PS_PER_US


def ack_timeout_ps(encoding: int) -> int | None:
    """The requester's transport (local ACK) timer for ``timeout`` ``encoding``: 4.096 us * 2**encoding, None for 0
    (infinite: it never fires) (IB spec vol. 1 9.7.6.1.3; mlx5 writes the encoding into the QP context's
    ``ack_timeout`` as it is: mlx5 fpga/conn.c sets 0x12 as "~1.07s") (ps)."""
    encoding &= 0x1F
    return None if encoding == 0 else 4096 * PS_PER_NS * 2**encoding
