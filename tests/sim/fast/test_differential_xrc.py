"""XRC workloads (perftest -c XRC): an XRC initiator on the requester, an XRC target and XRC SRQ on the responder.
Their steps are RC's with the XRCETH on every request packet, static for a stream, so the vectorized core solves them
to the event engine's picosecond; the schema refuses what one QP per end cannot do."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models.nic.transport import XRCETH
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.sim.fast.test_differential import same_runs, two_nodes
from tests.sim.fast.test_differential_transport import write_bw_rates

WORK = {"write_bw": (([1, 64, 4096], 1500, 128, {}), ([65536], 600, 16, {"qps": 2})),
        "read_bw": (([64, 4096], 1500, 16, {}), ([1 << 20], 60, 4, {})),
        "send_bw": (([64, 4096], 1500, 64, {"rx_depth": 1500}), ([65536], 400, 16, {"rx_depth": 400})),
        "read_lat": (([64, 4096], 200, 1, {}),)}


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx6-gen4-200G-mps512"])
@pytest.mark.parametrize("kind", sorted(WORK))
def test_xrc_workloads_equal_the_event_engine(preset, kind):
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": [f"{s}B" for s in sizes], "iterations": n,
             "transport": "xrc", **({"tx_depth": depth} if kind != "read_lat" else {}), **extra}
            for sizes, n, depth, extra in WORK[kind]]
    runs = same_runs(scenario_dict(seed=5, workload=work, **two_nodes(preset)))
    assert runs[0].operations["ok"].all() and runs[1].engine == "fast"


def test_the_xrceth_costs_a_wire_bound_stream_at_most_its_share_of_a_packet():
    """Every request packet of an XRC initiator carries the 4-byte XRCETH (IBA vol. 1 annex A14): a 64 KiB WRITE
    stream, wire-bound, is slower than RC's, by no more than 4 bytes in each 4 KiB packet."""
    rates = write_bw_rates(("rc", "xrc"), "64KiB", 600)
    assert rates["rc"] * (1 - XRCETH / 4096) <= rates["xrc"] < rates["rc"]


@pytest.mark.parametrize("kind, extra, words", [
    ("write_lat", {}, "xrc with write_lat"),
    ("send_lat", {}, "xrc with send_lat"),
    ("write_bw", {"bidirectional": True}, "xrc with bidirectional"),
])
def test_the_schema_refuses_xrc_where_an_end_would_both_send_and_answer(kind, extra, words):
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 10, **extra,
             "transport": "xrc"}]
    with pytest.raises(ValidationError, match=words):
        Scenario.model_validate(scenario_dict(workload=work))
