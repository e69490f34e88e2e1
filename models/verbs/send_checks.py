"""The checks ``ibv_post_send`` and ``ibv_create_qp`` make of a work request's shape and a send queue's caps on
an mlx5 device, with its errno values.

Read in rdma-core's providers/mlx5 (linux-rdma/rdma-core, qp.c ``_mlx5_post_send`` and ``set_data_inl_seg``,
verbs.c ``mlx5_calc_send_wqe`` and ``mlx5_create_qp``) and libibverbs/man/ibv_post_send.3:

* ``_mlx5_post_send``, per work request in this order: a full send queue (``mlx5_wq_overflow``: ``head - tail``,
  the tail advanced when a send completion is polled, ``mlx5_poll_one`` in cq.c) -> ENOMEM; more
  SGEs than the send queue's ``qp_state_max_gs`` -> ENOMEM ("max gs exceeded"): that is the QP's ``max_send_sge``
  once it has moved to RTS, and -1 from its creation and every move to RESET until then
  (``set_qp_operational_state`` in verbs.c), so a QP that never reached RTS refuses every post with ENOMEM, in
  RESET, INIT, RTR or an ERR reached from those (libmlx5 makes no other state check); an atomic on a QP of a
  device whose ``atomic_cap`` is ``IBV_ATOMIC_NONE`` (``atomics_enabled`` unset by ``mlx5_create_qp``) ->
  EOPNOTSUPP; inline data beyond the QP's ``max_inline_data`` -> ENOMEM (``set_data_inl_seg``).
* An atomic's alignment and its SGE's length are not checked when it is posted: mlx5 writes 8 bytes for the SGE
  whatever its length (``set_data_ptr_seg_atomic``), and a misaligned remote address is the responder's NAK
  (:mod:`models.nic.remote_access`).
* ``mlx5_calc_send_wqe``: ``max_send_sge`` beyond what a WQE gathers -> EINVAL, and an inline size the WQE
  cannot hold -> EINVAL; the model takes the device's ``max_sge`` and the NIC's ``max_inline`` as those limits.
* A field wider than its C type (libibverbs/verbs.h: ``struct ibv_send_wr``'s and ``struct ibv_recv_wr``'s
  ``uint64_t wr_id``, ``struct ibv_sge``'s ``uint64_t addr``, ``uint32_t length`` and ``uint32_t lkey``, the
  ``__be32 imm_data``): a C caller cannot pass one, a Python caller can; the model refuses it with EINVAL before
  any other check (:func:`check_c_widths`; ``imm_data`` after the others, where mlx5 copies it), so no work request
  moves a negative or truncated length.
"""

from __future__ import annotations

from models.ib.mr_checks import U64
from models.nic.device import AtomicCap
from models.nic.wqe import Opcode, QpState, SendWR, Sge
from sim.core import VerbsError
from sim.core.units import format_size


def check_send_wr(qp, wr: SendWR, ahead: int = 0) -> None:
    """The checks of ``_mlx5_post_send`` on ``wr`` posted to ``qp`` (a :class:`~models.verbs.qp.QueuePair`
    able to send), ``ahead`` work requests of the same batch before it (``mlx5_wq_overflow``'s ``nreq``).

    :raises VerbsError: ENOMEM, EOPNOTSUPP or EINVAL as the module says.
    """
    call = "ibv_post_send"
    check_c_widths(wr.wr_id, wr.sges, call)
    if qp.max_send_wr == 0:
        raise VerbsError("ENOMEM", f"the {qp.qp_type.name} QP has no send queue (mlx5: sq.wqe_cnt 0, "
                         "mlx5_wq_overflow)", call=call)
    if qp.sq_used + ahead >= qp.max_send_wr:
        unpolled = qp.sq_used - qp.outstanding
        held = "".join((f", {qp.unsignaled} of them unsignaled and done, waiting for a signaled completion"
                        if qp.unsignaled else "",
                        f", {unpolled} of them completed but not yet polled (a slot is free once its completion is "
                        "polled)" if unpolled else ""))
        raise VerbsError("ENOMEM", f"send queue full ({qp.max_send_wr} work requests outstanding{held})", call=call)
    if qp.sq_state_max_gs < 0:
        raise VerbsError("ENOMEM", f"the QP is in {qp.state.name} and has not been in RTS since it was created or "
                         "reset (mlx5: qp_state_max_gs is -1 until RTS, max gs exceeded)", call=call)
    if wr.num_sge > qp.sq_state_max_gs:
        raise VerbsError("ENOMEM", f"num_sge {wr.num_sge} exceeds the QP's max_send_sge {qp.max_send_sge} "
                         "(mlx5: max gs exceeded)", call=call)
    if wr.opcode.is_atomic and qp.node.nic.params.device.atomic_cap is AtomicCap.ATOMIC_NONE:
        raise VerbsError("EOPNOTSUPP", f"IBV_WR_{wr.opcode.name}: the device's atomic_cap is IBV_ATOMIC_NONE",
                         call=call)
    if wr.is_inline:
        if wr.opcode.reads_remote:
            raise VerbsError("EINVAL", f"IBV_SEND_INLINE on IBV_WR_{wr.opcode.name}: inline data only for sends "
                             "and writes", call=call)
        if wr.message_bytes > qp.max_inline_data:
            raise VerbsError("ENOMEM", f"{wr.message_bytes} B inline exceeds the QP's max_inline_data "
                             f"{qp.max_inline_data}", call=call)
    if not 0 <= wr.imm_data < 2**32:
        raise VerbsError("EINVAL", f"imm_data {wr.imm_data} is not a 32-bit value (__be32)", call=call)
    if wr.opcode is Opcode.BIND_MW:
        check_bind_wr(wr, call)


KLM_MAX_LENGTH = 1 << 31
"""The longest window one KLM entry describes (mlx5 ``set_bind_wr``: "KLM support only 2GB")."""


def check_bind_wr(wr: SendWR, call: str) -> None:
    """What ``_mlx5_post_send`` checks of an ``IBV_WR_BIND_MW`` (``set_bind_wr``; the rules of the bind itself
    the NIC checks as it executes it, :func:`~models.nic.memory_window.rxe_check_bind_mw`).

    :raises VerbsError: ``EINVAL`` without ``bind_mw``; ``EOPNOTSUPP`` for a window longer than 2 GiB.
    """
    if wr.bind_mw is None:
        raise VerbsError("EINVAL", "IBV_WR_BIND_MW without bind_mw (the window and its bind_info)", call=call)
    length = wr.bind_mw.bind_info.length
    if length > KLM_MAX_LENGTH:
        raise VerbsError("EOPNOTSUPP", f"a window of {format_size(length)}: one KLM entry holds at most 2GiB "
                         "(mlx5 set_bind_wr)", call=call)


U32 = 2**32
"""``uint32_t`` holds ``[0, U32)`` (``uint64_t``: ``[0, U64)``)."""


def check_c_widths(wr_id: int, sges: tuple[Sge, ...], call: str) -> None:
    """Refuse a work request whose ``wr_id`` or SGEs do not fit their C types.

    :raises VerbsError: EINVAL naming the field and its type.
    """
    if not 0 <= wr_id < U64:
        raise VerbsError("EINVAL", f"wr_id {wr_id} is not a 64-bit value (uint64_t wr_id)", call=call)
    for sge in sges:
        if not (0 <= sge.addr < U64 and 0 <= sge.length < U32 and 0 <= sge.lkey < U32):
            raise VerbsError("EINVAL", f"SGE (addr {sge.addr}, length {sge.length}, lkey {sge.lkey}) does not fit "
                             "struct ibv_sge (uint64_t addr, uint32_t length, uint32_t lkey)", call=call)


def sq_state_max_gs(qp, new) -> int:
    """The send queue's ``qp_state_max_gs`` after ``qp`` moves to state ``new`` (mlx5's
    ``set_qp_operational_state``): -1 in RESET, the QP's ``max_send_sge`` from RTS on, else unchanged."""
    if new is QpState.RESET:
        return -1
    return qp.max_send_sge if new is QpState.RTS else qp.sq_state_max_gs


def check_send_caps(nic_params, max_send_sge: int, max_inline_data: int) -> None:
    """``mlx5_calc_send_wqe``'s limits on the send queue's caps asked of ``ibv_create_qp``.

    :raises VerbsError: EINVAL for more SGEs than the device's ``max_sge`` or more inline data than a WQE holds.
    """
    call = "ibv_create_qp"
    if not 0 <= max_send_sge <= nic_params.device.max_sge:
        raise VerbsError("EINVAL", f"max_send_sge {max_send_sge} outside 0..{nic_params.device.max_sge} "
                         "(device max_sge)", call=call)
    if not 0 <= max_inline_data <= nic_params.max_inline:
        raise VerbsError("EINVAL", f"max_inline_data {max_inline_data} outside 0..{nic_params.max_inline} "
                         "(what one WQE holds)", call=call)
