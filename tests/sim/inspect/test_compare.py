"""``sim.inspect.compare``: the bandwidth timeline keeps every delivered byte and never shows more than the link, and
the comparison names each buffer's mode."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from sim.inspect.compare import bandwidth_timeline, comparison_table
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
