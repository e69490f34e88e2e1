"""The vectorized core's groups run by the event engine's own machinery: simpy, the data path's step
interpreter (:mod:`sim.core.interpreter`) on real FifoServers, a FIFO semaphore per gate, and a posting loop
with in-order completion delivery as the bandwidth workloads have it (:mod:`models.verbs.workloads`).

Covers window-posted groups (posting while :attr:`~sim.fast.steps.Group.posts_while` allows, when it is set;
several streams at once where groups are parallel) whose main chain ends with a :class:`~sim.core.steps.Wake`
(the completion is seen then and wakes the poster), any servers shared between positions, eager claims, gates,
forks, detours, waits, claims in turns (a stream's own, numbered in posting order) and checks held in their
hold intervals. A group whose :attr:`~sim.fast.steps.Group.unsignaled` operations deliver no completion is
posted as perftest posts with CQ moderation (``cq_mod``): each delivered completion covers every operation up to
its own, at most ``window + cq_mod - 1`` posted and not covered; an operation skips the claims whose
``skipped_by`` it draws nonzero.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import simpy

from sim.core import Environment, FifoServer
from sim.core.interpreter import Operation, Semaphore, Turns, compile_steps
from sim.core.steps import Check, Claim, Detour, Fork, Gate, Wake, walk_order
from sim.fast.steps import Group, Server


def run_events(servers: list[Server], groups: list[Group], start_ps: int = 0, cq_mod: int = 1):
    """Posts and completions of every operation of every group, as lists of ints (``cq_mod``: the moderation of
    the groups with unsignaled operations)."""
    env = Environment()
    fifo = [FifoServer(s.name) for s in servers]
    for server, spec in zip(fifo, servers):
        for begin, end in spec.stalls:
            server.add_stall(begin, end)
    if start_ps:
        env.run(until=start_ps)
    posts, dones = [], []
    rounds: list[list[list[Group]]] = []
    for group in groups:
        if group.first:
            rounds[-1][-1].append(group)  # continues the stream
        elif group.parallel and rounds:
            rounds[-1].append([group])  # starts with the round's other streams (perftest -q)
        else:
            rounds.append([[group]])
    ran = []
    for streams in rounds:
        procs = [env.process(_poster(env, fifo, stream, cq_mod)) for stream in streams]
        env.run(until=env.all_of(procs))
        ran += [(stream, proc.value) for stream, proc in zip(streams, procs)]
    env.run()  # (unsignaled operations after a timed stream's last signaled one complete after it ends)
    for stream, (posted, completed, issued) in ran:
        for group in stream:
            posts.append(posted[group.first:min(group.ops, issued)])
            dones.append(completed[group.first:min(group.ops, issued)])
    return posts, dones


def claims_changed(steps: tuple, change) -> tuple:
    """``steps`` with each claim, in forks and detours too, replaced by ``change(claim)``."""
    out = []
    for step in steps:
        if isinstance(step, Claim):
            step = change(step)
        elif isinstance(step, (Fork, Detour)):
            step = replace(step, steps=claims_changed(step.steps, change))
        out.append(step)
    return tuple(out)


def _served(steps, fifo) -> tuple:
    """``steps`` with the servers' indices replaced by the FifoServers."""
    return claims_changed(steps, lambda claim: replace(claim, server=fifo[claim.server]))


class _Owner:
    """One operation's owner: holds checks in their intervals, reports the main chain's last wake."""

    def __init__(self, i: int, holds: dict[str, tuple], wakes: int, complete) -> None:
        self.i, self.holds, self.wakes, self.complete = i, holds, wakes, complete

    def check(self, op, name, now, head, tail):
        for begin, end in self.holds[name]:
            if begin <= now < end:
                return end
        return None

    def wake(self, op, head):
        self.wakes -= 1
        if not self.wakes:
            self.complete(self.i, head)


def _skipping(steps, skipped: frozenset) -> tuple:
    """``steps`` without the claims skipped by the draws named in ``skipped``."""
    out = []
    for step in steps:
        if isinstance(step, Claim) and step.skipped_by in skipped:
            continue
        if isinstance(step, (Fork, Detour)):
            step = replace(step, steps=_skipping(step.steps, skipped))
        out.append(step)
    return tuple(out)


def _poster(env, fifo, stream: list[Group], cq_mod: int):
    """One stream of operations: each group's steps from its ``first`` operation on."""
    group = stream[-1]
    n, window = group.ops, group.window + (cq_mod - 1 if group.unsignaled else 0)
    draws = {name: [int(x) for x in d(0, n)] for name, d in group.draws.items()}
    silent = draws[group.unsignaled] if group.unsignaled else [0] * n
    variants: dict = {}

    def program(mine: Group, i: int):
        skipped = frozenset(name for name, v in draws.items() if v[i])
        key = (id(mine), skipped)
        if key not in variants:
            variants[key] = compile_steps(_served(_skipping(mine.steps, skipped), fifo))
        return variants[key]

    gates = {s.release: Semaphore(s.slots) for s in walk_order(group.steps) if isinstance(s, Gate)}
    turns = {s.turn: Turns() for g in stream for s in walk_order(g.steps) if isinstance(s, Claim) and s.turn}
    holds = {id(g): {s.name: s.holds for s in walk_order(g.steps) if isinstance(s, Check)} for g in stream}
    wakes = {id(g): sum(isinstance(s, Wake) for s in g.steps) for g in stream}
    group_of = [next(g for g in reversed(stream) if g.first <= i) for i in range(n)]
    posted, completed = [0] * n, [0] * n
    state = {"outstanding": 0, "next": 0, "last": 0, "finished": {}, "entries": [], "waiter": None}

    def deliver(i: int, seen: int) -> None:
        state["entries"].append(i)
        if state["waiter"] is not None:
            waiter, state["waiter"] = state["waiter"], None
            waiter.succeed()

    def complete(i: int, seen: int) -> None:  # models.nic.completion.complete_at: in order
        state["finished"][i] = seen
        while state["next"] in state["finished"]:
            k = state["next"]
            state["next"] += 1
            seen = max(state["finished"].pop(k), state["last"])
            state["last"] = completed[k] = seen
            if not silent[k]:
                env.timeout(seen - env.now).callbacks.append(lambda _e, k=k, s=seen: deliver(k, s))

    issued = covered = 0
    start, rule = env.now, group.posts_while

    def posting() -> bool:
        return issued < n and (rule is None or bool(rule(np.array([env.now]), start)[0]))

    while True:
        while posting() and state["outstanding"] < window:
            posted[issued] = env.now
            state["outstanding"] += 1
            mine = group_of[issued]
            owner = _Owner(issued, holds[id(mine)], wakes[id(mine)], complete)
            env.step_runner.start(Operation(program(mine, issued), env.step_runner.number(), owner,
                                            {name: v[issued] for name, v in draws.items()}, gates,
                                            turns=turns, ticket=issued))
            issued += 1
        if all(silent[covered:issued]) and not posting():  # (unsignaled ones after the last signaled: never covered)
            break
        if state["entries"]:
            ev = simpy.Event(env)
            ev.succeed()
        else:
            ev = state["waiter"] = simpy.Event(env)
        yield ev  # (models.verbs.workloads.bandwidth: it takes at most ``polls`` at once, then waits again)
        taken = state["entries"][:group.polls]
        del state["entries"][:len(taken)]
        state["outstanding"] -= taken[-1] + 1 - covered
        covered = taken[-1] + 1
    return posted, completed, issued
