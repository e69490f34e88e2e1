"""``sim.inspect.tables``: values in human units by their column's name, tables wrapped to a terminal's width."""

from __future__ import annotations

import re

import pytest

from sim.inspect.tables import WIDTH, blocks, cell, header


@pytest.mark.parametrize("column, value, shown", [
    ("bytes", 4096, "4KiB"), ("bytes", 1000, "1000B"), ("pinned_bytes", 3 * 2**30 + 2**29, "3.5GiB"),
    ("register_us", 22681.546405, "22.68ms"), ("p99_9_us", 337.714591, "337.7us"),
    ("time_ps", 42681546405, "42.68ms"), ("time_ms", 20.0, "20ms"), ("time_ms", 0.0, "0"), ("bw_avg_Gbps", 397.4561569, "397.5Gb/s"), ("bw_avg_Gbps", 0.017137, "17.14Mb/s"),
    ("bw_lost_pct", 65.2235, "65.2%"), ("bw_lost_pct", -0.04, "0.0%"), ("errors", 3, "3"),
    ("outcome", "freed", "freed"), ("p50_us", float("nan"), "-"), ("allocation", None, "-"),
    ("errors_by_status", {"WR_FLUSH_ERR": 2}, "WR_FLUSH_ERR: 2"), ("bw_avg_MiBps", 47380.466, "47,380"),
])
def test_a_value_is_shown_in_the_unit_its_column_names(column, value, shown):
    assert cell(column, value) == shown


def test_headers_are_words():
    assert header("bw_avg_Gbps") == "average bandwidth" and header("gpu_bar1_bytes") == "GPU BAR1"
    assert header("some_new_count") == "some new count"


def test_a_wide_table_wraps_into_blocks_that_repeat_the_naming_columns():
    headers = ["variant", "size", *(f"column {i}" for i in range(30))]
    rows = [[f"variant-{r}", "4KiB", *(f"{r * i}.5ms" for i in range(30))] for r in range(3)]
    text = blocks(headers, rows, keys=2)
    parts = [part.splitlines() for part in text.split("\n\n")]
    assert len(parts) > 1 and max(len(line) for line in text.splitlines()) <= WIDTH
    shown = []
    for part in parts:
        assert part[0].split()[:2] == ["variant", "size"]
        assert [line.split()[0] for line in part[1:]] == ["variant-0", "variant-1", "variant-2"]
        shown += re.split(r"\s{2,}", part[0].strip())[2:]
    assert shown == headers[2:]  # every column once, in order
