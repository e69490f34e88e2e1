"""What a registration mode costs a stream when memory moves, per case (a variant's workload at one message
size): its longest stall, the bandwidth it lost over a scenario event's window, and how the competing
allocations fared. Times are integer picoseconds on the run's clock."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from sim.engine.events import ALLOCATED, BOOKKEEPING_KINDS, NOTHING_TO_EVICT


class Stall(NamedTuple):
    """The longest time a case completed nothing (zero bandwidth): from one completion to the next (ps)."""

    start: int
    end: int


def longest_stall(completed_ps: np.ndarray) -> Stall | None:
    """The longest gap between two successive completions of ``completed_ps``; None with fewer than two."""
    done = np.sort(np.asarray(completed_ps, dtype=np.int64))
    if len(done) < 2:
        return None
    i = int(np.argmax(np.diff(done)))
    return Stall(int(done[i]), int(done[i + 1]))


class WindowLoss(NamedTuple):
    """A scenario event's window (from the event to the next one or the case's last completion, ps) and the
    share of the case's bandwidth before the event that it did not deliver in it (percent; negative when the
    window delivered more)."""

    start: int
    end: int
    lost_pct: float


def window_loss(first_post_ps: int, completed_ps: np.ndarray, nbytes: np.ndarray, event_ps) -> WindowLoss | None:
    """:class:`WindowLoss` of the first of ``event_ps`` (scenario events' times) that falls after the case's
    first post and before its last completion; None without one, or with fewer than two completions before it.

    The rate before the event is counted from completion to completion: the bytes completed after the first
    completion up to the last one before the event, over that time (the first operation's latency, which no later
    one repeats, is not a loss of the steady stream); the window's, the bytes completed in it over its length."""
    completed_ps = np.asarray(completed_ps, dtype=np.int64)
    if not len(completed_ps):
        return None
    first, last = int(completed_ps.min()), int(completed_ps.max())
    inside = sorted(int(t) for t in event_ps if first_post_ps < t < last)
    if not inside:
        return None
    start = inside[0]
    end = next((t for t in inside if t > start), last)
    last_before = int(completed_ps[completed_ps <= start].max(initial=first))
    if last_before <= first:
        return None
    before = float(nbytes[(completed_ps > first) & (completed_ps <= last_before)].sum()) / (last_before - first)
    during = float(nbytes[(completed_ps > start) & (completed_ps <= end)].sum()) / (end - start)
    if before <= 0:
        return None
    return WindowLoss(start, end, 100.0 * (1.0 - during / before))


def scenario_event_times(events: pd.DataFrame) -> list[int]:
    """The times (ps) of a variant's scenario events, the bookkeeping rows left out."""
    if not len(events):
        return []
    return [int(t) for t in events.loc[~events["kind"].isin(BOOKKEEPING_KINDS), "time_ps"]]


def allocation_outcome(events: pd.DataFrame) -> str | None:
    """How a variant's competing allocations fared: their one outcome (``allocated``, or why they failed), or
    ``N of M allocated``; None without any."""
    if not len(events):
        return None
    outcomes = [str(o) for o in events["outcome"] if o in (ALLOCATED, NOTHING_TO_EVICT)]
    if not outcomes:
        return None
    if len(set(outcomes)) == 1:
        return outcomes[0] if len(outcomes) == 1 else f"{len(outcomes)}x {outcomes[0]}"
    return f"{outcomes.count(ALLOCATED)} of {len(outcomes)} allocated"
