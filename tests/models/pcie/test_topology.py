"""Topology: routes, shared links, P2P through a switch vs the CPU, cross-socket penalties, and the event
engine walking the route's stages against the closed form."""

import itertools

import pytest

from models.nic.stages import stream_Bps
from models.pcie.link import PcieLink, PcieParams
from models.pcie.topology import (LAYOUTS, PeerToPeerError, RootComplexParams, SocketLinkParams, SwitchParams,
                                  build_topology, dma_path, dma_read_stages, dma_write_stages, route)
from sim.core import PS_PER_NS

MiB = 1 << 20


def test_routes_follow_the_layouts():
    kinds = {lay: [h.kind for h in route(build_topology(lay), "nic0", "gpu0")] for lay in LAYOUTS}
    assert kinds == {"switch": ["pcie", "pcie"], "root_complex": ["pcie", "p2p", "pcie"],
                     "cross_socket": ["pcie", "p2p", "socket", "p2p", "pcie"]}
    g = build_topology("switch")
    up = [h.server for h in route(g, "nic0", "mem0")]
    down = [h.server for h in route(g, "mem0", "nic0")]
    nic_link: PcieLink = g.edges["sw0", "nic0"]["link"]
    assert up[0] is nic_link.up and down[-1] is nic_link.down


def test_concurrent_flows_share_the_same_link_servers():
    g = build_topology("switch")
    nic, gpu = route(g, "nic0", "mem0"), route(g, "gpu0", "mem0")
    assert nic[-1].server is gpu[-1].server  # the switch uplink towards the CPU
    assert nic[0].server is not gpu[0].server
    assert route(g, "nic0", "mem0")[-1].server is nic[-1].server  # routes are rebuilt over the same objects


def test_switch_p2p_runs_at_link_rate_and_the_cpu_at_a_fraction():
    n = 4 * MiB
    link = PcieParams()
    switch = dma_path(build_topology("switch"), "nic0", "gpu0", n)
    via_cpu = dma_path(build_topology("root_complex"), "nic0", "gpu0", n)
    host = dma_path(build_topology("root_complex"), "nic0", "mem0", n)
    assert switch.write_Bps == pytest.approx(link.write_efficiency(n), rel=1e-6)
    assert via_cpu.write_Bps == pytest.approx(0.46 * link.write_efficiency(n), rel=1e-6)
    assert via_cpu.read_Bps == pytest.approx(0.46 * link.read_efficiency(n), rel=1e-6)
    assert host.write_Bps == pytest.approx(link.write_efficiency(n), rel=1e-6)
    assert switch.p2p and via_cpu.p2p and not host.p2p
    slower = dma_path(build_topology("root_complex", root=RootComplexParams(p2p_write_factor=0.25)), "nic0", "gpu0", n)
    assert slower.write_Bps == pytest.approx(0.25 * link.write_efficiency(n), rel=1e-6)


def test_latencies_add_switch_p2p_and_socket_hops():
    base = PcieParams()
    sw, rc = SwitchParams(), RootComplexParams()
    sock = SocketLinkParams()
    local = dma_path(build_topology("root_complex"), "nic0", "mem0", 64)
    remote = dma_path(build_topology("root_complex"), "nic0", "mem1", 64)
    assert (local.read_latency_ps, local.write_latency_ps) == (base.read_latency_ps, base.write_latency_ps)
    assert remote.read_latency_ps - local.read_latency_ps == 100 * PS_PER_NS  # pcie-bench: remote NUMA +~100 ns
    under_switch = dma_path(build_topology("switch"), "nic0", "gpu0", 64)
    assert under_switch.read_latency_ps == base.read_latency_ps + 2 * sw.latency_ps
    cross = dma_path(build_topology("cross_socket"), "nic0", "gpu0", 64)
    assert cross.write_latency_ps == base.write_latency_ps + 2 * rc.p2p_latency_ps + sock.latency_ps


def test_socket_link_caps_remote_memory():
    fast = PcieParams(gen=6)
    g = build_topology("root_complex", nic=fast, socket_link=SocketLinkParams(bw_Bps=40e9))
    assert dma_path(g, "nic0", "mem1", 4 * MiB).write_Bps == pytest.approx(40e9, rel=1e-6)
    assert dma_path(g, "nic0", "mem0", 4 * MiB).write_Bps == pytest.approx(fast.write_efficiency(4 * MiB), rel=1e-6)


def test_intel_client_root_complex_forwards_p2p_writes_only():
    g = build_topology("root_complex", root=RootComplexParams(p2p_read_supported=False))
    path = dma_path(g, "nic0", "gpu0", 4096)
    assert path.read_Bps == 0.0 and path.read_latency_ps is None and path.write_Bps > 0
    with pytest.raises(PeerToPeerError, match="cpu0.*writes only"):
        dma_read_stages(g, "nic0", "gpu0", 4096)
    assert dma_read_stages(g, "nic0", "mem0", 4096)  # host memory is no P2P
    under_switch = build_topology("switch", root=RootComplexParams(p2p_read_supported=False))
    assert dma_path(under_switch, "nic0", "gpu0", 4096).read_Bps > 0  # the switch forwards, not the CPU


def test_unknown_layout_and_nodes_are_rejected():
    with pytest.raises(ValueError, match="unknown layout"):
        build_topology("ring")
    with pytest.raises(Exception, match="gpu7"):
        route(build_topology(), "nic0", "gpu7")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [4096, MiB])
def test_event_engine_matches_the_closed_form(layout, n):
    g = build_topology(layout)
    path = dma_path(g, "nic0", "gpu0", n)
    write = stream_Bps(lambda: dma_write_stages(g, "nic0", "gpu0", n), n, 200)
    read = stream_Bps(lambda: dma_read_stages(g, "nic0", "gpu0", n), n, 200)
    assert write == pytest.approx(path.write_Bps, rel=0.01)
    assert read == pytest.approx(path.read_Bps, rel=0.01)


def test_two_flows_share_the_switch_uplink():
    g = build_topology("switch")
    n = MiB
    alone = stream_Bps(lambda: dma_write_stages(g, "nic0", "mem0", n), n, 100)
    g = build_topology("switch")
    sources = itertools.cycle(["nic0", "gpu0"])  # the messages alternate between the two sources
    together = stream_Bps(lambda: dma_write_stages(g, next(sources), "mem0", n), n, 200)
    assert together == pytest.approx(alone, rel=0.01)  # two sources, one uplink: the sum stays at its rate
