"""The network between NICs: line rate, one-way latency, MTU and per-packet header overhead.

Header overheads per packet (bytes on the wire beyond the payload):

* ``ib``: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 (InfiniBand Architecture Spec vol. 1, ch. 5-9);
* ``roce``: Ethernet 14 + FCS 4 + preamble/IFG 20 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 = 82 (RoCEv2).

RDMA WRITE and READ requests carry a 16 B RETH in their first packet; READ responses and ACKs carry a
4 B AETH. An atomic request carries a 28 B AtomicETH (remote address, rkey, swap/add and compare operands), its
response an AETH and an 8 B AtomicAckETH holding the original value (IBA vol. 1, 9.3.3 and 9.3.5). Every UD
packet carries an 8 B DETH (Q_Key and source QP) after its BTH (IBA vol. 1, 9.3.4).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.core import PS_PER_NS, transfer_ps

TRANSPORT_HEADER = {"ib": 26, "roce": 82}
RETH = 16
AETH = 4
ATOMIC_ETH = 28
ATOMIC_ACK_ETH = 8
DETH = 8
MTUS = (256, 512, 1024, 2048, 4096)


@dataclass(frozen=True, slots=True)
class FabricParams:
    """Links and switches between NICs, seen as one hop."""

    rate_Bps: float = 400e9 / 8
    """Line rate per direction (bytes/s); 400 Gb/s NDR / 400GbE."""
    latency_ps: int = 300 * PS_PER_NS
    """One-way latency from the last bit leaving one port to it arriving at the other (PHY, FEC, cable,
    switch)."""
    mtu: int = 4096
    """Path MTU in payload bytes (256..4096)."""
    transport: str = "ib"
    """``ib`` or ``roce`` (sets the per-packet header overhead)."""

    def packets(self, nbytes: int) -> int:
        """Packets needed for a message of ``nbytes`` (a zero-byte message still sends one)."""
        return max(1, -(-nbytes // self.mtu))

    def wire_bytes(self, nbytes: int, first_extra: int = 0, per_packet_extra: int = 0) -> int:
        """Bytes on the wire for a message: payload, transport headers and the opcode's extension headers."""
        pkts = self.packets(nbytes)
        return nbytes + pkts * (TRANSPORT_HEADER[self.transport] + per_packet_extra) + first_extra

    def serialize_ps(self, nbytes: int, first_extra: int = 0, per_packet_extra: int = 0) -> int:
        """Time to put a whole message on the wire (ps)."""
        return transfer_ps(self.wire_bytes(nbytes, first_extra, per_packet_extra), self.rate_Bps)

    def first_packet_ps(self, nbytes: int, first_extra: int = 0, per_packet_extra: int = 0) -> int:
        """Time to serialize the message's first packet (ps): the cut-through head delay."""
        return self.serialize_ps(min(nbytes, self.mtu), first_extra, per_packet_extra)

    def efficiency(self, nbytes: int, first_extra: int = 0) -> float:
        """Payload bandwidth of back-to-back messages of ``nbytes`` (bytes/s)."""
        return self.rate_Bps * nbytes / self.wire_bytes(nbytes, first_extra)


class Fabric:
    """The network joining the NICs of a scenario; knows who can send to whom."""

    def __init__(self, params: FabricParams) -> None:
        self.params = params
        self.endpoints: list[str] = []
        self.datagram_qps: dict[tuple[int, int], object] = {}
        """The UD QPs datagrams reach, by (LID of their port, QP number)."""
        self.ports: dict[int, object] = {}
        """The node behind each LID whose device has been opened (:func:`~models.verbs.device.ibv_open_device`)."""

    def attach(self, nic_name: str) -> None:
        """Plug a NIC port into the fabric."""
        self.endpoints.append(nic_name)

    def lid(self, nic_name: str) -> int:
        """The LID of ``nic_name``'s port: 1, 2, ... in the order the ports were attached (a subnet manager's)."""
        return self.endpoints.index(nic_name) + 1

    @property
    def point_to_point(self) -> bool:
        """True when exactly two ports are attached: each receive port then has a single sender."""
        return len(self.endpoints) == 2
