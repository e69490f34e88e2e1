"""The SEND workloads against closed forms, as the WRITE workloads are
(:mod:`tests.models.nic.test_datapath_closed_form`, which also holds send_bw's large-message bandwidth):
small-message latency is the sum of the stage latencies with the responder's receive CQE written after the
payload, a wire-bound SEND carries no RETH, and too few receives cost an RNR timer per NAK."""

import pytest

from models.fabric import RETH
from sim.engine.run import run_scenario
from sim.scenario.resolve import fabric_params, nic_params, pcie_params
from tests.models.nic.test_datapath_closed_form import CONFIGS, _scenario


@pytest.mark.parametrize("config", CONFIGS)
def test_small_send_latency_is_sum_of_stage_latencies_with_the_receive_cqe(make_scenario, config):
    nic, pcie, rate = CONFIGS[config]
    scn = _scenario(make_scenario, nic, pcie, rate,
                    {"kind": "send_lat", "from": "src", "to": "dst", "sizes": ["2B"], "iterations": 20})
    n, link, fab = nic_params(scn.nodes[0]), pcie_params(scn.nodes[0]), fabric_params(scn)
    one_way = (n.doorbell_ps + n.tx_process_ps + n.tx_latency_ps + fab.latency_ps + fab.serialize_ps(2)
               + n.rx_process_ps + n.rx_latency_ps + link.write_ps(2) + link.write_ps(n.cqe_bytes)
               + link.write_latency_ps)
    result = run_scenario(scn).summary.iloc[0]
    assert result["t_typical_us"] == pytest.approx(one_way / 1e6, rel=0.01)
    assert result["t_stdev_us"] == pytest.approx(0, abs=1e-9)


def test_send_carries_no_reth_so_small_sends_outrun_writes_on_the_wire(make_scenario):
    """A wire-bound small message: a SEND's packet is 16 bytes (RETH) shorter than a WRITE's."""
    def bw(kind):
        scn = _scenario(make_scenario, {"preset": "connectx7"}, {}, "25Gb/s",
                        {"kind": kind, "from": "src", "to": "dst", "sizes": ["256B"], "iterations": 8000})
        return scn, run_scenario(scn).summary["bw_avg_Gbps"].iloc[0]

    scn, send = bw("send_bw")
    _, write = bw("write_bw")
    fab = fabric_params(scn)
    assert send == pytest.approx(fab.efficiency(256) * 8 / 1e9, rel=0.01)
    assert write == pytest.approx(fab.efficiency(256, RETH) * 8 / 1e9, rel=0.01)


def test_too_few_receives_cost_an_rnr_timer_per_nak(make_scenario):
    def run(rx_depth):
        node = {"host": {"poll_period": "0ns"}}
        scn = make_scenario(nodes=[{"name": "a", **node}, {"name": "b", **node}],
                            workload=[{"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["64B"],
                                       "iterations": 2000, "tx_depth": 64, "rx_depth": rx_depth}])
        result = run_scenario(scn)
        ops = result.operations
        return result.counters["rnr_naks"], (ops["completed_ps"].max() - ops["posted_ps"].min()) / 1e6

    naks, span_us = run(512)
    short_naks, short_us = run(4)
    assert naks == 0 and short_naks > 0
    # perftest's min_rnr_timer (12: 640 us) is waited once per NAK: the run takes at least that much longer
    assert short_us - span_us >= short_naks * 640 * 0.99
