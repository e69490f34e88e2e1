"""perftest's -c UC and -c UD: the front end against the equivalent scenario with ``transport``, UD's message size
lowered to the MTU as perftest lowers it, and the scenario key's located refusals."""

from __future__ import annotations

import numpy as np
import pytest

from models.fabric import DETH, FabricParams
from sim.cli.perftest import perftest_scenario, run_perftest
from sim.engine.run import run_scenario
from sim.scenario.scenario_file import load_scenario
from tests.conftest import perftest_streams
from sim.scenario.schema import Scenario


def _row(text: str, size: int) -> list[float]:
    row = next(line for line in text.splitlines() if line.split()[:1] == [str(size)])
    return [float(x) for x in row.split()]


@pytest.mark.parametrize("argv, transport", [
    (["ib_write_bw", "-c", "UC", "-s", "4K", "-n", "300"], "uc"),
    (["ib_send_bw", "-c", "UC", "-s", "4K", "-n", "300"], "uc"),
    (["ib_write_lat", "-c", "UC", "-s", "64", "-n", "50"], "uc"),
    (["ib_send_bw", "-c", "UD", "-s", "4K", "-n", "300"], "ud"),
    (["ib_send_lat", "-c", "UD", "-s", "64", "-n", "50"], "ud"),
])
def test_c_uc_and_ud_run_the_scenario_with_that_transport(argv, transport):
    scenario = perftest_scenario(argv)
    assert scenario.workload[0].transport == transport
    code, text = run_perftest([*argv, "--report_gbits"])
    assert code == 0, text
    assert f"Connection type : {argv[2]}" in text
    (row,) = run_scenario(scenario, notice=lambda _: None).summary.to_dict("records")
    printed = _row(text, row["bytes"])
    if argv[0].endswith("_bw"):
        assert printed[1:4] == [row["iterations"], round(row["bw_peak_Gbps"], 2), round(row["bw_avg_Gbps"], 2)]
    else:
        assert printed[1:5] == [row["iterations"], round(row["t_min_us"], 2), round(row["t_max_us"], 2),
                                round(row["t_typical_us"], 2)]


def test_uc_write_bw_of_small_messages_beats_rc_which_waits_for_acks():
    """With the send queue's window full, RC frees a slot per ACK; UC frees it once the message is sent."""
    uc = run_perftest(["ib_write_bw", "-c", "UC", "-s", "64", "-n", "2000", "-t", "16", "--report_gbits"])
    rc = run_perftest(["ib_write_bw", "-c", "RC", "-s", "64", "-n", "2000", "-t", "16", "--report_gbits"])
    assert uc[0] == rc[0] == 0
    assert _row(uc[1], 64)[3] > 1.5 * _row(rc[1], 64)[3]


def test_ud_send_bw_of_small_messages_pays_the_deth_of_each_packet():
    """At 512 B the port is the bottleneck: UD's rate is UC's times the ratio of their wire bytes per message (UD adds
    an 8-byte DETH to each packet)."""
    argv = ["ib_send_bw", "-s", "512", "-n", "1000", "-t", "128", "--report_gbits"]
    ud, uc = (run_perftest([*argv, "-c", c]) for c in ("UD", "UC"))
    assert ud[0] == uc[0] == 0
    fabric = FabricParams()
    ratio = fabric.wire_bytes(512) / fabric.wire_bytes(512, 0, DETH)
    assert _row(ud[1], 512)[2] / _row(uc[1], 512)[2] == pytest.approx(ratio, rel=2e-3)
    assert ratio < 1 - 1e-2


def test_c_ud_with_a_or_perftests_default_size_lowers_it_to_the_mtu_and_says_so():
    code, text, said = perftest_streams(["ib_send_bw", "-c", "UD", "-a", "-n", "100", "-m", "1024"])
    assert code == 0, said
    assert " Max msg size in UD is MTU 1024\n Changing to this MTU" in said and "Changing" not in text
    assert _row(text, 1024) and not any(line.split()[:1] == ["2048"] for line in text.splitlines())
    scenario = perftest_scenario(["ib_send_bw", "-c", "UD"])
    assert scenario.workload[0].size_list() == [4096]
    remote = next(b for b in scenario.buffers if b.name == "remote")
    assert remote.size >= 4096 + 40  # perftest's buffer holds the GRH too


@pytest.mark.parametrize("work, message", [
    ("{kind: read_bw, from: src, to: dst, sizes: [64B], transport: uc}", "workload[0].transport: read_bw: UC carries"),
    ("{kind: atomic_lat, from: src, to: dst, sizes: [8B], transport: uc}", "UC carries RDMA WRITE and SEND only"),
    ("{kind: write_bw, from: src, to: dst, sizes: [64B], transport: ud}", "workload[0].transport: write_bw: UD"),
    ("{kind: send_bw, from: src, to: dst, sizes: [2KiB], transport: ud}", "more than the fabric's MTU 1024"),
    ("{kind: send_bw, from: src, to: dst, sizes: [1KiB], transport: ud}", "1024 + 40 (the GRH) does not fit"),
    ("{kind: send_lat, from: src, to: dst, sizes: [1KiB], transport: xrc}", "workload[0].transport: xrc with send_lat"),
    ("{kind: send_bw, from: src, to: dst, sizes: [1KiB], transport: dc}", "workload[0].transport"),
])
def test_illegal_transport_combinations_are_located_errors(tmp_path, work, message):
    path = tmp_path / "s.yaml"
    path.write_text("schema: 1\nname: t\nnodes:\n  - {name: a}\n  - {name: b}\nfabric: {mtu: 1024}\nbuffers:\n"
                    "  - {name: src, on: a.host, size: 1KiB, register: pinned}\n"
                    "  - {name: dst, on: b.host, size: 1KiB, register: pinned}\n"
                    f"workload:\n  - {work}\noutputs: []\n")
    with pytest.raises(Exception) as err:
        load_scenario(path)
    assert f"{path}:" in str(err.value) and message in str(err.value), str(err.value)


@pytest.mark.parametrize("kind, transport", [("send_bw", "ud"), ("write_bw", "uc"), ("send_bw", "uc"),
                                             ("send_lat", "uc"), ("send_bw", "xrc"), ("write_bw", "xrc")])
def test_data_mode_delivers_the_source_bytes_after_the_grh(kind, transport):
    scenario = Scenario.model_validate({
        "schema": 1, "name": "data", "seed": 3, "data": True, "nodes": [{"name": "a"}, {"name": "b"}],
        "buffers": [{"name": "src", "on": "a.host", "size": "8KiB"}, {"name": "dst", "on": "b.host", "size": "8KiB"}],
        "workload": [{"kind": kind, "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 20,
                      "transport": transport}]})
    result = run_scenario(scenario, notice=lambda _: None)
    assert result.counters["data_checked_bytes"] == 4096 and result.counters["data_mismatched_bytes"] == 0
    assert not result.summary["errors"].any()
    dst = result.testbed.registrations["dst"].current_bytes()
    if transport == "ud":  # a GRH-less datagram on InfiniBand: the payload starts 40 bytes in
        src = result.testbed.registrations["src"].current_bytes()
        assert np.array_equal(dst[40:40 + 4096], src[:4096]) and not np.array_equal(dst[:4096], src[:4096])


@pytest.mark.parametrize("connection, words", [("UC", "UC"), ("XRC", "no XRC")])
def test_a_transport_the_device_does_not_create_is_refused_naming_c(connection, words):
    """EFA creates no UC QPs (efa_create_qp) and has no XRC (no IBV_DEVICE_XRC, no open_xrcd)."""
    from sim.cli.perftest import UsageError

    refused = rf"^-c/--connection: the efa NIC of node 'a' refuses it: .*EOPNOTSUPP.*{words}"
    with pytest.raises(UsageError, match=refused):
        perftest_scenario(["ib_write_bw", "-d", "efa_0", "-c", connection, "-n", "5"])
