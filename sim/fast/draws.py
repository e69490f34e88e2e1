"""Per-operation random values as arrays, the same numbers the event engine draws one at a time.

:class:`UniformSeries` reproduces :class:`sim.core.env.UniformDraws` (integers uniform in ``[0, high]``,
generated in blocks from one named stream) as a sliding window over the sequence, so a solver can ask for a
range again while it re-solves a block and memory stays bounded.

>>> import numpy as np
>>> from sim.core.env import UniformDraws
>>> one = UniformDraws(np.random.default_rng(3), 40)
>>> series = UniformSeries(np.random.default_rng(3), 40)
>>> series.take(0, 5).tolist() == [one.next() for _ in range(5)]
True
"""

from __future__ import annotations

import copy

import numpy as np

from sim.core.env import DRAW_BLOCK, UniformDraws


class UniformSeries:
    """Draws ``0..`` of a :class:`~sim.core.env.UniformDraws` sequence, kept from the oldest still needed."""

    def __init__(self, rng: np.random.Generator, high: int, block: int = DRAW_BLOCK) -> None:
        self._rng, self._high, self._block = rng, int(high), block
        self._values = np.empty(0, np.int64)
        self._first = 0
        """Index of ``_values[0]`` in the sequence (a multiple of ``block``)."""
        self._kept = 0
        """Index of the first draw that may still be asked for (a multiple of ``block``)."""

    @classmethod
    def following(cls, draws: UniformDraws) -> UniformSeries:
        """The series ``draws`` will hand out (it must not have handed out any yet), from a copy of its stream:
        ``draws`` itself is left as it was, so the series can be made again."""
        if draws.started:
            raise ValueError("UniformDraws already drawn from: its series no longer starts at its first draw")
        return cls(copy.deepcopy(draws.rng), draws.high, draws.block)

    def take(self, lo: int, hi: int, step: int = 1) -> np.ndarray:
        """Draws ``lo, lo + step, ...`` below ``hi`` (int64).

        :raises IndexError: a draw before one already released by :meth:`release`.
        """
        if lo < self._kept:
            raise IndexError(f"draw {lo} was released (kept from {self._kept})")
        if self._high == 0:
            return np.zeros(len(range(lo, hi, step)), np.int64)
        missing = hi - (self._first + len(self._values))
        if missing > 0:  # one call draws the same numbers as one call per block
            fresh = self._rng.integers(0, self._high + 1, size=-(-missing // self._block) * self._block)
            kept = min(self._kept, self._first + len(self._values))
            old = self._values[kept - self._first:]
            self._values = np.concatenate((old, fresh)) if len(old) else fresh
            self._first = kept
        return self._values[lo - self._first:hi - self._first:step]

    def release(self, lo: int) -> None:
        """Draws before ``lo`` will not be asked for again (their blocks are dropped when more are drawn)."""
        self._kept = max(self._kept, lo // self._block * self._block)
