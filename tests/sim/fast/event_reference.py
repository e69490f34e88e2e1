"""The vectorized core's groups run by the event engine's own machinery: simpy, the data path's step
interpreter (:mod:`sim.core.interpreter`) on real FifoServers, a FIFO semaphore per gate, and a posting loop
with in-order completion delivery as the bandwidth workloads have it (:mod:`models.verbs.workloads`).

Covers window-posted groups (posting while :attr:`~sim.fast.steps.Group.posts_while` allows, when it is set;
several streams at once where groups are parallel) whose main chain ends with a :class:`~sim.core.steps.Wake`
(the completion is seen then and wakes the poster), any servers shared between positions, eager claims, gates,
forks, detours, waits, claims in turns (a stream's own, numbered in posting order) and checks held in their
hold intervals.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import simpy

from sim.core import Environment, FifoServer
from sim.core.interpreter import Operation, Semaphore, Turns, compile_steps
from sim.core.steps import Check, Claim, Detour, Fork, Gate, Wake, walk_order
from sim.fast.steps import Group, Server


def run_events(servers: list[Server], groups: list[Group], start_ps: int = 0):
    """Posts and completions of every operation of every group, as lists of ints."""
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
    for streams in rounds:
        procs = [env.process(_poster(env, fifo, stream)) for stream in streams]
        env.run(until=env.all_of(procs))
        for stream, proc in zip(streams, procs):
            posted, completed = proc.value
            for group in stream:
                posts.append(posted[group.first:group.ops])
                dones.append(completed[group.first:group.ops])
    return posts, dones


def _served(steps, fifo) -> tuple:
    """``steps`` with the servers' indices replaced by the FifoServers."""
    out = []
    for step in steps:
        if isinstance(step, Claim):
            step = replace(step, server=fifo[step.server])
        elif isinstance(step, (Fork, Detour)):
            step = replace(step, steps=_served(step.steps, fifo))
        out.append(step)
    return tuple(out)


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


def _poster(env, fifo, stream: list[Group]):
    """One stream of operations: each group's steps from its ``first`` operation on."""
    group = stream[-1]
    n, window = group.ops, group.window
    draws = {name: [int(x) for x in d(0, n)] for name, d in group.draws.items()}
    gates = {s.release: Semaphore(s.slots) for s in walk_order(group.steps) if isinstance(s, Gate)}
    turns = {s.turn: Turns() for g in stream for s in walk_order(g.steps) if isinstance(s, Claim) and s.turn}
    programs = {id(g): compile_steps(_served(g.steps, fifo)) for g in stream}
    holds = {id(g): {s.name: s.holds for s in walk_order(g.steps) if isinstance(s, Check)} for g in stream}
    wakes = {id(g): sum(isinstance(s, Wake) for s in g.steps) for g in stream}
    group_of = [next(g for g in reversed(stream) if g.first <= i) for i in range(n)]
    posted, completed = [0] * n, [0] * n
    state = {"outstanding": 0, "next": 0, "last": 0, "finished": {}, "entries": 0, "waiter": None}

    def deliver(i: int, seen: int) -> None:
        completed[i] = seen
        state["entries"] += 1
        if state["waiter"] is not None:
            waiter, state["waiter"] = state["waiter"], None
            waiter.succeed()

    def complete(i: int, seen: int) -> None:  # models.nic.completion.complete_at: in order
        state["finished"][i] = seen
        while state["next"] in state["finished"]:
            k = state["next"]
            state["next"] += 1
            seen = max(state["finished"].pop(k), state["last"])
            state["last"] = seen
            env.timeout(seen - env.now).callbacks.append(lambda _e, k=k, s=seen: deliver(k, s))

    issued = done = 0
    start, rule = env.now, group.posts_while

    def posting() -> bool:
        return issued < n and (rule is None or bool(rule(np.array([env.now]), start)[0]))

    while done < issued or posting():
        while posting() and state["outstanding"] < window:
            posted[issued] = env.now
            state["outstanding"] += 1
            mine = group_of[issued]
            owner = _Owner(issued, holds[id(mine)], wakes[id(mine)], complete)
            env.step_runner.start(Operation(programs[id(mine)], env.step_runner.number(), owner,
                                            {name: v[issued] for name, v in draws.items()}, gates,
                                            turns=turns, ticket=issued))
            issued += 1
        if state["entries"]:
            ev = simpy.Event(env)
            ev.succeed()
        else:
            ev = state["waiter"] = simpy.Event(env)
        yield ev  # (models.verbs.workloads.bandwidth: it takes at most ``polls`` at once, then waits again)
        taken = state["entries"] if group.polls is None else min(state["entries"], group.polls)
        done += taken
        state["outstanding"] -= taken
        state["entries"] -= taken
    return posted[:issued], completed[:issued]
