"""What the vectorized core solves: streams of operations, each walking a pipeline of steps.

An operation is posted, then walks its steps in order; every time is integer picoseconds. It carries a
*head* and a *tail* time (the first and last byte of a message streamed cut-through) and the state of the
process that walks it: the time it last woke (``wake``) and when the event that woke it was created
(``created``). Those two order simultaneous claims on a shared server the way the event engine's scheduler
does (earlier time first, then earlier-created event first).

Operations of a :class:`Group` are posted with a window: the first ``window`` at the group's start (the
previous group's last completion), each later one when operation ``i - window`` completes. A group may
continue the previous group's stream with other steps from some operation on (:attr:`Group.first`): a route
that changes mid-stream. An operation
completes at the head time its main chain ends with (a :class:`Rebase` from the tail makes that the last
byte), in order: a completion waits for the previous one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Union

import numpy as np

Draws = Callable[[int, int], np.ndarray]
"""Per-operation values for operations ``lo..hi-1`` of a group (int64 ps); asked again for ranges it
already gave while a block is re-solved, so it must be repeatable. If it has a ``finished(lo)`` method, the
solver calls it once operations before ``lo`` are final (their values may then be dropped)."""


@dataclass(frozen=True)
class Server:
    """A FIFO service centre: ``count`` identical servers, unable to start work during ``stalls``."""

    name: str
    count: int = 1
    """Identical servers fed by one queue (more than one: not shareable between pipeline positions)."""
    stalls: tuple[tuple[int, int], ...] = ()
    """``[start, end)`` intervals (ps), sorted by start, in which no job starts: one that would start inside
    one starts at its end (single servers only; work already started is not interrupted)."""


@dataclass(frozen=True)
class Claim:
    """Stream through ``servers[server]`` cut-through (:func:`sim.core.servers.claim_cut_through`): it starts
    when the head has arrived and the server is free, lasts ``service_ps``, and ends no earlier than the tail
    plus ``tail_ps``; the head leaves ``head_ps`` after the start, both leave ``latency_ps`` later still.

    A claim waits for the head's arrival (the process wakes then) unless ``eager``: then it is made at once,
    in the order the process reaches it (valid where a single feeder fixes that order).
    """

    server: int
    service_ps: int
    head_ps: int = 0
    tail_ps: int = 0
    latency_ps: int = 0
    eager: bool = False
    label: str | None = None
    """Name under which each operation's claim time is kept (for a :class:`Gate`)."""


@dataclass(frozen=True)
class Delay:
    """Add ``ps`` (plus, when ``draws`` names a per-operation series, its value) to head and tail."""

    ps: int = 0
    draws: str | None = None


@dataclass(frozen=True)
class Rebase:
    """Continue from one time: head = tail = (tail if ``from_tail`` else head) + ``offset_ps``."""

    from_tail: bool
    offset_ps: int = 0


@dataclass(frozen=True)
class Wake:
    """Another process takes over at the head time, woken by an event created then."""


@dataclass(frozen=True)
class Sleep:
    """The process sleeps until ``back_ps`` before the head when that is later than its last wake (woken by a
    timeout created at that wake, as a claim's own sleep is); head and tail stay.

    Where it then wakes inside one of ``holds`` (sorted, disjoint ``[start, end)`` intervals, ps), it sleeps on
    until that interval's end (a timeout created at that wake), and head and tail move to at least the end:
    an access that finds its translation being rebuilt waits for it."""

    back_ps: int = 0
    holds: tuple[tuple[int, int], ...] = ()
    label: str | None = None
    """Name under which each operation's wake here (before any hold) is reported (:attr:`Finished.marks`)."""


@dataclass(frozen=True)
class Wait:
    """The process sleeps for a per-operation time (``draws``) from when it last woke; head = tail = then."""

    draws: str


@dataclass(frozen=True)
class Gate:
    """At most ``slots`` operations between here and the claim labelled ``release``: operation ``i`` passes
    once operation ``i - slots`` has made that claim (a FIFO semaphore released there). Neither may follow a
    drawn delay, which could bring operations to them out of order."""

    slots: int
    release: str


@dataclass(frozen=True)
class Fork:
    """A side chain started from the current state (its end is not the operation's completion)."""

    steps: tuple[Step, ...]


Step = Union[Claim, Delay, Rebase, Wake, Sleep, Wait, Gate, Fork]


@dataclass(frozen=True)
class Group:
    """``ops`` operations walking ``steps``, posted with a window of ``window`` outstanding operations."""

    steps: tuple[Step, ...]
    ops: int
    window: int
    draws: Mapping[str, Draws] = field(default_factory=dict)
    first: int = 0
    """Number of the group's first operation. Above 0 the group continues the previous group's stream, whose
    ``first`` operations came before (``ops`` counts from the stream's start): its operations are posted by
    that stream's completions, pass its gates after that stream's releases and complete after it."""


def after_draws(steps: tuple[Step, ...], varied: bool = False) -> list[bool]:
    """For every step in :func:`walk_order`: whether a per-operation delay (drawn) comes before it, which may
    let a later operation overtake an earlier one."""
    out: list[bool] = []
    for step in steps:
        out.append(varied)
        if isinstance(step, Fork):
            out.extend(after_draws(step.steps, varied))
        varied = varied or isinstance(step, Wait) or (isinstance(step, Delay) and step.draws is not None)
    return out


def walk_order(steps: tuple[Step, ...]) -> list[Step]:
    """Every step in the order a walk reaches it (a fork, then its own steps, then what follows it)."""
    out: list[Step] = []
    for step in steps:
        out.append(step)
        if isinstance(step, Fork):
            out.extend(walk_order(step.steps))
    return out


def tail_draws(steps: tuple[Step, ...]) -> tuple[str, ...] | None:
    """The drawn delays after the last claim of the main chain, when only delays, rebases and wakes follow it
    (then an operation's end is the last claim's output plus their sum); None otherwise."""
    last = max((k for k, s in enumerate(steps) if isinstance(s, Claim)), default=None)
    after = steps[last + 1:] if last is not None else ()
    if last is None or not all(isinstance(s, (Delay, Rebase, Wake)) for s in after):
        return None
    return tuple(s.draws for s in after if isinstance(s, Delay) and s.draws is not None)
