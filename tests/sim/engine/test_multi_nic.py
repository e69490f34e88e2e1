"""Rails nodes: several NICs and GPUs per node, each NIC with its own link, queues and keys; routes, NIC selection,
per-NIC MRs, registration fan-out and rail-aligned against cross-rail rates out of the event engine."""

import json

import networkx as nx
import pandas as pd
import pytest

from models.nic.stages import node_dma_read, node_dma_write
from models.nic.wqe import Opcode, SendWR, WcStatus
from models.pcie.server import (RailLayout, build_rail_server, connection, cross_rail_nic, devices, flow_rates,
                                qp_nic, rail_nics)
from models.pcie.topology import dma_write_stages, route
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.qp import ibv_create_qp, ibv_post_send, poll_stream
from sim.engine.build import build, qp_device
from sim.core import PS_PER_S
from sim.core.steps import Claim
from sim.fast import block
from sim.engine.planner.domain import outside_domain, slow_for_fast
from sim.engine.planner.streams import streams
from sim.engine.harness import setup_run
from sim.inspect.rails import rail_table
from sim.results.write import json_records, write_results
from sim.engine.run import run_scenario
from sim.scenario.refs import check_references
from sim.scenario.schema import Scenario

RAILS = {"sockets": 2, "switches_per_socket": 2, "gpus_per_switch": 2, "nics_per_gpu": 1}


def _scenario(gpus: int = 2, nics: dict | None = None, rails: str = "aligned", **extra) -> Scenario:
    """Two rails nodes with buffers src<i> on a.gpu<i> and dst<i> on b.gpu<i>, all on every NIC unless ``nics``
    names other NICs for some, and one write_bw streaming from each src to its dst at once."""
    nics = nics or {}
    buffers = [{"name": f"{end}{i}", "on": f"{node}.gpu{i}", "size": "1MiB", "register": "dmabuf",
                "nics": nics.get(f"{end}{i}", "all")}
               for end, node in (("src", "a"), ("dst", "b")) for i in range(gpus)]
    return Scenario.model_validate({
        "schema": 1, "name": "rails", "seed": 3,
        "nodes": [{"name": "a", "rails": RAILS}, {"name": "b", "rails": RAILS}],
        "buffers": buffers, "outputs": [],
        "workload": [{"kind": "write_bw", "from": "src0", "to": "dst0", "sizes": ["1MiB"], "iterations": 60,
                      "rails": rails, "pairs": [{"from": f"src{i}", "to": f"dst{i}"} for i in range(1, gpus)]}],
        **extra})


def test_every_nic_routes_to_every_gpu_along_the_graphs_shortest_path():
    g = build_rail_server(RailLayout(**RAILS))
    for nic in devices(g, "nic"):
        for gpu in devices(g, "gpu"):
            path = nx.shortest_path(g, nic, gpu)
            assert [h.to for h in route(g, nic, gpu) if h.kind != "p2p"] == path[1:]
            assert {h.to for h in route(g, nic, gpu) if h.kind == "p2p"} == {
                n for n in path[1:-1] if g.nodes[n]["kind"] == "root_complex"}


def test_a_qps_dma_takes_the_route_from_its_own_nic():
    bed = build(_scenario(), 1)
    node = bed.nic_node("b", "nic5")
    servers = {s.server for s in node_dma_write(node, "gpu1", 1 << 20) if isinstance(s, Claim)}
    assert servers == {h.server for h in route(node.topology, "nic5", "gpu1")}
    assert node.pcie is node.topology.edges["sw2", "nic5"]["link"]
    reads = {s.server for s in node_dma_read(node, "gpu1", 1 << 20) if isinstance(s, Claim)}
    assert node.topology.nodes["cpu0"]["p2p"] in reads and node.topology.nodes["cpu1"]["p2p"] in reads


def test_nic_selection_by_rail_policy():
    layout = RailLayout(**RAILS)
    g = build_rail_server(layout)
    home = {v: rail_nics(g, v, layout) for v in ("gpu3", "mem0", "mem1")}
    assert [qp_nic(g, home["gpu3"], "aligned", k) for k in range(2)] == ["nic3", "nic3"]
    assert qp_nic(g, home["gpu3"], "cross", 0) == cross_rail_nic(g, "nic3") == "nic7"
    assert connection(g, "gpu3", "nic7") == "SYS" and connection(g, "gpu3", "nic3") == "PIX"
    assert [qp_nic(g, home["gpu3"], "all", k) for k in range(9)] == [*devices(g, "nic"), "nic0"]
    assert home["mem0"] == ["nic0", "nic1", "nic2", "nic3"]
    assert [qp_nic(g, home["mem1"], "aligned", k) for k in range(3)] == ["nic4", "nic5", "nic6"]


def test_a_rails_nodes_rail_nics_are_worked_out_once_and_its_rail_buffers_and_aligned_qps_share_them():
    bed = build(_scenario(gpus=3, nics={"dst1": "rail", "dst2": ["nic2", "nic6"]}), 1)
    g, layout = bed.nodes["b"].topology, RailLayout(**RAILS)
    assert bed.rails["b"] == {v: rail_nics(g, v, layout) for v in [*devices(g, "memory"), *devices(g, "gpu")]}
    assert list(bed.rails["b"]) == ["mem0", "mem1", *(f"gpu{i}" for i in range(8))]
    rail = bed.registrations["dst1"]
    assert list(rail.mrs) == bed.rails["b"]["gpu1"] == ["nic1"]
    assert [qp_device(bed, rail, "aligned", k).context.node.device for k in range(3)] == ["nic1"] * 3
    assert qp_device(bed, rail, "cross", 0).context.node.device == "nic5"


def test_each_nic_holds_its_own_mr_and_the_rail_buffer_only_its_rail_nic():
    bed = build(_scenario(nics={"dst1": "rail"}), 1)
    everywhere, rail = bed.registrations["dst0"], bed.registrations["dst1"]
    assert list(everywhere.mrs) == [f"nic{k}" for k in range(8)] and list(rail.mrs) == ["nic1"]
    assert everywhere.mr is everywhere.mrs["nic0"] and rail.mr is rail.mrs["nic1"]  # its first NIC's
    for nic, mr in everywhere.mrs.items():
        assert bed.nic_node("b", nic).nic.lookup(mr.rkey) is mr
        assert mr.pd is bed.devices[f"b.{nic}"].pd
    assert len({id(mr) for mr in everywhere.mrs.values()}) == 8


def _write_through(bed, requester_nic: str, responder_nic: str, rkey_nic: str) -> WcStatus:
    """One signaled 4 KiB WRITE from src0 to dst0 on QPs of ``requester_nic`` and ``responder_nic``, with the
    rkey of dst0's MR on ``rkey_nic``."""
    a, b = bed.devices[f"a.{requester_nic}"], bed.devices[f"b.{responder_nic}"]
    cq = ibv_create_cq(a.context, 4)
    qp, peer = ibv_create_qp(a.pd, cq, 4), ibv_create_qp(b.pd, ibv_create_cq(b.context, 4), 4)
    qp.connect(peer)
    src, dst = bed.registrations["src0"].mr_on(requester_nic), bed.registrations["dst0"].mr_on(rkey_nic)
    ibv_post_send(qp, SendWR(1, Opcode.RDMA_WRITE, src.iova, 4096, src.lkey, dst.iova, dst.rkey))
    bed.env.run()
    (wc,) = ibv_poll_cq(cq, 1)
    return wc.status


def test_an_rkey_of_nic0_used_on_nic1_fails_with_rem_access_err():
    bed = build(_scenario(gpus=1, nics={"dst0": ["nic0"]}), 1)
    assert _write_through(bed, "nic0", "nic0", "nic0") is WcStatus.SUCCESS
    assert _write_through(bed, "nic1", "nic1", "nic0") is WcStatus.REM_ACCESS_ERR


def test_a_workload_on_a_nic_its_buffer_is_not_registered_on_is_refused():
    with pytest.raises(Exception, match=r"'dst0' is not registered on b\.nic4 \(registered on nic0"):
        run_scenario(_scenario(gpus=1, rails="cross", nics={"dst0": "rail"}))


@pytest.mark.parametrize("rails, nics, refused", [
    ("cross", "rail", "b.nic4"), ("cross", ["nic0", "nic1"], "b.nic4"), ("aligned", ["nic1"], "b.nic0"),
    ("cross", "all", None), ("aligned", "rail", None), ("cross", ["nic4"], None), ("all", "all", None)])
def test_a_qp_on_a_nic_its_buffer_is_not_registered_on_is_refused_at_the_rails_key(rails, nics, refused):
    scenario = _scenario(gpus=1, rails=rails, nics={"dst0": nics})
    problems = check_references(scenario)
    if refused is None:
        assert problems == [] and len(run_scenario(scenario).summary) == 1
        return
    assert [path for path, _ in problems] == [("workload", 0, "rails")]
    assert f"opens QP 0 of 'dst0' on {refused}, where its nics" in problems[0][1]
    with pytest.raises(Exception, match=rf"'dst0' is not registered on {refused}"):  # what the run would meet
        run_scenario(scenario)


def test_registering_on_every_nic_costs_every_registration():
    bed = build(_scenario(nics={"dst1": "rail"}), 1)
    everywhere, rail = bed.registrations["dst0"], bed.registrations["dst1"]
    assert everywhere.register_ps == sum(mr.reg_ps for mr in everywhere.mrs.values())
    assert rail.register_ps == rail.mrs["nic1"].reg_ps
    assert everywhere.register_ps > 7 * rail.register_ps


@pytest.fixture(scope="module")
def rates():
    """Per-rail table of two GPUs' flows, rail-aligned and cross-rail."""
    return {policy: rail_table(run_scenario(_scenario(rails=policy))) for policy in ("aligned", "cross")}


def test_rail_aligned_flows_run_at_the_estimate_and_cross_rail_far_below(rates):
    aligned, cross = rates["aligned"], rates["cross"]
    assert list(aligned["requester"]) == ["a.nic0", "a.nic1"] and list(cross["requester"]) == ["a.nic4", "a.nic5"]
    # The estimate is the least of the two DMA legs and the wire; the simulated stream adds only its start-up
    # (one message's latency over 60 messages) and per-message costs off the bottleneck.
    assert aligned["bw_GBps"].to_numpy() == pytest.approx(aligned["estimate_GBps"].to_numpy(), rel=0.01)
    assert (cross["bw_GBps"] < aligned["bw_GBps"] / 3).all()
    # Cross-rail, each flow crosses four shared root-complex forwarding stages (two per node): the simulation
    # delivers at most the bottleneck estimate.
    assert (cross["bw_GBps"] <= cross["estimate_GBps"] * 1.01).all()


def _simulated_Bps(flows, stages_of, n: int, messages: int = 40) -> list[float]:
    """Each flow's rate when all ``flows`` queue ``messages`` DMAs of ``n`` bytes at once, each through the
    stages ``stages_of(src, dst)`` gives, on the event engine's servers (bytes/s)."""
    from models.nic.stages import EndTimes
    from sim.core import Environment
    from sim.core.interpreter import Operation, compile_steps
    from sim.core.steps import Rebase, Wake

    env, ends = Environment(), [[] for _ in flows]
    for k in range(messages):
        for f, (src, dst) in enumerate(flows):
            program = compile_steps((*stages_of(src, dst), Rebase(True), Wake()))
            env.step_runner.start(Operation(program, k * len(flows) + f, EndTimes(ends[f])))
    env.run()
    return [messages * n * PS_PER_S / max(done) for done in ends]


@pytest.mark.parametrize("cross", [False, True])
def test_one_dma_leg_of_concurrent_flows_matches_the_bottleneck_estimate(cross):
    """Eight NIC-to-GPU write flows of one node at once against :func:`flow_rates` on the same graph."""
    g, n = build_rail_server(RailLayout(**RAILS)), 1 << 20
    flows = [(cross_rail_nic(g, f"nic{i}") if cross else f"nic{i}", f"gpu{i}") for i in range(8)]
    simulated = _simulated_Bps(flows, lambda nic, gpu: dma_write_stages(g, nic, gpu, n), n)
    assert simulated == pytest.approx(flow_rates(g, flows, n), rel=0.01)


def test_two_cross_rail_legs_in_series_lose_rate_only_when_flows_cross_the_sockets_both_ways():
    """A cross-rail leg on each of two nodes in series: at the estimate when every flow goes from socket 1 to
    socket 0; below it when half go the other way and meet the two forwarding servers in the opposite order."""
    a, b, n = build_rail_server(RailLayout(**RAILS)), build_rail_server(RailLayout(**RAILS)), 1 << 20
    flows = [(cross_rail_nic(a, f"nic{i}"), f"gpu{i}") for i in range(8)]

    def legs(nic, gpu):
        return dma_write_stages(a, nic, gpu, n) + dma_write_stages(b, nic, gpu, n)

    one_way = _simulated_Bps(flows[:4], legs, n)
    assert one_way == pytest.approx(flow_rates(a, flows[:4], n), rel=0.02)
    both_ways = _simulated_Bps(flows, legs, n)
    assert max(both_ways) < 0.8 * min(flow_rates(a, flows, n))


@pytest.mark.parametrize("rails, kind, qps, gpus", [("aligned", "write_bw", 2, 2), ("cross", "write_bw", 1, 2),
                                                   ("cross", "read_bw", 1, 2), ("aligned", "write_lat", 1, 1)])
def test_rails_nodes_give_the_same_answers_on_both_engines(rails, kind, qps, gpus):
    """Flows of a rails node on separate NICs share the sockets' links: the vectorized core solves them with the
    event engine's answers (the domain is the steps': nothing in them is decided at run time)."""
    scenario = _scenario(gpus=gpus, rails=rails)
    assert outside_domain(scenario) is None
    work = scenario.workload[0].model_copy(update={"kind": kind, "qps": qps, "sizes": [4096, 65536],
                                                   "iterations": 300})
    runs = [run_scenario(scenario.model_copy(update={"workload": [work], "engine": engine}))
            for engine in ("event", "fast")]
    pd.testing.assert_frame_equal(runs[0].operations, runs[1].operations)


@pytest.mark.parametrize("rails, gpus, slow", [("cross", 8, True), ("cross", 5, True), ("cross", 4, False),
                                               ("aligned", 8, False)])
def test_auto_leaves_flows_crossing_the_socket_links_both_ways_to_the_event_engine(rails, gpus, slow):
    """Cross-rail flows from GPUs on both sockets: each way's DMA read requests queue among the other way's
    payloads on the socket links, where the core is slower than the event engine; from one socket's GPUs, or
    rail-aligned, it is faster."""
    reason = slow_for_fast(_scenario(gpus=gpus, rails=rails))
    assert (reason is not None and "from GPUs on 2 sockets of node a" in reason) == slow
    assert slow or reason is None


def test_eight_flows_crossing_rails_give_the_same_answers_when_the_passes_go_on(monkeypatch):
    """Eight 1 MiB flows crossing the sockets both ways take turns on the socket links at almost every message:
    a smallest block's passes go on past their usual count (``sim.fast.crawl.repeats``), and still end on the
    event engine's answers."""
    scenario = _scenario(gpus=8, rails="cross")
    work = scenario.workload[0].model_copy(update={"iterations": 60})
    went_on = []
    repeats = block.repeats
    monkeypatch.setattr(block, "repeats", lambda *args: went_on.append(repeats(*args)) or went_on[-1])
    runs = [run_scenario(scenario.model_copy(update={"workload": [work], "engine": engine}))
            for engine in ("event", "fast")]
    assert any(went_on)
    pd.testing.assert_frame_equal(runs[0].operations, runs[1].operations)


def test_qps_on_two_nics_of_a_node_draw_their_poll_delays_from_streams_of_their_own():
    """QP numbers repeat across a node's NICs; each QP's poll delays still come from a stream of its own (two QPs
    drawing from one would take each other's delays in event order, which no per-QP solve reproduces)."""
    scenario = _scenario(rails="cross")
    mine = [end.src.qp for end in streams(scenario, setup_run(scenario, 3, False)[0])]
    assert len(mine) == 2 and mine[0].qp_num == mine[1].qp_num and mine[0].node.device != mine[1].node.device
    assert poll_stream(mine[0]) != poll_stream(mine[1]) and mine[0].poll_delays.rng is not mine[1].poll_delays.rng


def test_rails_keys_are_checked():
    with pytest.raises(Exception, match="room for 1"):
        Scenario.model_validate({**_scenario().model_dump(by_alias=True),
                                 "nodes": [{"name": "a", "gpus": [{}, {}]}, {"name": "b"}]})
    with pytest.raises(Exception, match="drop 'topology'"):
        Scenario.model_validate({**_scenario().model_dump(by_alias=True),
                                 "nodes": [{"name": "a", "rails": RAILS, "topology": "switch"}, {"name": "b"}]})
    problems = check_references(_scenario(nics={"dst0": ["nic1", "nic9"]}))
    assert [(path, text.split(" (")[0]) for path, text in problems] == [
        (("buffers", 2, "nics", 1), "no NIC named 'nic9'")]


def test_same_seed_same_rails_results(rates):
    again = rail_table(run_scenario(_scenario(rails="cross")))
    assert again.equals(rates["cross"])


def test_a_runs_rail_table_is_worked_out_once_and_its_summary_holds_that_one(tmp_path):
    result = run_scenario(_scenario(gpus=1))
    table = rail_table(result)
    assert rail_table(result) is table and len(table) == 1
    summary = json.loads((write_results(result, tmp_path / "out") / "summary.json").read_text())
    assert summary["rails"] == json_records(table)

