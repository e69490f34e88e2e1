"""One pass over a block of operations: every step of every operation, given guesses for what comes later.

A block is a run of consecutive operations cut into slices of one group each. Values an operation needs from
later in the same block (its post, released by the completion ``window`` operations earlier; a gate's
release by a later claim; the claims of later pipeline positions on a shared server) are taken from the
caller's guesses; :mod:`sim.fast.block` repeats passes with better guesses until they equal what a pass
computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from sim.core.interpreter import MODEL_EVENT
from sim.core.steps import Check, Claim, Delay, Detour, Fork, Gate, Mark, Rebase, Wait, Wake, waits
from sim.fast.deliveries import FIRST, FIRST_DELIVERED, KEYS, UNRANKED, delivery_keys, walk_key
from sim.fast.limits import unnumbered_tie
from sim.fast.merge import Claims, key_order, per_claim
from sim.fast.merge_reuse import Books
from sim.fast.pace_lanes import Pace
from sim.fast.steps import released
from sim.fast.scans import running_max
from sim.fast.server import pool, serve
from sim.fast.turns import turn_key, turn_order

NO_RELEASE = -1
"""Gate input of an operation that needs no earlier release (times are never negative)."""
LOW = -(1 << 62)
"""Minus infinity: long before any time (ps)."""


@dataclass
class Record:
    """The claims one pipeline position made in one slice, in operation order (arrays, ps)."""

    server: int
    pos: int
    seq0: int
    """Sequence number of the slice's first operation."""
    post: np.ndarray
    """When each operation was posted (its number's first key, :mod:`sim.fast.merge`)."""
    rank: np.ndarray
    """Each operation's rank among those posted at its time (its number's second key)."""
    wake: np.ndarray
    wpos: int | np.ndarray
    """Position of the step whose time orders these claims (:mod:`sim.fast.merge`); per claim in a turn
    (:mod:`sim.fast.turns`)."""
    head: np.ndarray
    not_before: np.ndarray
    service: int
    finish: np.ndarray | None = None

    def claims(self, lo: int = 0, hi: int | None = None) -> Claims:
        """Operations ``lo..hi-1`` of the slice as :class:`Claims`."""
        return Claims(*(per_claim(self, name)[lo:hi] for name in Claims.FIELDS[:-1]),
                      None if self.finish is None else self.finish[lo:hi])

    INPUTS = ("wake", "head", "not_before", "post", "rank")
    """The fields that make the claims: their keys and arrival times (with :attr:`wpos`)."""

    def same_inputs(self, other: Record | None) -> bool:
        """True when ``other`` made the same claims."""
        return other is not None and all(same_values(getattr(self, k), getattr(other, k)) for k in self.INPUTS) \
            and bool(np.all(np.asarray(self.wpos) == np.asarray(other.wpos)))

    def differs(self, other: Record) -> np.ndarray:
        """Per claim: whether ``other`` made it otherwise."""
        return reduce(np.logical_or, (getattr(self, k) != getattr(other, k) for k in self.INPUTS),
                      np.asarray(self.wpos) != np.asarray(other.wpos))


@dataclass
class SliceIn:
    """What a pass needs to know about one slice (operations ``lo..hi-1`` of one group)."""

    group: int
    lo: int
    hi: int
    seq0: int
    start: int | None
    """The group's start (its first posts), or no earlier than this when it waits for ``after``."""
    hist_done: np.ndarray
    """Releases (:attr:`SliceOut.release`) of operations ``max(0, lo - window)..lo-1`` (final)."""
    guess_post: np.ndarray
    """Guessed posts of operations ``lo + window..hi-1``."""
    guess_rank: np.ndarray
    """Guessed ranks of operations ``lo + window..hi-1`` (:mod:`sim.fast.deliveries`)."""
    gate_input: dict[str, np.ndarray]
    """Per gate label: release time of operation ``i - slots`` for each operation, or :data:`NO_RELEASE`."""
    draws: dict[str, np.ndarray]
    shared: list[int] = field(default_factory=list)
    """The slice's positions on shared servers."""
    idle_done: np.ndarray | None = None
    """Each operation's post-to-completion time when every server is free."""
    idle_gate: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Per gate, with every server free: post-to-gate and gate-to-release times."""
    idle_claim: dict[int, np.ndarray] = field(default_factory=dict)
    """Per position on a shared server, with every server free: post-to-arrival times."""
    hist_released: dict[str, np.ndarray] = field(default_factory=dict)
    """Per gate label: the latest releases before the slice (final)."""
    after: tuple[int, ...] = ()
    """Slices of the block whose last completions the group's start waits for (the round before it)."""
    last_done: int = LOW
    """The completion of operation ``lo - 1`` (final; before operation 0, long before any time)."""
    joined: bool = False
    """The slice continues the previous slice's stream in the same block (:attr:`sim.fast.steps.Group.first`):
    each pass completes its history with that slice's values."""

    def deps(self, index: int) -> tuple[int, ...]:
        """The slices of the block this one (at ``index``) follows: walked and kept whole before it."""
        return self.after + ((index - 1,) if self.joined else ())


@dataclass
class SliceOut:
    """What a pass computed for one slice."""

    post: np.ndarray
    rank: np.ndarray
    """Each operation's rank among those posted at its time (:mod:`sim.fast.deliveries`)."""
    done: np.ndarray
    """Completion of each operation (in order: never before the previous one's)."""
    last_wake: np.ndarray | None
    """The latest time each operation claimed anything, a claim it skips included: its zero job's place in the
    server's order is carried on once the operation is kept (None: the group claims nothing)."""
    released: dict[str, np.ndarray] = field(default_factory=dict)
    marks: dict[str, np.ndarray] = field(default_factory=dict)
    """Per label: each operation's wake at that :class:`~sim.core.steps.Check`, or when it made that :class:`Claim`."""
    records: dict[int, Record] = field(default_factory=dict)
    gate_in: dict[str, np.ndarray] = field(default_factory=dict)
    """Per gate: when each operation reached it."""
    gate_out: dict[str, np.ndarray] = field(default_factory=dict)
    """Per gate: when each operation passed it."""
    pace: Pace | None = None
    """The kept operations' steady state, when nearly every one of them queued somewhere."""
    head: np.ndarray | None = None
    """Each operation's end before completions are put in order (a completion waits for the previous one)."""
    release: np.ndarray | None = None
    """When each operation's completion lets its stream post again (:func:`released`; :attr:`done` itself unless
    some operations deliver none)."""
    waited: tuple | None = None
    """The time and ordering position of the main chain's latest step that waited (a wake does not: the event
    engine's interpreter goes on through it without waiting), while the slice is walked."""
    walked: tuple | None = None
    """The time and ordering position of the walk that reached each operation's wake (what :attr:`waited` was
    then)."""


@dataclass
class Carry:
    """A server's state between blocks: free from ``free_at`` on, except for ``pending`` claims of finished
    operations that come after the next block's earliest possible claim (in key order)."""

    free_at: int = 0
    pending: Claims | None = None
    free: list[int] | None = None
    """Free times of a multi-server pool."""


class Pass:
    """One pass over a block (see the module docstring); ``idle`` takes every server as free."""

    def __init__(self, problem, slices: list[SliceIn], carry: list[Carry], shared: dict[int, list[int]],
                 previous: dict[int, Record], idle: bool = False) -> None:
        self.problem, self.slices, self.carry, self.shared = problem, slices, carry, shared
        self.previous, self.idle = previous, idle
        self.current: dict[int, Record] = {}
        self.used: dict[int, Record | None] = {}
        """Records of later positions taken from the guesses (None: there was none)."""
        self.merged: dict[int, tuple[Claims, np.ndarray]] = {}
        """Per shared server: all its claims (pending ones first) and their service order, as last served."""
        self.books = Books(problem.speedups.merge_reuse)
        """Per server merged in this pass, with merge_reuse: its claims as the pass has them."""
        self.walks = 1
        """Slices being walked in step."""
        self.tie = None
        """The earliest claims of parallel streams this pass found tied in an order the core does not know
        (:func:`sim.fast.limits.unnumbered_tie`)."""
        self.ranked: int | None = None
        """The earliest time claims of parallel streams tied up to their operations' ranks in this pass (ps)."""
        self.turned: np.ndarray | None = None
        """The ordering positions of the walked slice's last claim in a turn, while no step that waits has come
        since: the eager claims after it are ordered with it (:mod:`sim.fast.turns`)."""

    def run(self) -> list[SliceOut]:
        """Walk every slice, those that wait for no other in step (each one's claim on a shared server is made
        before any of them is served, so one service order serves all); returns their outputs."""
        outs: list = [None] * len(self.slices)
        waiting, walks = list(range(len(self.slices))), {}
        while waiting or walks:
            for index in [i for i in waiting if all(outs[k] is not None for k in self.slices[i].deps(i))]:
                waiting.remove(index)
                walks[index] = self._begin(index, outs)
            self.walks = len(walks)
            for index, (walk, context) in list(walks.items()):
                self.slice, self.out, self.step, self.turned = context
                try:
                    next(walk)
                    walks[index] = (walk, (self.slice, self.out, self.step, self.turned))
                except StopIteration as end:
                    del walks[index]
                    outs[index] = self._end(end.value)
        return outs

    def _begin(self, index: int, outs: list):
        """Start walking slice ``index``: its walk and where it is."""
        piece = self.slices[index]
        group = self.problem.groups[piece.group]
        if piece.joined:
            _join(self.problem, self.slices[index - 1], outs[index - 1], piece)
        ends = [self.problem.groups[self.slices[k].group].end_after(outs[k].done, outs[k].marks, len(outs[k].done))
                for k in piece.after]
        start = max([piece.start] * (piece.start is not None) + ends)
        post = _posts(piece, group.window, start, piece.hist_done, piece.guess_post)
        out = SliceOut(post, self._ranks(piece, group.window, post), post, None, waited=(post, MODEL_EVENT))
        self.slice, self.out, self.step, self.turned = piece, out, 0, None
        return self._chain(group.steps, (post, post, post), True), (piece, self.out, 0, None)

    def _end(self, head: np.ndarray) -> SliceOut:
        """The slice walked: its completions are ``head`` in order."""
        piece, group = self.slice, self.problem.groups[self.slice.group]
        done = head if self.idle else running_max(np.concatenate(([piece.last_done], head)))[1:]  # (in order)
        self.out.done, self.out.head = done, head
        self.out.release = released(group, piece.draws, done, piece.hist_done[-1] if piece.lo else self.out.post[0])
        if self.problem.streams_meet:
            walked = np.full(len(head), UNRANKED) if self.out.walked is None else walk_key(*self.out.walked)
            self.out.released.update(delivery_keys(walked, done, piece.hist_done, piece.hist_released,
                                                   group.polls))
        return self.out

    def _ranks(self, piece: SliceIn, window: int, post: np.ndarray) -> np.ndarray:
        """Each operation's rank (:mod:`sim.fast.deliveries`), found as its post is (:data:`FIRST` for the group's
        first ``window``, then from the kept or guessed keys ``window`` operations back). Where no streams meet,
        ranks order nothing: the posts stand in (operations of one post share one rank), and no keys are kept."""
        if not self.problem.streams_meet:
            return post
        known = piece.hist_released.get(FIRST_DELIVERED, piece.hist_done[:0])
        return _posts(piece, window, FIRST, known[len(known) - len(piece.hist_done):], piece.guess_rank)

    def _chain(self, steps, state, main: bool = False):
        """Walk ``steps`` from ``state`` = (head, tail, wake); returns the final head. ``main``: the slice's main
        chain, at whose end its operations pass the turns they make no claim in (:meth:`_pass_turns`)."""
        state, last = yield from self._steps(steps, state, main)
        if last is not None:
            mine = self.out.last_wake
            self.out.last_wake = last if mine is None else np.maximum(mine, last)
        if main and self.problem.unclaimed[self.slice.group]:
            self._pass_turns()
        return state[0]

    def _steps(self, steps, state, main: bool = False):
        """Walk ``steps`` of one chain from ``state``; returns the final state and the wake of its last claim
        (None: it made none). In the ``main`` chain each step that waits is kept as :attr:`SliceOut.waited`, and
        the walk reaching a wake as :attr:`SliceOut.walked`."""
        last = None
        for step in steps:
            self.step += 1
            if isinstance(step, Fork):
                turned = self.turned
                yield from self._chain(step.steps, state)
                self.turned = turned
            elif isinstance(step, Detour):
                head, kept, wake = state
                (head, _, wake), inner = yield from self._steps(step.steps, (head, head, wake), main)
                state, last = (head, np.maximum(kept, head), wake), last if inner is None else inner
            elif isinstance(step, Claim):
                state = yield from self._claim(step, state, self.step - 1)
                made = self.out.records[self.problem.pos_base[self.slice.group] + self.step - 1]
                last = made.wake  # (a skipped claim's own: its zero job's place is carried on too)
                if main and (not step.eager or step.turn is not None):
                    self.out.waited = state[2], made.wpos
            elif isinstance(step, Gate):
                self.turned = None
                state = self._gate(step, state[0])
                if main:
                    self.out.waited = state[2], self.step - 1
            else:
                if waits(step):
                    self.turned = None
                state = self._step(step, state)
                if main and isinstance(step, Wake):
                    self.out.walked = self.out.waited
                elif main and waits(step):
                    self.out.waited = state[2], MODEL_EVENT if isinstance(step, Wait) else self.step - 1
        return state, last

    def _pass_turns(self) -> None:
        """The walked slice's operations pass their turns in each of the stream's turns their steps make no claim
        in (:attr:`sim.fast.solver.Problem.unclaimed`) when their main chain ends: at its latest step that waited,
        as the event engine's interpreter passes them (:mod:`sim.fast.turns` orders them with the stream's own)."""
        wake, wpos = self.out.waited
        for turn, server in self.problem.unclaimed[self.slice.group]:
            names = turn_key(turn, server)
            self.out.released[names[0]], self.out.released[names[1]] = turn_order(wake, wpos, self._turn_seed(names),
                                                                                  passes=True)

    def _step(self, step, state):
        head, tail, wake = state
        if isinstance(step, Delay):
            extra = step.ps if step.draws is None else _plus(self.slice.draws[step.draws], step.ps)
            moved = _plus(head, extra)
            return moved, moved if tail is head else _plus(tail, extra), wake
        if isinstance(step, Rebase):
            base = _plus(tail if step.from_tail else head, step.offset_ps)
            return base, base, wake
        if isinstance(step, Wake):
            return head, tail, head
        if isinstance(step, Mark):
            return state
        if isinstance(step, Check) and step.back_ps is None and not step.restarts:  # made at once, at the last wait
            if step.label is not None:
                self.out.marks[step.label] = wake
                if step.edges:
                    self.out.marks[step.label + ".head"], self.out.marks[step.label + ".tail"] = head, tail
            return state
        if isinstance(step, Check):
            if step.back_ps is not None:
                wake = np.maximum(_plus(head, -step.back_ps), wake)
            if step.label is not None:
                self.out.marks[step.label] = wake
            for begin, end in () if self.idle else step.holds:  # idle times stay lower bounds: no holds
                held = (wake >= begin) & (wake < end)
                if held.any():
                    wake = np.where(held, end, wake)
                    head = np.where(held, np.maximum(head, end), head)
                    tail = np.where(held, np.maximum(tail, end), tail)
            return (wake, wake, wake) if step.restarts else (head, tail, wake)
        t = wake + self.slice.draws[step.draws]  # Wait
        return t, t, t

    def _gate(self, gate: Gate, t):
        """Wait for a slot at ``t``: the release of operation ``i - slots``, or at once where it came before."""
        self.out.gate_in[gate.release] = t
        go = self.out.gate_out[gate.release] = t if self.idle else np.maximum(t, self.slice.gate_input[gate.release])
        return go, go, go

    def _claim(self, step: Claim, state, walk: int):
        """Claim for every operation (``walk``: the claim's walk-order index); the claims' ordering position is
        the pipeline position's (:attr:`sim.fast.solver.Problem.wpos_at`)."""
        head, tail, wake = before = state
        pos = self.problem.pos_base[self.slice.group] + walk
        if not step.eager:  # made when the head arrives
            wake, self.turned = head, None
        wpos = self.problem.wpos_at[pos] if self.turned is None else self.turned
        # A pass over free servers knows no post but the first ones, so it leaves a turn's order to the real passes:
        # the claims' own times are its lower bound, and a later position's guess built on them holds.
        if step.turn is not None and not self.idle:
            names = turn_key(step.turn, step.server)
            wake, wpos = turn_order(wake, wpos, self._turn_seed(names))
            self.turned = wpos
            self.out.released[names[0]], self.out.released[names[1]] = wake, wpos
        skip = step.skips(self.slice.draws)
        rec = Record(step.server, pos, self.slice.seq0, self.out.post, self.out.rank, wake, wpos, head,
                     _plus(tail, step.tail_ps), step.service(skip))
        if skip is not None:  # a job of no time at the claim's ordering time: it delays no later claim
            rec.head, rec.not_before = np.where(skip, wake, head), np.where(skip, wake, rec.not_before)
        self.current[pos] = self.out.records[pos] = rec
        self.books.made(step.server, pos)
        if step.server in self.shared and self.walks > 1:  # the other walks claim too before this one is served
            yield
        ahead = self._serve(step, rec)
        if step.label is not None:
            self.out.released[step.label] = self.out.marks[step.label] = rec.wake
        after = ahead, _plus(rec.finish, step.latency_ps), rec.wake
        return after if skip is None else tuple(np.where(skip, b, a) for b, a in zip(before, after))

    def _turn_seed(self, names: tuple[str, str]) -> tuple[int, int] | None:
        """The ordering time and position, at the turn kept under ``names``, of the operation before the walked
        slice's first in its stream (None: it is the stream's first)."""
        kept = self.slice.hist_released.get(names[0])
        if kept is None or not len(kept):
            return None
        return int(kept[-1]), int(self.slice.hist_released[names[1]][-1])

    def _serve(self, step: Claim, rec: Record) -> np.ndarray:
        """Serve ``rec``'s claims, setting their finish times; returns their start times plus the claim's head
        time and latency: when each head moves on (ps)."""
        server = self.problem.servers[step.server]
        state = self.carry[step.server]
        walk = rec.pos - self.problem.pos_base[self.slice.group]
        free_at = state.free_at if state.pending is None else int(state.pending.finish[-1])
        shift = step.head_ps + step.latency_ps
        if self.idle or (walk in self.problem.calm[self.slice.group] and rec.head[0] >= free_at):
            rec.finish = rec.head + rec.service
            np.maximum(rec.finish, rec.not_before, out=rec.finish)
            return _plus(rec.head, shift)
        if step.server in self.shared or (self.problem.varied[self.slice.group][walk]
                                          and _out_of_order(rec, state.pending)):
            return _plus(self._merge(step.server, rec), shift)
        if server.count > 1:
            start, rec.finish, _ = pool(rec.head, rec.service, rec.not_before, state.free)
            return _plus(start, shift)
        ahead, rec.finish, self.problem.queued[rec.pos] = serve(
            rec.head, rec.service, rec.not_before, free_at, np.asarray(server.stalls) if server.stalls else None,
            self.problem.queued.get(rec.pos, False), shift)
        return ahead

    def _merge(self, server: int, rec: Record) -> np.ndarray:
        """Serve the claims of every position on ``server`` in key order; sets ``rec``'s finish times and returns
        its start times. With merge_reuse the server's :class:`~sim.fast.merge_reuse.Book` keeps its claims through
        the pass, and the last service order stands while none changed."""
        state = self.carry[server]
        claims, mine = self.books.join(server, rec.pos, lambda: (state.pending, *self._parts(server, rec.pos)),
                                       self.current)
        if claims is not None:
            order, tied = key_order(claims)
            ranked, tie = unnumbered_tie(self.problem, claims, order, server) if tied else (None, None)
            if ranked is not None:
                self.ranked = min(ranked, self.ranked if self.ranked is not None else ranked)
            if tie is not None and (self.tie is None or tie[0] < self.tie[0]):
                self.tie = tie
            stalls = self.problem.servers[server].stalls
            service = claims.service if len(claims.parts) > 1 or isinstance(claims.parts[0], Claims) else rec.service
            s, f, self.problem.queued[("merged", server)] = serve(
                np.take(claims.head, order), service if np.ndim(service) == 0 else np.take(service, order),
                np.take(claims.not_before, order), state.free_at, np.asarray(stalls) if stalls else None,
                self.problem.queued.get(("merged", server), False))
            claims.start, claims.finish = np.empty_like(s), np.empty_like(f)
            claims.start[order], claims.finish[order] = s, f
            self.merged[server] = (claims, order)
        claims, n = self.merged[server][0], len(rec.wake)
        rec.finish = claims.finish[mine:mine + n]
        return claims.start[mine:mine + n]

    def _parts(self, server: int, pos: int) -> tuple[list[int], list]:
        """The positions on ``server`` (``pos`` claims it) in the order the pass reaches them, and the claims of
        each: the pass's own where made, else the last pass's guess (kept as used; None where there is none)."""
        positions = self.shared.get(server, [pos])
        for other in positions:
            if other not in self.current:  # not claimed yet in this pass: its guess
                self.used[other] = self.previous.get(other)
        return positions, [self.current.get(other, self.used.get(other)) for other in positions]


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of times hold the same values (their bytes compared where their types match: much faster
    than ``np.array_equal`` on the short arrays a pass compares)."""
    return a is b or (a.tobytes() == b.tobytes() if a.dtype == b.dtype else np.array_equal(a, b))


def _join(problem, previous: SliceIn, out: SliceOut, piece: SliceIn) -> None:
    """Complete a joined slice's history (completions, gate releases) with the values this pass computed for
    the slice it continues."""
    back = min(piece.lo, problem.groups[piece.group].window)
    piece.hist_done, piece.last_done = np.concatenate((previous.hist_done, out.release))[-back:], int(out.done[-1])
    for label, slots in problem.gates[piece.group].items():
        released = np.concatenate((previous.hist_released[label], out.released[label]))[-problem.keep:]
        gate_history(piece.gate_input[label], released, piece.lo, piece.hi, slots)
        piece.hist_released[label] = released
    for name in KEYS if problem.streams_meet else ():
        kept = previous.hist_released.get(name, out.released[name][:0])
        piece.hist_released[name] = np.concatenate((kept, out.released[name]))[-problem.keep:]
    for name in problem.stream_turn_keys[piece.group]:  # the stream's turns go on across the change of steps
        kept = out.released.get(name)
        if kept is not None and len(kept):
            piece.hist_released[name] = kept[-1:]


def gate_history(given: np.ndarray, released: np.ndarray, lo: int, hi: int, slots: int) -> None:
    """Fill in ``given`` (gate inputs of operations ``lo..hi-1``) the releases of operations before ``lo``:
    ``released`` holds the latest of them."""
    index = np.arange(lo, min(hi, lo + slots)) - slots
    past = index >= 0
    given[: len(index)][past] = released[index[past] - lo + len(released)]


def _posts(piece: SliceIn, window: int, start: int, known: np.ndarray, guessed: np.ndarray) -> np.ndarray:
    """Per operation of the slice, what posts it: the group's ``start`` for the group's first ``window``
    operations, then ``known`` completions ``window`` operations back from earlier blocks, then ``guessed``
    ones."""
    first = max(0, min(window, piece.hi) - piece.lo)
    count = max(0, min(piece.hi, piece.lo + window) - max(piece.lo, window))
    return np.concatenate((np.full(first, start, np.int64), known[:count], guessed))


def _plus(times: np.ndarray, extra) -> np.ndarray:
    """``times + extra`` (ps); ``times`` itself when ``extra`` is the scalar 0 (arrays are never changed in
    place, so steps may share them)."""
    return times if not isinstance(extra, np.ndarray) and extra == 0 else times + extra


def _out_of_order(rec: Record, pending: Claims | None) -> bool:
    """True when a position's claims are not in key order (then they are served sorted by key)."""
    wake = rec.wake
    first = rec.wpos if np.ndim(rec.wpos) == 0 else rec.wpos[0]
    if pending is not None and len(wake) and (wake[0], first) < (pending.wake[-1], pending.wpos[-1]):
        return True
    return bool((wake[1:] < wake[:-1]).any())
