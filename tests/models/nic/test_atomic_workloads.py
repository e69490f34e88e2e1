"""atomic_bw and atomic_lat against closed forms: an atomic's latency is an 8-byte READ's plus the responder's
atomic unit, its rate the slowest of the atomic unit and the READ/atomic slots; the scenario's checks."""

import pytest
from pydantic import ValidationError

from models.fabric import AETH, ATOMIC_ACK_ETH, ATOMIC_ETH
from sim.core import VerbsError
from sim.engine.run import run_scenario
from sim.scenario.resolve import fabric_params, nic_params, pcie_params
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict


ATOMIC_BUFFERS = [{"name": name, "on": f"{node}.host", "size": "64KiB",
                   "access": ["local_write", "remote_write", "remote_read", "remote_atomic"]}
                  for name, node in (("src", "a"), ("dst", "b"))]


def _scenario(make_scenario, workload, **nic):
    node = {"nic": {"preset": "connectx7", **nic}, "host": {"poll_period": "0ns"}}
    return make_scenario(nodes=[{"name": "a", **node}, {"name": "b", **node}], buffers=ATOMIC_BUFFERS,
                         workload=[workload])


@pytest.mark.parametrize("atomic", ["FETCH_AND_ADD", "CMP_AND_SWAP"])
@pytest.mark.parametrize("unit", ["125ns", "2us"])
def test_atomic_latency_is_an_8_byte_read_plus_the_atomic_unit(make_scenario, atomic, unit):
    scn = _scenario(make_scenario, {"kind": "atomic_lat", "from": "src", "to": "dst", "sizes": ["8B"],
                                    "iterations": 20, "atomic": atomic}, atomic=unit)
    n, link, fab = nic_params(scn.nodes[0]), pcie_params(scn.nodes[0]), fabric_params(scn)
    request = n.doorbell_ps + n.tx_process_ps + n.tx_latency_ps + fab.latency_ps + fab.serialize_ps(0, ATOMIC_ETH)
    responder = (n.rx_process_ps + n.rx_latency_ps + link.read_request_ps(8) + link.read_latency_ps
                 + link.read_return_ps(8) + n.atomic_ps)
    response = (n.tx_latency_ps + fab.latency_ps + fab.serialize_ps(0, AETH + ATOMIC_ACK_ETH) + n.rx_process_ps
                + n.rx_latency_ps)
    landing = link.write_ps(8 + n.cqe_bytes) + link.write_latency_ps
    result = run_scenario(scn).summary.iloc[0]
    assert result["errors"] == 0
    assert result["t_typical_us"] == pytest.approx((request + responder + response + landing) / 1e6, rel=0.01)


def test_atomic_rate_is_the_atomic_unit_when_it_is_the_slowest(make_scenario):
    scn = _scenario(make_scenario, {"kind": "atomic_bw", "from": "src", "to": "dst", "sizes": ["8B"],
                                    "iterations": 2000}, atomic="1us")
    assert nic_params(scn.nodes[1]).atomic_ps == 1_000_000
    result = run_scenario(scn).summary.iloc[0]
    assert result["msg_rate_Mpps"] == pytest.approx(1.0, rel=0.01)


def test_atomic_rate_is_capped_by_outstanding_atomics(make_scenario):
    base = {"kind": "atomic_bw", "from": "src", "to": "dst", "sizes": ["8B"], "iterations": 1000}

    def rate(max_rd_atomic):
        scn = _scenario(make_scenario, base, max_rd_atomic=max_rd_atomic, atomic="10ns")
        return run_scenario(scn).summary["msg_rate_Mpps"].iloc[0]

    lat_us = run_scenario(_scenario(make_scenario, {**base, "kind": "atomic_lat", "iterations": 50}, atomic="10ns")
                          ).summary["t_avg_us"].iloc[0]
    one, two = rate(1), rate(2)
    # one atomic in flight: its slot is held from the send engine until the response reaches the NIC, i.e. the
    # round trip less the doorbell, the landing write and the polling (under 0.5 us together)
    assert 1 / lat_us <= one <= 1 / (lat_us - 0.5)
    assert two == pytest.approx(2 * one, rel=0.03)


@pytest.mark.parametrize("workload, words", [
    ({"kind": "atomic_bw", "sizes": ["16B"]}, "sizes must be [8B]"),
    ({"kind": "atomic_lat", "sizes": ["8B"], "qps": 2}, "qps must be 1"),
    ({"kind": "atomic_bw", "sizes": ["8B"], "atomic": "SWAP"}, "atomic"),
])
def test_atomic_workload_checks(workload, words):
    """Scenario errors name what is wrong."""
    data = scenario_dict(workload=[{"from": "src", "to": "dst", **workload}])
    with pytest.raises(ValidationError) as info:
        Scenario.model_validate(data)
    assert words in str(info.value)


def test_atomics_without_remote_atomic_rights_complete_in_error(make_scenario):
    scn = make_scenario(workload=[{"kind": "atomic_bw", "from": "src", "to": "dst", "sizes": ["8B"],
                                   "iterations": 20}])
    result = run_scenario(scn).summary.iloc[0]
    assert result["errors"] == 20
    assert set(result["errors_by_status"]) == {"IBV_WC_REM_ACCESS_ERR", "IBV_WC_WR_FLUSH_ERR"}


def test_atomics_on_an_efa_nic_are_refused_when_posted(make_scenario):
    scn = make_scenario(nodes=[{"name": "a", "nic": {"preset": "efa"}}, {"name": "b", "nic": {"preset": "efa"}}],
                        workload=[{"kind": "atomic_lat", "from": "src", "to": "dst", "sizes": ["8B"],
                                   "iterations": 5}])
    with pytest.raises(VerbsError) as info:
        run_scenario(scn)
    assert info.value.errno == "EOPNOTSUPP" and "IBV_ATOMIC_NONE" in str(info.value)
