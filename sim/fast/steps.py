"""What the vectorized core solves: streams of operations, each walking the step list of :mod:`sim.core.steps`.

Claims name their server by index into the list of :class:`Server` s. Operations of a :class:`Group` are
posted with a window: the first ``window`` at the group's start (the previous group's last completion), each
later one when operation ``i - window`` completes. Groups run one after the other, each starting at the
previous one's last completion (or its side chains' ends, :attr:`Group.settles`), unless a group is
:attr:`Group.parallel`: several streams at once. A group may
continue the previous group's stream with other steps from some operation on (:attr:`Group.first`): a route that
changes mid-stream. An operation completes at the head time its main chain ends with, in order: a completion
waits for the previous one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from sim.core.interpreter import MODEL_EVENT
from sim.core.steps import Claim, Delay, Detour, Fork, Mark, Rebase, Step, Wait, Wake, waits, walk_order

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
    parallel: bool = False
    """Start with the previous group, at its start, as another stream sharing the servers (perftest -q); the
    next group that is not parallel starts once every stream of the round has ended."""
    posts_while: Callable[[np.ndarray, int], np.ndarray] | None = None
    """A stream that posts for a while (perftest -D): given posts and the group's start (ps), which of them are
    made; once one is refused, none after it is. ``ops`` is then a bound: the group ends before the first refused
    operation (the first is never refused)."""
    ended: Callable[[int], None] | None = None
    """Told the group's operation count once ``posts_while`` ended it, before any later group's draws are asked."""
    polls: int | None = None
    """The most completions the stream's loop takes in one wake (None: all delivered); the rest of one time's are
    taken after other streams woken then, which :mod:`sim.fast.deliveries` does not rank."""
    settles: tuple[str, ...] = ()
    """Labels of side chains the stream waits for once posted out: it ends (and the next group that is not
    parallel starts) at the latest of its last operation's completion and its times at these labels (a ping-pong
    that polls its last messages' completions before the next size)."""
    unsignaled: str | None = None
    """Name of a draw marking with 1 the operations that deliver no completion (work requests not signaled,
    perftest -Q): a later operation is then posted by the latest completion delivered at or before the operation
    ``window`` back (the group's start before the first), as perftest counts a moderated CQ's completions; an
    operation's own completion still orders the later ones'."""

    def end_after(self, done: np.ndarray, marks: Mapping[str, np.ndarray], n: int) -> int:
        """When the stream ends if operation ``n - 1`` of these completions and marks is its last (ps)."""
        return max([int(done[n - 1])] + [int(marks[label][n - 1]) for label in self.settles])


def released(group: Group, draws: Mapping[str, np.ndarray], done: np.ndarray, seed: int) -> np.ndarray:
    """When each operation's completion ``done`` lets the group's stream post again (ps): the latest delivered at
    or before it where some deliver none (:attr:`Group.unsignaled`; ``seed``, the release before the first, where
    none is), else ``done`` itself. ``draws``: the operations' draws."""
    if group.unsignaled is None:
        return done
    return np.maximum.accumulate(np.where(draws[group.unsignaled] != 0, seed, done))


def after_draws(steps: tuple[Step, ...], skips: bool = True) -> list[bool]:
    """For every step in walk order: whether a per-operation delay (drawn) or (``skips``) a claim some operations
    skip comes before it, which may let a later operation overtake an earlier one."""
    out: list[bool] = []
    _after_draws(steps, False, out, skips)
    return out


def _after_draws(steps: tuple[Step, ...], varied: bool, out: list[bool], skips: bool) -> bool:
    """Append :func:`after_draws` of ``steps`` to ``out``; returns whether a drawn delay came before their end."""
    for step in steps:
        out.append(varied)
        if isinstance(step, Fork):
            _after_draws(step.steps, varied, out, skips)
        elif isinstance(step, Detour):  # part of the chain: what it draws delays what follows
            varied = _after_draws(step.steps, varied, out, skips)
        varied = varied or isinstance(step, Wait) or (isinstance(step, Delay) and step.draws is not None) \
            or (skips and isinstance(step, Claim) and step.skipped_by is not None)  # (a skipping one goes on)
    return varied


def claim_wpos(steps: tuple[Step, ...], base: int = 0, wpos: int = MODEL_EVENT) -> dict[int, int]:
    """For every claim's walk-order index: the position of the step whose time orders it (itself, or for an
    eager claim the waiting step before it; :data:`MODEL_EVENT` after a post, a wake or a wait), counted on from
    a :class:`~sim.core.steps.Rebase`'s or :class:`~sim.core.steps.Fork`'s ``renumber`` after one."""
    out: dict[int, int] = {}
    _claim_wpos(steps, base, wpos, out, 0)
    return out


def _claim_wpos(steps: tuple[Step, ...], k: int, wpos: int, out: dict[int, int], shift: int) -> tuple[int, int, int]:
    """Fill ``out`` with :func:`claim_wpos` of ``steps`` from walk index ``k`` (position ``k + shift``); returns
    the index after them, the ordering position at their end and the shift then."""
    for step in steps:
        if waits(step):
            wpos = MODEL_EVENT if isinstance(step, (Wake, Wait)) else k + shift
        if isinstance(step, Claim):
            out[k] = wpos
        elif isinstance(step, Rebase) and step.renumber is not None:
            shift = step.renumber - k - 1
        elif isinstance(step, Fork):
            _claim_wpos(step.steps, k + 1, wpos, out, shift)
            k += len(walk_order(step.steps))
            if step.renumber is not None:
                shift = step.renumber - k - 1
        elif isinstance(step, Detour):  # part of the chain: its waiting steps order what follows
            k, wpos, shift = _claim_wpos(step.steps, k + 1, wpos, out, shift)
            continue
        k += 1
    return k, wpos, shift


def tail_draws(steps: tuple[Step, ...]) -> tuple[str, ...] | None:
    """The drawn delays after the last claim of the main chain, when only delays, rebases, wakes and marks
    follow it (then an operation's end is the last claim's output plus their sum); None otherwise."""
    last = max((k for k, s in enumerate(steps) if isinstance(s, Claim)), default=None)
    after = steps[last + 1:] if last is not None else ()
    if last is None or not all(isinstance(s, (Delay, Rebase, Wake, Mark)) for s in after):
        return None
    return tuple(s.draws for s in after if isinstance(s, Delay) and s.draws is not None)
