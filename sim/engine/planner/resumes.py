"""A run solved again goes on from the latest block of its last solve that the change leaves as it was
(:func:`sim.fast.resume.rebase`): the pieces that solve yielded before that block are handed on as they were, and
the vectorized core solves the rest. Each re-solve then costs what follows the change, not the whole run again."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import numpy as np

from sim.fast import Finished, solve
from sim.fast.resume import rebase
from sim.fast.state import State


class Resumes:
    """The states before each block of the solves so far and the pieces yielded before each, for the next solve."""

    def __init__(self, block: int = 16384, hand_on: bool = True) -> None:
        self.block = block
        """The most operations per stream a block takes (:func:`sim.fast.solve`)."""
        self.hand_on = hand_on
        """Go on from the latest state that holds (False: solve each time from the first operation, for
        comparison: ``bench/resolves.py``)."""
        self.saved: list[State] = []
        """The solver's states before each block, of the solves that are still to go on from (in order)."""
        self.before: list[int] = []
        """Per state of :attr:`saved`: the pieces yielded before it."""
        self.log: list[tuple[tuple[int, int], Finished]] = []
        """The pieces of the latest solve, ``((workload index, size), piece)`` in order."""

    def pieces(self, pipes, start_ps: int) -> Iterator[tuple[tuple[int, int], Finished]]:
        """Solve ``pipes`` (:class:`~sim.engine.planner.plan.Pipelines`) from ``start_ps``, from the latest state
        that still holds: yields ``((workload index, size), piece)`` in order, the pieces before that state first."""
        saved = self.saved if self.hand_on else []
        state, index = rebase(saved, pipes.servers, pipes.groups, start_ps, self._reached(pipes))
        kept = self.before[index] if index >= 0 else 0
        self.saved, self.before, log = self.saved[:index + 1], self.before[:index + 1], self.log[:kept]
        self.log = []
        for item in log:
            self.log.append(item)
            yield item
        for piece in solve(pipes.servers, pipes.groups, start_ps, self.block, resume=state,
                           save=self._save):
            item = (pipes.labels[piece.group], piece)
            self.log.append(item)
            yield item

    def _save(self, state: State) -> None:
        """The solver's ``save``: ``state`` comes before the pieces not yet yielded."""
        self.saved.append(state)
        self.before.append(len(self.log))

    def _reached(self, pipes):
        """:data:`sim.fast.resume.Reached` from the latest solve's pieces (streams numbered as in ``pipes``)."""
        firsts = [g for g, group in enumerate(pipes.groups) if not group.first]

        @cache  # (each of a stream's groups carries the same hold; each earlier problem asks again)
        def reached(stream: int, label: str, since: int) -> int:
            key = pipes.labels[firsts[stream]]
            for piece in (piece for k, piece in self.log if k == key):
                times = piece.marks.get(label)
                late = np.flatnonzero(times >= since) if times is not None else [0]
                if len(late):
                    return piece.lo + int(late[0])
            return pipes.ops[key]

        return reached
