import networkx as nx
import pytest

from models.libs.regcost import MOONCAKE_EFA, DeviceRegistrationCost, fanout_cost_ps
from models.pcie.server import (RailLayout, build_rail_server, connection, devices, flow_rates, nearest_nics,
                                rail_nics, topo_matrix)
from models.pcie.topology import dma_path

LAYOUTS = [RailLayout(), RailLayout(nics_per_gpu=4), RailLayout(sockets=1, switches_per_socket=4),
           RailLayout(sockets=3, switches_per_socket=1, gpus_per_switch=1)]


def switch_of(g, device):
    (parent,) = g.neighbors(device)
    return parent


def socket_of(g, device):
    return next(n for n in g.neighbors(switch_of(g, device)) if g.nodes[n]["kind"] == "root_complex")


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_connection_classes_follow_the_graph(layout):
    g = build_rail_server(layout)
    assert len(devices(g, "gpu")) == layout.gpus and len(devices(g, "nic")) == layout.nics
    for gpu in devices(g, "gpu"):
        for nic in devices(g, "nic"):
            expected = ("PIX" if switch_of(g, gpu) == switch_of(g, nic)
                        else "PHB" if socket_of(g, gpu) == socket_of(g, nic) else "SYS")
            assert connection(g, gpu, nic) == expected == connection(g, nic, gpu)
            hops = nx.shortest_path_length(g, gpu, nic)
            assert hops == {"PIX": 2, "PHB": 4}.get(expected, hops) and (expected != "SYS" or hops >= 5)


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_two_gpus_share_a_socket_in_the_layout_where_they_share_a_root_complex_in_the_graph(layout):
    g = build_rail_server(layout)
    for a in range(layout.gpus):
        for b in range(layout.gpus):
            same = socket_of(g, f"gpu{a}") == socket_of(g, f"gpu{b}")
            assert (layout.socket_of(a) == layout.socket_of(b)) == same


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_each_gpu_selects_the_nics_under_its_own_switch_and_its_rail_among_them(layout):
    g = build_rail_server(layout)
    for gpu in devices(g, "gpu"):
        near = nearest_nics(g, gpu)
        assert set(near) == {n for n in devices(g, "nic") if switch_of(g, n) == switch_of(g, gpu)}
        rails = rail_nics(g, gpu, layout)
        assert len(rails) == layout.nics_per_gpu and set(rails) <= set(near)


def test_rail_aligned_flows_share_no_link_and_cross_rail_flows_share_the_cpus():
    g = build_rail_server(RailLayout())
    alone = dma_path(g, "nic0", "gpu0", 1 << 20).write_Bps
    aligned = flow_rates(g, [(f"nic{i}", f"gpu{i}") for i in range(8)], 1 << 20)
    cross = flow_rates(g, [(f"nic{i}", f"gpu{(i + 4) % 8}") for i in range(8)], 1 << 20)
    assert aligned == pytest.approx([alone] * 8)
    single_cross = dma_path(g, "nic0", "gpu4", 1 << 20).write_Bps
    assert max(cross) < single_cross < alone


def test_the_matrix_names_every_device_and_the_classes():
    text = topo_matrix(build_rail_server(RailLayout()))
    header, gpu0 = text.splitlines()[:2]
    assert header.split() == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)]
    assert gpu0.split()[:2] == ["GPU0", "X"] and gpu0.split()[9] == "PIX" and "Legend:" in text


def test_registering_on_every_nic_costs_more_than_the_extra_calls_when_cost_grows():
    nics = [f"nic{i}" for i in range(8)]
    every = [(64 << 20, nics) for nic in nics for _ in range(16)]  # 16 buffers of 64 MiB per GPU, on all NICs
    rail = [(64 << 20, [nic]) for nic in nics for _ in range(16)]  # the same, each on its GPU's rail NIC

    def ratio(profile):
        return sum(fanout_cost_ps(profile, every).values()) / sum(fanout_cost_ps(profile, rail).values())

    flat = DeviceRegistrationCost(MOONCAKE_EFA.base_ps, MOONCAKE_EFA.per_byte_ps, 0.0)
    assert ratio(flat) == pytest.approx(8) and ratio(MOONCAKE_EFA) > 8
