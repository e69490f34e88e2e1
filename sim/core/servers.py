"""FIFO service centres solved by the recurrence ``start = max(arrival, free_at)``.

Both engines use these rules: the event engine claims a server at the simulated arrival time, the
vectorized core applies the same recurrence to arrays. A claim made in arrival order is an exact FIFO
queue; ties are served in claim order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


class FifoServer:
    """One server, first come first served; ``busy_ps`` accumulates service time for utilisation.

    ``stalls`` are ``[start, end)`` intervals (ps) in which no job starts (a link that is down): a job that
    would start inside one starts at its end; work already started is not interrupted. They are known in
    advance, so a claim made before a stall still respects it (the vectorized core's rule too).
    """

    __slots__ = ("name", "free_at", "busy_ps", "stalls")

    def __init__(self, name: str) -> None:
        self.name = name
        self.free_at = 0
        self.busy_ps = 0
        self.stalls: tuple[tuple[int, int], ...] = ()

    def add_stall(self, start: int, end: int) -> None:
        """No job starts in ``[start, end)`` (ps); intervals that touch or overlap are joined."""
        joined: list[tuple[int, int]] = []
        for s, e in sorted((*self.stalls, (int(start), int(end)))):
            if joined and s <= joined[-1][1]:
                joined[-1] = (joined[-1][0], max(joined[-1][1], e))
            else:
                joined.append((s, e))
        self.stalls = tuple(joined)

    def claim(self, arrival: int, service: int) -> tuple[int, int]:
        """Serve a job arriving at ``arrival`` needing ``service`` ps; return its (start, finish)."""
        start = arrival if arrival > self.free_at else self.free_at
        if self.stalls:
            start = after_stalls(self.stalls, start)
        finish = start + service
        self.free_at = finish
        self.busy_ps += service
        return start, finish


class ServerPool:
    """``k`` identical FIFO servers fed by one queue: a job takes the server that frees first."""

    __slots__ = ("name", "_free", "busy_ps")

    def __init__(self, name: str, servers: int) -> None:
        if servers < 1:
            raise ValueError(f"{name}: a server pool needs at least one server, got {servers}")
        self.name = name
        self._free = [0] * servers
        self.busy_ps = 0

    def claim(self, arrival: int, service: int) -> tuple[int, int]:
        """Serve a job arriving at ``arrival``; return its (start, finish)."""
        earliest = self._free[0]
        start = arrival if arrival > earliest else earliest
        finish = start + service
        heapq.heapreplace(self._free, finish)
        self.busy_ps += service
        return start, finish


def claim_cut_through(server: FifoServer, arrival: int, service: int, not_before: int) -> tuple[int, int]:
    """Claim ``server`` for a message streamed through it cut-through style.

    The head arrives at ``arrival``; the message occupies the server for ``service`` ps but cannot finish
    before ``not_before`` (its tail has not arrived yet). The server stays busy until the finish; it starts
    nothing inside its stall intervals. Returns (start, finish).
    """
    return claim_chain(((server, service, 0, 0, 0),), arrival, not_before)


def claim_chain(claims: tuple, head: int, tail: int, trace: Callable | None = None) -> tuple[int, int]:
    """Stream a message whose head arrives at ``head`` and tail at ``tail`` through ``claims`` one after the
    other, each ``(server, service_ps, lead_ps, tail_ps, latency_ps)``: the claim of :func:`claim_cut_through`
    with the tail no earlier than ``tail + tail_ps``; the head goes on ``lead_ps`` after the start, the tail
    ``latency_ps`` after the finish. ``trace(server.name, "busy", start, finish)`` is told each claim. Returns
    the head and tail after the last claim.
    """
    for server, service, lead, tail_ps, latency in claims:
        start = head if head > server.free_at else server.free_at
        if server.stalls:
            start = after_stalls(server.stalls, start)
        finish = start + service
        tail += tail_ps
        if tail > finish:
            finish = tail
        server.busy_ps += finish - start
        server.free_at = finish
        if trace is not None:
            trace(server.name, "busy", start, finish)
        head, tail = start + lead, finish + latency
    return head, tail


def after_stalls(stalls: tuple[tuple[int, int], ...], t: int) -> int:
    """``t``, or the end of the (sorted, disjoint) stall interval that contains it."""
    for start, end in stalls:
        if start <= t < end:
            return end
        if start > t:
            break
    return t
