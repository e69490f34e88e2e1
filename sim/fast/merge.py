"""Claims on one server from several pipeline positions, put in the order the event engine makes them.

The event engine claims a server while processing an event, so claims are ordered by the key of that event:
the time it fires (``wake``), then the time it was created (``created``: an event created earlier has a
lower sequence number). Claims of one position come in operation order. Two claims of different positions
with equal keys were made in an order that the key does not decide (it depends on events further back);
the solver reports the earliest such time so that a caller can refuse the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    finish: np.ndarray | None = None

    FIELDS = ("wake", "created", "head", "not_before", "service", "pos", "seq", "finish")

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
        if isinstance(part, Claims):
            return getattr(part, name)
        n = len(part.wake)
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
            out = np.empty(len(index), np.int64)
            for k, p in enumerate(self.parts):
                mine = part == k
                if mine.any():
                    out[mine] = self._part(p, name)[local[mine]]
            fields.append(out)
        return Claims(*fields, None if self.finish is None else self.finish[index])


def key_order(claims: Claims | Joined) -> tuple[np.ndarray, int | None]:
    """The service order of ``claims`` (given grouped by position, each position in operation order).

    Returns the order and the earliest wake of two claims of different positions with equal keys (None if
    there are none).
    """
    order = np.argsort(claims.wake, kind="stable")
    wake = np.take(claims.wake, order)
    equal = wake[1:] == wake[:-1]
    if not equal.any():
        return order, None
    pos = claims.pos[order]
    if not (equal & (pos[1:] != pos[:-1])).any():
        return order, None
    order = np.lexsort((np.arange(len(claims)), claims.created, claims.wake))
    wake, created, pos = claims.wake[order], claims.created[order], claims.pos[order]
    tied = (wake[1:] == wake[:-1]) & (created[1:] == created[:-1]) & (pos[1:] != pos[:-1])
    return order, (int(wake[1:][tied].min()) if tied.any() else None)
