"""What one operation does on its way through a pipeline of FIFO servers: a typed list of steps.

The models describe each operation (a work request from doorbell to polled completion) as a tuple of these
records; the event engine runs them through :mod:`sim.core.interpreter` and the vectorized core
(:mod:`sim.fast`) solves whole streams of them. Every time is integer picoseconds. An operation carries a
*head* and a *tail* time (the first and last byte of a message streamed cut-through).

The ordering rule both engines follow (see ``docs/contributing.md``): at one picosecond, model events (posts,
polls, faults, scenario events) come first; then the steps that wait for a time (a claim that is not eager, a
:class:`Check` with a ``back_ps``, a :class:`Gate`, a :class:`Wait`), in order of their position in the
operation's step list, then of the operation's number. A step that does not wait (an eager claim, a delay, an
inline check, a mark) is taken within the waiting step before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # (the scenario checks import these steps; numpy only where a claim is served)
    import numpy as np


@dataclass(frozen=True)
class Claim:
    """Stream through ``server`` cut-through (:func:`sim.core.servers.claim_cut_through`): it starts when the
    head has arrived and the server is free, lasts ``service_ps`` and ends no earlier than the tail plus
    ``tail_ps``; the head leaves ``head_ps`` after the start, both leave ``latency_ps`` later still.

    The claim waits for the head's arrival unless ``eager``: then it is made at once, in the order the
    operation reaches it (valid where a single feeder, the step before, fixes that order).
    """

    server: Any
    """The server: a :class:`~sim.core.servers.FifoServer` in the models, an index in :mod:`sim.fast`."""
    service_ps: int
    head_ps: int = 0
    tail_ps: int = 0
    latency_ps: int = 0
    eager: bool = False
    label: str | None = None
    """Name of the claim: a :class:`Gate` released here, or a time the vectorized core reports."""
    turn: str | None = None
    """Name of the operation's turn this claim is made in (a send queue's order): it is made only once every
    earlier operation of that turn has made its own claim in it or ended, whenever its head arrives. The
    vectorized core's streams repeat one step list, so they reach such claims in operation order anyway."""
    skipped_by: str | None = None
    """Name of a per-operation draw (:attr:`sim.fast.Group.draws`): an operation drawing nonzero there makes no
    such claim and goes on as if it were not there. Set only in the vectorized core's one step list for work
    requests that take one of two paths, signaled or not (the CQE that only a signaled one writes)."""

    def skips(self, draws: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """Per operation drawing ``draws``: whether it skips this claim (:attr:`skipped_by`; None: none does)."""
        return None if self.skipped_by is None else draws[self.skipped_by] != 0

    def service(self, skips: np.ndarray | None) -> int | np.ndarray:
        """The claim's service per operation (ps): none for those that skip it (``skips``: :meth:`skips`)."""
        return self.service_ps if skips is None else skips.choose((self.service_ps, 0))


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
    renumber: int | None = None
    """The steps after it take their positions in the ordering rule from this number on (None: on from its own),
    as a program that a check puts in the place of the rest of a list is numbered from its own start."""


@dataclass(frozen=True)
class Wake:
    """Another process takes over at the head time (the poller that sees the completion): a model event."""


@dataclass(frozen=True)
class Check:
    """The model decides something here at run time (a translation, a key check, a fault): it may let the
    operation go on, hold it until a later time, or end it with an error.

    With ``back_ps`` None the check is made at once; otherwise the operation first waits until ``back_ps``
    before the head. The vectorized core knows no run-time decisions: it holds an access that finds itself
    inside one of ``holds`` (sorted, disjoint ``[start, end)`` intervals in which a moved buffer is being
    re-mapped, ps) until that interval's end, head and tail moved to at least the end.
    """

    name: str
    back_ps: int | None = None
    holds: tuple[tuple[int, int], ...] = ()
    label: str | None = None
    """Name under which the vectorized core reports each operation's time here (before any hold)."""
    decides: str | None = None
    """What the model decides here from the run's own history, in words (a translation cache's hits, a first-touch
    page fault, a lost frame): the vectorized core, which knows only ``holds``, does not solve such a check. None
    when the answer is known before the run (key and access checks, the holds of a moved buffer)."""
    edges: bool = False
    """The vectorized core also reports each operation's head and tail here, under ``label`` with ``.head`` and
    ``.tail`` added (where a frame's first and last bit reached the far port)."""
    restarts: bool = False
    """The operation goes on from the check's time, head and tail both, after ``holds`` (a check made at once is
    held too then): what the model puts in place of the rest when a wait there ends starts then."""


@dataclass(frozen=True)
class Mark:
    """The model is told the head and tail here (the payload has landed); no time passes."""

    name: str


@dataclass(frozen=True)
class Wait:
    """Sleep a per-operation time (``draws``) from the operation's last wait; head = tail = then (a model
    event: a process polling, then posting)."""

    draws: str


@dataclass(frozen=True)
class Gate:
    """At most ``slots`` operations between here and the claim labelled ``release``: operation ``i`` passes
    once operation ``i - slots`` has made that claim, or ended without it (a FIFO semaphore)."""

    slots: int
    release: str


@dataclass(frozen=True)
class Fork:
    """A side chain started from the current head and tail (its end is not the operation's completion)."""

    steps: tuple[Step, ...]
    renumber: int | None = None
    """The steps after the fork take their positions in the ordering rule from this number on (None: on from the
    end of its own), as :attr:`Rebase.renumber` does, where no rebase may come between (a chain that takes a side
    chain's place goes on from the same head and tail)."""


@dataclass(frozen=True)
class Detour:
    """A side trip of the operation itself: ``steps`` run from its head (the tail set to the head), then it goes
    on from the head they end at, its tail no earlier than before (an address translation the NIC makes before
    the data it has already received moves on)."""

    steps: tuple[Step, ...]


Step = Union[Claim, Delay, Rebase, Wake, Check, Mark, Wait, Gate, Fork, Detour]


def walk_order(steps: tuple[Step, ...]) -> list[Step]:
    """Every step in the order a walk reaches it (a fork or a detour, then its own steps, then what follows it); a
    step's index here is its position in the ordering rule (after a :class:`Rebase` or a :class:`Fork` with
    ``renumber``, counted on from that number)."""
    out: list[Step] = []
    for step in steps:
        out.append(step)
        if isinstance(step, (Fork, Detour)):
            out.extend(walk_order(step.steps))
    return out


def waits(step: Step) -> bool:
    """Whether ``step`` waits for a time (it is then taken in the ordering rule's order)."""
    return ((isinstance(step, Claim) and not step.eager) or (isinstance(step, Check) and step.back_ps is not None)
            or isinstance(step, (Gate, Wait, Wake)))
