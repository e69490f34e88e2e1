"""The scans of :mod:`sim.fast.scans` against numpy's running maximum and cumulative sum."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sim.fast.scans import SIGN, flipped_ramp, prefix_max, ramp, running_max


@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=200))
def test_running_max(values):
    values = np.asarray(values, np.int64)
    out = running_max(values)
    assert out.tolist() == np.maximum.accumulate(values).tolist()
    assert (out is values) == bool((np.diff(values) >= 0).all())  # sorted input is not copied, others are


@given(st.lists(st.integers(-(1 << 62), 1 << 62), min_size=1, max_size=400), st.integers(1, 9))
def test_prefix_max(values, width):
    """Along either axis of a 2-D view as well as in 1-D, over the whole int64 range used for times."""
    values = np.asarray(values, np.int64)
    assert prefix_max(values.copy()).tolist() == np.maximum.accumulate(values).tolist()
    grid = values[: len(values) // width * width].reshape(-1, width)
    for axis in (0, 1):
        assert prefix_max(grid.copy(), axis).tolist() == np.maximum.accumulate(grid, axis).tolist()


@given(st.integers(1, 500), st.integers(0, 1 << 40))
def test_ramps_are_the_cumulative_sums_of_a_constant(n, step):
    expected = np.cumsum(np.full(n, step, np.int64))
    assert ramp(n, step).tolist() == expected.tolist() and not ramp(n, step).flags.writeable
    assert (flipped_ramp(n, step) ^ SIGN).tolist() == expected.tolist()
