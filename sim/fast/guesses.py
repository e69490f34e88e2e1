"""The first guesses of a block's passes (:mod:`sim.fast.block`): completions along the window's lanes, each an
operation's post plus its idle latency and no earlier than where it queued. Times are int64 ps."""

from __future__ import annotations

import numpy as np

from sim.fast.block_pass import SliceIn
from sim.fast.scans import prefix_max, running_max

LOW = -(1 << 62)
"""Minus infinity for guesses."""


def tail(problem, piece: SliceIn, at=slice(None)):
    """The sum of the drawn delays after the group's last claim, for the slice's operations ``at`` (ps; 0 when
    there are none)."""
    return sum(piece.draws[name][at] for name in problem.tail_draws[piece.group])


def lag_scan(first: np.ndarray, add: np.ndarray, floor: np.ndarray, lag: int) -> np.ndarray:
    """``d_i = max(d_{i-lag} + add_i, floor_i)``, with ``d_{i-lag}`` for ``i < lag`` given by ``first``
    (missing ones: minus infinity); solved along the ``lag`` lanes at once (lanes as contiguous rows)."""
    m = len(add)
    head = min(m, len(first))
    if (floor[:head] >= first[:head] + add[:head]).all() and (floor[lag:] >= floor[:-lag] + add[lag:]).all():
        return floor  # the floors already satisfy the recurrence (every operation queued)
    rows = -(-m // lag)
    grid_add = np.zeros(rows * lag, np.int64)
    grid_add[:m] = add
    grid_floor = np.full(rows * lag, LOW, np.int64)
    grid_floor[:m] = floor
    cum = np.cumsum(grid_add.reshape(rows, lag).T, axis=1)
    z = np.ascontiguousarray(grid_floor.reshape(rows, lag).T) - cum
    start = np.full(lag, LOW, np.int64)
    start[: len(first)] = first
    np.maximum(z[:, 0], start, out=z[:, 0])
    prefix_max(z, axis=1)
    z += cum
    return z.T.reshape(-1)[:m]


def guess_posts(problem, piece: SliceIn, first: np.ndarray, queued: np.ndarray,
                latency: np.ndarray | None = None) -> None:
    """Set the slice's guessed posts: completions ``window`` operations back, each its post plus its idle
    latency (or ``latency``) and no earlier than ``queued``, from the first posts ``first``."""
    window, m = problem.groups[piece.group].window, piece.hi - piece.lo
    add = piece.idle_done if latency is None else latency
    piece.guess_post = running_max(lag_scan(first, add, queued, window))[: m - window]
