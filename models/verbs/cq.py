"""Completion queues: ``ibv_create_cq``, ``ibv_poll_cq``, and the queue slots a completion frees when it is polled
or cleaned (``mlx5_cq_clean``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import simpy

from models.nic.wqe import WorkCompletion
from models.verbs.device import Context
from sim.core import VerbsError


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

    def wait(self) -> simpy.Event:
        """An event that fires when the CQ holds at least one completion."""
        if self.entries:
            ev = simpy.Event(self.context.env)
            ev.succeed()
            return ev
        if self._waiter is None:
            self._waiter = simpy.Event(self.context.env)
        return self._waiter


def ibv_create_cq(context: Context, cqe: int) -> CompletionQueue:
    """Create a completion queue with room for ``cqe`` completions.

    :raises VerbsError: ``EINVAL`` for cqe < 1 or above the device's ``max_cqe`` (mlx5_create_cq: "CQE is too big").
    """
    if cqe < 1:
        raise VerbsError("EINVAL", f"cqe must be >= 1, got {cqe}", call="ibv_create_cq")
    limit = context.node.nic.params.device.max_cqe
    if cqe > limit:
        raise VerbsError("EINVAL", f"cqe {cqe} is above the device's max_cqe ({limit})", call="ibv_create_cq")
    return CompletionQueue(context, cqe)


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
