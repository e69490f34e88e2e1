"""Completion channels and CQ events (``ibv_create_comp_channel``, ``ibv_req_notify_cq``, ``ibv_get_cq_event``,
``ibv_ack_cq_events``, ``ibv_destroy_comp_channel``) and ``ibv_resize_cq``, with libibverbs' and the kernel's
checks and errno values.

An armed CQ (``ibv_req_notify_cq``, one-shot) raises one completion event when the next completion is written into
it: any completion, or with ``solicited_only`` one whose request carried ``IBV_SEND_SOLICITED`` or one in error (the
IB spec's solicited notification; mlx5's ``MLX5_CQ_DB_REQ_NOT_SOL``). The event goes to the CQ's channel, where
``ibv_get_cq_event`` reads it at the simulated time the completion was written; each event read must be
acknowledged (``ibv_ack_cq_events``) before the CQ can be destroyed (``ibv_cmd_destroy_cq`` waits for that).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import simpy

from models.verbs.cq import CompletionQueue
from models.verbs.device import Context
from sim.core import VerbsError

@dataclass(eq=False)
class CompChannel:
    """``struct ibv_comp_channel``: the events of the CQs made with it, oldest first."""

    context: Context
    fd: int
    events: deque[CompletionQueue] = field(default_factory=deque)
    refcnt: int = 0
    """CQs made with it: libibverbs' ``channel->refcnt``; :func:`ibv_destroy_comp_channel` refuses while not 0."""
    destroyed: bool = False
    waiter: simpy.Event | None = None
    """Fires when an event arrives (for a process that waits on the channel's fd)."""


def ibv_create_comp_channel(context: Context) -> CompChannel:
    """A completion channel of ``context`` (a new file descriptor of the process)."""
    return CompChannel(context, context.node.nic.new_handle())


def ibv_destroy_comp_channel(channel: CompChannel) -> None:
    """Destroy ``channel``.

    :raises VerbsError: ``EBUSY`` while CQs made with it exist (libibverbs ``ibv_destroy_comp_channel``:
        ``channel->refcnt``); ``EINVAL`` when it was destroyed already.
    """
    call = "ibv_destroy_comp_channel"
    if channel.destroyed:
        raise VerbsError("EINVAL", "the completion channel was destroyed already", call=call)
    if channel.refcnt:
        raise VerbsError("EBUSY", f"{channel.refcnt} CQ(s) made with the channel still exist (destroy them first)",
                         call=call)
    channel.destroyed = True


def ibv_req_notify_cq(cq: CompletionQueue, solicited_only: int) -> None:
    """Arm ``cq`` for one completion event: the next completion written into it (``solicited_only`` non-zero: the
    next solicited or unsuccessful one). Arming an armed CQ changes only what it waits for. A CQ without a
    channel is armed too; its events go nowhere (``ib_uverbs_comp_handler`` drops them)."""
    cq.armed = "solicited" if solicited_only else "any"


def ibv_get_cq_event(channel: CompChannel) -> CompletionQueue:
    """Read the oldest event of ``channel``: the CQ that raised it (``cq_context`` is the caller's to keep). Each
    event read counts towards what :func:`ibv_ack_cq_events` must acknowledge.

    :raises VerbsError: ``EAGAIN`` when no event is pending (the channel's fd set non-blocking; a blocking read
        waits, which the caller does by running the clock until :attr:`CompChannel.events` holds one).
    """
    if not channel.events:
        raise VerbsError("EAGAIN", "no completion event is pending on the channel", call="ibv_get_cq_event")
    cq = channel.events.popleft()
    cq.events_reported += 1
    return cq


def ibv_ack_cq_events(cq: CompletionQueue, nevents: int) -> None:
    """Acknowledge ``nevents`` events of ``cq`` (libibverbs adds them to ``comp_events_completed``, unchecked)."""
    cq.events_acked += nevents


def unacknowledged_events(cq: CompletionQueue) -> str | None:
    """Why destroying ``cq`` would never return: ``ibv_cmd_destroy_cq`` waits until the events acknowledged equal
    those read (``comp_events_completed != comp_events_reported``), which nothing else changes. None when equal."""
    if cq.events_acked == cq.events_reported:
        return None
    return (f"{cq.events_reported} completion event(s) read but {cq.events_acked} acknowledged: ibv_destroy_cq "
            "waits for ibv_ack_cq_events to make them equal, and would never return")


def ibv_resize_cq(cq: CompletionQueue, cqe: int) -> None:
    """Give ``cq`` room for ``cqe`` completions (more or fewer); the completions in it are kept.

    :raises VerbsError: ``EINVAL`` for ``cqe`` < 1 or above the device's ``max_cqe`` (``mlx5_ib_resize_cq``), or
        fewer than the completions it holds now (``rxe_cq_chk_attr``; rdma-core's ``test_resize_cq`` expects
        EINVAL from mlx5 too).
    """
    call = "ibv_resize_cq"
    limit = cq.context.node.nic.params.device.max_cqe
    if not 1 <= cqe <= limit:
        raise VerbsError("EINVAL", f"cqe {cqe} is outside 1..max_cqe ({limit})", call=call)
    if cqe < len(cq.entries):
        raise VerbsError("EINVAL", f"cqe {cqe} is below the {len(cq.entries)} completions the CQ holds (poll them "
                         "first)", call=call)
    cq.cqe = cqe
