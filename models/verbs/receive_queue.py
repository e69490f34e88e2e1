"""Receive queues as mlx5 builds them: a QP's own receive queue and a shared receive queue (SRQ), their depth and
scatter entries, the slots their receives hold, and the SRQ limit's asynchronous event.

Read in rdma-core's providers/mlx5 at linux-rdma/rdma-core 691953d8d: ``mlx5_calc_rq_size``/``mlx5_calc_rcv_wqe``
(verbs.c: the depth and scatter entries a receive queue really gets), ``mlx5_post_recv`` and ``mlx5_post_srq_recv``
(the order of their ENOMEM and EINVAL checks). A receive slot is free again when its completion reaches the CQ (mlx5
moves the queue's tail as it polls the completion; the model has no separate poll of the slot), as the send queue's
slots are. The verbs that post to these queues are in :mod:`models.verbs.recv`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from models.nic.wqe import RecvWR
from models.verbs.send_checks import check_c_widths
from sim.core import VerbsError

DATA_SEG_BYTES = 16
"""``struct mlx5_wqe_data_seg``: one scatter entry of a receive WQE."""
SRQ_NEXT_SEG_BYTES = 16
"""``struct mlx5_wqe_srq_next_seg`` at the head of every SRQ WQE."""
SEND_WQE_BB = 64
"""``MLX5_SEND_WQE_BB``: the smallest receive queue buffer mlx5 allocates (bytes)."""


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def srq_geometry(max_wr: int, max_sge: int) -> tuple[int, int]:
    """``(depth, max_sge)`` of the SRQ mlx5 builds for ``max_wr`` and ``max_sge`` (``mlx5_alloc_srq_buf``): WQEs of
    a power of two of at least 32 bytes holding the next-segment header and the scatter entries, a power of two
    of them with one kept back."""
    wqe = _srq_wqe_bytes(max_sge)
    return _pow2_at_least(max_wr + 1) - 1, (wqe - SRQ_NEXT_SEG_BYTES) // DATA_SEG_BYTES


def _srq_wqe_bytes(max_sge: int) -> int:
    return _pow2_at_least(max(32, SRQ_NEXT_SEG_BYTES + max_sge * DATA_SEG_BYTES))


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
    polled (mlx5 advances the receive queue's tail in ``ibv_poll_cq``)."""

    cq = None
    """The CQ its receives complete in when the queue names one (an XRC SRQ's); None: the receiving QP's."""

    def __init__(self, depth: int, max_sge: int, wqe_bytes: int | None = None) -> None:
        self.depth, self.max_sge = depth, max_sge
        self.wqe_bytes = DATA_SEG_BYTES * max(max_sge, 1) if wqe_bytes is None else wqe_bytes
        """One receive WQE's size in the queue's buffer (what the NIC fetches per receive, bytes)."""
        self.posted: deque[RecvWR] = deque()
        self.held = 0
        """Slots in use: posted, or consumed with the completion not yet polled."""
        self.resets = 0
        """Times the queue was emptied by a reset (a completion of a receive from before one frees no slot)."""
        self.consumed = 0
        """Receives the NIC has taken."""

    def check_post(self, wr: RecvWR, call: str, *, full_first: bool) -> None:
        """Refuse a post: ENOMEM when every slot is held, EINVAL for more scatter entries than ``max_sge``, in the
        order the driver checks them (``full_first``: mlx5_post_recv; else mlx5_post_srq_recv).

        :raises VerbsError: as above; EINVAL first for a ``wr_id`` or an SGE that does not fit its C type
            (:func:`~models.verbs.send_checks.check_c_widths`).
        """
        check_c_widths(wr.wr_id, wr.sg_list, call)
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

    def release_at_poll(self) -> Callable[[], None]:
        """What frees the slot of a receive consumed (or flushed) now, called when its completion is polled or
        cleaned from its CQ; a reset of the queue in between has freed it already."""
        resets = self.resets

        def release() -> None:
            if self.resets == resets:
                self.held -= 1
        return release

    def flush(self) -> list[RecvWR]:
        """Every receive still posted, taken out (the QP moved to the error state): their completions follow."""
        out = list(self.posted)
        self.posted.clear()
        return out

    def reset(self) -> None:
        """Empty the queue without completions (the QP moved to RESET)."""
        self.posted.clear()
        self.held = 0
        self.resets += 1


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

    pd: object
    """The :class:`~models.verbs.device.ProtectionDomain` it was created on."""
    max_wr: int
    max_sge: int
    handle: int
    srq_limit: int = 0
    qps: list = field(default_factory=list)
    """The QPs created on it and not destroyed: the kernel's ``srq->usecnt``."""
    destroyed: bool = False
    cq: object = None
    """XRC SRQ: the CQ its receives complete in (``ibv_srq_init_attr_ex.cq``), whichever target QP took them."""
    xrcd: object = None
    """XRC SRQ: the :class:`~models.verbs.xrc.Xrcd` it was created through (None: a basic SRQ)."""

    def __post_init__(self) -> None:
        ReceiveQueue.__init__(self, self.max_wr, self.max_sge, _srq_wqe_bytes(self.max_sge))

    def take(self) -> RecvWR:
        wr = super().take()
        if self.srq_limit and len(self.posted) < self.srq_limit:
            self.srq_limit = 0
            context = self.pd.context
            context.async_events.append(AsyncEvent(AsyncEventType.SRQ_LIMIT_REACHED, self, context.env.now))
        return wr
