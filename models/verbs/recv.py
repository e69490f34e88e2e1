"""Receive queues: a QP's own receive queue and shared receive queues (SRQs), with ``ibv_post_recv``,
``ibv_create_srq``, ``ibv_post_srq_recv``, ``ibv_modify_srq``, ``ibv_query_srq`` and the SRQ limit's asynchronous
event (``ibv_get_async_event``).

Read for it: rdma-core's man pages ibv_post_recv(3), ibv_create_srq(3), ibv_modify_srq(3) and ibv_get_async_event(3);
providers/mlx5 at linux-rdma/rdma-core 691953d8d: ``mlx5_post_recv`` (qp.c: ENOMEM when ``mlx5_wq_overflow``, EINVAL
when ``num_sge`` exceeds ``qp_state_max_gs``, which is -1 in RESET, so every post there is refused),
``mlx5_calc_rq_size``/``mlx5_calc_rcv_wqe`` (verbs.c: the depth and scatter entries a receive queue really gets),
``mlx5_create_srq`` and ``mlx5_alloc_srq_buf`` (max_wr beyond the device's ``max_srq_wr`` or max_sge beyond its
descriptor size: EINVAL), ``mlx5_post_srq_recv`` (srq.c); the kernel's ``mlx5_ib_modify_srq`` (resizing refused with
EINVAL, a limit at or above the SRQ's size EINVAL); rdma-core's tests/test_srq.py (``test_modify_srq_limit``: 10
receives, limit 7, four SENDs, then IBV_EVENT_SRQ_LIMIT_REACHED).

The queues themselves (their geometry, slots and the SRQ limit's event) are :mod:`models.verbs.receive_queue`.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.nic.wqe import QpState, RecvWR
from models.verbs.receive_queue import AsyncEvent, SharedReceiveQueue, srq_geometry
from models.verbs.device import Context, ProtectionDomain
from models.verbs.qp import QueuePair
from sim.core import VerbsError

SRQ_MAX_WR, SRQ_LIMIT = 1 << 0, 1 << 1
"""``enum ibv_srq_attr_mask``."""


@dataclass(frozen=True)
class SrqAttr:
    """``struct ibv_srq_attr``."""

    max_wr: int = 0
    max_sge: int = 0
    srq_limit: int = 0


def ibv_create_srq(pd: ProtectionDomain, attr: SrqAttr) -> SharedReceiveQueue:
    """Create an SRQ of at least ``attr.max_wr`` receives of ``attr.max_sge`` scatter entries (``srq_limit`` is
    ignored, as the man page says); the SRQ's ``max_wr`` and ``max_sge`` are what mlx5 allocates
    (``mlx5_alloc_srq_buf`` without its wait queue: a power of two of WQEs, one kept back as the free list's tail;
    WQEs a power of two of bytes).

    :raises VerbsError: ``EOPNOTSUPP`` on a device without SRQs (``max_srq`` 0: libibverbs has no create_srq
        op to call); ``EINVAL`` for max_wr 0 or beyond the device's ``max_srq_wr``, or max_sge beyond its
        ``max_srq_sge``.
    """
    check_srq_caps(pd.context.node.nic.params.device, attr, "ibv_create_srq")
    depth, max_sge = srq_geometry(attr.max_wr, attr.max_sge)
    pd.usecnt += 1  # ib_create_srq_user: atomic_inc(&pd->usecnt)
    return SharedReceiveQueue(pd, depth, max_sge, pd.context.node.nic.new_handle())



def check_srq_caps(dev, attr: SrqAttr, call: str) -> None:
    """``mlx5_create_srq`` and ``mlx5_create_srq_ex``'s checks of an SRQ's size on device ``dev``
    (:class:`~models.nic.device.DeviceAttrs`).

    :raises VerbsError: ``EOPNOTSUPP`` on a device without SRQs (``max_srq`` 0: libibverbs has no create_srq op
        to call); ``EINVAL`` for max_wr 0 or beyond the device's ``max_srq_wr``, or max_sge beyond its
        ``max_srq_sge``.
    """
    if dev.max_srq == 0:
        raise VerbsError("EOPNOTSUPP", "the device has no shared receive queues (max_srq 0)", call=call)
    if not 1 <= attr.max_wr <= dev.max_srq_wr:
        raise VerbsError("EINVAL", f"max_wr {attr.max_wr} outside 1..{dev.max_srq_wr} (device max_srq_wr)", call=call)
    if not 0 <= attr.max_sge <= dev.max_srq_sge:
        raise VerbsError("EINVAL", f"max_sge {attr.max_sge} outside 0..{dev.max_srq_sge} (device max_srq_sge)",
                         call=call)


def ibv_modify_srq(srq: SharedReceiveQueue, attr: SrqAttr, attr_mask: int) -> None:
    """Arm the SRQ's limit (``IBV_SRQ_LIMIT``); nothing changes on error.

    :raises VerbsError: ``EINVAL`` for ``IBV_SRQ_MAX_WR`` (mlx5 cannot resize an SRQ), unknown mask bits, or a
        limit not below the SRQ's ``max_wr`` (``mlx5_ib_modify_srq``).
    """
    call = "ibv_modify_srq"
    if attr_mask & ~(SRQ_MAX_WR | SRQ_LIMIT):
        raise VerbsError("EINVAL", f"attr_mask {attr_mask:#x} has bits outside enum ibv_srq_attr_mask", call=call)
    if attr_mask & SRQ_MAX_WR:
        raise VerbsError("EINVAL", "IBV_SRQ_MAX_WR: mlx5 does not resize SRQs (no IBV_DEVICE_SRQ_RESIZE)", call=call)
    if attr_mask & SRQ_LIMIT:
        if not 0 <= attr.srq_limit < srq.max_wr:
            raise VerbsError("EINVAL", f"srq_limit {attr.srq_limit} must be below max_wr {srq.max_wr}", call=call)
        srq.srq_limit = attr.srq_limit


def ibv_query_srq(srq: SharedReceiveQueue) -> SrqAttr:
    """The SRQ's ``max_wr``, ``max_sge`` and armed ``srq_limit`` (0 once the limit event fired)."""
    return SrqAttr(srq.max_wr, srq.max_sge, srq.srq_limit)


def ibv_post_srq_recv(srq: SharedReceiveQueue, wr: RecvWR) -> None:
    """Post a receive to the SRQ: any QP on it may consume it.

    :raises VerbsError: ``EINVAL`` for more scatter entries than the SRQ's max_sge; ``ENOMEM`` when it is full
        (``mlx5_post_srq_recv``).
    """
    srq.check_post(wr, "ibv_post_srq_recv", full_first=False)
    srq.add(wr)


def ibv_post_recv(qp: QueuePair, wr: RecvWR) -> None:
    """Post a receive to the QP's own receive queue. In the error state it completes at once with
    IBV_WC_WR_FLUSH_ERR (the hardware flushes the queue).

    :raises VerbsError: ``EINVAL`` in RESET (mlx5's ``qp_state_max_gs`` is -1 there), for more scatter entries
        than the queue's max_sge, or on a QP created on an SRQ (post to the SRQ); ``ENOMEM`` when the queue is full.
    """
    call = "ibv_post_recv"
    if qp.srq is not None:
        raise VerbsError("EINVAL", "the QP receives from an SRQ: post with ibv_post_srq_recv", call=call)
    rq = qp.rq
    if qp.state is QpState.RESET:
        raise VerbsError("EINVAL", "QP is in RESET: receives can be posted from INIT on", call=call)
    rq.check_post(wr, call, full_first=True)
    rq.add(wr)
    if qp.state is QpState.ERR and not qp.error_completing:  # (else it flushes after the error completion)
        qp.flush_receives()


def ibv_get_async_event(context: Context) -> AsyncEvent:
    """The oldest asynchronous event not yet read (the async fd opened non-blocking).

    :raises VerbsError: ``EAGAIN`` when none is pending.
    """
    if not context.async_events:
        raise VerbsError("EAGAIN", "no asynchronous event pending", call="ibv_get_async_event")
    return context.async_events.popleft()
