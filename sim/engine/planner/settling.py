"""Decisions the model makes per operation from the run's own times (the RNR NAKs a request gets, the frames an
outage loses), on the vectorized core: a stream is solved with the decisions guessed so far, each is checked
against the complete solve and, where one differs, solved again with the solve's answer until every one holds.

Only the operations before the first that differs are sure of their times; those posted before that one
completes keep the solve's answer, and those its completion posts start again from none, since the change moves
them (:meth:`Settling.revise`).
"""

from __future__ import annotations

import numpy as np

MAX_SETTLES = 24
"""Solves the decisions may take to settle before the event engine is asked to simulate the run."""


def windows(ends) -> dict[int, int]:
    """Per stream of ``ends``: its window, the operations posted before one completes (what :meth:`Settling.revise`
    keeps the solve's answer for)."""
    return {k: end.work.rule.window(end.work.tx_depth) for k, end in enumerate(ends)}


class Settling:
    """Per (stream, size), one decision per operation (0: none), and how many solves they took."""

    what = "the decisions"
    """What the decisions are, for the message when they do not settle."""

    def __init__(self, depth: dict[int, int]) -> None:
        self.decided: dict[tuple[int, int], np.ndarray] = {}
        self.settles = 0
        self.depth = depth
        """Per stream: its window (:func:`windows`)."""

    def runs(self, key: tuple[int, int], lo: int, hi: int) -> list[tuple[int, int, int]]:
        """Operations ``lo..hi-1`` of ``key`` as ``(lo, hi, decision)`` runs of one decision each."""
        decided = self.decided.get(key)
        if decided is None or not decided[lo:hi].any():
            return [(lo, hi, 0)]
        mine = decided[lo:hi]
        cuts = [lo, *(lo + 1 + np.flatnonzero(mine[1:] != mine[:-1])).tolist(), hi]
        return [(a, b, int(decided[a])) for a, b in zip(cuts, cuts[1:])]

    def of(self, stream: int, size: int | None = None) -> list[np.ndarray]:
        """``stream``'s decisions, one array per message size (``size``'s alone, where given)."""
        return [decided for (k, s), decided in self.decided.items() if k == stream and size in (None, s)]

    def total(self, stream: int, size: int | None = None) -> int:
        """The sum of ``stream``'s decisions (at message ``size`` alone, where given)."""
        return int(sum(decided.sum() for decided in self.of(stream, size)))

    def revise(self, key: tuple[int, int], wanted: np.ndarray) -> bool:
        """Keep for the next solve of ``key`` what a complete solve says (``wanted``) from the first operation
        whose decision differs, for those posted before it completes (the stream's window, :attr:`depth`), none
        for those its completion posts; False when every decision holds."""
        old = self.decided.get(key, np.zeros(len(wanted), wanted.dtype))
        differ = np.flatnonzero(wanted != old)
        if not len(differ):
            return False
        c = int(differ[0])
        wanted = wanted.copy()
        wanted[c + self.depth[key[0]]:] = 0
        self.decided[key] = np.concatenate((old[:c], wanted[c:]))
        return True

    def counted(self, changed: bool) -> bool:
        """``changed``, one more solve counted when it is.

        :raises OverflowError: the decisions did not settle in :data:`MAX_SETTLES` solves.
        """
        if changed:
            self.settles += 1
            if self.settles > MAX_SETTLES:
                raise OverflowError(f"{self.what} did not settle in {MAX_SETTLES} solves")
        return changed
