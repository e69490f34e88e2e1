"""A PCIe link at TLP granularity (first version): encoding, lanes, MPS/MRRS, TLP and DLLP overheads.

Constants and formulas restate the pcie-model of Neugebauer et al. (SIGCOMM'18) as digested in the
project's reference: raw rate = lanes x GT/s x encoding; the TLP layer loses ACK and flow-control DLLPs
and SKIP ordered sets; a DMA write pays a 24 B MWr overhead (64-bit address) per MPS-sized TLP; a DMA
read pays a 24 B MRd per MRRS-sized request upstream and a 20 B CplD header per MPS-sized completion
downstream. Each direction of the link is its own FIFO server.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from sim.core import FifoServer, PS_PER_NS, transfer_ps

GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
"""Transfer rate per lane by generation (GT/s)."""
ENCODING = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
"""Line-code efficiency: 8b/10b, 128b/130b, Gen6 FLIT mode as in pcie-model."""

DLLP_FRAMING = 8
"""Sequence number, LCRC and framing charged to every TLP (bytes)."""
MWR_HEADER_64 = 16
MRD_HEADER_64 = 16
CPLD_HEADER = 12
ECRC = 4
DLLP_SIZE = 8
"""ACK and flow-control update DLLPs (bytes)."""
SKIP_BYTES, SKIP_INTERVAL = 4, 1538

_ACK_INTERVAL_X16 = {128: 144, 256: 168, 512: 182, 1024: 246, 2048: 374, 4096: 630}
_ACK_INTERVAL_X8 = {128: 163, 256: 203, 512: 182, 1024: 246, 2048: 374, 4096: 630}
"""Bytes between ACK (and FC-update) DLLPs, PCIe Base Spec 5.0 tables 3-7..3-9 as used by pcie-model."""


@dataclass(frozen=True)
class PcieParams:
    """One PCIe link between a device and its upstream port."""

    gen: int = 5
    """Generation 1..6."""
    lanes: int = 16
    """Link width: 1, 2, 4, 8 or 16."""
    mps: int = 256
    """Max payload size (bytes)."""
    mrrs: int = 512
    """Max read request size (bytes)."""
    ecrc: bool = False
    """End-to-end CRC digest on every TLP."""
    read_latency_ps: int = 550 * PS_PER_NS
    """DMA read round trip, request to first completion (pcie-bench, Xeon E5, 64 B read median 546-560 ns)."""
    write_latency_ps: int = 150 * PS_PER_NS
    """Posted-write flight from device to memory visibility (one-way, about half a read round trip less the
    memory access)."""

    @cached_property
    def raw_Bps(self) -> float:
        """Raw rate per direction after line coding (bytes/s)."""
        return self.lanes * GT_PER_S[self.gen] * 1e9 * ENCODING[self.gen] / 8

    @cached_property
    def tlp_Bps(self) -> float:
        """Rate left for TLPs after ACK/FC DLLPs and SKIP ordered sets (bytes/s)."""
        table = _ACK_INTERVAL_X16 if self.lanes >= 16 else _ACK_INTERVAL_X8
        interval = table[self.mps]
        return self.raw_Bps * (1 - (DLLP_SIZE / interval + DLLP_SIZE / interval + SKIP_BYTES / SKIP_INTERVAL))

    def write_wire_bytes(self, nbytes: int) -> int:
        """Bytes on the link for a posted DMA write of ``nbytes`` (payload + per-TLP overhead)."""
        tlps = max(1, -(-nbytes // self.mps))
        return nbytes + tlps * (DLLP_FRAMING + MWR_HEADER_64 + (ECRC if self.ecrc else 0))

    def read_completion_bytes(self, nbytes: int) -> int:
        """Bytes flowing back to the requester for a DMA read of ``nbytes`` (data + CplD overheads)."""
        cpls = max(1, -(-nbytes // self.mps))
        return nbytes + cpls * (DLLP_FRAMING + CPLD_HEADER + (ECRC if self.ecrc else 0))

    def read_request_bytes(self, nbytes: int) -> int:
        """Bytes of MRd requests sent by the requester for a DMA read of ``nbytes``."""
        reqs = max(1, -(-nbytes // self.mrrs))
        return reqs * (DLLP_FRAMING + MRD_HEADER_64 + (ECRC if self.ecrc else 0))

    def write_ps(self, nbytes: int) -> int:
        """Link occupancy of a DMA write of ``nbytes`` (ps)."""
        return transfer_ps(self.write_wire_bytes(nbytes), self.tlp_Bps)

    def read_return_ps(self, nbytes: int) -> int:
        """Downstream link occupancy of the completions of a DMA read of ``nbytes`` (ps)."""
        return transfer_ps(self.read_completion_bytes(nbytes), self.tlp_Bps)

    def read_request_ps(self, nbytes: int) -> int:
        """Upstream link occupancy of the MRd requests of a DMA read of ``nbytes`` (ps)."""
        return transfer_ps(self.read_request_bytes(nbytes), self.tlp_Bps)

    def write_efficiency(self, nbytes: int) -> float:
        """Effective DMA-write bandwidth for back-to-back ``nbytes`` writes (bytes/s)."""
        return self.tlp_Bps * nbytes / self.write_wire_bytes(nbytes)

    def read_efficiency(self, nbytes: int) -> float:
        """Effective DMA-read bandwidth limited by the completion direction (bytes/s)."""
        return self.tlp_Bps * nbytes / self.read_completion_bytes(nbytes)


class PcieLink:
    """The two directions of one link as separate FIFO servers: ``up`` (device to host: DMA writes, read
    requests) and ``down`` (host to device: read completions, MMIO doorbells)."""

    def __init__(self, name: str, params: PcieParams) -> None:
        self.name = name
        self.params = params
        self.up = FifoServer(f"{name}.up")
        self.down = FifoServer(f"{name}.down")
