"""Columns held in memory, then in raw files: what is appended is read back by any range, whichever holds it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.raw_columns import RawColumns
from tests.properties import examples


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.lists(st.integers(-(1 << 62), 1 << 62), max_size=30), min_size=1, max_size=8),
       st.integers(0, 120), st.data())
def test_ranges_read_back_what_was_appended_in_memory_or_in_files(tmp_path_factory, pieces, hold, data):
    made = []

    def directory(columns):
        made.append(columns)
        return str(tmp_path_factory.mktemp("raw"))

    columns = RawColumns({"t": np.int64, "s": np.uint8}, directory, hold)
    for piece in pieces:
        columns.append("t", piece)
        columns.append("s", [v % 251 for v in piece])
    whole = np.array([v for piece in pieces for v in piece], np.int64)
    assert columns.lengths == {"t": len(whole), "s": len(whole)}
    assert len(made) == (len(whole) > hold)  # files once a column would pass the hold, and only then
    lo = data.draw(st.integers(0, len(whole)))
    hi = data.draw(st.integers(lo, len(whole)))
    assert columns.read("t", lo, hi).tolist() == whole[lo:hi].tolist()
    assert columns.read("s", lo, hi).tolist() == (whole[lo:hi] % 251).astype(np.uint8).tolist()
    assert columns.read("s", lo, hi).dtype == np.uint8
    columns.close()
