"""Several QPs streaming at once (perftest -q, -b and buffer pairs) on the vectorized core against the event
engine: every posted and completed time (integer ps), the operation rows with their QP tags in the same order,
every summary row and counter identical; what ``engine: auto`` still leaves to the event engine."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.cli.perftest import perftest_scenario
from sim.engine.planner.domain import outside_domain, slow_for_fast
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict
from tests.sim.fast.test_differential import ATOMIC_ACCESS, auto_runs, same_runs, two_nodes

CASES = {"write_bw": ["64B", "4KiB", "64KiB"], "read_bw": ["64B", "4KiB", "64KiB"], "send_bw": ["64B", "4KiB"],
         "atomic_bw": ["8B"]}


@pytest.mark.parametrize("kind", CASES)
@pytest.mark.parametrize("qps, depths", [(2, (1, 128)), (5, (16,)), (8, (4, 64))])
def test_parallel_qps_equal_the_event_engine(kind, qps, depths):
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": CASES[kind], "iterations": 150 if depth < 16 else 400,
             "tx_depth": depth, "qps": qps} for depth in depths]
    buffers = [{"name": name, "on": on, "size": "1MiB", "access": ATOMIC_ACCESS} for name, on in (("src", "a.host"),
                                                                                                 ("dst", "b.host"))]
    event, fast = same_runs(scenario_dict(seed=qps, workload=work, buffers=buffers, **two_nodes("cx7-gen5-400G")))
    ops = fast.operations
    assert sorted(ops["qp"].unique()) == list(range(qps)) and ops["ok"].all()


@pytest.mark.parametrize("extra", [{"bidirectional": True, "qps": 2},
                                   {"pairs": [{"from": "src2", "to": "dst2"}], "qps": 3}])
def test_bidirectional_and_buffer_pairs_equal_the_event_engine(extra):
    buffers = [{"name": n, "on": f"{node}.host", "size": "1MiB"} for n, node in
               (("src", "a"), ("dst", "b"), ("src2", "a"), ("dst2", "b"))]
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": ["256B", "16KiB"], "iterations": 300, "tx_depth": 32,
             **extra} for kind in ("write_bw", "read_bw")]
    same_runs(scenario_dict(seed=5, buffers=buffers, workload=work, **two_nodes("cx6-gen4-200G-mps512")))


@pytest.mark.parametrize("argv", [["ib_write_bw", "-a", "-b"], ["ib_read_bw", "-a", "-b"],
                                  ["ib_write_bw", "-b", "-q", "2", "-s", "4096"]])
def test_perftest_streams_posting_at_one_picosecond_throughout_equal_the_event_engine(argv):
    """perftest -b: the two directions complete and post at the same picoseconds from the smallest sizes on, but
    their claims on a shared server do not tie so, and the numbering of those posts decides nothing: the core
    solves them, with the event engine's tables and counters."""
    scenario = perftest_scenario([*argv, "-n", "300"])
    fast, event = (run_scenario(scenario.model_copy(update={"engine": engine})) for engine in ("fast", "event"))
    for table in ("operations", "summary", "events", "registrations"):
        pd.testing.assert_frame_equal(getattr(fast, table), getattr(event, table))
    assert fast.counters == event.counters



def test_several_engines_spread_parallel_qps_on_both_engines():
    """QPs bound to different send engines reach the shared PCIe link and port at the same picoseconds, where
    the ordering rule decides which goes first."""
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64B", "2KiB"], "iterations": 500,
             "tx_depth": 64, "qps": 4}]
    same_runs(scenario_dict(seed=2, workload=work, **two_nodes("cx6-gen4-200G-mps512", tx_engines=3, rx_engines=2)))


def test_what_auto_leaves_to_the_event_engine_with_several_qps():
    bidirectional_send = scenario_dict(workload=[{"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["4KiB"],
                                                  "bidirectional": True}])
    assert "bidirectional send_bw" in outside_domain(Scenario.model_validate(bidirectional_send))
    several = Scenario.model_validate(scenario_dict(workload=[{"kind": "write_bw", "from": "src", "to": "dst",
                                                               "sizes": ["4KiB"], "qps": 4}]))
    assert outside_domain(several) is None and slow_for_fast(several) is None


@pytest.mark.parametrize("kind, qps, sizes, slow", [
    ("send_bw", 4, ["64B"], True), ("send_bw", 2, ["64B"], True), ("send_bw", 2, ["2KiB", "64KiB"], True),
    ("send_bw", 2, ["4KiB", "64KiB"], False), ("send_bw", 1, ["64B"], False), ("write_bw", 4, ["64B"], False)])
def test_auto_leaves_a_send_bw_of_small_messages_over_several_qps_to_the_event_engine(kind, qps, sizes, slow):
    """The core solves them (the differential tests above), but slower than the event engine below 4 KiB:
    ``auto`` decides from the workload's kind, its streams and its smallest message."""
    scenario = Scenario.model_validate(scenario_dict(workload=[{"kind": kind, "from": "src", "to": "dst",
                                                                "sizes": sizes, "qps": qps}]))
    assert outside_domain(scenario) is None
    reason = slow_for_fast(scenario)
    assert (reason is not None and f"send_bw over {qps} QPs with {sizes[0]} messages" in reason) == slow
    assert slow or reason is None


@pytest.mark.parametrize("argv, slow", [(["ib_write_bw", "-b"], True), (["ib_write_bw", "-b", "-q", "2"], True),
                                        (["ib_read_bw", "-b"], False), (["ib_write_bw", "-q", "2"], False)])
def test_auto_leaves_a_bidirectional_write_bw_to_the_event_engine(argv, slow):
    """perftest's -b: each side's acknowledgements queue among the other side's payloads on one wire. The core
    solves it (the differential tests above) but more slowly than the event engine; a bidirectional READ faster."""
    reason = slow_for_fast(perftest_scenario(argv))
    assert (reason is not None and "is a bidirectional write_bw" in reason) == slow
    assert slow or reason is None


def test_auto_runs_a_send_bw_of_large_messages_over_several_qps_on_the_core():
    """perftest's ib_send_bw -q 2 at its default 64 KiB: the core, with the event engine's tables and counters."""
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": 3000, "qps": 2}]
    auto, lines = auto_runs(scenario_dict(workload=work, **two_nodes("cx7-gen5-400G")))
    assert auto.engine == "fast" and "vectorized core ran" in lines[0]


def test_send_bw_reposting_receives_over_several_qps_and_sizes_equals_the_event_engine():
    # More iterations than receives posted ahead (perftest's 512): every QP's server reposts, and a QP that ends
    # first leaves receive completions to the next size's server, as on the event engine.
    work = [{"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["256B", "512B"], "iterations": 1500, "qps": 4}]
    event, fast = same_runs(scenario_dict(workload=work, **two_nodes("cx7-gen5-400G")))
    assert fast.operations["ok"].all() and len(fast.operations) == 2 * 4 * 1500
