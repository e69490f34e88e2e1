"""PCIe topology as a networkx graph: sockets (root complex + memory), PCIe switches, GPUs and NICs.

Nodes carry ``kind`` (``root_complex``, ``memory``, ``switch``, ``gpu``, ``nic``) and ``params``; edges carry
``link``: a :class:`~models.pcie.link.PcieLink` (with ``upstream``, the end nearer the CPU, so a hop towards it
claims ``link.up`` and a hop away from it ``link.down``), a :class:`SocketLink`, or None (a socket to its
memory). Links are objects shared by every route through them, so concurrent flows queue on the same
:class:`~sim.core.FifoServer` per direction.

Latency: a device's own :class:`~models.pcie.link.PcieParams` give the read round trip and write flight to the
memory of its own socket; each switch, socket-link crossing and root-complex peer-to-peer forward adds its
one-way latency once per direction (twice for a read). Bandwidth is the minimum over the hops (FIFO
stages in series); a root complex forwarding peer-to-peer (device to device, "CPUs are very, very bad PCI
switches", NCCL #465) runs at ``p2p_*_factor`` x the PCIe link feeding it, and may refuse P2P reads
(Intel client CPUs: writes only, open-gpu-kernel-modules #1253). A switch forwards peer-to-peer at link
rate. A read holds the reading device's tags (:func:`models.pcie.link.read_tags`) for its route's round trip.

Examples
--------
>>> g = build_topology("switch")
>>> [h.kind for h in route(g, "nic0", "gpu0")]
['pcie', 'pcie']
>>> cross = dma_path(build_topology("cross_socket"), "nic0", "gpu0", 1 << 20)
>>> cross.p2p, round(cross.write_Bps / dma_path(build_topology("switch"), "nic0", "gpu0", 1 << 20).write_Bps, 2)
(True, 0.46)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import networkx as nx

from models.pcie.link import PcieLink, PcieParams, read_tags, write_issue
from sim.core import FifoServer, PS_PER_NS, PS_PER_S, SimError, transfer_ps
from sim.core.steps import Claim, Delay, Step

LAYOUTS = ("switch", "root_complex", "cross_socket")
"""Preset layouts of :func:`build_topology`."""


class PeerToPeerError(SimError):
    """A peer-to-peer transaction the root complex on its route does not forward."""


@dataclass(frozen=True, slots=True)
class RootComplexParams:
    """A CPU root complex's peer-to-peer forwarding (device to device through the CPU)."""

    p2p_write_factor: float = 0.46
    """P2P posted-write rate / rate of the PCIe link feeding it. Fitted to perftest #241 (A30 + 200 Gb/s
    IB, SYS topology, ib_write_bw 32 MiB: GPU 11000 vs host 23000 MiB/s, ratio 0.478; ``sim.inspect.calibrate``
    gets 0.481). Measured across sockets; assumed for root ports of one socket (unvalidated)."""
    p2p_read_factor: float = 0.46
    """Same for completions of P2P reads (the anchor mixes reads and writes: unvalidated split)."""
    p2p_read_supported: bool = True
    """False: P2P reads through this root complex fail (Intel client CPUs, open-gpu-kernel-modules #1253)."""
    p2p_latency_ps: int = 250 * PS_PER_NS
    """One-way latency of forwarding a TLP port to port inside the CPU: an unvalidated default, chosen above a
    switch's cut-through hop because the TLP crosses the CPU's internal fabric (NCCL #465: "CPUs are very, very
    bad PCI switches")."""
    p2pdma_whitelisted: bool = True
    """The host bridge is on the kernel's P2PDMA whitelist (drivers/pci/p2pdma.c: AMD Zen and recent Intel
    server root complexes), so ``pci_p2pdma_distance`` allows peer-to-peer through it."""


@dataclass(frozen=True, slots=True)
class SwitchParams:
    """A PCIe switch (forwards peer-to-peer at link rate)."""

    latency_ps: int = 110 * PS_PER_NS
    """One-way port-to-port latency (unvalidated default, Gen4/Gen5 switch class)."""


@dataclass(frozen=True, slots=True)
class SocketLinkParams:
    """The inter-socket interconnect (UPI / Infinity Fabric) seen as one hop per direction."""

    bw_Bps: float = 62.4e9
    """Payload rate per direction (bytes/s): 3 UPI links x 20.8 GB/s (unvalidated default)."""
    latency_ps: int = 50 * PS_PER_NS
    """One-way crossing; a remote-NUMA DMA read is +~100 ns (pcie-bench data, 653-666 vs 546-560 ns)."""


ROOT_COMPLEX_PRESETS: dict[str, dict] = {"server": {},
                                         "intel_client": {"p2p_read_supported": False, "p2pdma_whitelisted": False}}
"""Root complex presets (constructor arguments of :class:`RootComplexParams`)."""
SOURCES = {
    "switch": "NIC and GPU under one PCIe switch (nvidia-smi topo PIX/PXB): P2P stays below the CPU.",
    "root_complex": "NIC and GPU on two root ports of one socket (PHB/NODE): P2P forwarded by the CPU.",
    "cross_socket": "NIC on socket 0, GPU on socket 1 (SYS): P2P through both root complexes and the socket "
                    "link; the perftest #241 anchor topology.",
    "intel_client": "P2P writes only (github.com/NVIDIA/open-gpu-kernel-modules issue #1253).",
}


class SocketLink:
    """Both directions of an inter-socket link as FIFO servers, keyed by the sending socket."""

    def __init__(self, a: str, b: str, params: SocketLinkParams) -> None:
        self.params = params
        self.servers = {a: FifoServer(f"{a}->{b}"), b: FifoServer(f"{b}->{a}")}


class Hop(NamedTuple):
    """One step of a route: the server claimed and the one-way latency it adds."""

    kind: str
    """``pcie`` (a link direction), ``socket`` (the socket link) or ``p2p`` (a root complex forwarding)."""
    to: str
    """The node the hop reaches (the forwarding root complex for ``p2p``)."""
    server: FifoServer
    latency_ps: int
    params: PcieParams | SocketLinkParams | RootComplexParams


class DmaPath(NamedTuple):
    """Closed-form DMA from a device to a memory target along its route (bytes/s, ps)."""

    read_Bps: float
    """Back-to-back reads (0.0 when P2P reads are not forwarded)."""
    write_Bps: float
    read_latency_ps: int | None
    """Request to first completion (None when reads are not forwarded)."""
    write_latency_ps: int
    p2p: bool
    """The route is peer to peer (device to device)."""


def new_graph(**attributes) -> nx.Graph:
    """An empty topology graph with ``attributes``. networkx is imported here, when a run builds its first
    topology: most runs have none, and every command would pay its import."""
    import networkx

    return networkx.Graph(**attributes)


def devices_between(graph: nx.Graph, a: str, b: str) -> list[str]:
    """The nodes on the way from ``a`` to ``b``, both included (the shortest path).

    :raises networkx.NodeNotFound, networkx.NetworkXNoPath: unknown or unconnected nodes.
    """
    import networkx

    return networkx.shortest_path(graph, a, b)


def add_socket(g: nx.Graph, socket: int, params: RootComplexParams = RootComplexParams()) -> str:
    """Add root complex ``cpu<socket>`` with its memory ``mem<socket>``; return the root complex's name."""
    rc = f"cpu{socket}"
    g.add_node(rc, kind="root_complex", params=params, p2p=FifoServer(f"{rc}.p2p"))
    g.add_node(f"mem{socket}", kind="memory", params=None)
    g.add_edge(rc, f"mem{socket}", link=None)
    return rc


def add_pcie(g: nx.Graph, name: str, kind: str, parent: str, link: PcieParams,
             params: SwitchParams | None = None) -> str:
    """Attach a ``switch``, ``gpu`` or ``nic`` below ``parent`` through a new PCIe link; return ``name``."""
    if kind not in ("switch", "gpu", "nic") or parent not in g:
        raise ValueError(f"add_pcie: {name!r} must be a switch, gpu or nic below an existing node, "
                         f"got kind {kind!r}, parent {parent!r}")
    if kind == "switch":
        params = params or SwitchParams()
    g.add_node(name, kind=kind, params=params)
    g.add_edge(parent, name, link=PcieLink(f"{parent}-{name}", link), upstream=parent)
    return name


def connect_sockets(g: nx.Graph, a: str, b: str, params: SocketLinkParams = SocketLinkParams()) -> None:
    """Join root complexes ``a`` and ``b`` by a socket link."""
    g.add_edge(a, b, link=SocketLink(a, b, params))


def build_topology(layout: str = "switch", *, nic: PcieParams = PcieParams(), gpu: PcieParams = PcieParams(),
                   uplink: PcieParams = PcieParams(), root: RootComplexParams = RootComplexParams(),
                   switch: SwitchParams = SwitchParams(), socket_link: SocketLinkParams = SocketLinkParams()
                   ) -> nx.Graph:
    """A two-socket host with ``nic0`` and ``gpu0`` placed as ``layout`` says (see :data:`SOURCES`).

    :param uplink: the switch's link to its root port (``switch`` layout only).
    :raises ValueError: unknown layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"build_topology: unknown layout {layout!r}; choose one of {LAYOUTS}")
    g = new_graph(layout=layout)
    cpu0, cpu1 = add_socket(g, 0, root), add_socket(g, 1, root)
    connect_sockets(g, cpu0, cpu1, socket_link)
    if layout == "switch":
        sw = add_pcie(g, "sw0", "switch", cpu0, uplink, switch)
        add_pcie(g, "nic0", "nic", sw, nic)
        add_pcie(g, "gpu0", "gpu", sw, gpu)
    else:
        add_pcie(g, "nic0", "nic", cpu0, nic)
        add_pcie(g, "gpu0", "gpu", cpu0 if layout == "root_complex" else cpu1, gpu)
    return g


def device_link(graph: nx.Graph, device: str = "nic0") -> PcieLink:
    """A device's own PCIe link in ``graph`` (its only edge; for the NIC, doorbells, WQE fetches and CQE
    writes use it too)."""
    (edge,) = graph.edges(device, data="link")
    return edge[2]


def route(graph: nx.Graph, src: str, dst: str) -> list[Hop]:
    """The hops from ``src`` to ``dst`` (shortest path), in order.

    Root complexes on a device-to-device route add a ``p2p`` hop where the traffic enters them.

    :raises networkx.NodeNotFound, networkx.NetworkXNoPath: unknown or unconnected nodes.
    """
    path = devices_between(graph, src, dst)
    p2p = graph.nodes[src]["kind"] != "memory" and graph.nodes[dst]["kind"] != "memory"
    hops = []
    for u, v in pairwise(path):
        link = graph.edges[u, v]["link"]
        if isinstance(link, PcieLink):
            up = graph.edges[u, v]["upstream"] == v
            hops.append(Hop("pcie", v, link.up if up else link.down, 0, link.params))
        elif isinstance(link, SocketLink):
            hops.append(Hop("socket", v, link.servers[u], link.params.latency_ps, link.params))
        node = graph.nodes[v]
        if v == dst:
            continue
        if node["kind"] == "switch":
            hops[-1] = hops[-1]._replace(latency_ps=hops[-1].latency_ps + node["params"].latency_ps)
        elif node["kind"] == "root_complex" and p2p:
            hops.append(Hop("p2p", v, node["p2p"], node["params"].p2p_latency_ps, node["params"]))
    return hops


def pci_p2pdma_distance(graph: nx.Graph, provider: str, client: str) -> int:
    """``pci_p2pdma_distance`` (drivers/pci/p2pdma.c): the number of links between two devices when peer-to-peer
    DMA between them works, else -1. Devices under a common switch always qualify; a route through a root
    complex only when its host bridge is whitelisted (:attr:`RootComplexParams.p2pdma_whitelisted`), and never
    across sockets (different host bridges)."""
    hops = route(graph, provider, client)
    bridges = [h.params for h in hops if h.kind == "p2p"]
    if any(h.kind == "socket" for h in hops) or not all(b.p2pdma_whitelisted for b in bridges):
        return -1
    return len(hops)


def has_common_pci_switch(graph: nx.Graph, a: str, b: str) -> bool:
    """Whether devices ``a`` and ``b`` sit below one PCIe switch, so that the route between them never reaches a
    root complex (the NVIDIA driver's ``nv_pci_has_common_pci_switch``, kernel-open/nvidia/nv-pci.c: a common
    upstream bridge).

    :raises networkx.NodeNotFound, networkx.NetworkXNoPath: unknown or unconnected nodes.
    """
    return all(graph.nodes[n]["kind"] == "switch" for n in devices_between(graph, a, b)[1:-1])


def _stages(hops: list[Hop], nbytes: int, pcie, factor: str, socket_bytes: int) -> list[Claim]:
    """Cut-through claims over ``hops``. ``pcie(params, n)`` is a PCIe link's occupancy for ``n`` bytes; the
    socket link carries ``socket_bytes`` at its rate (64 B head); a p2p hop serves at ``factor`` x the PCIe
    hop feeding it."""
    stages, feed = [], (0, 0)
    for h in hops:
        p = h.params
        if h.kind == "pcie":
            s, first = feed = (pcie(p, nbytes), pcie(p, min(nbytes, p.mps)))
        elif h.kind == "socket":
            s, first = transfer_ps(socket_bytes, p.bw_Bps), transfer_ps(min(socket_bytes, 64), p.bw_Bps)
        else:
            f = getattr(p, factor)
            s, first = int(feed[0] / f + 0.5), int(feed[1] / f + 0.5)
        stages.append(Claim(h.server, s, first, first))
    return stages


def dma_write_stages(graph: nx.Graph, src: str, dst: str, nbytes: int) -> list[Claim]:
    """Claims (:class:`~sim.core.steps.Claim`) of a posted DMA write of ``nbytes`` from device
    ``src`` to ``dst`` (after the issue spacing of ``src``'s engine, :func:`~models.pcie.link.write_issue`);
    the flight latency rides on the last stage."""
    hops = route(graph, src, dst)
    stages = _stages(hops, nbytes, PcieParams.write_ps, "p2p_write_factor", nbytes)
    link = device_link(graph, src)
    flight = link.params.write_latency_ps + sum(h.latency_ps for h in hops)
    stages[-1] = replace(stages[-1], latency_ps=flight, eager=False)
    return [*write_issue(link), *stages]


def dma_read_stages(graph: nx.Graph, src: str, dst: str, nbytes: int) -> list[Step]:
    """Steps of a DMA read of ``nbytes`` of ``dst`` by device ``src``: MRd requests along the route (not
    through the p2p forwarding, which is charged on the data), the round trip, CplD completions back.

    :raises PeerToPeerError: a root complex on the route does not forward P2P reads.
    """
    to, back = route(graph, src, dst), route(graph, dst, src)
    refusing = [h.to for h in back if h.kind == "p2p" and not h.params.p2p_read_supported]
    if refusing:
        raise PeerToPeerError(f"{src} cannot read {dst}: root complex {refusing[0]} forwards peer-to-peer "
                              "writes only (p2p_read_supported=False)")
    link = device_link(graph, src)
    requests = _stages([h for h in to if h.kind != "p2p"], nbytes, PcieParams.read_request_ps, "p2p_read_factor",
                       link.params.read_request_bytes(nbytes))
    round_trip = link.params.read_latency_ps + 2 * sum(h.latency_ps for h in to)
    completions = _stages(back, nbytes, PcieParams.read_return_ps, "p2p_read_factor", nbytes)
    completions[-1] = replace(completions[-1], latency_ps=completions[-1].latency_ps + link.params.read_size_ps(nbytes))
    tags = read_tags(link, nbytes, round_trip)
    if tags is None:
        return [*requests, Delay(round_trip), *completions]
    pool, last_hop_ps = tags  # a tag-limited read's completions stream no faster into the device
    completions[-1] = replace(completions[-1], service_ps=max(completions[-1].service_ps, last_hop_ps))
    return [pool, *requests, Delay(round_trip), *completions]


def dma_path(graph: nx.Graph, src: str, dst: str, nbytes: int) -> DmaPath:
    """Closed-form bandwidth and latency of back-to-back ``nbytes`` DMAs that device ``src`` issues to
    ``dst`` (``mem<k>`` or a GPU's BAR): FIFO stages in series run at ``nbytes`` / the largest service time;
    the latency is the sum of the stages' pure delays (serialisation not included)."""
    write = dma_write_stages(graph, src, dst, nbytes)
    try:
        read = dma_read_stages(graph, src, dst, nbytes)
    except PeerToPeerError:
        read = None

    def rate(steps: list[Step]) -> float:
        return nbytes * PS_PER_S / max(s.service_ps for s in steps if isinstance(s, Claim))

    def latency(steps: list[Step], spacing) -> int:
        """The steps' pure delays, but for the negative delay of ``spacing``'s claim (it shapes a tail: no
        latency)."""
        return sum(s.ps if isinstance(s, Delay) else s.latency_ps for s in steps
                   if not (isinstance(s, Claim) and s.server is spacing))

    link = device_link(graph, src)
    return DmaPath(rate(read) if read else 0.0, rate(write), latency(read, link.tags) if read else None,
                   latency(write, link.writes), graph.nodes[dst]["kind"] != "memory")
