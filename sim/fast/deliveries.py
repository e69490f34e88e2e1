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
POLLED = "polled"
"""Name under which a slice keeps how many of its stream's completions of the same time come before each one."""
KEYS = (DELIVERED, FIRST_DELIVERED, POLLED)
"""What a slice keeps for the ranks of the operations after it."""
FIRST = 0
"""The rank of the operations a stream posts at its round's start."""
POSITION_BITS = 12
UNRANKED = np.iinfo(np.int64).max
"""The rank of an operation posted by a completion its loop did not take at its first wake of that time (its
stream's :attr:`sim.fast.steps.Group.polls`), and a walk's key whose time (from 2**51 ps on) or position does not
fit; it stays the latest of its stream's."""


def walk_key(wake: np.ndarray, wpos) -> np.ndarray:
    """The keys of walks at ``wake`` (ps) from ordering position(s) ``wpos`` (:data:`MODEL_EVENT` first), in the
    order the interpreter takes them."""
    position = np.asarray(wpos, np.int64) + 1
    fits = (wake < 1 << (63 - POSITION_BITS)) & (position >= 0) & (position < 1 << POSITION_BITS)
    return np.where(fits, (wake << POSITION_BITS) | position, UNRANKED)


def delivery_keys(walked: np.ndarray, done: np.ndarray, hist_done: np.ndarray, hist: dict,
                  polls: int | None) -> dict[str, np.ndarray]:
    """Per operation of a slice, under :data:`KEYS`: the key of the walk that created its delivery (its own
    wake's ``walked``, or the previous delivery's where that came later); its stream's first such key at its
    completion time ``done`` (:data:`UNRANKED` from the ``polls``-th on); and how many of that time's come before
    it. ``hist_done`` and ``hist`` hold the completions and keys of the operations before the slice."""
    seeded = int(len(hist.get(DELIVERED, ())) > 0 and len(hist_done) > 0)
    if seeded:
        walked, done = np.concatenate((hist[DELIVERED][-1:], walked)), np.concatenate((hist_done[-1:], done))
    delivered = np.maximum.accumulate(walked)
    source = np.concatenate((hist[FIRST_DELIVERED][-1:], delivered[1:])) if seeded else delivered
    starts = np.flatnonzero(np.concatenate(([True], done[1:] != done[:-1])))
    lengths = np.diff(np.append(starts, len(done)))
    first = np.repeat(source[starts], lengths)
    polled = np.arange(len(done)) - np.repeat(starts, lengths)
    if seeded:
        polled[:lengths[0]] += hist[POLLED][-1]
    if polls is not None:
        first[polled >= polls] = UNRANKED
    return {DELIVERED: delivered[seeded:], FIRST_DELIVERED: first[seeded:], POLLED: polled[seeded:]}
