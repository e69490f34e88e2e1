"""``QP`` with ``QPCap``, ``QPInitAttr`` and ``QPAttr``, and the work requests' ``SGE``, ``SendWR`` and ``RecvWR``,
in pyverbs' shape (pyverbs/qp.pyx, wr.pyx) over :mod:`models.verbs` (RC, UC and UD queue pairs: RDMA WRITE and READ,
SEND, the ``*_WITH_IMM`` opcodes and the atomics, SGE lists, receive queues and SRQs; UD's address handles).

State transitions (``to_init``, ``to_rtr``, ``to_rts``, ``modify``) are :func:`~models.verbs.qp.ibv_modify_qp`
with the masks pyverbs passes for the QP's type; they take no simulated time in the model. Posting is asynchronous: the
work request starts at the current simulated time and its completion arrives in the CQ later (a send's in the send
CQ, a receive's in the receive CQ).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from models.nic.memory_window import MwBind
from models.nic.wqe import Opcode, QpState, SendFlags, Sge
from models.nic.wqe import RecvWR as ReceiveRequest
from models.nic.wqe import SendWR as WorkRequest
from models.verbs import qp_state
from models.verbs.data_in_order import ibv_query_qp_data_in_order
from models.verbs.destroy import ibv_destroy_qp
from models.verbs.mw import ibv_bind_mw, ibv_inc_rkey
from models.verbs.qp_state import PathMtu, QpAttrMask, QpType
from models.verbs.recv import ibv_post_recv
from models.verbs.qp import PERFTEST_MASKS, ibv_create_qp, ibv_modify_qp, ibv_post_send, ibv_query_qp
from models.verbs.qp_ex import QpInitAttrMask
from models.verbs.xrc import create_xrc_qp_user
from sim.api.arguments import c_integer
from sim.api.device import CQ, PD, Context
from sim.api.resource import Resource
from sim.api.sge import SGE, sge_list
from sim.core import ProtocolError, VerbsError


def _first_sges(num_sge: int, sg: list[SGE] | None, what: str, needs_sge: bool = True) -> list[SGE]:
    """The ``num_sge`` SGEs a work request holds (pyverbs copies the first ``num_sge`` of ``sg``); ``needs_sge``
    False: none is needed (pyverbs' memory-window opcodes).

    :raises ProtocolError: no SGE where one is needed (pyverbs: "A WR needs at least one SGE").
    :raises ArgumentTypeError: ``num_sge`` is not an integer.
    """
    if (c_integer(num_sge, "int", "num_sge", what) < 1 or not sg) and needs_sge:
        raise ProtocolError(f"{what}: a WR needs at least one SGE")
    return list(sg or ())[:num_sge]


_MW_OPCODES = frozenset((Opcode.LOCAL_INV, Opcode.BIND_MW, Opcode.SEND_WITH_INV))
"""The opcodes pyverbs' ``SendWR`` takes without an SGE (its ``mw_opcodes``)."""


_OPCODES, _QP_TYPES = frozenset(Opcode), frozenset(QpType)
"""The members, which pyverbs' ints (``IBV_WR_*``, ``IBV_QPT_*``) equal."""

class SendWR(Resource):
    """``struct ibv_send_wr`` as pyverbs builds it: ``sg`` holds ``num_sge`` SGEs (the gather list; a READ's
    scatter list); ``imm_data`` goes with ``*_WITH_IMM``; :meth:`set_wr_rdma` and :meth:`set_wr_atomic` set the
    remote side; ``send_flags`` are :class:`~models.nic.wqe.SendFlags`; ``close()`` as pyverbs has it (a closed
    work request is not posted).

    :raises ProtocolError: no SGE (pyverbs: "A WR needs at least one SGE").
    :raises ArgumentTypeError: an argument of another type (``opcode`` a string rather than an
        :class:`~models.nic.wqe.Opcode`, ...; the setters below check theirs the same way). A value too wide for
        its C field (``wr_id`` beyond ``uint64_t``) is ``EINVAL`` from :meth:`QP.post_send`.
    """

    def __init__(self, wr_id: int = 0, opcode: Opcode = Opcode.SEND, num_sge: int = 0, imm_data: int = 0,
                 sg: list[SGE] | None = None, send_flags: int = SendFlags.SIGNALED) -> None:
        call = "SendWR"
        if c_integer(opcode, "enum ibv_wr_opcode", "opcode", call) not in _OPCODES:
            raise VerbsError("EINVAL", f"opcode {opcode} is none of the modelled IBV_WR_* opcodes "
                             f"({', '.join(op.name for op in Opcode)}; mlx5_post_send: bad opcode)",
                             call="ibv_post_send")
        self.sg = _first_sges(num_sge, sg, call, opcode not in _MW_OPCODES)
        self.wr_id, self.num_sge = c_integer(wr_id, "uint64_t", "wr_id", call), num_sge
        self.opcode = Opcode(opcode)
        self.imm_data = c_integer(imm_data, "uint32_t", "imm_data", call)
        self._bind: MwBind | None = None
        self.send_flags = SendFlags(c_integer(send_flags, "uint32_t", "send_flags", call))
        self.remote_addr = self.rkey = self.compare_add = self.swap = 0
        self.ah, self.remote_qpn, self.remote_qkey, self.remote_srqn = None, 0, 0, 0

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        """The remote buffer of an RDMA WRITE or READ: its key and address (``uint32_t``, ``uint64_t``)."""
        call = "SendWR.set_wr_rdma"
        self.rkey = c_integer(rkey, "uint32_t", "rkey", call)
        self.remote_addr = c_integer(addr, "uint64_t", "addr", call)

    def set_wr_atomic(self, rkey: int, addr: int, compare_add: int, swap: int = 0) -> None:
        """The remote 8 bytes of an atomic and its operands: CMP_AND_SWP writes ``swap`` where ``compare_add``
        matches, FETCH_AND_ADD adds ``compare_add`` (unsigned 64-bit); the old value lands in the SGE."""
        call = "SendWR.set_wr_atomic"
        self.set_wr_rdma(rkey, addr)
        self.compare_add = c_integer(compare_add, "uint64_t", "compare_add", call)
        self.swap = c_integer(swap, "uint64_t", "swap", call)

    def set_wr_ud(self, ah, rqpn: int, rqkey: int) -> None:
        """A UD work request's destination: the port of :class:`~sim.api.ah.AH` ``ah``, the QP number ``rqpn``
        there and the Q_Key ``rqkey`` it must have (high bit set: the sending QP's own)."""
        call = "SendWR.set_wr_ud"
        self.ah = ah
        self.remote_qpn = c_integer(rqpn, "uint32_t", "rqpn", call)
        self.remote_qkey = c_integer(rqkey, "uint32_t", "rqkey", call)

    def set_qp_type_xrc(self, remote_srqn: int) -> None:
        """An XRC_SEND work request's XRC SRQ at the target (``wr.qp_type.xrc.remote_srqn``; pyverbs'
        ``set_qp_type_xrc``): the number :meth:`~sim.api.srq.SRQ.get_srq_num` gives."""
        self.remote_srqn = c_integer(remote_srqn, "uint32_t", "remote_srqn", "SendWR.set_qp_type_xrc")

    def set_bind_wr(self, mw, bind_info) -> None:
        """A BIND_MW's window (:class:`~sim.api.mw.MW`) and :class:`~sim.api.mw.MWBindInfo`; the new rkey, the
        window's next (``ibv_inc_rkey``), is :attr:`rkey` from now on (pyverbs' ``set_bind_wr``)."""
        self.rkey = ibv_inc_rkey(mw.rkey)
        self._bind = (mw, bind_info)

    def _request(self, call: str) -> WorkRequest:
        """The verbs layer's work request."""
        self._check_open(call)
        sges = sge_list(self.sg, call)
        first = sges[0] if sges else Sge(0, 0, 0)
        bind = None
        if self._bind is not None:
            mw, info = self._bind
            mw._check_open(call)
            bind = MwBind(mw.mw, self.rkey, info._info(call))
        if self.ah is not None:
            self.ah._check_open(call)
        return WorkRequest(self.wr_id, self.opcode, first.addr, first.length, first.lkey, self.remote_addr,
                           self.rkey, sg_list=sges if len(sges) > 1 else None, send_flags=int(self.send_flags),
                           compare_add=self.compare_add, swap=self.swap, imm_data=self.imm_data,
                           ah=None if self.ah is None else self.ah.ah, remote_qpn=self.remote_qpn,
                           remote_qkey=self.remote_qkey, remote_srqn=self.remote_srqn, bind_mw=bind)


class RecvWR(Resource):
    """``struct ibv_recv_wr`` as pyverbs builds it: a receive buffer of ``num_sge`` SGEs (the scatter list) for
    one incoming SEND or RDMA WRITE with immediate; ``close()`` as pyverbs has it.

    :raises ProtocolError: no SGE (pyverbs: "A WR needs at least one SGE").
    :raises ArgumentTypeError: ``wr_id`` or ``num_sge`` is not an integer (one beyond ``uint64_t`` is ``EINVAL``
        when it is posted).
    """

    def __init__(self, wr_id: int = 0, num_sge: int = 0, sg: list[SGE] | None = None) -> None:
        self.sg = _first_sges(num_sge, sg, "RecvWR")
        self.wr_id, self.num_sge = c_integer(wr_id, "uint64_t", "wr_id", "RecvWR"), num_sge

    def _request(self, call: str) -> ReceiveRequest:
        """The verbs layer's receive request."""
        self._check_open(call)
        return ReceiveRequest(self.wr_id, sge_list(self.sg, call))


@dataclass
class QPCap:
    """``struct ibv_qp_cap`` with pyverbs' defaults, all passed to ``ibv_create_qp``: send and receive queue depths
    (work requests), SGEs per work request, and the largest ``SendFlags.INLINE`` payload (bytes)."""

    max_send_wr: int = 1
    max_recv_wr: int = 10
    max_send_sge: int = 1
    max_recv_sge: int = 1
    max_inline_data: int = 0


@dataclass
class QPInitAttr:
    """``struct ibv_qp_init_attr`` (pyverbs' ``QPInitAttr(qp_type, qp_context, scq, rcq, srq, cap, sq_sig_all)``):
    ``rcq`` None receives into ``scq``; with an :class:`~sim.api.srq.SRQ` the QP takes its receives from it;
    ``sq_sig_all`` 0 completes only work requests posted with ``SendFlags.SIGNALED``. ``qp_type`` is RC, UC or UD
    (:class:`~models.nic.transport.QpType`); RC is the default (pyverbs' is UD)."""

    qp_type: QpType = QpType.RC
    qp_context: object = None
    scq: CQ | None = None
    rcq: CQ | None = None
    srq: object = None
    """An :class:`~sim.api.srq.SRQ` or None."""
    cap: QPCap | None = None
    sq_sig_all: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.qp_type, QpType) and self.qp_type in _QP_TYPES:  # pyverbs' IBV_QPT_* ints
            self.qp_type = QpType(self.qp_type)

    @property
    def send_cq(self) -> CQ | None:
        """pyverbs' name for ``scq``."""
        return self.scq

    @property
    def recv_cq(self) -> CQ | None:
        """pyverbs' name for ``rcq``."""
        return self.rcq


@dataclass
class QPAttr(qp_state.QPAttr):
    """``struct ibv_qp_attr`` (:class:`models.verbs.qp_state.QPAttr`) with pyverbs' defaults: ``qp_state`` INIT,
    ``port_num`` 1, ``path_mtu`` 1024."""

    qp_state: QpState = QpState.INIT
    port_num: int = 1
    path_mtu: int = PathMtu.MTU_1024


class QP(Resource):
    """A queue pair (``ibv_create_qp``) of ``init_attr.qp_type`` on ``pd`` with the CQs, SRQ, capabilities and
    ``sq_sig_all`` of ``init_attr``; with ``qp_attr`` it is moved to INIT (RC, UC) or on to RTS (UD), as pyverbs
    does. It holds its PD, its CQs and its SRQ (they refuse to close while it is open).

    Made on a :class:`~sim.api.device.Context` with a :class:`~sim.api.qp_ex.QPInitAttrEx` (pyverbs'
    ``QP(ctx, attr_ex, qp_attr)``: ``ibv_create_qp_ex``), it is an XRC target (``QpType.XRC_RECV``) on
    ``init_attr.xrcd`` (``IBV_QP_INIT_ATTR_XRCD``), which it holds, or a QP of ``init_attr.pd``
    (``IBV_QP_INIT_ATTR_PD``), an XRC initiator (``QpType.XRC_SEND``) among them.

    The remote QP of an RC, UC or XRC QP is the one ``to_rtr``'s ``dest_qp_num`` names behind ``ah_attr.dlid``
    (the remote context's :attr:`~sim.api.device.Context.lid`); a UD QP's work requests name theirs
    (:meth:`SendWR.set_wr_ud`), an XRC initiator's the SRQ at its target (:meth:`SendWR.set_qp_type_xrc`).

    :raises VerbsError: as :func:`models.verbs.qp.ibv_create_qp` (``EINVAL`` for a depth or SGE count beyond
        the device's, too much inline data, an SRQ of another device or an XRC SRQ); ``EINVAL`` for a CQ of
        another device context, or on a context without the PD or XRC domain its type needs; ``EOPNOTSUPP`` for QP
        types other than RC, UC, UD, XRC_SEND and XRC_RECV, or XRC on a device without it.
    """

    def __init__(self, creator: PD | Context, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        call = "ibv_create_qp"
        self.xrcd = None
        if isinstance(creator, Context):  # pyverbs' QP(ctx, QPInitAttrEx): ibv_create_qp_ex
            self._from_context(creator, init_attr)
        else:
            self._on_pd(creator, init_attr, call)
        testbed = self.context.testbed
        testbed._qps[(self.context.lid, self.qp.qp_num)] = self
        testbed._posted[(self.context.lid, self.qp.qp_num)] = deque()
        self.context._adopt(self)
        if qp_attr is not None:
            if self.qp_type is QpType.UD:
                self.to_rts(qp_attr)
            else:
                self.to_init(qp_attr)

    def _on_pd(self, pd: PD, init_attr: QPInitAttr, call: str) -> None:
        pd._check_open(call)
        if not isinstance(init_attr.qp_type, QpType):
            raise VerbsError("EOPNOTSUPP", f"QP type {init_attr.qp_type!r} is not modelled (RC, UC, UD, XRC_SEND, "
                             "XRC_RECV are)", call=call)
        scq = _own_cq(init_attr.scq, pd, "send", call)
        rcq = scq if init_attr.rcq is None else _own_cq(init_attr.rcq, pd, "receive", call)
        srq = init_attr.srq
        if srq is not None:
            srq._check_open(call)
        cap = init_attr.cap or QPCap()
        self.pd, self.context, self.init_attr = pd, pd.context, init_attr
        self.qp = self._create(pd.pd, scq.cq, cap.max_send_wr, max_send_sge=cap.max_send_sge,
                               max_inline_data=cap.max_inline_data, sq_sig_all=bool(init_attr.sq_sig_all),
                               recv_cq=rcq.cq, max_recv_wr=cap.max_recv_wr, max_recv_sge=cap.max_recv_sge,
                               srq=None if srq is None else srq.srq, qp_type=init_attr.qp_type)
        """The verbs layer's QP (:class:`models.verbs.qp.QueuePair`; an XRC target's
        :class:`models.verbs.xrc.OpenedQp`)."""

    def _from_context(self, context: Context, init_attr) -> None:
        """``ibv_create_qp_ex``: an XRC target on ``init_attr.xrcd`` (libibverbs ``ibv_cmd_create_qp_ex2``:
        XRC_RECV needs IBV_QP_INIT_ATTR_XRCD, the others IBV_QP_INIT_ATTR_PD: EINVAL), else on ``init_attr.pd``."""
        call = "ibv_create_qp_ex"
        context._check_open(call)
        if init_attr.qp_type != QpType.XRC_RECV:
            if not init_attr.comp_mask & QpInitAttrMask.PD or init_attr.pd is None:
                raise VerbsError("EINVAL", "ibv_create_qp_ex needs IBV_QP_INIT_ATTR_PD and a PD", call=call)
            if init_attr.pd.context is not context:
                raise VerbsError("EINVAL", "the PD belongs to another context", call=call)
            self._on_pd(init_attr.pd, init_attr, call)
            return
        if not init_attr.comp_mask & QpInitAttrMask.XRCD or init_attr.xrcd is None:
            raise VerbsError("EINVAL", "an XRC_RECV QP needs IBV_QP_INIT_ATTR_XRCD and an XRC domain", call=call)
        init_attr.xrcd._check_open(call)
        self.pd, self.context, self.init_attr, self.xrcd = None, context, init_attr, init_attr.xrcd
        self.qp = create_xrc_qp_user(init_attr.xrcd.xrcd)

    def _create(self, pd, send_cq, max_send_wr: int, **caps):
        """The verbs layer's QP: ``ibv_create_qp``."""
        return ibv_create_qp(pd, send_cq, max_send_wr, **caps)

    @property
    def qp_num(self) -> int:
        """The QP number."""
        return self.qp.qp_num

    @property
    def qp_state(self) -> QpState:
        """The current state."""
        return self.qp.state

    @property
    def qp_type(self) -> QpType:
        """RC, UC or UD."""
        return self.qp.qp_type

    def to_init(self, qp_attr: QPAttr) -> None:
        """RESET -> INIT with pyverbs' mask for the QP's type (P_Key index, port, and access flags for RC and UC,
        the Q_Key for UD)."""
        qp_attr.qp_state = QpState.INIT
        self.modify(qp_attr, PERFTEST_MASKS[self.qp_type][0])

    def to_rtr(self, qp_attr: QPAttr) -> None:
        """-> RTR (through INIT first unless already there), with pyverbs' mask for the QP's type (RC: address,
        path MTU, remote QP number, receive PSN, ``max_dest_rd_atomic``, ``min_rnr_timer``; UC without the last
        two; UD: the state only)."""
        if self.qp_state is not QpState.INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = QpState.RTR
        self.modify(qp_attr, PERFTEST_MASKS[self.qp_type][1])

    def to_rts(self, qp_attr: QPAttr) -> None:
        """-> RTS (through RTR first unless already there), with pyverbs' mask for the QP's type (send PSN, and
        for RC the timeout, retry counts and ``max_rd_atomic``)."""
        if self.qp_state is not QpState.RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = QpState.RTS
        self.modify(qp_attr, PERFTEST_MASKS[self.qp_type][2])

    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        """``ibv_modify_qp``: set the attributes ``attr_mask`` selects.

        :raises VerbsError: as :func:`models.verbs.qp.ibv_modify_qp` (``EINVAL`` for an illegal transition or
            a missing attribute).
        """
        self._check_open("ibv_modify_qp")
        ibv_modify_qp(self.qp, qp_attr, attr_mask)
        if attr_mask & QpAttrMask.DEST_QPN:
            peer = self.context.testbed._qps.get((self.qp.attr.ah_attr.dlid, self.qp.attr.dest_qp_num))
            self.qp.remote = peer.qp if peer is not None else None

    def query(self, attr_mask: int) -> tuple[qp_state.QPAttr, QPInitAttr]:
        """``ibv_query_qp``: the QP's attributes and its init attributes."""
        self._check_open("ibv_query_qp")
        return ibv_query_qp(self.qp, attr_mask), self.init_attr

    def query_data_in_order(self, op: int, flags: int = 0) -> int:
        """``ibv_query_qp_data_in_order`` (pyverbs' ``QP.query_data_in_order``): 0 or 1, or with
        ``QueryDataInOrderFlags.RETURN_CAPS`` the :class:`DataInOrderCaps` bits."""
        self._check_open("ibv_query_qp_data_in_order")
        return ibv_query_qp_data_in_order(self.qp, Opcode(op), flags)

    def post_send(self, wr: SendWR, bad_wr: SendWR | None = None) -> None:
        """Post ``wr`` (any opcode, its SGEs, flags, immediate data and atomic operands); it runs from now on and
        its completion, if it is signaled (``SendFlags.SIGNALED`` or ``sq_sig_all``) or fails, arrives in the
        send CQ (``CQ.poll``).

        :raises VerbsError: as :func:`models.verbs.qp.ibv_post_send` (``EINVAL`` before RTS, ``ENOMEM`` for a
            full send queue, too many SGEs or too much inline data, ``EOPNOTSUPP`` for an atomic on a device
            without atomics, ...).
        :raises ProtocolError: the QP is in RTS but its ``dest_qp_num``/``dlid`` name no QP of the testbed (UD: the
            work request's AH has a LID that names no port; a QP number with no UD QP there has the datagram
            dropped at that port).
        """
        call = "ibv_post_send"
        self._check_open(call)
        request = wr._request(call)
        if self.qp.state is QpState.RTS and self.qp.remote is None and self.qp_type is not QpType.UD:
            raise ProtocolError(f"{call}: QP {self.qp_num} is connected to QP {self.qp.attr.dest_qp_num} behind LID "
                                f"{self.qp.attr.ah_attr.dlid}, which is not a QP of this testbed")
        ibv_post_send(self.qp, request)
        signaled = bool(wr.send_flags & SendFlags.SIGNALED) or self.qp.sq_sig_all
        self.context.testbed._posted[(self.context.lid, self.qp_num)].append((signaled, request.message_bytes))

    def bind_mw(self, mw, mw_bind) -> None:
        """``ibv_bind_mw``: bind the type 1 window ``mw`` (:class:`~sim.api.mw.MW`) as
        :class:`~sim.api.mw.MWBind` ``mw_bind`` says; ``mw.rkey`` is its new key once the bind is posted, and the
        bind completes in the send CQ (``WcOpcode.BIND_MW``; ``WcStatus.MW_BIND_ERR`` when it breaks a rule).

        :raises VerbsError: as :func:`models.verbs.mw.ibv_bind_mw` (``EINVAL`` for a type 2 window or a zero-based
            one, ``EPERM`` for an MR of another PD, and the errors of posting).
        """
        call = "ibv_bind_mw"
        self._check_open(call)
        mw._check_open(call)
        ibv_bind_mw(self.qp, mw.mw, mw_bind.wr_id, mw_bind.send_flags, mw_bind.info._info(call))
        signaled = bool(mw_bind.send_flags & SendFlags.SIGNALED) or self.qp.sq_sig_all
        self.context.testbed._posted[(self.context.lid, self.qp_num)].append((signaled, 0))

    def post_recv(self, wr: RecvWR, bad_wr: RecvWR | None = None) -> None:
        """Post the receive ``wr`` to the QP's own receive queue; the SEND (or WRITE with immediate) that
        consumes it completes in the receive CQ with its byte count, ``wc_flags``, ``imm_data`` and ``src_qp``.

        :raises VerbsError: as :func:`models.verbs.recv.ibv_post_recv` (``EINVAL`` in RESET, for too many SGEs
            or on a QP created on an SRQ; ``ENOMEM`` for a full receive queue).
        """
        call = "ibv_post_recv"
        self._check_open(call)
        ibv_post_recv(self.qp, wr._request(call))

    @property
    def _uses(self) -> tuple:
        return self.pd, self.init_attr.scq, self.init_attr.rcq, self.init_attr.srq, self.xrcd

    def _destroy(self) -> None:
        ibv_destroy_qp(self.qp)
        del self.context.testbed._qps[(self.context.lid, self.qp_num)]


def _own_cq(cq: CQ | None, pd: PD, which: str, call: str) -> CQ:
    """``cq``, a CQ of ``pd``'s device context.

    :raises VerbsError: ``EINVAL`` for no CQ or one of another context (uverbs looks its handle up in the
        caller's file).
    :raises ProtocolError: the CQ was closed.
    """
    if cq is None or cq.context is not pd.context:
        raise VerbsError("EINVAL", f"the {which} CQ must be a CQ of the PD's device context (uverbs looks its "
                         "handle up in the caller's file)", call=call)
    cq._check_open(call)
    return cq
