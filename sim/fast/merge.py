"""Claims on one server from several pipeline positions, put in the order the event engine makes them.

The event engine claims a server while processing an event, so claims are ordered by the key of that event:
the time it fires (``wake``), then the time it was created (``created``: an event created earlier has a
lower sequence number). Claims of one position come in operation order. Two claims of different positions
with equal keys were made in the order their creators ran, which the events further back decide: the claims'
origins (the creation times of the events that woke their creators, and so on, :data:`DEPTH` deep), where the
solver follows them. Where those do not tell them apart either, the solver reports the earliest such time so
that a caller can refuse the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNKNOWN = -1
"""An origin the core did not follow (times are never negative)."""
DEPTH = 4
"""Origins kept per claim: the creation times of the events further back in its creator's history."""


@dataclass
class Claims:
    """Claims on one server, one entry per claim (arrays of equal length, times in ps)."""

    wake: np.ndarray
    created: np.ndarray
    head: np.ndarray
    not_before: np.ndarray
    service: np.ndarray
    pos: np.ndarray
    """Pipeline position of each claim."""
    seq: np.ndarray
    """Operation sequence number of each claim."""
    origin: np.ndarray | None
    """Per claim (rows of :data:`DEPTH`; None: not followed): when the event that woke the process creating
    the claim's event was created, then the one that woke that process's creator, and so on (:data:`UNKNOWN`
    from where the core did not follow them). Orders equal keys of different positions."""
    finish: np.ndarray | None = None

    FIELDS = ("wake", "created", "head", "not_before", "service", "pos", "seq", "origin", "finish")

    def __len__(self) -> int:
        return len(self.wake)

    def take(self, index) -> Claims:
        """A subset (or reordering) of the claims."""
        return Claims(*(None if getattr(self, f) is None else getattr(self, f)[index] for f in self.FIELDS))


def concat(parts: list[Claims]) -> Claims:
    """The claims of all ``parts`` one after the other (an optional field is kept if every part has it)."""
    return Claims(*(np.concatenate([getattr(p, f) for p in parts])
                    if all(getattr(p, f) is not None for p in parts) else None for f in Claims.FIELDS))


class Joined:
    """Claims of several parts laid end to end, each field built when first needed.

    A part is a :class:`Claims` or a per-position record (arrays ``wake``, ``created``, ``head``,
    ``not_before``; scalars ``service``, ``pos``; first operation ``seq0``). Serving needs only times;
    positions and creation times are needed when times tie, operation numbers when claims are carried over.
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
            self._fields[name] = np.concatenate([self._part(p, name) for p in self.parts])
        return self._fields[name]

    @staticmethod
    def _part(part, name: str) -> np.ndarray:
        n = len(part.wake)
        if name == "origin" and part.origin is None:
            return np.full((n, DEPTH), UNKNOWN, np.int64)
        if isinstance(part, Claims):
            return getattr(part, name)
        if name == "seq":
            return np.arange(part.seq0, part.seq0 + n, dtype=np.int64)
        if name in ("service", "pos"):
            return np.full(n, getattr(part, name), np.int64)
        return getattr(part, name)

    def take(self, index: np.ndarray) -> Claims:
        """The claims at positions ``index`` (an integer array, usually short), every field included."""
        bounds = np.cumsum([0] + [len(p.wake) for p in self.parts])
        part = np.searchsorted(bounds, index, side="right") - 1
        local = index - bounds[part]
        fields = []
        for name in Claims.FIELDS[:-1]:
            if name == "origin" and all(p.origin is None for p in self.parts):
                fields.append(None)  # not followed
                continue
            out = np.empty((len(index), DEPTH) if name == "origin" else len(index), np.int64)
            for k, p in enumerate(self.parts):
                mine = part == k
                if mine.any():
                    out[mine] = self._part(p, name)[local[mine]]
            fields.append(out)
        return Claims(*fields, None if self.finish is None else self.finish[index])


def key_order(claims: Claims | Joined) -> tuple[np.ndarray, int | None, bool]:
    """The service order of ``claims`` (given grouped by position, each position in operation order).

    Returns the order, the earliest wake of two claims of different positions with equal keys that their
    origins do not tell apart (None if there are none), and whether origins decided any order.
    """
    order = np.argsort(claims.wake, kind="stable")
    wake = np.take(claims.wake, order)
    equal = wake[1:] == wake[:-1]
    if not equal.any():
        return order, None, False
    pos = claims.pos[order]
    if not (equal & (pos[1:] != pos[:-1])).any():
        return order, None, False
    order = np.lexsort((np.arange(len(claims)), claims.created, claims.wake))
    wake, created, pos = claims.wake[order], claims.created[order], claims.pos[order]
    same = (wake[1:] == wake[:-1]) & (created[1:] == created[:-1])
    if not (same & (pos[1:] != pos[:-1])).any():
        return order, None, False
    # Equal keys from different positions: the events were created in the order their creators ran, which
    # the creators' own keys decide (their origins), when the core followed them and they differ.
    first = np.flatnonzero(np.concatenate(([True], ~same)))
    last = np.append(first[1:], len(order))
    origin, tie, decided = claims.origin[order], None, False
    for a, b in zip(first[last - first > 1], last[last - first > 1]):
        if (pos[a:b] == pos[a]).all():
            continue
        rank = np.lexsort(origin[a:b].T[::-1])
        rows = origin[a:b][rank]
        differ = rows[1:] != rows[:-1]
        where = differ.argmax(axis=1)  # unknown origins are a suffix: the first difference must be known
        pairs = np.arange(len(where))
        known = (rows[:-1][pairs, where] != UNKNOWN) & (rows[1:][pairs, where] != UNKNOWN)
        if not (differ.any(axis=1) & known).all():
            tie = int(wake[a]) if tie is None else min(tie, int(wake[a]))
            continue
        order[a:b] = order[a:b][rank]
        decided = True
    return order, tie, decided
