"""Which of several streams' operations posted at one picosecond the event engine numbers first.

A bandwidth loop posts as its QP's completions are delivered (:func:`models.verbs.workloads.bandwidth`). Each
delivery is a simpy timeout that :func:`models.nic.completion.complete_at` creates when the interpreter walks the
operation's wake, at the time and ordering position of its last step that waited; a completion delivered in
posting order waits for the one before, so its timeout is created at the later of the two walks. simpy fires
timeouts due at one time in the order they were created, and the loop woken by its QP's first delivery of that
time polls every completion delivered then and posts. So operations that streams post at one time are numbered
in the order of their streams' first deliveries of that time: by the time, then the position, of the walks that
created them.

An operation's *rank* is that walk's key packed in one integer (:func:`walk_key`); the operations a stream posts
at its round's start rank :data:`FIRST` and are numbered stream by stream. Walks tied on time and position are
ordered by their own operations' numbers, which a rank does not hold: ranks that tie across streams, or that
:data:`UNRANKED` marks, are left to :func:`sim.fast.limits.unnumbered_tie`.
"""

from __future__ import annotations

import numpy as np

DELIVERED = "delivered"
"""Name under which a slice keeps each operation's delivery key (the walk that created its delivery)."""
FIRST_DELIVERED = "first delivered"
"""Name under which a slice keeps each operation's stream's first delivery key at its completion time: the rank
of the operations that completion posts."""
FIRST = 0
"""The rank of the operations a stream posts at its round's start."""
POSITION_BITS = 12
UNRANKED = np.iinfo(np.int64).max
"""A walk whose time (from 2**51 ps on) or position does not fit a key; it stays the latest of its stream's."""


def walk_key(wake: np.ndarray, wpos) -> np.ndarray:
    """The keys of walks at ``wake`` (ps) from ordering position(s) ``wpos`` (:data:`MODEL_EVENT` first), in the
    order the interpreter takes them."""
    position = np.asarray(wpos, np.int64) + 1
    fits = (wake < 1 << (63 - POSITION_BITS)) & (position >= 0) & (position < 1 << POSITION_BITS)
    return np.where(fits, (wake << POSITION_BITS) | position, UNRANKED)


def delivery_keys(walked: np.ndarray, done: np.ndarray, hist_done: np.ndarray, hist: dict) -> dict[str, np.ndarray]:
    """Per operation of a slice, under :data:`DELIVERED`: the key of the walk that created its delivery (its own
    wake's ``walked``, or the previous delivery's where that came later); under :data:`FIRST_DELIVERED`: its
    stream's first such key at its completion time ``done``. ``hist_done`` and ``hist`` hold the completions and
    both keys of the operations before the slice."""
    before = hist.get(DELIVERED)
    if before is not None and len(before) and len(hist_done):
        walked, done = np.concatenate((before[-1:], walked)), np.concatenate((hist_done[-1:], done))
    else:
        before = None
    delivered = np.maximum.accumulate(walked)
    source = delivered.copy()
    if before is not None:
        source[0] = hist[FIRST_DELIVERED][-1]
    starts = np.flatnonzero(np.concatenate(([True], done[1:] != done[:-1])))
    first = np.repeat(source[starts], np.diff(np.append(starts, len(done))))
    skip = int(before is not None)
    return {DELIVERED: delivered[skip:], FIRST_DELIVERED: first[skip:]}
