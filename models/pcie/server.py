"""Servers with several GPUs and NICs: rail layouts built from :mod:`models.pcie.topology`'s blocks, the
connection matrix ``nvidia-smi topo -m`` prints, NIC selection by PCIe distance, and the closed-form DMA rate of
flows that run at the same time and share links.

A rail layout puts, under each PCIe switch, some GPUs and ``nics_per_gpu`` NICs for each of them (one NIC per
GPU under a shared switch on DGX-class servers; four EFA NICs per GPU on a p5.48xlarge, Mooncake issue #3217);
the switches hang off the sockets' root complexes, joined by the socket link. GPU ``i``'s own NICs are
``nic{i * nics_per_gpu + j}``.

Connection classes, as ``nvidia-smi topo -m`` names them: ``PIX`` (at most one PCIe switch), ``PXB`` (several
switches, no host bridge), ``PHB`` (through the socket's root complex: the model has one host bridge per socket,
so it never reports ``NODE``), ``SYS`` (across the socket link).

Examples
--------
>>> g = build_rail_server(RailLayout())
>>> connection(g, "gpu0", "nic0"), connection(g, "gpu0", "nic2"), connection(g, "gpu0", "nic7")
('PIX', 'PHB', 'SYS')
>>> nearest_nics(g, "gpu3"), rail_nics(g, "gpu3", RailLayout())
(['nic2', 'nic3'], ['nic3'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

from models.pcie.link import PcieParams
from models.pcie.topology import (RootComplexParams, SocketLinkParams, SwitchParams, add_pcie, add_socket,
                                  connect_sockets, devices_between, dma_read_stages, dma_write_stages, new_graph,
                                  pci_p2pdma_distance, route)
from sim.core import PS_PER_S
from sim.core.steps import Claim

CLASSES = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
"""Connection classes, nearest first."""
LEGEND = ("X    = Self", "SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes",
          "PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
          "PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
          "PIX  = Connection traversing at most a single PCIe bridge")
"""The legend ``nvidia-smi topo -m`` prints, for the classes this model produces."""


@dataclass(frozen=True, slots=True)
class RailLayout:
    """How many of each device a rail server has."""

    sockets: int = 2
    switches_per_socket: int = 2
    gpus_per_switch: int = 2
    nics_per_gpu: int = 1

    @property
    def gpus(self) -> int:
        """GPUs in the server."""
        return self.sockets * self.switches_per_socket * self.gpus_per_switch

    @property
    def nics(self) -> int:
        """NICs in the server."""
        return self.gpus * self.nics_per_gpu

    def socket_of(self, gpu: int) -> int:
        """The socket of ``gpu<gpu>``: :func:`build_rail_server` numbers the GPUs socket by socket."""
        return gpu // (self.switches_per_socket * self.gpus_per_switch)


def build_rail_server(layout: RailLayout, *, gpu: PcieParams = PcieParams(), nic: PcieParams = PcieParams(),
                      uplink: PcieParams = PcieParams(), root: RootComplexParams = RootComplexParams(),
                      switch: SwitchParams = SwitchParams(),
                      socket_link: SocketLinkParams = SocketLinkParams()) -> nx.Graph:
    """The graph of a rail server (see the module docstring); sockets beyond two are chained by socket links."""
    g = new_graph(layout="rails", rails=layout)
    cpus = [add_socket(g, s, root) for s in range(layout.sockets)]
    for a, b in zip(cpus, cpus[1:]):
        connect_sockets(g, a, b, socket_link)
    index = 0
    for s, cpu in enumerate(cpus):
        for k in range(layout.switches_per_socket):
            sw = add_pcie(g, f"sw{s * layout.switches_per_socket + k}", "switch", cpu, uplink, switch)
            for _ in range(layout.gpus_per_switch):
                add_pcie(g, f"gpu{index}", "gpu", sw, gpu)
                for j in range(layout.nics_per_gpu):
                    add_pcie(g, f"nic{index * layout.nics_per_gpu + j}", "nic", sw, nic)
                index += 1
    return g


def devices(g: nx.Graph, kind: str) -> list[str]:
    """The ``gpu``, ``nic`` or ``memory`` nodes of ``g``, by index."""
    return sorted((n for n, k in g.nodes(data="kind") if k == kind), key=lambda n: int(n[3:]))


def connection(g: nx.Graph, a: str, b: str) -> str:
    """The ``nvidia-smi topo -m`` class of the PCIe connection between devices ``a`` and ``b``."""
    if a == b:
        return "X"
    inner = [g.nodes[n]["kind"] for n in devices_between(g, a, b)[1:-1]]
    if inner.count("root_complex") > 1:
        return "SYS"
    if "root_complex" in inner:
        return "PHB"
    return "PIX" if inner.count("switch") <= 1 else "PXB"


def topo_matrix(g: nx.Graph) -> str:
    """The connection matrix of every GPU and NIC, laid out as ``nvidia-smi topo -m`` prints it, with its
    legend."""
    names = devices(g, "gpu") + devices(g, "nic")
    width = max(len(n) for n in names) + 1
    lines = [" " * width + "".join(f"{n.upper():<{width}}" for n in names)]
    for a in names:
        lines.append(f"{a.upper():<{width}}" + "".join(f"{connection(g, a, b):<{width}}" for b in names))
    return "\n".join([*(line.rstrip() for line in lines), "", "Legend:", "", *(f"  {item}" for item in LEGEND)])


def nearest_nics(g: nx.Graph, gpu: str) -> list[str]:
    """The NICs nearest ``gpu`` (best connection class, then fewest hops) that peer-to-peer DMA can reach
    (``pci_p2pdma_distance`` >= 0): where NCCL and NIXL's rail selection put the GPU's traffic and
    registrations. Empty when no NIC can reach the GPU peer to peer."""
    reachable = [n for n in devices(g, "nic") if pci_p2pdma_distance(g, gpu, n) >= 0]
    if not reachable:
        return []
    rank = {n: (CLASSES.index(connection(g, gpu, n)), pci_p2pdma_distance(g, gpu, n)) for n in reachable}
    best = min(rank.values())
    return [n for n in reachable if rank[n] == best]


def rail_nics(g: nx.Graph, gpu: str, layout: RailLayout) -> list[str]:
    """The NICs a rail-aware library uses for ``gpu``: its own NICs when they are among the nearest (a tie
    under a shared switch goes to the GPU's rail), else the nearest. For host memory ``mem<k>``: the NICs of
    socket ``k`` (no socket link on their route)."""
    if g.nodes[gpu]["kind"] == "memory":
        return [n for n in devices(g, "nic") if all(h.kind != "socket" for h in route(g, n, gpu))]
    nearest = nearest_nics(g, gpu)
    index = int(gpu[3:])
    own = [f"nic{index * layout.nics_per_gpu + j}" for j in range(layout.nics_per_gpu)]
    return [n for n in own if n in nearest] or nearest


def cross_rail_nic(g: nx.Graph, nic: str) -> str:
    """The NIC at ``nic``'s place on the other socket (half the NICs on): where cross-rail traffic goes."""
    nics = devices(g, "nic")
    return nics[(nics.index(nic) + len(nics) // 2) % len(nics)]


RAIL_POLICIES = ("aligned", "cross", "all")
"""How a workload's QPs pick their NICs (:func:`qp_nic`)."""


def qp_nic(g: nx.Graph, home: list[str], policy: str, k: int) -> str:
    """The NIC that QP ``k`` of a flow to or from a memory or GPU whose :func:`rail_nics` are ``home`` uses under
    ``policy``: ``aligned`` those NICs in turn, ``cross`` the :func:`cross_rail_nic` of that NIC, ``all`` every
    NIC in turn."""
    if policy == "all":
        nics = devices(g, "nic")
        return nics[k % len(nics)]
    nic = home[k % len(home)]
    return cross_rail_nic(g, nic) if policy == "cross" else nic


def buffer_nics(g: nx.Graph, home: list[str], nics: str | list[str]) -> list[str]:
    """The NICs a buffer of a memory or GPU whose :func:`rail_nics` are ``home`` is registered on under ``nics``:
    ``rail`` those, ``all`` every NIC, else the NICs listed."""
    if nics == "all":
        return devices(g, "nic")
    return list(home) if nics == "rail" else list(nics)


def flow_rates(g: nx.Graph, flows: list[tuple[str, str]], nbytes: int, *, read: bool = False) -> list[float]:
    """Bytes/s of each ``(src, dst)`` DMA-write flow (``read``: device ``src`` reading ``dst``) when all run at
    once: each flow runs at the rate of its slowest stage, a stage shared by ``k`` of the flows giving each ``1/k``
    of its rate (a bottleneck estimate, not a max-min fair share)."""
    claims = [[s for s in (dma_read_stages if read else dma_write_stages)(g, src, dst, nbytes) if isinstance(s, Claim)]
              for src, dst in flows]
    sharing: dict[int, int] = {}
    for flow in claims:
        for server in {id(c.server) for c in flow}:
            sharing[server] = sharing.get(server, 0) + 1
    return [nbytes * PS_PER_S / max(c.service_ps * sharing[id(c.server)] for c in flow) for flow in claims]
