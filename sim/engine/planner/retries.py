"""RNR NAKs of requests that reach a responder's buffer while its exporter moves it, on the vectorized core.

When ``move_notify`` zaps a dynamic dma-buf MR that a stream's requests reach at the responder (a READ's source, a
WRITE's sink), the first request to reach it after the zap re-faults (the watch makes that very access on the
testbed at its time, :meth:`sim.engine.planner.events.Watch.fold`), and every request that reaches it before the
re-fault is done is answered with an RNR NAK: the requester sends it again once the NAK is back and the responder's
min_rnr_timer has passed (:meth:`models.nic.retransmit.Retransmission._rnr_nak`), as often as it arrives inside the
re-fault (``rnr_retry`` 7: for ever). How many NAKs each request gets depends on when it arrives, which the retries
of the requests ahead of it move: each count is settled against the solve (:meth:`Retries.settle`) and the stream
solved again with the steps of :func:`models.nic.retransmit.rnr_retried` until every count holds. Each attempt's
responder check is labelled ``remote0``, ``remote1``, ... (:func:`attempts_labelled`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from models.nic.datapath import Path
from models.nic.retransmit import rnr_retried
from sim.core.steps import Check
from sim.engine.planner.errors import NONE
from sim.engine.planner.settling import Settling

REMOTE = "remote"
"""The label prefix of a request's checks at the responder, one per attempt."""


def attempts_labelled(steps: tuple) -> tuple:
    """``steps`` with their responder checks labelled :data:`REMOTE` and the attempt's number, in order."""
    out, n = [], 0
    for step in steps:
        if isinstance(step, Check) and step.name == "responder":
            step, n = replace(step, label=f"{REMOTE}{n}"), n + 1
        out.append(step)
    return tuple(out)


class Retries(Settling):
    """The windows in which each stream's responder buffer answers RNR NAKs (``[first access, re-fault done)``, ps)
    and the NAKs each operation gets, by (stream, size)."""

    what = "the RNR NAK counts"

    def __init__(self, depth: dict[int, int]) -> None:
        super().__init__(depth)
        self.windows: dict[int, list[tuple[int, int]]] = {}
        self.pending = False
        """A window came or a count changed since a complete solve last held every count: the times after the
        first window are not sure yet (:meth:`sim.engine.planner.events.Watch.follow` steps no event then)."""

    def open(self, k: int, window: tuple[int, int]) -> None:
        """Stream ``k``'s responder buffer answers RNR NAKs in ``window`` (``[first access, re-fault done)``, ps)."""
        self.windows.setdefault(k, []).append(window)
        self.pending = True

    def parts(self, key: tuple[int, int], lo: int, hi: int, found: Path, min_rnr_timer_ps: int):
        """Operations ``lo..hi-1`` of ``key`` (stream, size) of path ``found`` as ``(lo, hi, steps)`` runs of one
        count of RNR NAKs each."""
        return [(a, b, rnr_retried(found, count, min_rnr_timer_ps)) for a, b, count in self.runs(key, lo, hi)]

    def settle(self, marks: dict[tuple[int, int], dict[str, np.ndarray]]) -> bool:
        """Check each operation's count against a complete solve's ``marks`` (its attempts' times at the responder):
        every attempt but the last inside a window, the last outside. Where one differs, the count the solve says
        (attempts that came out of the window earlier; or, when the last one still came inside, as many more as
        fit in the rest of the window at the spacing of its last two) goes to the next solve
        (:meth:`~sim.engine.planner.settling.Settling.revise`): True then."""
        changed = False
        for (k, size), labelled in marks.items():
            windows = self.windows.get(k)
            if not windows:
                continue
            first = labelled[f"{REMOTE}0"]
            counts = self.decided.get((k, size), np.zeros(len(first), np.int64))
            times = np.stack([labelled.get(f"{REMOTE}{a}", np.full(len(first), NONE))
                              for a in range(int(counts.max(initial=0)) + 1)])
            inside = np.zeros(times.shape, bool)
            end = np.zeros(times.shape, np.int64)
            for start, stop in windows:
                hit = (times >= start) & (times < stop)
                inside |= hit
                end = np.where(hit, stop, end)
            made = np.arange(len(times))[:, None] <= counts  # the attempts each operation made
            naked = np.cumprod(inside & made, axis=0).sum(axis=0)  # its leading attempts answered with a NAK
            wanted = naked.copy()
            more = naked > counts  # every attempt came inside: more follow
            for i in np.flatnonzero(more):
                r = int(counts[i])
                last = int(times[r, i])
                period = last - int(times[r - 1, i]) if r else 0
                wanted[i] = r + 1 + (max(0, -(-(int(end[r, i]) - last) // period) - 1) if period > 0 else 0)
            if more.any():  # the operations still inside go on together (one group): the most any of them needs
                wanted[more] = wanted[more].max()
            changed = self.revise((k, size), wanted) or changed
        self.pending = changed
        return self.counted(changed)
