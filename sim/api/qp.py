"""``QP`` with ``QPCap``, ``QPInitAttr`` and ``QPAttr``, and the send side's ``SGE`` and ``SendWR``, in pyverbs'
shape (pyverbs/qp.pyx, wr.pyx) over :mod:`models.verbs` (RC queue pairs, RDMA WRITE and READ).

State transitions (``to_init``, ``to_rtr``, ``to_rts``, ``modify``) are :func:`~models.verbs.verbs.ibv_modify_qp`
with the masks pyverbs passes for RC; they take no simulated time in the model. Posting is asynchronous: the
work request starts at the current simulated time and its completion arrives in the CQ later.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from models.nic.wqe import Opcode, QpState
from models.nic.wqe import SendWR as WorkRequest
from models.verbs import qp_state
from models.verbs.destroy import ibv_destroy_qp
from models.verbs.qp_state import PathMtu, QpAttrMask, QpType
from models.verbs.verbs import (PERFTEST_TO_INIT, PERFTEST_TO_RTR, PERFTEST_TO_RTS, ibv_create_qp, ibv_modify_qp,
                                ibv_post_send, ibv_query_qp)
from sim.api.device import CQ, PD
from sim.api.resource import Resource
from sim.core import ProtocolError, VerbsError


class SendFlags(enum.IntFlag):
    """``enum ibv_send_flags`` (libibverbs/verbs.h)."""

    FENCE = 1
    SIGNALED = 1 << 1
    SOLICITED = 1 << 2
    INLINE = 1 << 3


@dataclass(eq=False)
class SGE(Resource):
    """``struct ibv_sge``: ``length`` bytes at ``addr`` of the MR whose local key is ``lkey`` (``close()`` as
    pyverbs has it; a closed SGE is not posted)."""

    addr: int
    length: int
    lkey: int


class SendWR(Resource):
    """``struct ibv_send_wr`` as pyverbs builds it: ``sg`` holds ``num_sge`` SGEs; :meth:`set_wr_rdma` sets the
    remote side; ``close()`` as pyverbs has it (a closed work request is not posted). Only RDMA WRITE and RDMA READ are modelled (pyverbs' default opcode, SEND, is not yet), so the
    default opcode here is ``Opcode.RDMA_WRITE``.

    :raises ProtocolError: no SGE (pyverbs: "A WR needs at least one SGE").
    """

    def __init__(self, wr_id: int = 0, opcode: Opcode = Opcode.RDMA_WRITE, num_sge: int = 0, imm_data: int = 0,
                 sg: list[SGE] | None = None, send_flags: int = SendFlags.SIGNALED) -> None:
        if num_sge < 1 or not sg:
            raise ProtocolError("SendWR: a WR needs at least one SGE")
        self.wr_id, self.opcode, self.num_sge, self.imm_data = wr_id, opcode, num_sge, imm_data
        self.sg, self.send_flags = list(sg)[:num_sge], SendFlags(send_flags)
        self.remote_addr = self.rkey = 0

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        """The remote buffer of an RDMA WRITE or READ: its key and address."""
        self.rkey, self.remote_addr = rkey, addr


@dataclass
class QPCap:
    """``struct ibv_qp_cap`` with pyverbs' defaults; only ``max_send_wr`` shapes the model (no receive queue,
    one SGE per work request)."""

    max_send_wr: int = 1
    max_recv_wr: int = 10
    max_send_sge: int = 1
    max_recv_sge: int = 1
    max_inline_data: int = 0


@dataclass
class QPInitAttr:
    """``struct ibv_qp_init_attr`` (pyverbs' ``QPInitAttr(qp_type, qp_context, scq, rcq, srq, cap, sq_sig_all)``).
    Only RC QPs are modelled, so RC is the default (pyverbs' is UD)."""

    qp_type: QpType = QpType.RC
    qp_context: object = None
    scq: CQ | None = None
    rcq: CQ | None = None
    srq: object = None
    cap: QPCap | None = None
    sq_sig_all: int = 1

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
    """An RC queue pair (``ibv_create_qp``) on ``pd`` with the CQ, capabilities and type of ``init_attr``; with
    ``qp_attr`` it is moved to INIT, as pyverbs does for connected QPs.

    The remote QP is the one ``to_rtr``'s ``dest_qp_num`` names behind ``ah_attr.dlid`` (the remote
    context's :attr:`~sim.api.device.Context.lid`).

    :raises VerbsError: ``EINVAL`` for ``max_send_wr`` beyond the device's ``max_qp_wr`` or a CQ of another
        device context; ``EOPNOTSUPP`` for what is not modelled yet (non-RC types, an SRQ, a receive CQ other
        than the send CQ).
    """

    def __init__(self, pd: PD, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        pd._check_open("ibv_create_qp")
        call = "ibv_create_qp"
        scq = init_attr.scq
        if init_attr.qp_type is not QpType.RC or init_attr.srq is not None or init_attr.rcq not in (None, scq):
            raise VerbsError("EOPNOTSUPP", "only RC QPs without an SRQ, whose receive CQ is the send CQ, are "
                             "modelled", call=call)
        if scq is None or scq.context is not pd.context:
            raise VerbsError("EINVAL", "the send CQ must be a CQ of the PD's device context (uverbs looks its "
                             "handle up in the caller's file)", call=call)
        scq._check_open(call)
        self.pd, self.context, self.init_attr = pd, pd.context, init_attr
        self.qp = ibv_create_qp(pd.pd, scq.cq, (init_attr.cap or QPCap()).max_send_wr)
        """The verbs layer's QP (:class:`models.verbs.verbs.QueuePair`)."""
        testbed = self.context.testbed
        testbed._qps[(self.context.lid, self.qp.qp_num)] = self
        testbed._posted[(self.context.lid, self.qp.qp_num)] = deque()
        self.context._adopt(self)
        if qp_attr is not None:
            self.to_init(qp_attr)

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
        """RC."""
        return self.qp.qp_type

    def to_init(self, qp_attr: QPAttr) -> None:
        """RESET -> INIT with pyverbs' RC mask (P_Key index, port, access flags)."""
        qp_attr.qp_state = QpState.INIT
        self.modify(qp_attr, PERFTEST_TO_INIT)

    def to_rtr(self, qp_attr: QPAttr) -> None:
        """-> RTR (through INIT first unless already there), with pyverbs' RC mask (address, path MTU, remote
        QP number, receive PSN, ``max_dest_rd_atomic``, ``min_rnr_timer``)."""
        if self.qp_state is not QpState.INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = QpState.RTR
        self.modify(qp_attr, PERFTEST_TO_RTR)

    def to_rts(self, qp_attr: QPAttr) -> None:
        """-> RTS (through RTR first unless already there), with pyverbs' RC mask (timeout, retry counts, send
        PSN, ``max_rd_atomic``)."""
        if self.qp_state is not QpState.RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = QpState.RTS
        self.modify(qp_attr, PERFTEST_TO_RTS)

    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        """``ibv_modify_qp``: set the attributes ``attr_mask`` selects.

        :raises VerbsError: as :func:`models.verbs.verbs.ibv_modify_qp` (``EINVAL`` for an illegal transition or
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

    def post_send(self, wr: SendWR, bad_wr: SendWR | None = None) -> None:
        """Post ``wr``; it runs from now on and its completion arrives in the send CQ (``CQ.poll``).

        :raises VerbsError: as :func:`models.verbs.verbs.ibv_post_send` (``EINVAL`` before RTS, ``ENOMEM`` for a
            full send queue); ``EOPNOTSUPP`` for what is not modelled yet (other opcodes, several SGEs,
            unsignaled or fenced work requests).
        :raises ProtocolError: the QP is in RTS but its ``dest_qp_num``/``dlid`` name no QP of the testbed.
        """
        call = "ibv_post_send"
        for obj in (self, wr, *wr.sg):
            obj._check_open(call)
        unsignaled = not wr.send_flags & SendFlags.SIGNALED and not self.init_attr.sq_sig_all
        if wr.opcode not in (Opcode.RDMA_WRITE, Opcode.RDMA_READ) or wr.num_sge != 1 or unsignaled \
                or wr.send_flags & SendFlags.FENCE:
            raise VerbsError("EOPNOTSUPP", f"only signaled, unfenced RDMA WRITE/READ with one SGE are modelled, "
                             f"got {wr.opcode} with {wr.num_sge} SGEs and flags {wr.send_flags!r}", call=call)
        if self.qp.state is QpState.RTS and self.qp.remote is None:
            raise ProtocolError(f"{call}: QP {self.qp_num} is connected to QP {self.qp.attr.dest_qp_num} behind LID "
                                f"{self.qp.attr.ah_attr.dlid}, which is not a QP of this testbed")
        (sge,) = wr.sg
        ibv_post_send(self.qp, WorkRequest(wr.wr_id, wr.opcode, sge.addr, sge.length, sge.lkey, wr.remote_addr,
                                           wr.rkey, inline=bool(wr.send_flags & SendFlags.INLINE)))
        self.context.testbed._posted[(self.context.lid, self.qp_num)].append(sge.length)

    def _destroy(self) -> None:
        ibv_destroy_qp(self.qp)
        del self.context.testbed._qps[(self.context.lid, self.qp_num)]
