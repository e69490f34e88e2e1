"""A node: one host address space, one NIC and the PCIe link between them."""

from __future__ import annotations

from dataclasses import dataclass

from models.host import HostMemory, HostParams
from models.nic import Nic, NicParams
from models.pcie import PcieLink, PcieParams


@dataclass
class Node:
    """A server with a NIC on a PCIe link; ``host`` is the address space of the process under test."""

    name: str
    host: HostMemory
    pcie: PcieLink
    nic: Nic

    @classmethod
    def create(cls, name: str, host: HostParams, pcie: PcieParams, nic: NicParams) -> "Node":
        """Build a node from its parameter objects."""
        return cls(name, HostMemory(name, host), PcieLink(f"{name}.pcie", pcie), Nic(f"{name}.nic", nic))
