"""Completion queues: ``ibv_create_cq``, ``ibv_poll_cq``, and the queue slots a completion frees when it is polled
or cleaned (``mlx5_cq_clean``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import simpy

from models.nic.wqe import WcStatus, WorkCompletion
from models.verbs.device import Context
from sim.core import VerbsError

NUM_COMP_VECTORS = 32
"""``ibv_context.num_comp_vectors``: the completion vectors (EQs) a device offers the process. mlx5 makes one per
online CPU (``mlx5_comp_vectors_max``); 32 stands for a 32-core host, a model assumption, not a measurement."""


@dataclass(eq=False)
class CompletionQueue:
    """``struct ibv_cq`` with a simpy event for processes that wait for the next completion."""

    context: Context
    cqe: int
    entries: deque[WorkCompletion] = field(default_factory=deque)
    _waiter: simpy.Event | None = None
    usecnt: int = 0
    """QPs that use it: the kernel's ``cq->usecnt``; :func:`~models.verbs.destroy.ibv_destroy_cq` refuses while it
    is not 0."""
    cleaned: set[int] = field(default_factory=set)
    """Numbers of destroyed QPs: their completions are dropped (mlx5 cleans them from its CQ,
    ``__mlx5_ib_cq_clean``)."""
    destroyed: bool = False
    delivered: int = 0
    """Completions delivered to it so far (what a progress display counts)."""
    channel: Any = None
    """The :class:`~models.verbs.cq_events.CompChannel` its events go to (None: none)."""
    comp_vector: int = 0
    armed: str | None = None
    """``"any"`` or ``"solicited"`` while armed by ``ibv_req_notify_cq`` (one-shot), else None."""
    events_reported: int = 0
    """Completion events read from its channel (libibverbs' ``comp_events_reported``)."""
    events_acked: int = 0
    """Events acknowledged by ``ibv_ack_cq_events`` (``comp_events_completed``)."""

    def push(self, wc: WorkCompletion) -> None:
        """Deliver a completion (the NIC side); one of a destroyed QP is dropped (freeing its SRQ slot)."""
        if wc.qp_num in self.cleaned:
            free_slots(wc)
            return
        if len(self.entries) >= self.cqe:
            raise VerbsError("EOVERFLOW", f"CQ overrun: more than {self.cqe} completions unpolled "
                             "(create the CQ with more entries or poll more often)", call="ibv_poll_cq")
        self.entries.append(wc)
        self.delivered += 1
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            waiter.succeed()
        if self.armed is not None:
            self._raise_event(wc)

    def _raise_event(self, wc: WorkCompletion) -> None:
        """The armed CQ got ``wc``: it raises its completion event, and is disarmed, when it waits for any
        completion, or for a solicited one and ``wc`` is solicited or unsuccessful (the IB spec's solicited
        notification; mlx5's ``MLX5_CQ_DB_REQ_NOT_SOL``). Without a channel the event goes nowhere
        (``ib_uverbs_comp_handler``)."""
        if self.armed == "solicited" and not wc.solicited and wc.status is WcStatus.SUCCESS:
            return
        self.armed = None
        channel = self.channel
        if channel is None or channel.destroyed:
            return
        channel.events.append(self)
        if channel.waiter is not None:
            waiter, channel.waiter = channel.waiter, None
            waiter.succeed()

    def wait(self) -> simpy.Event:
        """An event that fires when the CQ holds at least one completion."""
        if self.entries:
            ev = simpy.Event(self.context.env)
            ev.succeed()
            return ev
        if self._waiter is None:
            self._waiter = simpy.Event(self.context.env)
        return self._waiter


def ibv_create_cq(context: Context, cqe: int, channel=None, comp_vector: int = 0) -> CompletionQueue:
    """Create a completion queue with room for ``cqe`` completions, its events going to ``channel`` (a
    :class:`~models.verbs.cq_events.CompChannel`, whose ``refcnt`` it raises) on vector ``comp_vector``.

    :raises VerbsError: ``EINVAL`` for cqe < 1 or above the device's ``max_cqe`` (mlx5_create_cq: "CQE is too
        big"), for ``comp_vector`` not below :data:`NUM_COMP_VECTORS` (uverbs ``create_cq``), or a channel that was
        destroyed (its fd no longer names one).
    """
    call = "ibv_create_cq"
    if cqe < 1:
        raise VerbsError("EINVAL", f"cqe must be >= 1, got {cqe}", call=call)
    limit = context.node.nic.params.device.max_cqe
    if cqe > limit:
        raise VerbsError("EINVAL", f"cqe {cqe} is above the device's max_cqe ({limit})", call=call)
    if not 0 <= comp_vector < NUM_COMP_VECTORS:
        raise VerbsError("EINVAL", f"comp_vector {comp_vector} is not below num_comp_vectors ({NUM_COMP_VECTORS})",
                         call=call)
    if channel is not None:
        if channel.destroyed:
            raise VerbsError("EINVAL", "the completion channel was destroyed", call=call)
        channel.refcnt += 1
    return CompletionQueue(context, cqe, channel=channel, comp_vector=comp_vector)


def ibv_poll_cq(cq: CompletionQueue, num_entries: int) -> list[WorkCompletion]:
    """Take up to ``num_entries`` completions, oldest first; each frees the queue slots it covers
    (:func:`free_slots`)."""
    out = []
    while cq.entries and len(out) < num_entries:
        out.append(free_slots(cq.entries.popleft()))
    return out


def cq_clean(cq: CompletionQueue, qp_num: int) -> None:
    """Take QP ``qp_num``'s completions out of ``cq``, freeing the slots they cover (an SRQ's matters: its other QPs
    take receives from it), as ``mlx5_cq_clean`` does when the QP is destroyed or moved to RESET."""
    kept = type(cq.entries)()
    for wc in cq.entries:
        if wc.qp_num == qp_num:
            free_slots(wc)
        else:
            kept.append(wc)
    cq.entries = kept


def free_slots(wc: WorkCompletion) -> WorkCompletion:
    """``wc``, the queue slots it covers freed: a receive's receive queue slot, a send's send queue slot and those of
    the unsignaled work requests before it (mlx5's poll and CQ clean advance the queue's tail)."""
    if wc.release is not None:
        wc.release()
        wc.release = None
    return wc
