"""The step language of :mod:`sim.fast.steps` run by the event engine's own machinery: simpy, FifoServers
claimed by :func:`models.nic.datapath.walk`, a FIFO semaphore for gates, and the bandwidth workload's posting
loop with in-order completion delivery (as :mod:`models.verbs.workloads` and :mod:`models.nic.datapath` do it).

Covers window-posted groups whose main chain ends ``Rebase(True), Delay(draws=...), Wake()`` (the completion
is seen at that time and wakes the poster), any servers shared between positions, eager claims, gates and
forks.
"""

from __future__ import annotations

import simpy

from models.nic.datapath import walk
from sim.core import Environment, FifoServer
from sim.fast.steps import Claim, Delay, Fork, Gate, Group, Rebase, Server, Sleep, Wake


def run_simpy(servers: list[Server], groups: list[Group], start_ps: int = 0):
    """Posts and completions of every operation of every group, as lists of ints."""
    env = Environment()
    fifo = [FifoServer(s.name) for s in servers]
    if start_ps:
        env.run(until=start_ps)
    posts, dones = [], []
    streams: list[list[Group]] = []
    for group in groups:
        if group.first:
            streams[-1].append(group)  # continues the stream
        else:
            streams.append([group])
    for stream in streams:
        proc = env.process(_poster(env, fifo, stream))
        posted, completed = env.run(until=proc)
        for group in stream:
            posts.append(posted[group.first:group.ops])
            dones.append(completed[group.first:group.ops])
    return posts, dones


def _poster(env, fifo, stream: list[Group]):
    """One stream of operations: each group's steps from its ``first`` operation on."""
    group = stream[-1]
    n, window = group.ops, group.window
    draws = {name: [int(x) for x in d(0, n)] for name, d in group.draws.items()}
    gates = {s.release: simpy.Resource(env, capacity=s.slots) for s in group.steps if isinstance(s, Gate)}
    steps_of = [next(g for g in reversed(stream) if g.first <= i).steps for i in range(n)]
    posted, completed = [0] * n, [0] * n
    state = {"outstanding": 0, "next": 0, "last": 0, "finished": {}, "entries": 0, "waiter": None}

    def deliver(i: int, seen: int) -> None:
        completed[i] = seen
        state["outstanding"] -= 1
        state["entries"] += 1
        if state["waiter"] is not None:
            waiter, state["waiter"] = state["waiter"], None
            waiter.succeed()

    def complete(i: int, seen: int) -> None:  # models.nic.datapath._complete_at: in order
        state["finished"][i] = seen
        while state["next"] in state["finished"]:
            k = state["next"]
            state["next"] += 1
            seen = max(state["finished"].pop(k), state["last"])
            state["last"] = seen
            env.timeout(seen - env.now).callbacks.append(lambda _e, k=k, s=seen: deliver(k, s))

    issued = done = 0
    while done < n:
        while issued < n and state["outstanding"] < window:
            posted[issued] = env.now
            state["outstanding"] += 1
            env.start(_operation(env, fifo, steps_of[issued], issued, draws, gates, complete))
            issued += 1
        if state["entries"]:
            ev = simpy.Event(env)
            ev.succeed()
        else:
            ev = state["waiter"] = simpy.Event(env)
        yield ev
        done += state["entries"]
        state["entries"] = 0
    return posted, completed


def _operation(env, fifo, steps, i, draws, gates, complete, head=None, tail=None, main=True):
    head = env.now if head is None else head
    tail = head if tail is None else tail
    slots = {}
    for step in steps:
        if isinstance(step, Claim):
            stage = (fifo[step.server], step.service_ps, step.head_ps, step.tail_ps, step.latency_ps, step.eager)
            head, tail = yield from walk(env, [stage], head, tail)
            if step.label in slots:
                gates[step.label].release(slots.pop(step.label))
        elif isinstance(step, Delay):
            extra = step.ps + (draws[step.draws][i] if step.draws else 0)
            head, tail = head + extra, tail + extra
        elif isinstance(step, Rebase):
            head = tail = (tail if step.from_tail else head) + step.offset_ps
        elif isinstance(step, Gate):  # models.nic.datapath.run_work_request's read slot
            slots[step.release] = request = gates[step.release].request()
            if head > env.now:
                yield env.timeout(head - env.now)
            yield request
            head = tail = env.now
        elif isinstance(step, Sleep):  # models.nic.datapath's translation of an access (held while re-mapped)
            if head - step.back_ps > env.now:
                yield env.timeout(head - step.back_ps - env.now)
            for begin, end in step.holds:
                if begin <= env.now < end:
                    yield env.timeout(end - env.now)
                    head, tail = max(head, end), max(tail, end)
        elif isinstance(step, Fork):
            env.start(_operation(env, fifo, step.steps, i, draws, gates, complete, head, tail, main=False))
        elif isinstance(step, Wake) and main:
            complete(i, head)
