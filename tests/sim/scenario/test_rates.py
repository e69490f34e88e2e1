"""A fabric faster than a NIC port runs at the port's rate (and says so); a rate no port runs at is refused,
located, with the unit likely meant."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.engine.run import run_scenario
from sim.scenario.resolve import fabric_params, fabric_rate_notice
from tests.conftest import tiny_yaml

LARGE = {"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["1MiB"], "iterations": 40}


def _scenario(make_scenario, rate: str | None, nic: str = "connectx7", other: str = "connectx7"):
    fabric = {} if rate is None else {"fabric": {"rate": rate}}
    return make_scenario(nodes=[{"name": "a", "nic": {"preset": nic}}, {"name": "b", "nic": {"preset": other}}],
                         buffers=[{"name": "src", "on": "a.host", "size": "1MiB"},
                                  {"name": "dst", "on": "b.host", "size": "1MiB"}], workload=[LARGE], **fabric)


@pytest.mark.parametrize("rate, nic, other, expected_Gbps", [
    ("800Gb/s", "connectx7", "connectx7", 400), ("400Gb/s", "connectx7", "connectx6", 200),
    ("300Gb/s", "connectx7", "connectx7", 300), (None, "connectx7", "connectx5", 100)])
def test_links_run_at_the_slower_of_fabric_and_ports(make_scenario, rate, nic, other, expected_Gbps):
    assert fabric_params(_scenario(make_scenario, rate, nic, other)).rate_Bps * 8 / 1e9 == expected_Gbps


@pytest.mark.parametrize("engine", ["event", "fast"])
def test_no_link_carries_more_than_its_port(make_scenario, engine):
    """An 800 Gb/s fabric between ConnectX-7s (400 Gb/s ports) measures what a 400 Gb/s one does, below 400."""
    fast, exact = (run_scenario(_scenario(make_scenario, rate).model_copy(update={"engine": engine}),
                                notice=lambda _: None) for rate in ("800Gb/s", "400Gb/s"))
    assert fast.summary["bw_avg_Gbps"].tolist() == exact.summary["bw_avg_Gbps"].tolist()
    assert fast.summary["bw_avg_Gbps"].max() < 400


def test_the_run_says_which_rate_links_run_at(make_scenario):
    scenario = _scenario(make_scenario, "800Gb/s", other="connectx6")
    assert fabric_rate_notice(scenario) == ("fabric 800 Gb/s is faster than node b's NIC port (connectx6, hdr "
                                            "200 Gb/s): links run at 200 Gb/s")
    told = []
    run_scenario(scenario, notice=told.append)
    assert told[0] == "t (base): " + fabric_rate_notice(scenario)
    assert fabric_rate_notice(_scenario(make_scenario, "400Gb/s")) is None
    assert fabric_rate_notice(_scenario(make_scenario, None)) is None


@pytest.mark.parametrize("rate, reason", [
    ("400GBps", "400GBps is 3.2 Tb/s, faster than any NIC port built (1.6 Tb/s): did you mean 400Gb/s? "
                "(B is a byte, b a bit)"),
    ("200Tb/s", None),  # past the parser's own bound: its message stands
    ("400Tb/s", None),
    ("3.2Tb/s", "3.2Tb/s is 3.2 Tb/s, faster than any NIC port built (1.6 Tb/s)"),
    ("100Tb/s", "100Tb/s is 100 Tb/s, faster than any NIC port built (1.6 Tb/s): did you mean 100Gb/s?"),
])
def test_an_implausible_rate_is_refused_where_it_is_written(tmp_path, rate, reason):
    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 5}",
                              tail=f"fabric: {{rate: {rate}, latency: 300ns}}\n"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    line = f"{path}:12:16 fabric.rate: "
    assert result.output.startswith(line) and result.output.count("\n") == 1, result.output
    if reason:
        assert result.output == line + reason + "\n"


def test_a_rate_a_port_runs_at_is_accepted(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(tiny_yaml("{kind: write_bw, from: src, to: dst, sizes: [4KiB], iterations: 5}",
                              tail="fabric: {rate: 1.6Tb/s}\n"))
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0
