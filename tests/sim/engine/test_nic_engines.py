"""NIC processing engines and concurrent QPs (perftest -q): a QP is bound to one engine, so one QP gets one
engine's message rate and several QPs spread over all of them."""

import pytest

from sim.core import PS_PER_S
from sim.engine.run import run_scenario
from sim.scenario.loader import validate
from sim.scenario.yaml_reader import load_yaml
from sim.core.errors import ConfigErrors
from sim.scenario.schema import Scenario

PROCESS_NS, ITERATIONS = 20, 8000


def _message_rate(make_scenario, engines: int, qps: int, kind: str = "write_bw") -> tuple[float, object]:
    """The message rate, on the event engine, whose NIC engines count their busy time."""
    nic = {"tx_process": f"{PROCESS_NS}ns", "tx_engines": engines, "rx_engines": engines}
    node = {"nic": nic, "host": {"poll_period": "0ns"}}
    scn = make_scenario(engine="event", nodes=[{"name": "a", **node}, {"name": "b", **node}],
                        workload=[{"kind": kind, "from": "src", "to": "dst", "sizes": ["64B"], "iterations": ITERATIONS,
                                   "tx_depth": 512, "inline": 64 if kind == "write_bw" else None, "qps": qps}])
    result = run_scenario(scn)
    return result.summary["msg_rate_Mpps"].iloc[0], result


@pytest.mark.parametrize("qps", [1, 2, 4])
def test_qps_spread_over_the_engines(make_scenario, qps):
    rate, result = _message_rate(make_scenario, engines=4, qps=qps)
    one_engine_Mpps = PS_PER_S / (PROCESS_NS * 1000) / 1e6
    assert rate == pytest.approx(qps * one_engine_Mpps, rel=0.03)
    ops = result.operations
    assert len(ops) == ITERATIONS * qps and sorted(ops["qp"].unique()) == list(range(qps))
    assert (ops.groupby("qp")["iteration"].max() == ITERATIONS - 1).all()


def test_one_engine_caps_every_qp_together(make_scenario):
    single, _ = _message_rate(make_scenario, engines=1, qps=1)
    together, _ = _message_rate(make_scenario, engines=1, qps=4)
    assert together == pytest.approx(single, rel=0.03)


def test_more_engines_than_qps_leave_the_rest_idle(make_scenario):
    one, result = _message_rate(make_scenario, engines=4, qps=1)
    busy = [e.busy_ps for e in result.testbed.nodes["a"].nic.tx_engines]
    assert sum(b > 0 for b in busy) == 1 and one == pytest.approx(1e3 / PROCESS_NS, rel=0.03)


def test_concurrent_read_qps_each_get_their_own_max_rd_atomic(make_scenario):
    one, _ = _message_rate(make_scenario, engines=1, qps=1, kind="read_bw")
    four, _ = _message_rate(make_scenario, engines=1, qps=4, kind="read_bw")
    assert four > 1.5 * one  # one QP is held to max_rd_atomic READs in flight; four QPs have four times that


def test_qps_is_refused_for_latency_tests(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("schema: 1\nname: t\nnodes: [{name: a}, {name: b}]\n"
                    "buffers:\n  - {name: src, on: a.host, size: 1MiB}\n  - {name: dst, on: b.host, size: 1MiB}\n"
                    "workload:\n  - {kind: write_lat, from: src, to: dst, sizes: [8B], qps: 2}\n")
    data, positions = load_yaml(path)
    with pytest.raises(ConfigErrors) as info:
        validate(Scenario, data, positions, str(path))
    (error,) = info.value.errors
    assert (error.line, error.key) == (8, "workload[0].qps") and "perftest" in error.reason
