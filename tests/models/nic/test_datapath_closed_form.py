"""The event engine against closed forms: bandwidth saturates at the slowest resource, small-message latency is
the sum of the stage latencies."""

import pytest

from models.fabric import AETH, RETH
from models.pcie.closed_form import read_Bps, read_tag_Bps
from sim.engine.run import run_scenario
from sim.scenario.resolve import fabric_params, nic_params, pcie_params

CONFIGS = {
    "cx7-gen5-400G": ({"preset": "connectx7"}, {}, "400Gb/s"),
    "cx7-gen4-400G": ({"preset": "connectx7"}, {"preset": "gen4x16"}, "400Gb/s"),
    "cx6-gen4-200G-mps512": ({"preset": "connectx6"}, {"mps": 512}, "200Gb/s"),
    "cx5-gen3x8-100G": ({"preset": "connectx5"}, {"preset": "gen3x8", "mps": 128}, "100Gb/s"),
}


def _scenario(make_scenario, nic, pcie, rate, workload, **fabric):
    node = {"nic": nic, "pcie": pcie, "host": {"poll_period": "0ns"}}
    return make_scenario(nodes=[{"name": "a", **node}, {"name": "b", **node}],
                         fabric={"rate": rate, **fabric}, workload=[workload])


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("size", [65536, 1 << 20])
@pytest.mark.parametrize("kind, header", [("write_bw", RETH), ("send_bw", 0)])  # a SEND has no RETH
def test_large_write_and_send_bandwidth_is_min_of_wire_and_pcie(make_scenario, config, size, kind, header):
    nic, pcie, rate = CONFIGS[config]
    scn = _scenario(make_scenario, nic, pcie, rate,
                    {"kind": kind, "from": "src", "to": "dst", "sizes": [f"{size}B"], "iterations": 300})
    result = run_scenario(scn)
    link = pcie_params(scn.nodes[0])
    expected_Bps = min(fabric_params(scn).efficiency(size, header), link.read_efficiency(size),
                       link.write_efficiency(size))
    assert result.summary["bw_avg_Gbps"].iloc[0] == pytest.approx(expected_Bps * 8 / 1e9, rel=0.01)


@pytest.mark.parametrize("tags", [4, 16])
def test_write_bandwidth_is_bound_by_the_requesters_read_tags(make_scenario, tags):
    n = 65536
    scn = _scenario(make_scenario, {"preset": "connectx7"}, {"read_tags": tags}, "400Gb/s",
                    {"kind": "write_bw", "from": "src", "to": "dst", "sizes": [f"{n}B"], "iterations": 300})
    link = pcie_params(scn.nodes[0])
    assert link.read_tags == tags and read_tag_Bps(link, n) < fabric_params(scn).efficiency(n, RETH)
    result = run_scenario(scn)
    assert result.summary["bw_avg_Gbps"].iloc[0] == pytest.approx(read_Bps(link, n) * 8 / 1e9, rel=0.01)


def test_unlimited_read_tags_leave_the_wire_as_the_bound(make_scenario):
    def bandwidth(tags):
        scn = _scenario(make_scenario, {"preset": "connectx7"}, {"read_tags": tags, "read_latency": "2us"},
                        "400Gb/s", {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"],
                                    "iterations": 300})
        return scn, run_scenario(scn).summary["bw_avg_Gbps"].iloc[0]

    scn, unlimited = bandwidth("unlimited")
    assert pcie_params(scn.nodes[0]).read_tags is None
    assert unlimited == pytest.approx(fabric_params(scn).efficiency(65536, RETH) * 8 / 1e9, rel=0.01)
    scn, limited = bandwidth(64)
    assert limited == pytest.approx(read_tag_Bps(pcie_params(scn.nodes[0]), 65536) * 8 / 1e9, rel=0.01)
    assert limited < unlimited / 2


def test_pcie_bound_and_wire_bound_cases_both_exist(make_scenario):
    fab = fabric_params(_scenario(make_scenario, {}, {}, "400Gb/s", {"kind": "write_bw", "from": "src", "to": "dst",
                                                                     "sizes": ["1B"]}))
    gen4 = pcie_params(_scenario(make_scenario, {}, {"preset": "gen4x16"}, "400Gb/s",
                                 {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["1B"]}).nodes[0])
    assert gen4.write_efficiency(1 << 20) < fab.efficiency(1 << 20, RETH)


@pytest.mark.parametrize("config", CONFIGS)
def test_small_write_latency_is_sum_of_stage_latencies(make_scenario, config):
    nic, pcie, rate = CONFIGS[config]
    scn = _scenario(make_scenario, nic, pcie, rate,
                    {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["2B"], "iterations": 20})
    n, link, fab = nic_params(scn.nodes[0]), pcie_params(scn.nodes[0]), fabric_params(scn)
    one_way = (n.doorbell_ps + n.tx_process_ps + n.tx_latency_ps + fab.latency_ps + fab.serialize_ps(2, RETH)
               + n.rx_process_ps + n.rx_latency_ps + link.write_ps(2) + link.write_latency_ps)
    result = run_scenario(scn).summary.iloc[0]
    assert result["t_typical_us"] == pytest.approx(one_way / 1e6, rel=0.01)
    assert result["t_stdev_us"] == pytest.approx(0, abs=1e-9)


def test_small_read_latency_is_sum_of_stage_latencies(make_scenario):
    scn = _scenario(make_scenario, {"preset": "connectx7"}, {}, "400Gb/s",
                    {"kind": "read_lat", "from": "src", "to": "dst", "sizes": ["2B"], "iterations": 20})
    n, link, fab = nic_params(scn.nodes[0]), pcie_params(scn.nodes[0]), fabric_params(scn)
    request = n.doorbell_ps + n.tx_process_ps + n.tx_latency_ps + fab.latency_ps + fab.serialize_ps(0, RETH)
    responder = (n.rx_process_ps + n.rx_latency_ps + link.read_request_ps(2) + link.read_latency_ps
                 + link.read_return_ps(2))
    response = n.tx_latency_ps + fab.latency_ps + fab.serialize_ps(2, AETH) + n.rx_process_ps + n.rx_latency_ps
    landing = link.write_ps(2 + n.cqe_bytes) + link.write_latency_ps
    result = run_scenario(scn).summary.iloc[0]
    assert result["t_typical_us"] == pytest.approx((request + responder + response + landing) / 1e6, rel=0.01)


def test_polling_adds_jitter_bounded_by_the_poll_period(make_scenario):
    scn = make_scenario(workload=[{"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["2B"],
                                   "iterations": 500}])
    jittery = run_scenario(scn).summary.iloc[0]
    assert 0 < jittery["t_stdev_us"] and jittery["t_max_us"] - jittery["t_min_us"] <= 0.040 + 1e-9


def test_read_bandwidth_is_capped_by_outstanding_reads(make_scenario):
    base = {"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 400, "tx_depth": 128}

    def bw(max_rd_atomic):
        scn = make_scenario(nodes=[{"name": "a", "nic": {"max_rd_atomic": max_rd_atomic}}, {"name": "b"}],
                            workload=[base])
        return run_scenario(scn).summary["bw_avg_Gbps"].iloc[0]

    rtt_us = run_scenario(make_scenario(workload=[{**base, "kind": "read_lat", "iterations": 50}])
                          ).summary["t_avg_us"].iloc[0]
    one, two, many = bw(1), bw(2), bw(16)
    # one READ in flight: a credit is held from the send engine until the response reaches the NIC, i.e. the
    # round trip less the doorbell, the landing write and the polling (under 0.5 us together)
    assert 4096 * 8 / (rtt_us * 1e3) <= one <= 4096 * 8 / ((rtt_us - 0.5) * 1e3)
    assert two == pytest.approx(2 * one, rel=0.03)
    assert many > 6 * one
