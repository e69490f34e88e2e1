"""Extended QPs: ``ibv_create_qp_ex`` with ``send_ops_flags`` and the work-request builder of ``struct ibv_qp_ex``
(``ibv_wr_start``, the ``ibv_wr_*`` opcodes and setters, ``ibv_wr_complete``, ``ibv_wr_abort``), as the providers
of the modelled devices implement them.

Read in rdma-core (libibverbs/verbs.h ``enum ibv_qp_create_send_ops_flags``; providers/mlx5/qp.c
``mlx5_qp_fill_wr_pfns``, ``MLX5_SUPPORTED_SEND_OPS_FLAGS_*``, ``mlx5_send_wr_start``, ``mlx5_send_wr_complete``,
``mlx5_send_wr_abort``, ``_common_wqe_init_op``; providers/efa/verbs.c ``efa_check_qp_attr``,
``efa_qp_fill_wr_pfns``):

* mlx5 refuses ``send_ops_flags`` beyond what the QP type supports, and the atomics on a device without them
  (EOPNOTSUPP); it then sets every builder the type supports, whatever was asked. EFA refuses flags beyond SEND and
  SEND_WITH_IMM (UD) or those plus the RDMA READ and WRITE its device has (SRD, the model's RC), and sets only the
  builders asked for. No provider of the modelled devices supports ``IBV_QP_EX_WITH_FLUSH`` or
  ``IBV_QP_EX_WITH_ATOMIC_WRITE`` (only rxe does): asking for them is EOPNOTSUPP.
* ``wr_start`` opens a batch; each ``wr_*`` opcode adds a work request with the builder's ``wr_id`` and ``wr_flags``
  and the setters fill its last one in; a send queue that would overflow or a gather list too long is remembered and
  ``wr_complete`` then returns that errno and posts none of the batch (mlx5 rolls ``cur_post`` back); otherwise it
  rings one doorbell for them all. ``wr_abort`` drops the batch.
"""

from __future__ import annotations

import enum

from models.ib.mr_checks import EFA_VENDOR_ID
from models.nic.device import AtomicCap
from models.nic.memory_window import MwBind, MwBindInfo
from models.nic.work_request import inline_payload
from models.nic.wqe import SEND_INLINE, Access, Opcode, SendWR, Sge
from models.verbs.ah import datagram_destination
from models.verbs.device import ProtectionDomain
from models.verbs.qp import QueuePair, ibv_create_qp, ibv_post_send
from models.verbs.qp_state import QpType
from models.verbs.send_checks import check_send_wr
from sim.core import ProtocolError, VerbsError


class SendOps(enum.IntFlag):
    """``enum ibv_qp_create_send_ops_flags`` (libibverbs/verbs.h)."""

    RDMA_WRITE = 1 << 0
    RDMA_WRITE_WITH_IMM = 1 << 1
    SEND = 1 << 2
    SEND_WITH_IMM = 1 << 3
    RDMA_READ = 1 << 4
    ATOMIC_CMP_AND_SWP = 1 << 5
    ATOMIC_FETCH_AND_ADD = 1 << 6
    LOCAL_INV = 1 << 7
    BIND_MW = 1 << 8
    SEND_WITH_INV = 1 << 9
    TSO = 1 << 10
    FLUSH = 1 << 11
    ATOMIC_WRITE = 1 << 12


class QpInitAttrMask(enum.IntFlag):
    """``enum ibv_qp_init_attr_mask`` (libibverbs/verbs.h): the fields of ``struct ibv_qp_init_attr_ex`` that are
    set."""

    PD = 1 << 0
    XRCD = 1 << 1
    CREATE_FLAGS = 1 << 2
    MAX_TSO_HEADER = 1 << 3
    IND_TABLE = 1 << 4
    RX_HASH = 1 << 5
    SEND_OPS_FLAGS = 1 << 6


OPCODE_OP = {op: SendOps[op.name] for op in Opcode}
"""The ``IBV_QP_EX_WITH_*`` flag of each opcode the model has (they share their names)."""

_MLX5_RC = (SendOps.SEND | SendOps.SEND_WITH_INV | SendOps.SEND_WITH_IMM | SendOps.RDMA_WRITE
            | SendOps.RDMA_WRITE_WITH_IMM | SendOps.RDMA_READ | SendOps.ATOMIC_CMP_AND_SWP
            | SendOps.ATOMIC_FETCH_AND_ADD | SendOps.LOCAL_INV | SendOps.BIND_MW)
MLX5_SUPPORTED_SEND_OPS = {
    QpType.RC: _MLX5_RC,
    QpType.UC: (SendOps.SEND | SendOps.SEND_WITH_INV | SendOps.SEND_WITH_IMM | SendOps.RDMA_WRITE
                | SendOps.RDMA_WRITE_WITH_IMM | SendOps.LOCAL_INV | SendOps.BIND_MW),
    QpType.UD: SendOps.SEND | SendOps.SEND_WITH_IMM,
    QpType.XRC_SEND: _MLX5_RC}
"""``MLX5_SUPPORTED_SEND_OPS_FLAGS_RC``, ``_UC``, ``_UD``, ``_XRC`` (which is ``_RC``) (providers/mlx5/qp.c); a type
absent here (an XRC target) has no builder (``mlx5_qp_fill_wr_pfns``' default: EOPNOTSUPP)."""
_ATOMICS = SendOps.ATOMIC_CMP_AND_SWP | SendOps.ATOMIC_FETCH_AND_ADD


def mlx5_qp_fill_wr_pfns(nic_params, qp_type: QpType, send_ops_flags: int) -> SendOps:
    """mlx5's checks of ``send_ops_flags`` and the builders it sets: every one ``qp_type`` supports.

    :raises VerbsError: ``EOPNOTSUPP`` for an atomic on a device whose ``atomic_cap`` is ``IBV_ATOMIC_NONE``
        (``atomics_enabled`` unset), a flag the QP type does not support, or a type without builders.
    """
    call = "ibv_create_qp_ex"
    if send_ops_flags & _ATOMICS and nic_params.device.atomic_cap is AtomicCap.ATOMIC_NONE:
        raise VerbsError("EOPNOTSUPP", "atomic send ops on a device without atomics (mlx5_qp_fill_wr_pfns)", call=call)
    supported = MLX5_SUPPORTED_SEND_OPS.get(qp_type)
    if supported is None:
        raise VerbsError("EOPNOTSUPP", f"a {qp_type.name} QP has no work-request builder (mlx5_qp_fill_wr_pfns)",
                         call=call)
    _refuse_beyond(send_ops_flags, supported, qp_type, "mlx5_qp_fill_wr_pfns")
    return supported


def efa_check_qp_attr(nic_params, qp_type: QpType, send_ops_flags: int) -> SendOps:
    """EFA's checks of ``send_ops_flags`` (UD: SEND, SEND_WITH_IMM; SRD, the model's RC: those and the RDMA READ
    and WRITE the device's capabilities allow) and the builders it sets: only those asked for
    (``efa_qp_fill_wr_pfns``).

    :raises VerbsError: ``EOPNOTSUPP`` for a flag beyond those.
    """
    supported = SendOps.SEND | SendOps.SEND_WITH_IMM
    if qp_type is QpType.RC:
        if nic_params.remote_access & Access.REMOTE_READ:
            supported |= SendOps.RDMA_READ
        if nic_params.remote_access & Access.REMOTE_WRITE:
            supported |= SendOps.RDMA_WRITE | SendOps.RDMA_WRITE_WITH_IMM
    _refuse_beyond(send_ops_flags, supported, qp_type, "efa_check_qp_attr")
    return SendOps(send_ops_flags)


def _refuse_beyond(send_ops_flags: int, supported: SendOps, qp_type: QpType, where: str) -> None:
    """:raises VerbsError: ``EOPNOTSUPP`` naming the flags beyond ``supported``."""
    beyond = send_ops_flags & ~supported
    if beyond:
        names = "|".join(f"IBV_QP_EX_WITH_{op.name}" for op in SendOps if op & beyond) or hex(beyond)
        raise VerbsError("EOPNOTSUPP", f"send_ops_flags {names} on a {qp_type.name} QP of this device ({where})",
                         call="ibv_create_qp_ex")


def ibv_create_qp_ex(pd: ProtectionDomain, send_cq, max_send_wr: int, send_ops_flags: int,
                     qp_type: QpType = QpType.RC, **caps) -> QpEx:
    """Create a QP as :func:`~models.verbs.qp.ibv_create_qp` does (``caps``: its keyword arguments) with
    ``IBV_QP_INIT_ATTR_SEND_OPS_FLAGS``: the provider's checks of ``send_ops_flags`` first, and the work-request
    builder it sets (:class:`QpEx`).

    :raises VerbsError: those of :func:`mlx5_qp_fill_wr_pfns` or :func:`efa_check_qp_attr`, and of
        :func:`~models.verbs.qp.ibv_create_qp`.
    """
    params = pd.context.node.nic.params
    fill = efa_check_qp_attr if params.device.vendor_id == EFA_VENDOR_ID else mlx5_qp_fill_wr_pfns
    builders = fill(params, QpType(qp_type), send_ops_flags)
    return QpEx(ibv_create_qp(pd, send_cq, max_send_wr, qp_type=qp_type, **caps), builders)


class QpEx:
    """``struct ibv_qp_ex``'s work-request builder over ``qp`` (``builders``: the ``wr_*`` opcodes its provider
    set). ``wr_id`` and ``wr_flags`` (``IBV_SEND_*``) go with each work request built after they are set."""

    def __init__(self, qp: QueuePair, builders: SendOps) -> None:
        self.qp, self.builders = qp, builders
        self.wr_id = 0
        self.wr_flags = 0
        self._batch: list[SendWR] | None = None

    @property
    def batch(self) -> list[SendWR]:
        """The work requests built since ``wr_start`` (none when no batch is open)."""
        return list(self._batch or ())

    def wr_start(self) -> None:
        """``ibv_wr_start``: open a batch (mlx5 takes the send queue's lock until ``wr_complete`` or ``wr_abort``).

        :raises ProtocolError: a batch is already open (the lock is held: C would deadlock).
        """
        if self._batch is not None:
            raise ProtocolError("ibv_wr_start: a batch is open; wr_complete or wr_abort it first (mlx5 holds the "
                                "send queue's lock)")
        self._batch = []

    def wr(self, opcode: Opcode, rkey: int = 0, remote_addr: int = 0, **fields) -> SendWR:
        """Add a work request of ``opcode`` to the batch (``ibv_wr_send``, ``ibv_wr_rdma_write``, ...; ``fields``:
        ``imm_data``, ``compare_add``, ``swap``, ``bind_mw`` as :class:`~models.nic.wqe.SendWR` has them).

        :raises ProtocolError: no batch is open.
        :raises VerbsError: ``EOPNOTSUPP`` for an opcode whose builder the provider did not set (C calls a NULL
            pointer).
        """
        call = f"ibv_wr_{opcode.name.lower()}"
        if self._batch is None:
            raise ProtocolError(f"{call}: no batch is open (ibv_wr_start first)")
        if not self.builders & OPCODE_OP[opcode]:
            raise VerbsError("EOPNOTSUPP", f"the provider set no builder for IBV_WR_{opcode.name} on this "
                             f"{self.qp.qp_type.name} QP", call=call)
        wr = SendWR(self.wr_id, opcode, 0, 0, 0, remote_addr, rkey, send_flags=self.wr_flags, **fields)
        self._batch.append(wr)
        return wr

    def wr_bind_mw(self, mw, rkey: int, info: MwBindInfo) -> SendWR:
        """``ibv_wr_bind_mw``: bind ``mw`` with the new ``rkey`` as ``info`` says."""
        return self.wr(Opcode.BIND_MW, bind_mw=MwBind(mw, rkey, info))

    def wr_set_sge(self, lkey: int, addr: int, length: int) -> None:
        """``ibv_wr_set_sge``: the last work request's one SGE."""
        wr = self._last("ibv_wr_set_sge")
        wr.local_addr, wr.length, wr.lkey, wr.sg_list = addr, length, lkey, None

    def wr_set_sge_list(self, sges: tuple[Sge, ...]) -> None:
        """``ibv_wr_set_sge_list``: the last work request's gather (or scatter) list."""
        wr = self._last("ibv_wr_set_sge_list")
        first = sges[0] if sges else Sge(0, 0, 0)
        wr.local_addr, wr.length, wr.lkey = first.addr, first.length, first.lkey
        wr.sg_list = tuple(sges) if len(sges) != 1 else None

    def wr_set_inline_data_list(self, bufs: tuple[tuple[int, int], ...]) -> None:
        """``ibv_wr_set_inline_data_list`` (``ibv_wr_set_inline_data`` for one buffer): the last work request
        carries the bytes at each ``(addr, length)`` of the process's memory inline, copied into the WQE now
        (mlx5's ``mlx5_send_wr_set_inline_data_list`` memcpys at this call; more than the QP's
        ``max_inline_data`` is ENOMEM at ``wr_complete``).

        :raises ProtocolError: a buffer is not the process's memory (the copy would fault).
        """
        wr = self._last("ibv_wr_set_inline_data_list")
        sges = [Sge(addr, length, 0) for addr, length in bufs if length]
        if self.qp.pd.context.env.data_mode:
            wr.inline_data = inline_payload(self.qp.node.host, sges)
        # the WQE holds one inline segment of all the bytes: no gather list, no SGE limit
        self.wr_set_sge(0, sges[0].addr if sges else 0, sum(sge.length for sge in sges))
        wr.send_flags |= SEND_INLINE

    def wr_set_ud_addr(self, ah, remote_qpn: int, remote_qkey: int) -> None:
        """``ibv_wr_set_ud_addr``: the last UD work request's destination."""
        wr = self._last("ibv_wr_set_ud_addr")
        wr.ah, wr.remote_qpn, wr.remote_qkey = ah, remote_qpn, remote_qkey

    def wr_set_xrc_srqn(self, remote_srqn: int) -> None:
        """``ibv_wr_set_xrc_srqn``: the XRC SRQ at the target the last work request is for (mlx5 sets this setter
        on XRC_SEND QPs only: ``mlx5_send_wr_set_xrc_srqn``).

        :raises VerbsError: ``EOPNOTSUPP`` on a QP of another type (C calls a NULL pointer).
        """
        call = "ibv_wr_set_xrc_srqn"
        if self.qp.qp_type is not QpType.XRC_SEND:
            raise VerbsError("EOPNOTSUPP", f"the provider set no wr_set_xrc_srqn on this {self.qp.qp_type.name} QP",
                             call=call)
        self._last(call).remote_srqn = remote_srqn

    def _last(self, call: str) -> SendWR:
        """:raises ProtocolError: no work request was built in the open batch."""
        if not self._batch:
            raise ProtocolError(f"{call}: no work request built since ibv_wr_start")
        return self._batch[-1]

    def wr_complete(self) -> None:
        """``ibv_wr_complete``: post the batch with one doorbell, or, when one of its work requests cannot be
        posted (a full send queue, too many SGEs, too much inline data: :func:`~models.verbs.send_checks.check_send_wr`
        with the batch's earlier ones counted), none of them.

        :raises VerbsError: that work request's errno (mlx5 returns it and rolls the batch back).
        :raises ProtocolError: no batch is open.
        """
        batch, self._batch = self._batch, None
        if batch is None:
            raise ProtocolError("ibv_wr_complete: no batch is open (ibv_wr_start first)")
        for ahead, wr in enumerate(batch):
            check_send_wr(self.qp, wr, ahead)
            if self.qp.qp_type is QpType.UD:
                datagram_destination(self.qp, wr)
        if batch:
            ibv_post_send(self.qp, batch)

    def wr_abort(self) -> None:
        """``ibv_wr_abort``: drop the batch, posting nothing.

        :raises ProtocolError: no batch is open.
        """
        if self._batch is None:
            raise ProtocolError("ibv_wr_abort: no batch is open (ibv_wr_start first)")
        self._batch = None
