"""Claims on one server from several pipeline positions, put in the ordering rule's order.

The rule (:mod:`sim.core.steps`): claims are made in order of the time of the step that makes them (``wake``:
the claim itself, or for an eager claim the waiting step before it), then of that step's position in the step
list (``wpos``; a model event comes first), then of the operation's number, then of the claim's own position
(``pos``). Claims of one position come in operation order. Operations are numbered in posting order: by post time
(``post``), then by ``seq``, which numbers them stream by stream (concurrent streams in the order they start, see
:attr:`sim.fast.steps.Group.parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Claims:
    """Claims on one server, one entry per claim (arrays of equal length, times in ps)."""

    wake: np.ndarray
    wpos: np.ndarray
    head: np.ndarray
    not_before: np.ndarray
    service: np.ndarray
    pos: np.ndarray
    """Pipeline position of each claim."""
    seq: np.ndarray
    """Operation sequence number of each claim."""
    post: np.ndarray
    """When each claim's operation was posted (ps)."""
    finish: np.ndarray | None = None

    FIELDS = ("wake", "wpos", "head", "not_before", "service", "pos", "seq", "post", "finish")

    def __len__(self) -> int:
        return len(self.wake)

    def take(self, index) -> Claims:
        """A subset (or reordering) of the claims."""
        return Claims(*(None if getattr(self, f) is None else getattr(self, f)[index] for f in self.FIELDS))


def concat(parts: list[Claims]) -> Claims:
    """The claims of all ``parts`` one after the other (``finish`` kept if every part has it)."""
    return Claims(*(np.concatenate([getattr(p, f) for p in parts])
                    if all(getattr(p, f) is not None for p in parts) else None for f in Claims.FIELDS))


class Joined:
    """Claims of several parts laid end to end, each field built when first needed.

    A part is a :class:`Claims` or a per-position record (arrays ``wake``, ``head``, ``not_before``, ``post``;
    scalars ``service``, ``pos``; ``wpos`` a scalar or per claim; first operation ``seq0``). Serving needs only
    times; the rest is needed when times tie or claims are carried over.
    """

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self._fields: dict[str, np.ndarray] = {}
        self.start: np.ndarray | None = None
        self.finish: np.ndarray | None = None

    def __len__(self) -> int:
        return sum(len(p.wake) for p in self.parts)

    def __getattr__(self, name: str) -> np.ndarray:
        if name not in Claims.FIELDS or name in ("finish", "start"):
            raise AttributeError(name)
        if name not in self._fields:
            self._fields[name] = np.concatenate([per_claim(p, name) for p in self.parts])
        return self._fields[name]

    def take(self, index: np.ndarray) -> Claims:
        """The claims at positions ``index`` (an integer array, usually short), every field included."""
        bounds = np.cumsum([0] + [len(p.wake) for p in self.parts])
        part = np.searchsorted(bounds, index, side="right") - 1
        local = index - bounds[part]
        fields = []
        for name in Claims.FIELDS[:-1]:
            out = np.empty(len(index), np.int64)
            for k, p in enumerate(self.parts):
                mine = part == k
                if mine.any():
                    out[mine] = per_claim(p, name)[local[mine]]
            fields.append(out)
        return Claims(*fields, None if self.finish is None else self.finish[index])


def per_claim(part, name: str) -> np.ndarray:
    """Field ``name`` of a :class:`Claims` or a per-position record (see :class:`Joined`), one entry per claim."""
    if isinstance(part, Claims) or name not in ("seq", "service", "pos", "wpos") or (
            name == "wpos" and np.ndim(part.wpos)):
        return getattr(part, name)
    n = len(part.wake)
    return np.arange(part.seq0, part.seq0 + n, dtype=np.int64) if name == "seq" else np.full(n, getattr(part, name),
                                                                                             np.int64)


def key_order(claims: Claims | Joined) -> np.ndarray:
    """The service order of ``claims`` (given grouped by position, each position in operation order)."""
    order = np.argsort(claims.wake, kind="stable")
    wake = np.take(claims.wake, order)
    equal = wake[1:] == wake[:-1]
    if not equal.any():
        return order
    pos = claims.pos[order]
    if not (equal & (pos[1:] != pos[:-1])).any():
        return order
    return np.lexsort((claims.pos, claims.seq, claims.post, claims.wpos, claims.wake))
