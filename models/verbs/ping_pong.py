"""One ping-pong iteration (ib_write_lat, ib_send_lat) as one chain of steps, which the vectorized core solves as
one operation; the event engine numbers the message back from :func:`ping_pong_offset` on, so that under the
ordering rule both engines give every step of the two messages the same position.

A message's receiver sees it when its payload lands (a WRITE: the CPU polls the last byte) or when its receive
completion is in memory (a SEND: the CPU polls the receive CQ); the receiver's poll delay later it sends back. Each
message's acknowledgement (none on UC and UD) and send completion run in a side chain ending when the sender's
CPU polls that completion, reported as ``acked`` (the message there) and ``peer_acked`` (the message back).
"""

from __future__ import annotations

from dataclasses import replace

from models.nic.datapath import RECEIVED
from sim.core.steps import Check, Delay, Fork, Mark, Rebase, Step, Wait, Wake, walk_order

ACKED = ("acked", "peer_acked")
"""The labels of the side chains' ends: when the sender's CPU polls the completion of the message there, and of the
message back (ps). Each waits the sender's poll delay drawn as ``<label>_poll``."""


class NoSingleChain(ValueError):
    """A message's steps land nowhere (neither in their main chain nor in a side chain that delivers them), so a
    ping-pong of them is not one chain."""


def ping_pong(there: tuple[Step, ...], back: tuple[Step, ...]) -> tuple[tuple[Step, ...], int]:
    """One iteration as one chain: the message ``there`` until its receiver sees it, that CPU's poll delay
    (``peer_poll``), the message ``back`` until it is seen, the requester's poll delay (``poll``). Returns the
    chain and the position of ``back``'s first step in it (its steps' offset in the event engine).

    :raises NoSingleChain: a message lands nowhere in its steps.
    """
    first, offset = _half(there, ACKED[0], "peer_poll", 0)
    second, _ = _half(back, ACKED[1], "poll", offset)
    return (*first, *second), offset


def ping_pong_offset(there: tuple[Step, ...]) -> int:
    """The position offset of the message back in :func:`ping_pong`'s chain.

    :raises NoSingleChain: as :func:`ping_pong`.
    """
    return _half(there, ACKED[0], "peer_poll", 0)[1]


def _half(steps: tuple[Step, ...], acked: str, poll: str, base: int) -> tuple[tuple[Step, ...], int]:
    """One message until its receiver sees it, then that CPU's poll delay ``poll``, the sender's completion forked;
    its steps keep their own positions from ``base`` on. Returns the steps and the position after them."""
    if Mark("landed") not in steps:  # unacknowledged (UC, UD): the message reaches the receiver in a side chain,
        return _unacknowledged(steps, acked, poll, base)  # the sender completes in the main one
    k = steps.index(Mark("landed"))
    ack = _completion(steps[k + 1:], acked)
    if not (k and _is_receive_completion(steps[k - 1])):  # a WRITE: seen when its payload lands
        half = (*steps[:k], Fork(ack), Rebase(True), Wake(), Wait(poll))
        return half, base + len(walk_order(half))
    # A SEND: its acknowledgement forks before the receive completion, renumbered to their places in its steps.
    landed_at = base + len(walk_order(steps[:k]))
    end = base + len(walk_order(steps))
    half = (*_seen(steps, k, base, Fork((replace(ack[0], renumber=landed_at + 2), *ack[1:]))),
            Rebase(True, renumber=end), Wake(), Wait(poll))
    return half, end + 2


def _unacknowledged(steps: tuple[Step, ...], acked: str, poll: str, base: int) -> tuple[tuple[Step, ...], int]:
    """:func:`_half` of a message whose delivery is a side chain of its steps (``datapath._unacknowledged``): that
    chain becomes the main one, and the sender's completion, which went on from the fork, forks in its place."""
    f = next((i for i, step in enumerate(steps) if isinstance(step, Fork) and Mark("landed") in step.steps), None)
    if f is None:
        raise NoSingleChain("a message that lands nowhere in its steps makes no ping-pong chain")
    delivery, rest = steps[f].steps, steps[f + 1:]
    fork_at = base + len(walk_order(steps[:f]))
    rest_at = fork_at + 1 + len(walk_order(delivery))
    completion = _completion(rest[1:], acked)
    sender = Fork((replace(rest[0], renumber=rest_at + 1), *completion), renumber=fork_at + 1)
    end = base + len(walk_order(steps))
    seen = _seen(delivery, delivery.index(Mark("landed")), fork_at + 1)
    return (*steps[:f], sender, *seen, Rebase(True, renumber=end), Wake(), Wait(poll)), end + 2


def _seen(steps: tuple[Step, ...], k: int, at: int, *forked: Step) -> tuple[Step, ...]:
    """A message's steps (the first at position ``at``, landing at ``k``) until its receiver sees it: a WRITE's
    until its payload lands, a SEND's on through its receive completion (a side chain of its steps, renumbered to
    its place); ``forked`` goes where the landing was."""
    if not (k and _is_receive_completion(steps[k - 1])):
        return (*steps[:k], *forked)
    fork_at = at + len(walk_order(steps[:k - 1]))
    received = steps[k - 1].steps
    return (*steps[:k - 1], *forked, replace(received[0], renumber=fork_at + 2), *received[1:])


def _is_receive_completion(step: Step) -> bool:
    """Whether ``step`` is the side chain writing a receive completion
    (:func:`models.nic.datapath.receive_completion`)."""
    return isinstance(step, Fork) and isinstance(step.steps[-1], Check) and step.steps[-1].name == RECEIVED


def _completion(after: tuple[Step, ...], acked: str) -> tuple[Step, ...]:
    """A message's steps to the sender's completion (an acknowledgement, or none on an unacknowledged QP; the CQE
    write; the sender's poll), ending with a check labelled ``acked`` when the sender's CPU polls the completion,
    its poll delay drawn as ``<acked>_poll``."""
    cut = next(i for i, step in enumerate(after) if isinstance(step, Delay) and step.draws is not None)
    return (*after[:cut], replace(after[cut], draws=f"{acked}_poll"), Check(acked, 0, label=acked))
