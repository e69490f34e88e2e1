"""Claims on one server from several pipeline positions, put in the ordering rule's order.

The rule (:mod:`sim.core.steps`): claims are made in order of the time of the step that makes them (``wake``:
the claim itself, or for an eager claim the waiting step before it), then of that step's position in the step
list (``wpos``; a model event comes first), then of the operation's number, then of the claim's own position
(``pos``). Claims of one position come in operation order. Operations are numbered in posting order: by post time
(``post``), then by ``rank`` (which stream's completions were delivered first then, :mod:`sim.fast.deliveries`),
then by ``seq``, which numbers them stream by stream (concurrent streams in the order they start, see
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
    rank: np.ndarray
    """Each claim's operation's rank among those posted at its time (:mod:`sim.fast.deliveries`)."""
    finish: np.ndarray | None = None

    FIELDS = ("wake", "wpos", "head", "not_before", "service", "pos", "seq", "post", "rank", "finish")

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

    A part is a :class:`Claims` or a per-position record (arrays ``wake``, ``head``, ``not_before``, ``post``, ``rank``;
    scalars ``service``, ``pos``; ``wpos`` a scalar or per claim; first operation ``seq0``). Serving needs only
    times; the rest is needed when times tie or claims are carried over.
    """

    def __init__(self, parts: list, lengths: np.ndarray | None = None) -> None:
        self.parts = parts
        self.built: dict[str, np.ndarray] = {}
        """The fields joined so far, by name."""
        self.lengths = np.array([len(p.wake) for p in parts], np.int64) if lengths is None else lengths
        """Claims per part (given where known)."""
        self.start: np.ndarray | None = None
        self.finish: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.lengths.sum())

    def __getattr__(self, name: str) -> np.ndarray:
        if name not in Claims.FIELDS or name in ("finish", "start"):
            raise AttributeError(name)
        if name not in self.built:
            self.built[name] = self._joined(name)
        return self.built[name]

    def _joined(self, name: str) -> np.ndarray:
        """Field ``name`` of every part, end to end: a per-position record's scalars (and ``seq0``) are spread
        over its claims by one ``np.repeat`` for all parts; parts that hold the field per claim are copied in."""
        per_part = [_per_part(p, name) for p in self.parts]
        if all(isinstance(v, np.ndarray) for v in per_part):
            return np.concatenate(per_part)
        ends = np.cumsum(self.lengths)
        starts = ends - self.lengths
        out = np.repeat(np.array([0 if isinstance(v, np.ndarray) else v for v in per_part], np.int64), self.lengths)
        if name == "seq":  # seq0 + the claim's index in its part
            out += np.arange(len(out), dtype=np.int64) - np.repeat(starts, self.lengths)
        for v, lo, hi in zip(per_part, starts, ends):
            if isinstance(v, np.ndarray):
                out[lo:hi] = v
        return out

    def take(self, index: np.ndarray) -> Claims:
        """The claims at positions ``index`` (an integer array, usually short), every field included."""
        bounds = np.concatenate(([0], np.cumsum(self.lengths)))
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


def _per_part(part, name: str) -> np.ndarray | int:
    """Field ``name`` of ``part`` per claim, or the scalar a per-position record holds for all its claims (for
    ``seq``, the first operation's ``seq0``; a service may be either)."""
    value = part.seq0 if name == "seq" and not isinstance(part, Claims) else getattr(part, name)
    return value if isinstance(value, np.ndarray) else int(value)


def per_claim(part, name: str) -> np.ndarray:
    """Field ``name`` of a :class:`Claims` or a per-position record (see :class:`Joined`), one entry per claim."""
    value = _per_part(part, name)
    if isinstance(value, np.ndarray):
        return value
    n = len(part.wake)
    return np.arange(value, value + n, dtype=np.int64) if name == "seq" else np.full(n, value, np.int64)


def key_order(claims: Claims | Joined) -> tuple[np.ndarray, bool]:
    """The service order of ``claims`` (given grouped by position, each position in operation order), and whether
    claims of different positions tie on their time (then the rest of the key orders them)."""
    order = np.argsort(claims.wake, kind="stable")
    wake = np.take(claims.wake, order)
    equal = wake[1:] == wake[:-1]
    if not equal.any():
        return order, False
    pos = claims.pos[order]
    if not (equal & (pos[1:] != pos[:-1])).any():
        return order, False
    return np.lexsort((claims.pos, claims.seq, claims.rank, claims.post, claims.wpos, claims.wake)), True


def tied_posts(claims: Claims | Joined, order: np.ndarray) -> np.ndarray:
    """Where claims next to each other in ``order`` (their key order) tie on time, ordering position and post
    time: the index in ``order`` of the first of each such pair (their operations' numbers order them)."""
    key = [np.take(getattr(claims, name), order) for name in ("wake", "wpos", "post")]
    return np.flatnonzero(np.logical_and.reduce([k[1:] == k[:-1] for k in key]))
