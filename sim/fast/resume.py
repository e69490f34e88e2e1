"""Solving a changed problem again from a block of an earlier solve instead of from its first operation.

A run whose decisions change as it is solved (a buffer that moves, RNR NAKs, lost frames: see
:mod:`sim.engine.planner.plan`) is solved again with other groups from some operation of a stream on. Every
operation an earlier solve kept before a block is final for the new groups too when every operation the blocks
before it took in, kept or not, walks the same steps in both (:attr:`~sim.fast.state.State.spanned`): a kept
operation's times are final for the steps of the operations solved beside it, and what a server still owes it is
carried in the state (:class:`~sim.fast.state.State`). :func:`rebase` takes the latest such state of the earlier
solve over to the new groups (their numbers, the servers' numbers by name); :func:`~sim.fast.solver.solve` goes
on from it.

A check's ``holds`` (the intervals in which a buffer's accesses wait for a re-fault) apply by the time an
operation reaches the check, not by its number: a new interval changes the operations that reach the check from
its start on, which the caller tells from the earlier solve (``reached``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from sim.core.steps import Check, Claim, Detour, Fork
from sim.fast.block_pass import Carry
from sim.fast.speedups import ALL, Speedups
from sim.fast.solver import Problem, begin
from sim.fast.state import State
from sim.fast.steps import Group, Server

Reached = Callable[[int, str, int], int]
"""Given a stream, a check's label and a time (ps): the first operation of the stream that an earlier solve
brought to that check at or after that time (the stream's operations if none)."""


def rebase(saved: Sequence[State], servers: Sequence[Server], groups: Sequence[Group], start_ps: int,
           reached: Reached, speedups: Speedups = ALL) -> tuple[State, int]:
    """The state to solve ``groups`` from: the latest of ``saved`` (states of earlier solves, in order) before
    which the blocks took in only operations that walk the same steps in ``groups`` as in the state's own problem
    (the operations kept are final for the steps of those their blocks took in), taken over to them, with its index
    in ``saved``; else the first block's state and -1."""
    new = Problem(servers, groups, speedups)
    limits: dict[int, list[int] | None] = {}  # per earlier problem (by id): how far each stream is unchanged
    for index in range(len(saved) - 1, -1, -1):
        state = saved[index]
        if id(state.problem) not in limits:
            limits[id(state.problem)] = _unchanged(state.problem, new, reached)
        unchanged = limits[id(state.problem)]
        if unchanged is not None and all(state.spanned.get(k, 0) <= limit for k, limit in enumerate(unchanged)):
            return _taken_over(state, new), index
    return begin(new, start_ps), -1


def _unchanged(old: Problem, new: Problem, reached: Reached) -> list[int] | None:
    """Per stream: the operations before the first whose steps differ between ``old`` and ``new``; None where
    their streams, rounds, servers or solving differ otherwise."""
    names = [s.name for s in old.servers], [s.name for s in new.servers]
    if len(set(names[1])) < len(names[1]) or any(s.posts_while for s in (*old.groups, *new.groups)):
        return None
    if new.keep > old.keep or len(old.rounds) != len(new.rounds) or old.stream_of[-1] != new.stream_of[-1]:
        return None
    by_name = {s.name: s for s in new.servers}
    if any(s.name not in by_name or by_name[s.name] != s for s in old.servers):
        return None
    limits = []
    for stream in range(int(new.stream_of[-1]) + 1):
        mine = [np.flatnonzero(p.stream_of == stream) for p in (old, new)]
        if [old.round_of[mine[0][0]], old.groups[mine[0][0]].parallel] != \
                [new.round_of[mine[1][0]], new.groups[mine[1][0]].parallel]:
            return None
        limits.append(_first_changed(stream, [old.groups[g] for g in mine[0]], [new.groups[g] for g in mine[1]],
                                     names, reached))
    return limits


def _first_changed(stream: int, old: list[Group], new: list[Group], names, reached: Reached) -> int:
    """The first operation of ``stream`` whose group in ``new`` is not defined as in ``old`` (``names``: each
    problem's server names), or that reaches a check after the start of holds ``new`` adds to it."""
    if old[-1].ops != new[-1].ops:
        return 0
    limit = old[-1].ops
    for lo in sorted({g.first for g in old} | {g.first for g in new}):
        was = next(g for g in reversed(old) if g.first <= lo)
        now = next(g for g in reversed(new) if g.first <= lo)
        held: list[tuple[str, int]] = []
        rules = [(g.window, sorted(g.draws), g.polls, g.settles, g.unsignaled) for g in (was, now)]
        if rules[0] != rules[1] or not _same(was.steps, now.steps, names, held):
            return min(limit, lo)
        limit = min([limit] + [reached(stream, label, since) for label, since in held])
    return limit


def _same(old: tuple, new: tuple, names, held: list[tuple[str, int]]) -> bool:
    """Whether ``old`` and ``new`` are the same steps, claims' servers by name (``names``: each problem's) and a
    labelled check's holds aside where ``new``'s add to ``old``'s: then its label and the first added hold's start
    (ps) go to ``held``."""
    if len(old) != len(new):
        return False
    for was, now in zip(old, new):
        if type(was) is not type(now):
            return False
        if isinstance(was, Claim):
            if replace(was, server=names[0][was.server]) != replace(now, server=names[1][now.server]):
                return False
        elif isinstance(was, (Fork, Detour)):
            if replace(was, steps=()) != replace(now, steps=()) or not _same(was.steps, now.steps, names, held):
                return False
        elif isinstance(was, Check) and was.holds != now.holds and was.label:
            added = set(now.holds) - set(was.holds)
            if set(was.holds) - set(now.holds) or replace(was, holds=()) != replace(now, holds=()):
                return False
            held.append((was.label, min(start for start, _ in added)))
        elif was != now:
            return False
    return True


def _taken_over(state: State, new: Problem) -> State:
    """``state`` of an earlier problem for the groups of ``new``: each group by the stream and operation it is at,
    servers by name. The groups a state refers to keep their pipeline positions: a change adds or removes groups
    only after them (the core solves no parallel stream that changes its steps, and a state holds no group of a
    later round)."""
    old = state.problem

    def group(g: int, op: int) -> int:
        stream = old.stream_of[g]
        return int(next(h for h in np.flatnonzero(new.stream_of == stream)[::-1] if new.groups[h].first <= op))

    index = {s.name: i for i, s in enumerate(old.servers)}
    carry = []
    for server in new.servers:
        was = state.carry[index[server.name]] if server.name in index else None
        if was is None:
            carry.append(Carry(free=[0] * server.count if server.count > 1 else None))
            continue
        if was.pending is not None:
            g = old.group_of_pos[was.pending.pos]
            assert (np.take(new.pos_base, [group(h, old.groups[h].first) for h in g]) == np.take(old.pos_base, g)).all()
        carry.append(Carry(was.free_at, was.pending, None if was.free is None else list(was.free)))
    active = {group(g, op): op for g, op in state.active.items()}
    history = {group(g, state.active.get(g, old.groups[g].first)): h for g, h in state.history.items()}
    rounds = {old.round_of[g]: at for g, at in state.start.items()}
    start = {g: rounds[r] for g, r in enumerate(new.round_of) if r in rounds}
    return State(new, active, list(state.ended), start, carry, history, dict(state.spanned),
                 max(state.size, new.smallest_block))
