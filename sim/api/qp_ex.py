"""``QPEx`` and ``QPInitAttrEx`` in pyverbs' shape (pyverbs/qp.pyx) over :mod:`models.verbs.qp_ex`: a QP created
with ``send_ops_flags`` and posted to through the ``ibv_wr_*`` builder (``wr_start``, the opcodes, the setters,
``wr_complete`` or ``wr_abort``)."""

from __future__ import annotations

from dataclasses import dataclass

from models.nic.wqe import Opcode, QpState, SendFlags
from models.verbs.qp_ex import QpInitAttrMask, SendOps, ibv_create_qp_ex
from models.verbs.qp_state import QpType
from sim.api.arguments import c_integer
from sim.api.device import Context
from sim.api.qp import QP, QPAttr, QPInitAttr
from sim.api.sge import SGE, sge_list
from sim.core import ProtocolError, VerbsError

_PD, _SEND_OPS_FLAGS = QpInitAttrMask.PD, QpInitAttrMask.SEND_OPS_FLAGS


@dataclass
class QPInitAttrEx(QPInitAttr):
    """``struct ibv_qp_init_attr_ex`` (pyverbs' ``QPInitAttrEx``): :class:`~sim.api.qp.QPInitAttr`'s fields with
    ``comp_mask`` (:class:`~models.verbs.qp_ex.QpInitAttrMask`), the ``pd`` and the ``send_ops_flags``
    (:class:`~models.verbs.qp_ex.SendOps`) the QP's builder is made for."""

    comp_mask: int = 0
    pd: object = None
    send_ops_flags: int = 0
    xrcd: object = None
    """An XRC target's :class:`~sim.api.xrc.XRCD` (with ``IBV_QP_INIT_ATTR_XRCD``)."""


@dataclass
class DataBuffer:
    """pyverbs' ``DataBuffer(addr, length)``: ``struct ibv_data_buf``, one buffer of inline data."""

    addr: int
    length: int


class QPEx(QP):
    """A QP made by ``ibv_create_qp_ex`` (pyverbs' ``QPEx(ctx, init_attr, qp_attr=None)``): ``init_attr.pd`` and,
    with ``IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`` in ``comp_mask``, ``init_attr.send_ops_flags``. Posting goes through its
    builder: ``wr_start()``, then per work request an opcode (``wr_send()``, ``wr_rdma_write(rkey, addr)``, ...) and
    its setters (``wr_set_sge(sge)``, ``wr_set_sge_list(sg)``, ``wr_set_ud_addr(ah, qpn, qkey)``), each taking
    ``wr_id`` and ``wr_flags`` as set then; ``wr_complete()`` posts them all with one doorbell, ``wr_abort()`` none.

    :raises VerbsError: as :func:`models.verbs.qp_ex.ibv_create_qp_ex` (``EOPNOTSUPP`` for send ops the device's
        provider does not support for the QP type); ``EINVAL`` without ``IBV_QP_INIT_ATTR_PD``.
    """

    def __init__(self, context: Context, init_attr: QPInitAttrEx, qp_attr: QPAttr | None = None) -> None:
        if not init_attr.comp_mask & _PD or init_attr.pd is None:
            raise VerbsError("EINVAL", "ibv_create_qp_ex needs IBV_QP_INIT_ATTR_PD and a PD", call="ibv_create_qp_ex")
        if init_attr.pd.context is not context:
            raise VerbsError("EINVAL", "the PD belongs to another context", call="ibv_create_qp_ex")
        self.wr_id, self.wr_flags = 0, 0
        super().__init__(init_attr.pd, init_attr, qp_attr)

    def _create(self, pd, send_cq, max_send_wr: int, **caps):
        ops = self.init_attr.send_ops_flags if self.init_attr.comp_mask & _SEND_OPS_FLAGS else 0
        self._ex = ibv_create_qp_ex(pd, send_cq, max_send_wr, SendOps(ops), **caps)
        return self._ex.qp

    def wr_start(self) -> None:
        """``ibv_wr_start``."""
        self._check_open("ibv_wr_start")
        self._ex.wr_start()

    def _build(self, opcode: Opcode, rkey: int = 0, remote_addr: int = 0, **fields) -> None:
        self._check_open(f"ibv_wr_{opcode.name.lower()}")
        self._ex.wr_id, self._ex.wr_flags = self.wr_id, int(self.wr_flags)
        self._ex.wr(opcode, rkey, remote_addr, **fields)

    def wr_send(self) -> None:
        """``ibv_wr_send``."""
        self._build(Opcode.SEND)

    def wr_send_imm(self, imm_data: int) -> None:
        """``ibv_wr_send_imm``."""
        self._build(Opcode.SEND_WITH_IMM, imm_data=imm_data)

    def wr_send_inv(self, invalidate_rkey: int) -> None:
        """``ibv_wr_send_inv``: a SEND that invalidates ``invalidate_rkey`` at the responder."""
        self._build(Opcode.SEND_WITH_INV, imm_data=invalidate_rkey)

    def wr_rdma_write(self, rkey: int, remote_addr: int) -> None:
        """``ibv_wr_rdma_write``."""
        self._build(Opcode.RDMA_WRITE, rkey, remote_addr)

    def wr_rdma_write_imm(self, rkey: int, remote_addr: int, imm_data: int) -> None:
        """``ibv_wr_rdma_write_imm``."""
        self._build(Opcode.RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data=imm_data)

    def wr_rdma_read(self, rkey: int, remote_addr: int) -> None:
        """``ibv_wr_rdma_read``."""
        self._build(Opcode.RDMA_READ, rkey, remote_addr)

    def wr_atomic_cmp_swp(self, rkey: int, remote_addr: int, compare: int, swap: int) -> None:
        """``ibv_wr_atomic_cmp_swp``."""
        self._build(Opcode.ATOMIC_CMP_AND_SWP, rkey, remote_addr, compare_add=compare, swap=swap)

    def wr_atomic_fetch_add(self, rkey: int, remote_addr: int, add: int) -> None:
        """``ibv_wr_atomic_fetch_add``."""
        self._build(Opcode.ATOMIC_FETCH_AND_ADD, rkey, remote_addr, compare_add=add)

    def wr_local_inv(self, invalidate_rkey: int) -> None:
        """``ibv_wr_local_inv``."""
        self._build(Opcode.LOCAL_INV, imm_data=invalidate_rkey)

    def wr_bind_mw(self, mw, rkey: int, bind_info) -> None:
        """``ibv_wr_bind_mw``: bind :class:`~sim.api.mw.MW` ``mw`` with the new ``rkey`` as the
        :class:`~sim.api.mw.MWBindInfo` ``bind_info`` says."""
        call = "ibv_wr_bind_mw"
        self._check_open(call)
        mw._check_open(call)
        self._ex.wr_id, self._ex.wr_flags = self.wr_id, int(self.wr_flags)
        self._ex.wr_bind_mw(mw.mw, c_integer(rkey, "uint32_t", "rkey", call), bind_info._info(call))

    def wr_flush(self, rkey: int, remote_addr: int, length: int, ptype: int, level: int) -> None:
        """``ibv_wr_flush``: no provider of the modelled devices sets it (only rxe supports FLUSH).

        :raises VerbsError: ``EOPNOTSUPP``.
        """
        raise VerbsError("EOPNOTSUPP", "no provider of the modelled devices supports IBV_WR_FLUSH (rxe only)",
                         call="ibv_wr_flush")

    def wr_atomic_write(self, rkey: int, remote_addr: int, atomic_wr: bytes) -> None:
        """``ibv_wr_atomic_write``: no provider of the modelled devices sets it (only rxe supports ATOMIC_WRITE).

        :raises VerbsError: ``EOPNOTSUPP``.
        """
        raise VerbsError("EOPNOTSUPP", "no provider of the modelled devices supports IBV_WR_ATOMIC_WRITE (rxe only)",
                         call="ibv_wr_atomic_write")

    def wr_set_sge(self, sge: SGE) -> None:
        """``ibv_wr_set_sge``: the last work request's SGE."""
        (one,) = sge_list([sge], "ibv_wr_set_sge")
        self._ex.wr_set_sge(one.lkey, one.addr, one.length)

    def wr_set_sge_list(self, sg: list[SGE]) -> None:
        """``ibv_wr_set_sge_list``."""
        self._ex.wr_set_sge_list(sge_list(sg, "ibv_wr_set_sge_list"))

    def wr_set_inline_data(self, addr: int, length: int) -> None:
        """``ibv_wr_set_inline_data``: the last work request carries ``length`` bytes at ``addr`` inline, copied
        now (no MR, no L_Key)."""
        call = "ibv_wr_set_inline_data"
        self._ex.wr_set_inline_data_list(((c_integer(addr, "uint64_t", "addr", call),
                                           c_integer(length, "size_t", "length", call)),))

    def wr_set_inline_data_list(self, num_buf: int, buf_list: list[DataBuffer]) -> None:
        """``ibv_wr_set_inline_data_list``: the first ``num_buf`` of ``buf_list`` (:class:`DataBuffer`), inline."""
        call = "ibv_wr_set_inline_data_list"
        self._ex.wr_set_inline_data_list(tuple((c_integer(b.addr, "uint64_t", "addr", call),
                                                c_integer(b.length, "size_t", "length", call))
                                               for b in buf_list[:c_integer(num_buf, "size_t", "num_buf", call)]))

    def wr_set_ud_addr(self, ah, remote_qpn: int, remote_qkey: int) -> None:
        """``ibv_wr_set_ud_addr``: the last UD work request's :class:`~sim.api.ah.AH`, QP number and Q_Key."""
        call = "ibv_wr_set_ud_addr"
        ah._check_open(call)
        self._ex.wr_set_ud_addr(ah.ah, c_integer(remote_qpn, "uint32_t", "remote_qpn", call),
                                c_integer(remote_qkey, "uint32_t", "remote_qkey", call))

    def wr_set_xrc_srqn(self, remote_srqn: int) -> None:
        """``ibv_wr_set_xrc_srqn``: the XRC SRQ at the target the last work request is for (XRC_SEND QPs only).

        :raises VerbsError: ``EOPNOTSUPP`` on a QP of another type.
        """
        call = "ibv_wr_set_xrc_srqn"
        self._check_open(call)
        self._ex.wr_set_xrc_srqn(c_integer(remote_srqn, "uint32_t", "remote_srqn", call))

    def wr_complete(self) -> None:
        """``ibv_wr_complete``: post the batch, or nothing when one of its work requests cannot be posted.

        :raises VerbsError: that work request's errno (``ENOMEM`` for a full send queue, ...).
        """
        call = "ibv_wr_complete"
        self._check_open(call)
        batch = self._ex.batch
        if self.qp.state is QpState.RTS and self.qp.remote is None and self.qp_type is not QpType.UD:
            raise ProtocolError(f"{call}: QP {self.qp_num} is connected to no QP of this testbed")
        self._ex.wr_complete()
        posted = self.context.testbed._posted[(self.context.lid, self.qp_num)]
        for wr in batch:
            posted.append((bool(wr.send_flags & SendFlags.SIGNALED) or self.qp.sq_sig_all, wr.message_bytes))

    def wr_abort(self) -> None:
        """``ibv_wr_abort``."""
        self._check_open("ibv_wr_abort")
        self._ex.wr_abort()
