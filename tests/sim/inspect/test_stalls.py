"""``sim.inspect.stalls``: a stream's longest stall and what an event's window lost, on streams built by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.engine.events import ALLOCATED, NOTHING_TO_EVICT
from sim.inspect.stalls import allocation_outcome, longest_stall, scenario_event_times, window_loss

US = 1_000_000


def _stream(hole_at: int, hole: int, n: int = 1000):
    """A completion every microsecond, ``n`` of them, and none for ``hole`` ps after the ``hole_at``-th."""
    done = np.arange(1, n + 1, dtype=np.int64) * US
    done[hole_at:] += hole
    return done, np.full(n, 4096)


def test_the_longest_stall_is_the_hole_between_two_completions():
    done, _ = _stream(400, 250 * US)
    assert longest_stall(done) == (400 * US, 401 * US + 250 * US)
    assert longest_stall(done[::-1]) == (400 * US, 651 * US)  # in any order
    assert longest_stall(done[:1]) is None


def test_an_events_window_loses_the_share_of_its_time_the_hole_took():
    done, nbytes = _stream(400, 250 * US)
    loss = window_loss(0, done, nbytes, [400 * US + US // 2])
    assert loss.start == 400 * US + US // 2 and loss.end == done[-1]
    window = loss.end - loss.start
    assert loss.lost_pct == pytest.approx(100 * 250 * US / window, abs=0.5)
    steady = window_loss(0, *_stream(400, 0), [400 * US + US // 2])
    assert abs(steady.lost_pct) < 0.5


def test_a_steady_stream_loses_nothing_however_long_its_first_operation_took():
    """The first completion comes a whole latency after the first post (here 100 operations' time); the rate before
    the event is counted from it, so a stream that keeps its pace through the window loses nothing (counted from
    the first post, the window would seem to deliver three times as much as before: a loss of -200 %)."""
    done = 100 * US + np.arange(1000, dtype=np.int64) * US
    loss = window_loss(0, done, np.full(1000, 4096), [150 * US + US // 2])
    assert abs(loss.lost_pct) < 0.5
    assert window_loss(0, done, np.full(1000, 4096), [100 * US + US // 2]) is None  # one completion before it


def test_the_window_ends_at_the_next_event_and_needs_an_event_inside_the_case():
    done, nbytes = _stream(400, 250 * US)
    loss = window_loss(0, done, nbytes, [900 * US, 400 * US + US // 2, 2 * 10**9])
    assert (loss.start, loss.end) == (400 * US + US // 2, 900 * US)
    assert window_loss(0, done, nbytes, [0, 2 * 10**9]) is None  # before the first post, after the last completion


def test_the_competing_allocations_are_told_by_their_outcome():
    log = pd.DataFrame({"kind": ["workloads-start", "gpu-memory-pressure", "gpu-memory-release"],
                        "time_ps": [0, 5, 9], "outcome": ["baseline", ALLOCATED, "freed"]})
    assert allocation_outcome(log) == ALLOCATED and scenario_event_times(log) == [5, 9]
    steps = pd.DataFrame({"kind": ["gpu-job-grows"] * 3, "time_ps": [1, 2, 3],
                          "outcome": [ALLOCATED, ALLOCATED, NOTHING_TO_EVICT]})
    assert allocation_outcome(steps) == "2 of 3 allocated"
    assert allocation_outcome(steps.iloc[2:].assign(time_ps=[4])) == NOTHING_TO_EVICT
    assert allocation_outcome(log.iloc[:1]) is None and allocation_outcome(pd.DataFrame()) is None
