"""The vectorized core against the event engine on real scenarios: every posted and completed time (integer
ps), every per-operation row and every summary row identical; engine selection and the command line."""

from __future__ import annotations

import copy
import re

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sim.fast.solver as solver_module
from models.pcie.presets import PCIE_PRESETS
from sim.cli.app import app
from sim.engine.planner.domain import OutsideDomain, outside_domain, slow_for_fast
from sim.engine.harness import setup_run
from sim.engine.run import run_scenario
from sim.scenario.schema import Scenario
from tests.conftest import nic_for, scenario_dict
from tests.properties import examples

PRESETS = {
    "cx7-gen5-400G": ({"preset": "connectx7"}, {}, {"rate": "400Gb/s"}),
    "cx6-gen4-200G-mps512": ({"preset": "connectx6"}, {"mps": 512}, {"rate": "200Gb/s", "latency": "1us"}),
    "cx5-gen3x8-100G-roce": ({"preset": "connectx5"}, {"preset": "gen3x8", "mps": 128, "mrrs": 256},
                             {"rate": "100Gb/s", "transport": "roce", "mtu": 1024}),
    "efa-gen4-400G-nopoll": ({"preset": "efa"}, {}, {"rate": "400Gb/s", "latency": "0ns"}),
}


def same_runs(data: dict) -> list:
    """The run under each engine; every table and counter (the run's, and each case's in its summary row)
    identical."""
    results = [run_scenario(Scenario.model_validate({**data, "engine": engine})) for engine in ("event", "fast")]
    for table in ("operations", "summary", "events", "registrations"):
        pd.testing.assert_frame_equal(getattr(results[1], table), getattr(results[0], table))
    assert results[1].counters == results[0].counters
    return results


def auto_runs(data: dict) -> tuple:
    """The run by default (``engine: auto``), with the one line it said, and on the event engine: every table and
    counter identical, whichever engine ``auto`` picked."""
    lines: list[str] = []
    auto = run_scenario(Scenario.model_validate({**data, "engine": "auto"}), notice=lines.append)
    event = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    for table in ("operations", "summary", "events", "registrations"):
        pd.testing.assert_frame_equal(getattr(auto, table), getattr(event, table))
    assert auto.counters == event.counters
    assert len(lines) == 1 and ("vectorized core ran" in lines[0] or "event engine ran" in lines[0]), lines
    return auto, lines


def falls_back(data: dict, refused: str, said: str) -> None:
    """``engine: fast`` refuses the scenario (its message matching ``refused``); ``auto`` says why in one line
    holding ``said`` and gives the event engine's operations."""
    with pytest.raises(OutsideDomain, match=refused):
        run_scenario(Scenario.model_validate({**data, "engine": "fast"}))
    lines = []
    auto = run_scenario(Scenario.model_validate({**data, "engine": "auto"}), notice=lines.append)
    event = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    assert len(lines) == 1 and said in lines[0], lines
    pd.testing.assert_frame_equal(auto.operations, event.operations)


def two_nodes(preset: str, poll: str = "40ns", **nic) -> dict:
    nic_spec, pcie, fabric = copy.deepcopy(PRESETS[preset])
    node = {"nic": nic_spec | nic, "pcie": pcie, "host": {"poll_period": "0ns" if "nopoll" in preset else poll}}
    return {"nodes": [{"name": "a", **node}, {"name": "b", **node}], "fabric": fabric}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("kind", ["write_bw", "read_bw"])
def test_bandwidth_equals_event_engine(preset, kind):
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": [f"{s}B" for s in sizes], "iterations": n,
             "tx_depth": depth}
            for sizes, n, depth in (([1, 64, 220, 4096], 2500, 128), ([16384, 65536], 1200, 16),
                                    ([2, 1 << 20], 150, 1), ([256, 4096], 4000, 512), ([512], 3000, 2))]
    same_runs(scenario_dict(seed=11, workload=work, **two_nodes(preset)))


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx5-gen3x8-100G-roce"])
def test_latency_workloads_equal_event_engine(preset):
    work = [{"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["2B", "220B", "221B", "4KiB", "1MiB"],
             "iterations": 150},
            {"kind": "read_lat", "from": "src", "to": "dst", "sizes": ["2B", "4KiB", "1MiB"], "iterations": 150},
            {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 200, "inline": 0}]
    same_runs(scenario_dict(seed=4, workload=work, **two_nodes(preset)))


def test_inline_writes_and_mixed_workloads_equal_event_engine():
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64B", "220B", "512B"], "iterations": 800,
             "tx_depth": 64, "inline": 220},
            {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["2B", "8KiB"], "iterations": 100},
            {"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["2KiB"], "iterations": 900, "tx_depth": 256},
            {"kind": "read_lat", "from": "dst", "to": "src", "sizes": ["64B"], "iterations": 100}]
    same_runs(scenario_dict(seed=9, workload=work, **two_nodes("cx7-gen5-400G", poll="7ns")))


@pytest.mark.parametrize("tags", [2, 16])
def test_read_tags_and_several_engines_equal_event_engine(tags):
    nodes = two_nodes("cx6-gen4-200G-mps512", tx_engines=3, rx_engines=2)
    for node in nodes["nodes"]:
        node["pcie"] = {**node["pcie"], "read_tags": tags, "read_latency": "900ns"}
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": ["64B", "4KiB", "64KiB"], "iterations": 600,
             "tx_depth": 64} for kind in ("write_bw", "read_bw", "write_lat", "read_lat")]
    same_runs(scenario_dict(workload=work, **nodes))


def test_small_writes_held_to_the_dma_engines_issue_rate_equal_event_engine():
    """pcie-bench's NFP-6000 engine on both nodes: small WRITEs run at the responder's posted-write issue rate
    (one per ``dma_write_issue_ps``), larger ones at the link's; the latency workloads' DMA reads carry the
    per-byte term. Both engines give the same rows."""
    nodes = two_nodes("cx5-gen3x8-100G-roce")
    for node in nodes["nodes"]:
        node["pcie"] = {"preset": "nfp6000"}
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["16B", "64B", "128B", "512B"],
             "iterations": 3000, "tx_depth": 128},
            {"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["64B", "4KiB"], "iterations": 1500,
             "tx_depth": 64},
            {"kind": "send_bw", "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 1500, "tx_depth": 64},
            {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["64B", "2KiB"], "iterations": 100, "inline": 0},
            {"kind": "read_lat", "from": "src", "to": "dst", "sizes": ["8B", "2KiB"], "iterations": 100}]
    _, fast = same_runs(scenario_dict(seed=3, workload=work, **nodes))
    rates = fast.summary[fast.summary.kind == "write_bw"].set_index("bytes")["msg_rate_Mpps"]
    issue_Mpps = 1e6 / PCIE_PRESETS["nfp6000"]["dma_write_issue_ps"]
    assert (rates[[16, 64]] <= issue_Mpps).all() and (rates[[16, 64]] > 0.95 * issue_Mpps).all()
    assert rates[512] < 0.3 * issue_Mpps  # the link, not the engine


@pytest.mark.parametrize("layout", ["switch", "root_complex", "cross_socket"])
@pytest.mark.parametrize("mode", ["peermem", "dmabuf", "dmabuf-pinned"])
def test_gpu_buffers_equal_event_engine(layout, mode):
    """GPU memory over each PCIe layout: a WRITE's source, a READ's target and both ends of the latency tests
    are translated through the MR's backing (the requester's sleep at its first read request, the
    responder's when the request arrives, the READ requester's before the response lands)."""
    gpu = "h200" if mode == "peermem" else "mi300x"
    nodes = [{"name": n, "gpus": [{"preset": gpu}], "topology": layout, "nic": nic_for(mode)} for n in ("a", "b")]
    buffers = [{"name": "src", "on": "a.gpu0", "size": "4MiB", "register": mode},
               {"name": "dst", "on": "b.gpu0", "size": "4MiB", "register": mode},
               {"name": "host", "on": "b.host", "size": "4MiB"}]
    work = [{"kind": kind, "from": "src", "to": to, "sizes": ["64B", "4KiB", "1MiB"], "iterations": 500, "tx_depth": 32}
            for kind in ("write_bw", "read_bw") for to in ("dst", "host")]
    work += [{"kind": kind, "from": "src", "to": "dst", "sizes": ["8B", "64KiB"], "iterations": 80}
             for kind in ("write_lat", "read_lat", "send_lat")]
    same_runs(scenario_dict(seed=6, nodes=nodes, buffers=buffers, workload=work))


def test_link_flaps_are_stall_intervals_on_both_engines():
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB", "64KiB"], "iterations": 3000},
            {"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["64B"], "iterations": 300},
            {"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 2000}]
    flaps = [{"at": "100us", "kind": "link-flap", "node": "a", "duration": "50us", "frames": "held"},
             {"at": "2ms", "kind": "link-flap", "node": "b", "duration": "300us", "frames": "held"},
             {"at": "900ms", "kind": "link-flap", "node": "b", "duration": "1us", "frames": "held"}]  # not reached
    data = scenario_dict(workload=work, events=flaps)
    results = same_runs(data)
    assert list(results[1].events["outcome"].str.split(":").str[0]) == [
        "link down for 50us, frames held", "link down for 300us, frames held", "not reached"]
    calm = run_scenario(Scenario.model_validate({**data, "events": [], "engine": "fast"}))
    assert results[1].operations["completed_ps"].max() > calm.operations["completed_ps"].max() + 200_000_000


def test_events_that_leave_the_workloads_alone_run_on_the_fast_engine():
    """Memory pressure that evicts only what the workloads do not use (or fails: nothing movable), a managed
    job, an eviction storm, host page migration blocked by the pin, faults after the run: same rows."""
    nodes = [{"name": "a", "gpus": [{"preset": "mi300x", "memory": "8GiB"}], "topology": "switch",
              "kernel": {"dmabuf_move_notify": True}, "nic": nic_for("dmabuf-pinned")}, {"name": "b"}]
    buffers = [{"name": "src", "on": "a.gpu0", "size": "1GiB", "register": "dmabuf-pinned"},
               {"name": "spare", "on": "a.gpu0", "size": "1GiB", "register": "dmabuf"},
               {"name": "dst", "on": "b.host", "size": "1GiB"}]
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": 3000, "tx_depth": 32},
            {"kind": "read_lat", "from": "dst", "to": "src", "sizes": ["4KiB"], "iterations": 300}]
    events = [{"at": "200us", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "7GiB", "hold": "1ms"},
              {"at": "300us", "kind": "eviction-storm", "on": "a.gpu0", "count": 3, "every": "100us"},
              {"at": "400us", "kind": "host-page-migration", "buffer": "dst"},
              {"at": "1500us", "kind": "managed-job", "on": "a.gpu0", "size": "64MiB"},
              {"at": "900ms", "kind": "qp-error", "node": "a"}]
    event, fast = same_runs(scenario_dict(seed=5, nodes=nodes, buffers=buffers, workload=work, events=events))
    assert fast.counters["evictions"] == 1 and fast.counters["invalidations"] == 1  # 'spare' zapped once
    assert fast.operations["ok"].all()
    outcomes = dict(zip(fast.events["kind"], fast.events["outcome"]))
    assert outcomes["eviction-storm"] == "3 moves, 3 refused (pinned)"
    assert outcomes["host-page-migration"].startswith("blocked") and "managed-job-faults" in outcomes
    assert outcomes["qp-error"].startswith("not reached")


PRESSURE = {"at": "100us", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "7.5GiB"}


@pytest.mark.parametrize("event, kind, source, says", [
    ({"at": "100us", "kind": "qp-error", "node": "b"}, "write_bw", "src", "scenario events changed QP 2 on b"),
    ({"at": "100us", "kind": "peermem-reclaim", "buffer": "src"}, "write_bw", "src",
     "scenario events changed buffer 'src'"),
    (PRESSURE, "send_bw", "dst", "buffer 'src' moved while workload 'send_bw' still reaches it as a responder (RNR "
     "NAKs and retries), which the vectorized core follows only for a READ or WRITE stream of one RC QP retrying "
     "for ever, for a count, alone on the buffer")])
def test_events_that_reach_the_workloads_need_the_event_engine(event, kind, source, says):
    """A QP error, a peer-memory reclaim, a dma-buf moved under a responder that another stream reads from: auto
    says what changed and runs the event engine; fast refuses."""
    nodes = [{"name": "a", "gpus": [{"preset": "h200" if "buffer" in event else "mi300x", "memory": "8GiB"}],
              "kernel": {"dmabuf_move_notify": True}}, {"name": "b"}]
    buffers = [{"name": "src", "on": "a.gpu0", "size": "1GiB",
                "register": "peermem" if "buffer" in event else "dmabuf"},
               {"name": "dst", "on": "b.host", "size": "1GiB"}]
    work = [{"kind": kind, "from": source, "to": "dst" if source == "src" else "src", "sizes": ["1MiB"],
             "iterations": 2000, "tx_depth": 16}]
    data = scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=[event], engine="auto")
    lines = []
    auto = run_scenario(Scenario.model_validate(data), notice=lines.append)
    event_run = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    assert len(lines) == 1 and says in lines[0] and "the event engine simulates that" in lines[0]
    pd.testing.assert_frame_equal(auto.operations, event_run.operations)
    assert not auto.operations["ok"].all() or auto.counters["invalidations"] == 1
    with pytest.raises(OutsideDomain, match=f"engine fast: {re.escape(says)}"):
        run_scenario(Scenario.model_validate({**data, "engine": "fast"}))


def pin_vs_dmabuf(events: list[dict], iterations: int, size: str = "1MiB", depth: int = 16,
                  kind: str = "write_bw") -> dict:
    """``scenarios/pin_vs_dmabuf.yaml``'s dynamic dma-buf variant with other events (and messages)."""
    nodes = [{"name": "a", "nic": {"preset": "connectx7"}, "gpus": [{"preset": "mi300x", "memory": "8GiB"}],
              "kernel": {"dmabuf_move_notify": True}}, {"name": "b", "nic": {"preset": "connectx7"}}]
    buffers = [{"name": "src", "on": "a.gpu0", "size": "1GiB", "register": "dmabuf"},
               {"name": "dst", "on": "b.host", "size": "1GiB"}]
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": [size], "iterations": iterations,
             "tx_depth": depth}]
    return scenario_dict(nodes=nodes, buffers=buffers, workload=work, events=events,
                         fabric={"rate": "400Gb/s", "latency": "300ns"})


PRESSURE_HELD = {"at": "20ms", "kind": "gpu-memory-pressure", "on": "a.gpu0", "allocate": "7.5GiB", "hold": "30ms"}


@pytest.mark.parametrize("events, moves, size, depth, kind", [
    ([PRESSURE_HELD], 1, "1MiB", 16, "write_bw"),
    ([{"at": "5ms", "kind": "eviction-storm", "on": "a.gpu0", "count": 3, "every": "40ms"}], 3, "1MiB", 16,
     "write_bw"),
    ([PRESSURE_HELD], 1, "1MiB", 16, "read_bw")])
def test_a_source_buffer_the_exporter_moves_is_followed_exactly(events, moves, size, depth, kind):
    """move_notify zaps the MR a WRITE stream reads from (or READ responses land in): the first access after
    the zap re-faults, accesses wait for the copy and the re-map, and operations posted after the zap reach the
    buffer where it went. The vectorized core follows each move (one more solve each) with the event engine's
    every time and row. (In the last case the READs' max_rd_atomic slots carry across the two routes, their
    responses landing in order.)"""
    event, fast = same_runs(pin_vs_dmabuf(events, 12000, size, depth, kind))
    assert fast.counters["invalidations"] == fast.counters["refaults"] == moves
    assert fast.counters["rnr_naks"] == 0
    latency = fast.operations["latency_ps"]
    assert latency.max() > 40 * latency.median()  # the 1 GiB copy (about 20 ms) shows in the worst latency


def test_a_move_of_a_later_workloads_source_is_followed_exactly():
    """The exporter moves the source of the second workload while the first (from host memory) still runs: the
    solve stops at the move, before the second has solved an operation, and the next solve starts it from where
    its buffer went."""
    data = pin_vs_dmabuf([PRESSURE_HELD], 2000)
    data["buffers"].append({"name": "host_src", "on": "a.host", "size": "1GiB"})
    data["workload"].insert(0, {**data["workload"][0], "from": "host_src", "name": "first"})
    event, fast = same_runs(data)
    ops, events = fast.operations, fast.events
    moved = int(events.loc[events["kind"] == "gpu-memory-pressure", "time_ps"].iloc[0])
    first = ops[ops["workload"] == "first"]
    assert first["posted_ps"].min() < moved < first["completed_ps"].max()  # the move came during the first
    assert fast.counters["invalidations"] == fast.counters["refaults"] == 1


def test_writes_of_a_moved_buffers_shorter_route_wait_for_their_qps_earlier_ones():
    """After the move, WRITEs read their payload from host memory, sooner than the WRITEs still reading VRAM, and
    reach the transmit port first; RC's send queue sends them in posting order, and the vectorized core keeps that
    turn (sim.fast.turns): both engines give the same rows."""
    fast = same_runs(pin_vs_dmabuf([PRESSURE], 2000, "64KiB", 128))[1]
    assert (fast.engine, fast.fallback) == ("fast", None)


def test_an_event_before_a_ping_pongs_last_acknowledgement_is_reached_on_both_engines():
    """The event engine's run ends once the last WRITEs of a ping-pong are acknowledged and polled, after the
    last iteration completed: an event in between is reached (not "not reached") on both engines."""
    data = scenario_dict(workload=[{"kind": "write_lat", "from": "src", "to": "dst", "sizes": ["64KiB"],
                                    "iterations": 50}])
    probe = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    last, end = int(probe.operations["completed_ps"].max()), probe.testbed.env.now
    assert end > last  # the acknowledgements come later
    begin = setup_run(Scenario.model_validate(data), data["seed"])[1]  # when the workloads start
    flap = {"at": f"{(last + end) // 2 - begin}ps", "kind": "link-flap", "node": "b", "duration": "1ns",
            "frames": "held"}
    event, fast = same_runs({**data, "events": [flap]})
    assert fast.events["outcome"].tolist() == ["link down for 1ns, frames held"]


def test_blueflame_off_is_exact_on_the_fast_engine():
    work = [{"kind": kind, "from": "src", "to": "dst", "sizes": ["64B", "4KiB"], "iterations": 300, "tx_depth": 32}
            for kind in ("write_bw", "read_bw", "write_lat")]
    same_runs(scenario_dict(workload=work, **two_nodes("cx6-gen4-200G-mps512", blueflame=False)))


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nic=st.sampled_from(["connectx7", "connectx6", "connectx5"]), mps=st.sampled_from([128, 256, 512]),
       rate=st.sampled_from(["100Gb/s", "200Gb/s", "400Gb/s"]), latency=st.integers(0, 2000),
       poll=st.sampled_from(["0ns", "7ns", "40ns"]), kind=st.sampled_from(["write_bw", "read_bw", "write_lat",
                                                                           "read_lat", "send_lat"]),
       sizes=st.lists(st.sampled_from([1, 64, 220, 4096, 65536]), min_size=1, max_size=3, unique=True),
       iterations=st.integers(1, 400), depth=st.sampled_from([1, 2, 16, 128, 1024]), seed=st.integers(0, 99),
       tags=st.sampled_from([1, 4, 32, 256, "unlimited"]), engines=st.integers(1, 3),
       place=st.sampled_from(["host", "switch", "root_complex", "cross_socket"]),
       mode=st.sampled_from(["peermem", "dmabuf", "dmabuf-pinned"]))
def test_random_scenarios_equal_event_engine(nic, mps, rate, latency, poll, kind, sizes, iterations, depth, seed,
                                             tags, engines, place, mode):
    node = {"nic": {"preset": nic, "tx_engines": engines, "rx_engines": engines},
            "pcie": {"mps": mps, "read_tags": tags}, "host": {"poll_period": poll}}
    nodes = [{"name": "a", **node}, {"name": "b", **node}]
    buffers = None
    if place != "host":  # the requester's buffer in GPU memory behind that layout
        nodes[0] |= {"gpus": [{"preset": "h200" if mode == "peermem" else "mi300x"}], "topology": place,
                     "nic": node["nic"] | nic_for(mode)}
        buffers = [{"name": "src", "on": "a.gpu0", "size": "8MiB", "register": mode},
                   {"name": "dst", "on": "b.host", "size": "8MiB"}]
    work = {"kind": kind, "from": "src", "to": "dst", "sizes": [f"{s}B" for s in sizes], "iterations": iterations,
            "tx_depth": depth}
    data = scenario_dict(seed=seed, nodes=nodes, fabric={"rate": rate, "latency": f"{latency}ns"}, workload=[work])
    same_runs(data | ({"buffers": buffers} if buffers else {}))


def test_domain_reasons():
    plain = Scenario.model_validate(scenario_dict())
    assert outside_domain(plain) is None and slow_for_fast(plain) is None
    assert "trace" in outside_domain(plain, trace=True)
    inline = scenario_dict(workload=[{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["512B"],
                                      "inline": 1024}])
    assert outside_domain(Scenario.model_validate(inline)) is None  # ibv_post_send's own check refuses it
    with pytest.raises(OutsideDomain, match="ibv_post_send refuses its work requests .*ENOMEM.*512 B inline exceeds"):
        run_scenario(Scenario.model_validate({**inline, "engine": "fast"}))
    fault = scenario_dict(events=[{"at": "1ms", "kind": "qp-error", "node": "a"}])
    assert outside_domain(Scenario.model_validate(fault)) is None  # decided once the events have run
    off = Scenario.model_validate(scenario_dict(**two_nodes("cx7-gen5-400G", blueflame=False)))
    assert outside_domain(off) is None and "blueflame off" in slow_for_fast(off)


def _odp() -> dict:
    """A responder's ODP buffer: its faults answer RNR NAKs (a stream's own are followed, test_odp_differential)."""
    data = scenario_dict()
    data["buffers"][1]["register"] = "odp"
    return data


def _flapped_read() -> dict:
    """A READ stream over a link that loses its frames a while (a WRITE stream's losses are followed,
    test_link_losses)."""
    data = scenario_dict(events=[{"at": "10us", "kind": "link-flap", "node": "b", "duration": "5us", "frames": "lost"}])
    data["workload"][0]["kind"] = "read_bw"
    return data


@pytest.mark.parametrize("data, check, says", [
    (scenario_dict(data=True), "source", "data mode moves the bytes"),
    (_odp(), "responder", "ODP maps a page when the NIC first touches it"),
    (_flapped_read(), "request_wire", "a link outage loses the frames it meets")])
def test_checks_that_decide_at_run_time_keep_the_steps_on_the_event_engine(data, check, says):
    """The vectorized core's domain comes from the steps: a check where the model decides from the run's history
    is refused by the solver, naming it; auto then runs the event engine and says why."""
    assert outside_domain(Scenario.model_validate(data)) is None
    falls_back(data, f"at its check '{check}' the model decides at run time: .*{re.escape(says)}", says)


def test_auto_says_why_and_runs_the_event_engine():
    data = scenario_dict(engine="auto", **two_nodes("cx7-gen5-400G", blueflame=False))
    lines = []
    auto = run_scenario(Scenario.model_validate(data), notice=lines.append)
    event = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    assert len(lines) == 1 and "(base): event engine ran write_bw: " in lines[0] and "blueflame off" in lines[0]
    pd.testing.assert_frame_equal(auto.operations, event.operations)
    assert (auto.engine, event.engine, event.fallback) == ("event", "event", None) and "blueflame off" in auto.fallback
    said = []
    fast = run_scenario(Scenario.model_validate(scenario_dict(engine="auto")), notice=said.append)
    assert said == [f"{fast.scenario.name} (base): vectorized core ran write_bw"]
    assert (fast.engine, fast.fallback) == ("fast", None)


def test_steps_the_solver_refuses_run_on_the_event_engine():
    """A NIC without transmit latency lets READs through the max_rd_atomic gate straight to the wire, which the
    ordering rule cannot order against the releasing claim: fast says so from the steps, auto falls back."""
    work = [{"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "iterations": 300}]
    data = scenario_dict(workload=work, **two_nodes("cx7-gen5-400G", tx_latency="0ns"))
    falls_back(data, "workload 'read_bw' at 4KiB: a gate must be followed by a positive", "a gate must be followed")


GPU_READS = [{"kind": "read_bw", "from": "src", "to": "dst", "sizes": ["64KiB"], "iterations": 3000, "tx_depth": 16}]
"""READs of 64 KiB landing in a GPU behind the requester's PCIe switch (``nodes`` of :func:`gpu_reads`): each
response's data and then its completion entry take the NIC's switch uplink, under max_rd_atomic."""


def gpu_reads(**work) -> dict:
    """:data:`GPU_READS` (with ``work`` over it) on a node with a GPU, under ``engine: auto``."""
    return scenario_dict(nodes=[{"name": "a", "gpus": [{"preset": "mi300x"}]}, {"name": "b"}], engine="auto",
                         workload=[{**GPU_READS[0], **work}])


def test_auto_hands_a_crawling_solve_to_the_event_engine():
    """Two QPs of :data:`GPU_READS` at 4 KiB: a READ's max_rd_atomic slot is freed when its completion entry lands,
    which queues on the uplink among the other QP's responses, so each pass settles about one round of slots and
    blocks keep a round or so each; auto notices and runs the event engine (engine: fast keeps solving, to the same
    answer)."""
    data = gpu_reads(qps=2, sizes=["4KiB"])
    lines = []
    auto = run_scenario(Scenario.model_validate(data), notice=lines.append)
    assert len(lines) == 1 and "operations per block here" in lines[0] and "the event engine is faster" in lines[0]
    fast = run_scenario(Scenario.model_validate({**data, "engine": "fast"}))
    pd.testing.assert_frame_equal(fast.operations, auto.operations)


@pytest.mark.parametrize("qps, blocks", [(1, 8), (2, 24)])
def test_reads_into_a_gpu_are_solved_in_long_blocks(monkeypatch, qps, blocks):
    """One or two QPs of :data:`GPU_READS`: each completion entry queues on the uplink behind the next response (of
    either QP) and moves the responses after it, a chain the passes used to settle one link at a time (blocks of
    about 65 READs, 13 passes each; two QPs were handed to the event engine); served one claim at a time as a guess,
    the QPs' chains together (:mod:`sim.fast.chain`), it is settled in a few passes per block, with the event engine's
    answer."""
    kept = []
    solve_block = solver_module.solve_block
    monkeypatch.setattr(solver_module, "solve_block",
                        lambda *args, **kw: (lambda out: kept.append(sum(out[1])) or out)(solve_block(*args, **kw)))
    lines = []
    auto = run_scenario(Scenario.model_validate(gpu_reads(qps=qps)), notice=lines.append)
    assert "vectorized core ran" in lines[0] and sum(kept) == 3000 * qps and len(kept) <= blocks
    event = run_scenario(Scenario.model_validate({**gpu_reads(qps=qps), "engine": "event"}))
    for table in ("operations", "summary", "events", "registrations"):
        pd.testing.assert_frame_equal(getattr(auto, table), getattr(event, table))
    assert auto.counters == event.counters


def test_fast_refuses_a_scenario_outside_its_domain():
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB"], "duration": "100us", "post_list": 4}]
    data = scenario_dict(engine="fast", workload=work)
    with pytest.raises(OutsideDomain, match="engine fast: workload 'write_bw' posts lists"):
        run_scenario(Scenario.model_validate(data))


def test_cli_engine_option(tmp_path):
    text = """schema: 1
name: tiny
nodes: [{name: a, nic: {blueflame: false}}, {name: b}]
buffers: [{name: src, on: a.host, size: 64KiB}, {name: dst, on: b.host, size: 64KiB}]
workload:
  - {kind: write_bw, from: src, to: dst, sizes: [2B, 4KiB], iterations: 200}
  - {kind: read_lat, from: src, to: dst, sizes: [64KiB], iterations: 50}
"""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    runner = CliRunner()
    for engine in ("event", "fast", "auto"):
        result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / engine), "--engine", engine, "-q"])
        assert result.exit_code == 0, result.output
        ran = {"event": "tiny (base): event engine ran write_bw, read_lat\n",
               "fast": "tiny (base): vectorized core ran write_bw, read_lat\n",
               "auto": "tiny (base): event engine ran write_bw, read_lat: node a fetches WQEs by DMA"}[engine]
        assert ran in result.stderr
    metrics = [(tmp_path / e / "metrics.parquet").read_bytes() for e in ("event", "fast", "auto")]
    assert metrics[0] == metrics[1] == metrics[2]
    assert runner.invoke(app, ["run", str(path), "--engine", "warp"]).exit_code == 2


ATOMIC_ACCESS = ["local_write", "remote_write", "remote_read", "remote_atomic"]


@pytest.mark.parametrize("preset", ["cx7-gen5-400G", "cx5-gen3x8-100G-roce"])
@pytest.mark.parametrize("unit", ["20ns", "400ns"])
def test_atomic_workloads_equal_event_engine(preset, unit):
    work = [{"kind": "atomic_bw", "from": "src", "to": "dst", "sizes": ["8B"], "iterations": 3000, "tx_depth": 128},
            {"kind": "atomic_bw", "from": "src", "to": "dst", "sizes": ["8B"], "iterations": 1500, "tx_depth": 3,
             "atomic": "CMP_AND_SWAP"},
            {"kind": "atomic_lat", "from": "src", "to": "dst", "sizes": ["8B"], "iterations": 200}]
    buffers = [{"name": "src", "on": "a.host", "size": "64KiB", "access": ATOMIC_ACCESS},
               {"name": "dst", "on": "b.host", "size": "64KiB", "access": ATOMIC_ACCESS}]
    results = same_runs(scenario_dict(seed=5, workload=work, buffers=buffers, **two_nodes(preset, atomic=unit)))
    assert (results[0].summary["errors"] == 0).all()


@pytest.mark.parametrize("kind, access, size, status", [
    ("atomic_bw", ["local_write", "remote_write", "remote_read"], "8B", "IBV_WC_REM_ACCESS_ERR"),
    ("read_bw", ["local_write", "remote_write"], "4KiB", "IBV_WC_REM_ACCESS_ERR"),
    ("write_bw", ["local_write", "remote_read"], "4KiB", "IBV_WC_REM_ACCESS_ERR"),
    ("read_bw", ["remote_read"], "4KiB", "IBV_WC_LOC_PROT_ERR"),
    ("write_lat", ["local_write", "remote_read"], "64B", "IBV_WC_REM_ACCESS_ERR")])
def test_work_requests_that_would_fail_are_left_to_the_event_engine(kind, access, size, status):
    """Buffers without the access a workload's operations need: the event engine completes them in error (and
    flushes the rest); the vectorized core, which solves successful operations only, declines them, naming the
    status, so auto's results are the event engine's."""
    data = scenario_dict(workload=[{"kind": kind, "from": "src", "to": "dst", "sizes": [size], "iterations": 40}])
    for buffer in data["buffers"]:
        buffer["access"] = access
    lines = []
    auto = run_scenario(Scenario.model_validate({**data, "engine": "auto"}), notice=lines.append)
    event_run = run_scenario(Scenario.model_validate({**data, "engine": "event"}))
    pd.testing.assert_frame_equal(auto.operations, event_run.operations)
    assert not event_run.operations["ok"].any()
    assert len(lines) == 1 and f"its work requests would fail ({status})" in lines[0]
    with pytest.raises(OutsideDomain, match=re.escape(f"would fail ({status})")):
        run_scenario(Scenario.model_validate({**data, "engine": "fast"}))
