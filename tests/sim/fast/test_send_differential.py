"""send_bw and send_lat on the vectorized core against the event engine: identical tables, send_bw in its steady
state (a receive posted before each SEND arrives), over NIC presets, GPU memory on either end and link flaps; what
``engine: auto`` leaves to the event engine (receives that may run short) and that ``engine: fast`` refuses it."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sim.engine.planner.domain import OutsideDomain
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.properties import examples
from tests.sim.fast.test_differential import PRESETS, auto_runs, same_runs, two_nodes


@pytest.mark.parametrize("preset", PRESETS)
def test_send_bandwidth_equals_event_engine(preset):
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": [f"{s}B" for s in sizes], "iterations": n,
             "tx_depth": depth, **extra}
            for sizes, n, depth, extra in (([1, 64, 220, 4096], 1500, 128, {}), ([16384, 65536], 600, 16,
                                                                                {"rx_depth": 64}),
                                           ([2, 1 << 20], 100, 1, {}), ([512], 2000, 2, {"rx_depth": 4}),
                                           ([64], 1000, 32, {"inline": 64}))]
    results = same_runs(scenario_dict(seed=11, workload=work, **two_nodes(preset)))
    assert results[0].counters["rnr_naks"] == 0 and results[0].operations["ok"].all()


@pytest.mark.parametrize("mode", ["peermem", "dmabuf"])
def test_send_bandwidth_into_gpu_memory_equals_event_engine(mode):
    nodes = [{"name": n, "gpus": [{"preset": "h200" if mode == "peermem" else "mi300x"}], "topology": "switch"}
             for n in ("a", "b")]
    buffers = [{"name": "src", "on": "a.gpu0", "size": "4MiB", "register": mode},
               {"name": "dst", "on": "b.gpu0", "size": "4MiB", "register": mode}]
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["64B", "4KiB", "1MiB"], "iterations": 400,
             "tx_depth": 32}]
    same_runs(scenario_dict(seed=6, nodes=nodes, buffers=buffers, workload=work))


def test_send_bandwidth_through_link_flaps_equals_event_engine():
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["4KiB", "64KiB"], "iterations": 3000}]
    flaps = [{"at": "100us", "kind": "link-flap", "node": "a", "duration": "50us", "frames": "held"},
             {"at": "2ms", "kind": "link-flap", "node": "b", "duration": "300us", "frames": "held"}]
    results = same_runs(scenario_dict(workload=work, events=flaps))
    assert results[0].counters["rnr_naks"] == 0


@pytest.mark.parametrize("preset", PRESETS)
def test_send_latency_equals_event_engine(preset):
    """ib_send_lat's ping-pong, each SEND seen when its receive completion is in memory: sizes on both sides of
    the inline threshold, one receive posted at a time, and the workloads after it, which start once its last
    SENDs' completions are polled (perftest's send_lat leaves none)."""
    work = [{"kind": "send_lat", "from": "src", "to": "dst", "sizes": ["2B", "220B", "221B", "4KiB", "1MiB"],
             "iterations": 150},
            {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 50},
            {"kind": "send_lat", "from": "src", "to": "dst", "sizes": ["64B", "8KiB"], "iterations": 200,
             "inline": 0, "rx_depth": 1},
            {"kind": "read_lat", "from": "dst", "to": "src", "sizes": ["64B"], "iterations": 30}]
    event, fast = same_runs(scenario_dict(seed=4, workload=work, **two_nodes(preset)))
    rows = fast.operations
    cases = [group for _, group in rows.groupby(["workload", "bytes"], sort=False)]
    waited = [int(after["posted_ps"].iloc[0] - before["completed_ps"].iloc[-1])
              for before, after in zip(cases, cases[1:]) if before["kind"].iloc[0] == "send_lat"]
    assert min(waited) >= 0 and max(waited) > 0  # a size ends after its last round trip, at its SENDs' completions


def test_auto_leaves_receive_waits_to_the_event_engine():
    work = {"kind": "send_bw", "sizes": ["64B"], "iterations": 1000, "tx_depth": 64, "rx_depth": 8}
    says = "send_bw's receives (rx_depth 8) may not be posted before every SEND arrives, so RNR NAKs may occur"
    data = scenario_dict(workload=[{"from": "src", "to": "dst", **work}], engine="auto")
    lines = []
    auto = run_scenario(Scenario.model_validate(data), notice=lines.append)
    event_run = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    assert len(lines) == 1 and says in lines[0] and "event engine ran" in lines[0]
    pd.testing.assert_frame_equal(auto.operations, event_run.operations)
    assert auto.counters["rnr_naks"] > 0
    with pytest.raises(OutsideDomain, match=f"engine fast: .*{re.escape(says)}"):
        run_scenario(Scenario.model_validate({**data, "engine": "fast"}))


@pytest.mark.parametrize("transport", ["uc", "ud"])
def test_without_acknowledgements_short_receives_are_said_to_drop_sends_not_to_draw_rnr_naks(transport):
    """A UC or UD responder drops a SEND that finds no receive posted, without a word back
    (models.nic.receive.unacknowledged_refusal): the fallback line says so, and no RNR NAK is counted."""
    work = {"kind": "send_bw", "sizes": ["64B"], "iterations": 1000, "tx_depth": 64, "rx_depth": 8,
            "transport": transport}
    data = scenario_dict(workload=[{"from": "src", "to": "dst", **work}], engine="auto")
    lines = []
    auto = run_scenario(Scenario.model_validate(data), notice=lines.append)
    assert len(lines) == 1 and "event engine ran" in lines[0]
    assert "(rx_depth 8) may not be posted before every SEND arrives, so a SEND that finds none is dropped" in lines[0]
    assert "RNR" not in lines[0] and auto.counters["rnr_naks"] == 0


def test_receives_reposted_before_their_sends_arrive_run_on_the_vectorized_core():
    """perftest's ``ib_send_bw -r 16`` at 64 KiB and ``-r 4`` at 4 KiB: with 128 SENDs in flight each is posted
    long before the server reposts its receive, but arrives after (the server polls within 40 ns of a receive's
    completion). The event engine NAKs none, and the vectorized core solves them, with the same tables."""
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": [size], "iterations": 3000, "tx_depth": 128,
             "rx_depth": depth} for size, depth in (("64KiB", 16), ("4KiB", 4))]
    auto, lines = auto_runs(scenario_dict(seed=3, workload=work, **two_nodes("cx7-gen5-400G")))
    assert "vectorized core ran" in lines[0], lines
    assert auto.counters["rnr_naks"] == 0


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.sampled_from([64, 1024, 4096, 65536]), rx_depth=st.sampled_from([1, 2, 4, 8, 16, 64]),
       tx_depth=st.sampled_from([4, 32, 128]), poll=st.sampled_from(["0ns", "40ns", "300ns", "1us"]),
       iterations=st.integers(50, 400), duration_us=st.one_of(st.none(), st.integers(2, 60)),
       transport=st.sampled_from(["rc", "uc", "ud", "xrc"]), seed=st.integers(0, 20))
def test_random_receive_depths_equal_the_event_engine(size, rx_depth, tx_depth, poll, iterations, duration_us,
                                                      transport, seed):
    """Whichever engine ``auto`` picks for a send_bw with few receives posted ahead, on any transport, for a count
    or a duration, the tables are the event engine's: the vectorized core takes a run only where every receive is
    reposted before its SEND arrives, so that no RNR NAK (on UC and UD: no drop) can come."""
    count = {"iterations": iterations} if duration_us is None else {"duration": f"{duration_us}us"}
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": [f"{size}B"], **count, "tx_depth": tx_depth,
             "rx_depth": rx_depth, "transport": transport}]
    auto, lines = auto_runs(scenario_dict(seed=seed, workload=work, **two_nodes("cx7-gen5-400G", poll=poll)))
    if "vectorized core ran" in lines[0]:
        assert auto.counters["rnr_naks"] == 0
