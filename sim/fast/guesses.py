"""The first guesses of a block's passes (:mod:`sim.fast.block`): completions along the window's lanes, each an
operation's post plus its idle latency and no earlier than where it queued. Times are int64 ps."""

from __future__ import annotations

import numpy as np

from sim.fast.block_pass import LOW, SliceIn
from sim.fast.scans import prefix_max, running_max


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
    """Set the slice's guessed posts: completions ``window`` operations back (where some deliver none, the
    latest delivered: :attr:`sim.fast.steps.Group.unsignaled`), each its post plus its idle latency (or
    ``latency``) and no earlier than ``queued``, from the first posts ``first``."""
    group, m = problem.groups[piece.group], piece.hi - piece.lo
    add = piece.idle_done if latency is None else latency
    if group.unsignaled is None:
        piece.guess_post = running_max(lag_scan(first, add, queued, group.window))[: m - group.window]
    else:
        piece.guess_post = release_scan(first, add, queued, group.window, piece.draws[group.unsignaled])[
            : m - group.window]


def release_scan(first: np.ndarray, add: np.ndarray, floor: np.ndarray, lag: int, silent: np.ndarray) -> np.ndarray:
    """The releases ``r`` of ``d_i = max(d_{i-1}, r_{i-lag} + add_i, floor_i)``, where ``r_k`` is ``d`` at the
    latest ``k' <= k`` whose ``silent`` is 0 (before any, the release before the slice: ``first[-1]``) and
    ``r_{i-lag}`` for ``i < lag`` is ``first[i]``; solved ``lag`` operations at a time, each of which is posted by
    a release of the ones before."""
    m = len(add)
    out = np.empty(m, np.int64)
    last = done = int(first[-1])
    for lo in range(0, m, lag):
        hi = min(m, lo + lag)
        post = first[:hi] if lo == 0 else out[lo - lag:hi - lag]
        d = running_max(np.maximum(np.maximum(post + add[lo:hi], floor[lo:hi]), done))
        out[lo:hi] = running_max(np.where(silent[lo:hi] != 0, last, d))  # (d is never below the last release)
        last, done = int(out[hi - 1]), int(d[-1])
    return out


def guess_from_pass(problem, piece: SliceIn, out, alone: bool, paced: np.ndarray | None) -> None:
    """Set the slice's guessed posts from a pass's completions ``out.done``: each its post plus its idle latency,
    and no earlier than where it queued; ``alone`` (a stream posting one operation at a time, the round's only
    one), plus what it waited beyond its idle latency, whenever it is posted (its claims queue behind each other);
    ``paced``: where a saturated group's operations end at its pace, instead of where they queued."""
    m, first = piece.hi - piece.lo, out.post[:problem.groups[piece.group].window]
    if alone:
        guess_posts(problem, piece, first, np.full(m, LOW), np.maximum(out.done - out.post, piece.idle_done))
    else:
        guess_posts(problem, piece, first, paced if paced is not None else np.where(
            out.done > out.post + piece.idle_done, out.done, LOW))
