"""Straightforward scalar references for the vectorized core: one operation at a time, one step at a time.

:func:`run_pipelines` handles pipelines whose servers are each claimed from one pipeline position (so every
server serves operations in operation order): the recurrences of :mod:`sim.core.servers`, posts released by
the completion ``window`` operations back, gates, forks, detours, waits. Pools are served with a heap, stalls by
moving a start out of a stall interval.
"""

from __future__ import annotations

import heapq

from sim.core.steps import Check, Claim, Delay, Detour, Fork, Gate, Rebase, Wait, Wake
from sim.fast.steps import Group, Server


def run_pipelines(servers: list[Server], groups: list[Group], start_ps: int = 0):
    """Posts and completions of every operation of every group, as lists of ints (a group continuing a
    stream, ``first`` > 0, is posted by that stream's completions)."""
    free = [[0] * s.count if s.count > 1 else 0 for s in servers]
    posts_all, done_all = [], []
    begin, done, released = start_ps, [], {}
    for group in groups:
        if not group.first:
            begin, done, released = (done[-1] if done else begin), [], {}
        draws = {name: [int(x) for x in d(0, group.ops)] for name, d in group.draws.items()}
        posts = []
        for i in range(group.first, group.ops):
            post = begin if i < group.window else done[i - group.window]
            ctx = {"i": i, "draws": draws, "released": released, "free": free, "servers": servers}
            end = _walk(group.steps, post, post, ctx)[0]
            done.append(end if i == 0 else max(end, done[-1]))
            posts.append(post)
        posts_all.append(posts)
        done_all.append(done[group.first:])
    return posts_all, done_all


def _walk(steps, head: int, tail: int, ctx, wake: int | None = None) -> tuple[int, int, int]:
    """One operation's chain ``steps`` from ``head`` and ``tail``: its final head, tail and wake."""
    i = ctx["i"]
    wake = head if wake is None else wake
    for step in steps:
        if isinstance(step, Claim):
            if not step.eager:
                wake = head
            start, finish = _claim(ctx, step.server, head, step.service_ps, tail + step.tail_ps)
            if step.label is not None:
                ctx["released"].setdefault(step.label, {})[i] = wake
            head, tail = start + step.head_ps + step.latency_ps, finish + step.latency_ps
        elif isinstance(step, Delay):
            extra = step.ps + (ctx["draws"][step.draws][i] if step.draws else 0)
            head, tail = head + extra, tail + extra
        elif isinstance(step, Rebase):
            head = tail = (tail if step.from_tail else head) + step.offset_ps
        elif isinstance(step, Wake):
            wake = head
        elif isinstance(step, Check) and step.back_ps is not None:
            wake = max(wake, head - step.back_ps)
            for begin, end in step.holds:
                if begin <= wake < end:
                    wake, head, tail = end, max(head, end), max(tail, end)
        elif isinstance(step, Wait):
            wake = head = tail = wake + ctx["draws"][step.draws][i]
        elif isinstance(step, Gate):
            source = ctx["released"].get(step.release, {}).get(i - step.slots)
            head = tail = wake = head if source is None else max(head, source)
        elif isinstance(step, Fork):
            _walk(step.steps, head, tail, ctx, wake)
        elif isinstance(step, Detour):
            kept = tail
            head, _, wake = _walk(step.steps, head, head, ctx, wake)
            tail = max(kept, head)
    return head, tail, wake


def _claim(ctx, index: int, head: int, service: int, not_before: int) -> tuple[int, int]:
    server, free = ctx["servers"][index], ctx["free"]
    if server.count > 1:
        start = max(head, free[index][0])
        finish = max(start + service, not_before)
        heapq.heapreplace(free[index], finish)
        return start, finish
    start = max(head, free[index])
    for a, b in server.stalls:
        if a <= start < b:
            start = b
    finish = max(start + service, not_before)
    free[index] = finish
    return start, finish
