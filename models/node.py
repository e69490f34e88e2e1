"""A node: one host address space, its NICs and the PCIe links between them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

from models.dmabuf import DmaBufCore, FdTable
from models.host import HostMemory, HostParams
from models.pcie.iommu import Iommu
from models.nic.nic import Nic, NicParams
from models.pcie.link import PcieLink, PcieParams
from models.pcie.topology import device_link


@dataclass
class Node:
    """A server with a NIC on a PCIe link; ``host`` is the address space of the process under test. A server
    with several NICs is one :class:`Node` per NIC (:meth:`with_nic`), sharing everything but the NIC."""

    name: str
    host: HostMemory
    pcie: PcieLink
    nic: Nic
    kernel: DmaBufCore | None = None
    """The node's dma-buf subsystem (set when the node has exporters)."""
    fds: FdTable = field(default_factory=lambda: FdTable("process"))
    """The file descriptors of the process under test."""
    rdma_core: str = "57"
    """rdma-core (libibverbs) version of the process under test."""
    iommu: Iommu | None = None
    """The host's IOMMU when modelled (off by default: DMA addresses are physical)."""
    topology: nx.Graph | None = None
    """The PCIe topology of a node with a GPU (models.pcie.topology: nic0, gpu0, sockets, switch; a rail server's
    from models.pcie.server); None: the NIC alone, its link reaching host memory."""
    device: str = "nic0"
    """This NIC's vertex in ``topology``: its DMA takes the routes from there."""

    @classmethod
    def create(cls, name: str, host: HostParams, pcie: PcieParams, nic: NicParams) -> "Node":
        """Build a node from its parameter objects."""
        return cls(name, HostMemory(name, host), PcieLink(f"{name}.pcie", pcie), Nic(f"{name}.nic", nic))

    def with_nic(self, device: str, nic: Nic) -> "Node":
        """The same server through its NIC at ``device`` of ``topology``: that NIC and its own PCIe link, the
        host memory, kernel, file descriptors, IOMMU and topology shared."""
        return dataclasses.replace(self, nic=nic, pcie=device_link(self.topology, device), device=device)
