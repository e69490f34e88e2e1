"""Port rates per InfiniBand and Ethernet generation: data rates from lanes and line codes, perftest's bandwidth
against the closed form of headers per MTU, the scenario key, ibv_query_port."""

import math

import pytest
from typer.testing import CliRunner

from models.fabric import FabricParams
from models.nic.port_rates import PORT_RATES, perftest_Bps, port_rate
from models.presets import NIC_PORT, NIC_PRESETS, NIC_RATE
from models.verbs.query import LinkLayer
from sim.api import ConfigError, Context, Testbed
from sim.cli.app import app
from sim.core.units import parse_rate
from sim.engine.run import run_scenario
from sim.scenario.resolve import fabric_params
from sim.scenario.schema import Scenario

NOMINAL_GBPS = {"edr": 100, "hdr": 200, "ndr": 400, "xdr": 800, "100gbe": 100, "200gbe": 200, "400gbe": 400,
                "800gbe": 800}
"""The generations' names: IBTA 4X data rates and IEEE 802.3 MAC rates."""
HEADERS = {"ib": 8 + 12 + 4 + 2, "roce": 14 + 4 + 20 + 20 + 8 + 12 + 4}
"""Per-packet bytes perftest does not count: LRH BTH ICRC VCRC; Ethernet FCS preamble/IFG IPv4 UDP BTH ICRC."""
LINK = {"ib": 1 - 6 / (4 * 65536), "roce": 1.0}
"""Share of the data rate packets get: an IB port sends a 6-byte flow-control packet per data VL at least every
65,536 symbol times of its 4 lanes (IBA vol. 1, 7.9.4; the packet's fields as Wireshark's packet-infiniband.c
dissect_infiniband_link reads them); Ethernet has no link-level credits."""


def test_every_generation_carries_its_nominal_rate_after_its_line_code():
    assert set(PORT_RATES) == set(NOMINAL_GBPS)
    for name, port in PORT_RATES.items():
        assert port.data_Gbps == pytest.approx(NOMINAL_GBPS[name], rel=1e-12), name
        assert port.data_Gbps < port.lanes * port.lane_Gbps  # the line code always costs something


def test_line_codes_match_their_standards():
    assert PORT_RATES["edr"].lane_data_Gbps == pytest.approx(25.78125 * 64 / 66)
    assert PORT_RATES["400gbe"].lane_data_Gbps == pytest.approx(106.25 * 256 / 257 * 514 / 544)
    assert PORT_RATES["100gbe"].lane_data_Gbps == pytest.approx(25.78125 * 256 / 257 * 514 / 528)
    assert PORT_RATES["ndr"].gbaud == 53.125 and PORT_RATES["edr"].gbaud == 25.78125


@pytest.mark.parametrize("name", sorted(PORT_RATES))
@pytest.mark.parametrize("size, mtu", [(65536, 4096), (65536, 1024), (4096, 4096), (1 << 20, 2048), (2, 4096)])
def test_perftest_bandwidth_is_the_data_rate_less_headers_per_packet(name, size, mtu):
    port = PORT_RATES[name]
    packets = max(1, math.ceil(size / mtu))
    pad = -size % 4  # BTH PadCnt: rxe's init_req_packet, pad = (-payload) & 0x3
    wire = size + pad + packets * HEADERS[port.transport] + 16  # + RETH
    expected = NOMINAL_GBPS[name] * 1e9 / 8 * LINK[port.transport] * size / wire
    assert perftest_Bps(port, size, mtu) == pytest.approx(expected, rel=1e-12)


def _bed(port: str | None, preset: str = "connectx5", **fabric) -> dict:
    nic = {"preset": preset, **({"port": port} if port else {})}
    return {"schema": 1, "name": "t", "seed": 1, "nodes": [{"name": "a", "nic": nic}, {"name": "b", "nic": nic}],
            "fabric": fabric, "buffers": [{"name": "s", "on": "a.host", "size": "1MiB"},
                                          {"name": "d", "on": "b.host", "size": "1MiB"}],
            "workload": [{"kind": "write_bw", "from": "s", "to": "d", "sizes": ["64KiB"], "iterations": 1000}]}


@pytest.mark.parametrize("port, preset", [("edr", "connectx5"), ("100gbe", "connectx5"), ("200gbe", "connectx6"),
                                          ("ndr", "connectx7")])
def test_a_write_stream_runs_at_what_perftest_would_report_for_the_port(port, preset):
    bw = run_scenario(Scenario.model_validate(_bed(port, preset))).summary["bw_avg_Gbps"].iloc[0] * 1e9 / 8
    assert bw == pytest.approx(perftest_Bps(PORT_RATES[port], 65536), rel=0.002)


def test_an_ethernet_port_makes_the_fabric_roce_and_an_unnamed_port_keeps_the_presets():
    assert fabric_params(Scenario.model_validate(_bed("400gbe"))).transport == "roce"
    assert fabric_params(Scenario.model_validate(_bed("400gbe"))).rate_Bps == 400e9 / 8
    default = fabric_params(Scenario.model_validate(_bed(None, "efa")))
    assert (default.transport, default.rate_Bps) == ("ib", parse_rate(NIC_RATE["efa"]))
    assert fabric_params(Scenario.model_validate(_bed("xdr", rate="200Gb/s"))).rate_Bps == 200e9 / 8


def test_presets_name_ports_of_their_rate():
    assert set(NIC_PORT) == set(NIC_PRESETS)
    for nic, port in NIC_PORT.items():
        assert parse_rate(NIC_RATE[nic]) == port_rate(port).data_Gbps * 1e9 / 8
    with pytest.raises(KeyError, match="known: edr"):
        port_rate("qdr")


@pytest.mark.parametrize("port, width, speed", [("edr", 2, 32), ("hdr", 2, 64), ("ndr", 2, 128), ("xdr", 2, 256),
                                                ("100gbe", 2, 32), ("400gbe", 2, 128), ("800gbe", 4, 128)])
def test_query_port_reports_each_generation_as_mlx5_does(port, width, speed):
    bed = Testbed({n: {"nic": {"preset": "connectx7", "port": port}} for n in "ab"})
    attr = Context(bed, "a").query_port(1)
    link = LinkLayer.ETHERNET if PORT_RATES[port].transport == "roce" else LinkLayer.INFINIBAND
    assert (attr.active_width, attr.active_speed, attr.link_layer) == (width, speed, link)
    assert attr.rate_Gbps == PORT_RATES[port].data_Gbps


@pytest.mark.parametrize("nics, fabric, where, reason", [
    (("400GbE", "400GbE"), "", "5:36 nodes[0].nic.port", "Input should be 'edr'"),
    (("ndr", "400gbe"), "", "7:36 nodes[1].nic.port", "one fabric has one link layer"),
    (("400gbe", "400gbe"), "fabric: {transport: ib}\n", "8:21 fabric.transport", "use 'roce'"),
])
def test_port_mistakes_are_located_errors(tmp_path, nics, fabric, where, reason):
    text = ("schema: 1\nname: t\nnodes:\n"
            + "".join(f"  - name: {n}\n    nic: {{preset: connectx7, port: {p}}}\n" for n, p in zip("ab", nics))
            + fabric + "buffers:\n  - {name: s, on: a.host, size: 1MiB}\n  - {name: d, on: b.host, size: 1MiB}\n"
            "workload: {kind: write_bw, from: s, to: d, sizes: [64KiB], iterations: 10}\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:{where}:" in result.stderr and reason in result.stderr and "Traceback" not in result.output


def test_fabric_headers_are_the_ones_perftest_excludes():
    assert FabricParams(transport="ib").wire_bytes(4096) - 4096 == HEADERS["ib"]
    assert FabricParams(transport="roce").wire_bytes(4096) - 4096 == HEADERS["roce"]


def test_a_python_testbed_refuses_mixed_link_layers_too():
    with pytest.raises(ConfigError, match=r"^<testbed> nodes\[1\]\.nic\.port: '400gbe' is an Ethernet port"):
        Testbed({"a": {"nic": {"port": "ndr"}}, "b": {"nic": {"port": "400gbe"}}})
    assert Testbed({n: {"nic": {"port": "400gbe"}} for n in "ab"}).bed.fabric.params.transport == "roce"


def test_the_resolved_scenario_names_the_transport_its_ports_run():
    assert Scenario.model_validate(_bed("800gbe")).model_dump()["fabric"]["transport"] == "roce"
    assert Scenario.model_validate(_bed("800gbe", transport="roce")).fabric.transport == "roce"
    assert Scenario.model_validate(_bed("ndr")).fabric.transport == "ib"
