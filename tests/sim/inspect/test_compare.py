"""``sim.inspect.compare``: the bandwidth timeline keeps every delivered byte and never shows more than the link, and
the comparison names each buffer's mode."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from sim.core.units import PS_PER_US
from sim.inspect.compare import bandwidth_timeline, comparison_table, format_comparison
from sim.inspect.tables import WIDTH
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import run_shipped_variants, scenario_dict

LINK_GBPS = 400.0
"""The fabric rate of the scenarios below."""


@cache
def pressure():
    return run_shipped_variants("pin_vs_dmabuf.yaml")[0]


def sizes_run():
    """Several message sizes back to back, with idle gaps between them: bins straddle size changes."""
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB", "64KiB", "1MiB"], "iterations": 300,
             "tx_depth": 16}]
    return run_scenario(Scenario.model_validate(scenario_dict(workload=work, fabric={"rate": "400Gb/s"})))


@pytest.mark.parametrize("bins", [7, 100, 1000])
def test_no_bin_shows_more_than_the_link_carried(bins):
    for result in [*pressure().values(), sizes_run()]:
        timeline = bandwidth_timeline(result, bins=bins)
        assert timeline["bw_Gbps"].max() <= LINK_GBPS * (1 + 1e-9), (result.variant, bins)


@pytest.mark.parametrize("bins", [7, 100])
def test_every_delivered_byte_is_in_the_timeline_once(bins):
    for result in [pressure()["dmabuf"], sizes_run()]:
        timeline = bandwidth_timeline(result, bins=bins)
        width_s = (timeline["time_ms"].iloc[1] - timeline["time_ms"].iloc[0]) / 1e3
        ops = result.operations
        delivered = ops.loc[ops["ok"] & ops["kind"].str.endswith("_bw"), "bytes"].sum()
        assert timeline["bw_Gbps"].sum() * 1e9 / 8 * width_s == pytest.approx(delivered, rel=1e-9)


def test_the_eviction_still_shows_as_a_hole_in_the_dynamic_registration_only():
    curves = {v: bandwidth_timeline(r, bins=60)["bw_Gbps"].to_numpy() for v, r in pressure().items()}
    assert curves["dmabuf"].min() < 0.2 * LINK_GBPS
    assert all(np.sort(c)[2] > 0.9 * LINK_GBPS for v, c in curves.items() if v != "dmabuf")  # all but the edges


def test_the_modes_column_names_each_buffers_mode():
    table = comparison_table(list(pressure().values())).set_index("variant")
    assert table.loc["dmabuf", "modes"] == "src=dmabuf,dst=pinned"
    assert table.loc["peermem", "modes"] == "src=peermem,dst=pinned"


def test_the_comparison_has_a_row_per_workload_and_size_from_that_cases_operations_alone():
    result = sizes_run()
    table = comparison_table([result])
    assert list(table["bytes"]) == [4096, 65536, 1048576] and set(table["workload"]) == {result.summary["workload"][0]}
    ops = result.operations
    for row, perftest in zip(table.itertuples(), result.summary.itertuples()):
        assert row.bw_avg_Gbps == perftest.bw_avg_Gbps  # perftest's own figure of that size, not a mean of sizes
        mine = np.sort(ops.loc[ops["ok"] & (ops["bytes"] == row.bytes), "latency_ps"].to_numpy())
        assert row.p50_us == mine[len(mine) // 2] / PS_PER_US
        assert row.p99_9_us == mine[int(len(mine) * 0.999)] / PS_PER_US
    assert table["p50_us"].is_monotonic_increasing  # a larger message takes longer: nothing pooled across sizes


def test_the_longest_stall_is_the_evicted_buffers_copy_and_only_the_dynamic_registration_has_one():
    table = comparison_table(list(pressure().values())).set_index("variant")
    event_ms = 20.0  # scenarios/pin_vs_dmabuf.yaml: the allocation at 20ms
    copy_us = (1 << 30) / 55.4e9 * 1e6  # the 1 GiB buffer copied out of VRAM at PCIe Gen5 x16 (copy_engine.py)
    dyn = table.loc["dmabuf"]
    assert dyn.stall_us >= copy_us and dyn.stall_from_ms >= event_ms
    assert dyn.stall_to_ms - dyn.stall_from_ms == pytest.approx(dyn.stall_us / 1e3, rel=1e-9)
    wire_us = (1 << 20) * 8 / (LINK_GBPS * 1e3)  # one 1 MiB message on the wire
    for pinned in ("peermem", "dmabuf-pinned", "dmabuf-no-move-notify"):
        assert table.loc[pinned, "stall_us"] < 10 * wire_us


def test_the_window_lost_what_the_stall_took_and_the_allocation_outcome_is_per_variant():
    table = comparison_table(list(pressure().values())).set_index("variant")
    dyn = table.loc["dmabuf"]
    # the allocation at 20 ms, released at 50 ms (hold 30ms): a stream at line rate otherwise loses its stall
    assert (dyn.window_from_ms, dyn.window_to_ms) == (20.0, 50.0)
    assert dyn.bw_lost_pct == pytest.approx(100 * dyn.stall_us / 1e3 / (50.0 - 20.0), abs=1.0)
    assert abs(table.loc["peermem", "bw_lost_pct"]) < 1.0
    assert table.loc["dmabuf", "allocation"] == "allocated"
    assert table.loc["peermem", "allocation"] == table.loc["dmabuf-pinned", "allocation"] == (
        "failed: no evictable memory")


def test_the_printed_comparison_fits_the_terminal_in_blocks_that_name_each_row():
    text = format_comparison(comparison_table(list(pressure().values())))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    blocks = text.split("\n\n")
    assert len(blocks) > 1
    for block in blocks:
        rows = block.splitlines()
        assert rows[0].split()[:3] == ["variant", "workload", "size"]
        assert [r.split()[0] for r in rows[1:]] == list(pressure())
    dyn = comparison_table([pressure()["dmabuf"]]).iloc[0]
    length, span = f"{dyn.stall_us / 1e3:.4g}ms", f"{dyn.stall_from_ms:.1f}..{dyn.stall_to_ms:.1f}ms"
    for shown in (length, span):  # its length, and in a column of its own unit, from when to when
        assert any(line.startswith("dmabuf ") and f" {shown}" in line for line in lines), shown
