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

The calls take the verbs layer's objects (:mod:`models.verbs.verbs` imports this module, so it names them only in
annotations). A receive slot is free again when its completion reaches the CQ (mlx5 moves the queue's tail as it
polls the completion; the model has no separate poll of the slot), as the send queue's slots are.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from models.nic.wqe import QpState, RecvWR
from sim.core import VerbsError

DATA_SEG_BYTES = 16
"""``struct mlx5_wqe_data_seg``: one scatter entry of a receive WQE."""
SRQ_NEXT_SEG_BYTES = 16
"""``struct mlx5_wqe_srq_next_seg`` at the head of every SRQ WQE."""
SEND_WQE_BB = 64
"""``MLX5_SEND_WQE_BB``: the smallest receive queue buffer mlx5 allocates (bytes)."""


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def rq_geometry(max_recv_wr: int, max_recv_sge: int) -> tuple[int, int]:
    """``(depth, max_sge)`` of the receive queue mlx5 builds for ``cap.max_recv_wr`` and ``cap.max_recv_sge``
    (``mlx5_calc_rq_size``): WQEs of a power of two of 16-byte scatter entries, a power-of-two count of them, at
    least one 64-byte block; ``(0, 0)`` without receives."""
    if max_recv_wr == 0:
        return 0, 0
    wqe = _pow2_at_least(DATA_SEG_BYTES * max(max_recv_sge, 1))
    return max(_pow2_at_least(max_recv_wr) * wqe, SEND_WQE_BB) // wqe, wqe // DATA_SEG_BYTES


def check_rq_caps(max_recv_wr: int, max_recv_sge: int, max_wr: int, max_sge: int, call: str) -> None:
    """``mlx5_get_max_recv_wr`` and ``mlx5_calc_rcv_wqe``: a deeper or wider receive queue than the device's
    ``max_qp_wr``/``max_sge`` is EINVAL."""
    if not 0 <= max_recv_wr <= max_wr:
        raise VerbsError("EINVAL", f"max_recv_wr {max_recv_wr} outside 0..{max_wr} (device max_qp_wr)", call=call)
    if not 0 <= max_recv_sge <= max_sge:
        raise VerbsError("EINVAL", f"max_recv_sge {max_recv_sge} outside 0..{max_sge} (device max_sge)", call=call)


class ReceiveQueue:
    """Receives posted and not yet consumed, oldest first; ``depth`` slots, each held until its completion is
    delivered."""

    def __init__(self, depth: int, max_sge: int, wqe_bytes: int | None = None) -> None:
        self.depth, self.max_sge = depth, max_sge
        self.wqe_bytes = DATA_SEG_BYTES * max(max_sge, 1) if wqe_bytes is None else wqe_bytes
        """One receive WQE's size in the queue's buffer (what the NIC fetches per receive, bytes)."""
        self.posted: deque[RecvWR] = deque()
        self.held = 0
        """Slots in use: posted, or consumed with the completion not yet delivered."""
        self.consumed = 0
        """Receives the NIC has taken."""

    def check_post(self, wr: RecvWR, call: str, *, full_first: bool) -> None:
        """Refuse a post: ENOMEM when every slot is held, EINVAL for more scatter entries than ``max_sge``, in the
        order the driver checks them (``full_first``: mlx5_post_recv; else mlx5_post_srq_recv).

        :raises VerbsError: as above.
        """
        checks = [self._full, self._too_wide] if full_first else [self._too_wide, self._full]
        for check in checks:
            check(wr, call)

    def _full(self, wr: RecvWR, call: str) -> None:
        if self.held >= self.depth:
            raise VerbsError("ENOMEM", f"receive queue full ({self.depth} receives outstanding)", call=call)

    def _too_wide(self, wr: RecvWR, call: str) -> None:
        if len(wr.sg_list) > self.max_sge:
            raise VerbsError("EINVAL", f"num_sge {len(wr.sg_list)} exceeds the queue's max_sge {self.max_sge}",
                             call=call)

    def add(self, wr: RecvWR) -> None:
        """A checked receive joins the queue."""
        self.posted.append(wr)
        self.held += 1

    def peek(self) -> RecvWR | None:
        """The receive the next incoming message would consume (None: none posted)."""
        return self.posted[0] if self.posted else None

    def take(self) -> RecvWR:
        """The NIC consumes the oldest receive."""
        self.consumed += 1
        return self.posted.popleft()

    def delivered(self) -> None:
        """A consumed (or flushed) receive's completion reached the CQ: its slot is free."""
        self.held -= 1

    def flush(self) -> list[RecvWR]:
        """Every receive still posted, taken out (the QP moved to the error state): their completions follow."""
        out = list(self.posted)
        self.posted.clear()
        return out

    def reset(self) -> None:
        """Empty the queue without completions (the QP moved to RESET)."""
        self.posted.clear()
        self.held = 0


class AsyncEventType(enum.IntEnum):
    """``enum ibv_event_type`` (libibverbs/verbs.h), the events the model raises."""

    QP_FATAL = 1
    SRQ_LIMIT_REACHED = 14


@dataclass(frozen=True)
class AsyncEvent:
    """``struct ibv_async_event``: what happened, to which object, when (ps)."""

    event_type: AsyncEventType
    element: object
    time_ps: int


@dataclass(eq=False)
class SharedReceiveQueue(ReceiveQueue):
    """``struct ibv_srq``: receives shared by every QP created on it; an armed ``srq_limit`` raises
    IBV_EVENT_SRQ_LIMIT_REACHED once when the receives left drop below it, then disarms (``srq_limit`` 0)."""

    pd: ProtectionDomain
    max_wr: int
    max_sge: int
    handle: int
    srq_limit: int = 0
    qps: list = field(default_factory=list)
    """The QPs created on it."""

    def __post_init__(self) -> None:
        wqe = _pow2_at_least(max(32, SRQ_NEXT_SEG_BYTES + self.max_sge * DATA_SEG_BYTES))
        ReceiveQueue.__init__(self, self.max_wr, self.max_sge, wqe)

    def take(self) -> RecvWR:
        wr = super().take()
        if self.srq_limit and len(self.posted) < self.srq_limit:
            self.srq_limit = 0
            context = self.pd.context
            context.async_events.append(AsyncEvent(AsyncEventType.SRQ_LIMIT_REACHED, self, context.env.now))
        return wr


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
    call = "ibv_create_srq"
    dev = pd.context.node.nic.params.device
    if dev.max_srq == 0:
        raise VerbsError("EOPNOTSUPP", "the device has no shared receive queues (max_srq 0)", call=call)
    if not 1 <= attr.max_wr <= dev.max_srq_wr:
        raise VerbsError("EINVAL", f"max_wr {attr.max_wr} outside 1..{dev.max_srq_wr} (device max_srq_wr)", call=call)
    if not 0 <= attr.max_sge <= dev.max_srq_sge:
        raise VerbsError("EINVAL", f"max_sge {attr.max_sge} outside 0..{dev.max_srq_sge} (device max_srq_sge)",
                         call=call)
    wqe = _pow2_at_least(max(32, SRQ_NEXT_SEG_BYTES + attr.max_sge * DATA_SEG_BYTES))
    depth = _pow2_at_least(attr.max_wr + 1) - 1
    return SharedReceiveQueue(pd, depth, (wqe - SRQ_NEXT_SEG_BYTES) // DATA_SEG_BYTES, pd.context.node.nic.new_handle())



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
    if qp.state is QpState.ERR:
        qp.flush_receives()


def ibv_get_async_event(context: Context) -> AsyncEvent:
    """The oldest asynchronous event not yet read (the async fd opened non-blocking).

    :raises VerbsError: ``EAGAIN`` when none is pending.
    """
    if not context.async_events:
        raise VerbsError("EAGAIN", "no asynchronous event pending", call="ibv_get_async_event")
    return context.async_events.popleft()
