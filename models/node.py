"""A node: one host address space, one NIC and the PCIe link between them."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from models.dmabuf import DmaBufCore, FdTable
from models.host import HostMemory, HostParams
from models.pcie.iommu import Iommu
from models.nic.nic import Nic, NicParams
from models.pcie.link import PcieLink, PcieParams


@dataclass
class Node:
    """A server with a NIC on a PCIe link; ``host`` is the address space of the process under test."""

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
    """The PCIe topology of a node with a GPU (models.pcie.topology: nic0, gpu0, sockets, switch); None: the NIC
    alone, its link reaching host memory."""

    @classmethod
    def create(cls, name: str, host: HostParams, pcie: PcieParams, nic: NicParams) -> "Node":
        """Build a node from its parameter objects."""
        return cls(name, HostMemory(name, host), PcieLink(f"{name}.pcie", pcie), Nic(f"{name}.nic", nic))
