"""The merge_reuse acceleration (:attr:`sim.fast.Speedups.merge_reuse`): each server merged in a pass keeps its claims
in a :class:`Book` that learns which positions the pass has made since its last merge, so a merge looks at those
alone, not at every position of the server; the last service order stands while none of them changed, and the
claims joined end to end are patched, not joined again, where only a few changed
(:meth:`sim.fast.block_pass.Pass._merge`)."""

from __future__ import annotations

import numpy as np

from sim.fast.merge import Joined, per_claim


class Book:
    """One server's claims in one pass, in the order a merge lays them end to end: the pending claims carried over
    (a :class:`~sim.fast.merge.Claims`, where there are any), then each of its ``positions``' (``parts``: a record,
    the pass's own once made and the last pass's guess before; None where a position has neither)."""

    def __init__(self, pending, positions: list[int], parts: list) -> None:
        first = pending is not None
        self.slot = {pos: k for k, pos in enumerate(positions, start=first)}
        """Per position: its place in :attr:`parts`."""
        self.parts = [pending] * first + parts
        self.fresh: list[int] = []
        """Positions the pass made since the last merge (:meth:`sim.fast.block_pass.Pass._claim` tells)."""
        self.last: Joined | None = None
        """The last join."""
        self.index: dict[int, int] = {}
        """Per place in :attr:`parts` holding claims: its part's number in the last join."""
        self.starts: dict[int, int] = {}
        """Per place in :attr:`parts` holding claims: where they start in the last join."""
        self.changed: set[int] = set()
        """Places in :attr:`parts` whose claims changed since the last join."""
        self.regrown = True
        """A place that held no claims got some since the last join: its layout changed."""

    def join(self, current: dict) -> Joined | None:
        """The server's claims with the positions made since the last merge in place (``current``: the pass's
        records by position); None where none of them changed, so the last service order stands."""
        for pos in self.fresh:
            k = self.slot[pos]
            new, old = current[pos], self.parts[k]
            if new is old:
                continue
            self.parts[k] = new
            if old is None:
                self.regrown = True
            elif not new.same_inputs(old):
                self.changed.add(k)
        self.fresh.clear()
        if self.last is not None and not self.changed and not self.regrown:
            return None
        joined = None if self.regrown else patched(self.last, [p for p in self.parts if p is not None],
                                                   [self.index[k] for k in self.changed])
        if joined is None:
            present = [k for k, p in enumerate(self.parts) if p is not None]
            joined = Joined([self.parts[k] for k in present])
            self.index = {k: i for i, k in enumerate(present)}
            ends = np.cumsum(joined.lengths).tolist()
            self.starts = {k: end - int(n) for k, end, n in zip(present, ends, joined.lengths)}
        self.last, self.changed, self.regrown = joined, set(), False
        return joined

    def start(self, pos: int) -> int:
        """Where ``pos``'s claims start in the last join."""
        return self.starts[self.slot[pos]]


class Books(dict):
    """The :class:`Book` of each server a pass has merged; without ``reuse`` none is kept: each merge joins all the
    server's claims again."""

    def __init__(self, reuse: bool = True) -> None:
        super().__init__()
        self.reuse = reuse

    def made(self, server: int, pos: int) -> None:
        """Position ``pos`` of the pass made its claims on ``server``."""
        if server in self:
            self[server].fresh.append(pos)

    def join(self, server: int, pos: int, parts, current: dict) -> tuple[Joined | None, int]:
        """:meth:`Book.join` of ``server``'s book (begun from ``parts()``: the pending claims, the server's positions
        and their claims, where there is none yet), and where ``pos``'s claims start in the last join."""
        book = self.get(server)
        if book is None:
            book = Book(*parts())
            if self.reuse:
                self[server] = book
        return book.join(current), book.start(pos)


def patched(joined: Joined, parts: list, changed: list[int]) -> Joined | None:
    """The same join as ``joined`` for ``parts``, which differ from its parts only at ``changed`` (indices into
    ``parts``): the fields built so far are copied and those parts' claims written over them; None where a length
    differs or more than a quarter of the parts changed (then a new join is about as cheap)."""
    if 4 * len(changed) > len(parts) or any(len(parts[k].wake) != joined.lengths[k] for k in changed):
        return None
    out = Joined(parts, joined.lengths)
    ends = np.cumsum(joined.lengths)
    for name, field in joined.built.items():
        field = out.built[name] = field.copy()
        for k in changed:
            field[ends[k] - joined.lengths[k]:ends[k]] = per_claim(parts[k], name)
    return out
