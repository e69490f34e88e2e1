"""The network between NICs: line rate, one-way latency, MTU and what each packet and the link itself add to a
message's payload on the wire.

Header overheads per packet (bytes on the wire beyond the payload):

* ``ib``: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 (InfiniBand Architecture Spec vol. 1, ch. 5-9; perftest issue
  #225's ibdump capture of ib_write_bw on EDR shows 4138-byte first packets: 4096 B + 26 + a 16 B RETH);
* ``roce``: Ethernet 14 + FCS 4 + preamble/IFG 20 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 = 82 (RoCEv2).

RDMA WRITE and READ requests carry a 16 B RETH in their first packet; ACKs and the first and last packets of a
READ response (its only packet, for one) carry a 4 B AETH, the middle ones none (the kernel's rxe opcode table,
``drivers/infiniband/sw/rxe/rxe_opcode.c``: RDMA_READ_RESPONSE_FIRST/LAST/ONLY are BTH + AETH, MIDDLE is BTH
alone). An atomic request carries a 28 B AtomicETH (remote address, rkey, swap/add and compare operands), its
response an AETH and an 8 B AtomicAckETH holding the original value (IBA vol. 1, 9.3.3 and 9.3.5). Every UD
packet carries an 8 B DETH (Q_Key and source QP) after its BTH (IBA vol. 1, 9.3.4). A payload is padded to a
multiple of 4 bytes (BTH PadCnt; rxe's ``init_req_packet`` and ``prepare_ack_packet``: ``pad = (-payload) &
0x3``): only a message's last packet can need it, path MTUs being multiples of 4.

The link itself: an InfiniBand port sends each data VL's link-level flow-control packet (6 B: Op and FCTBS,
VL and FCCL, LPCRC; Wireshark's ``packet-infiniband.c``, ``dissect_infiniband_link``) at least once every
65,536 symbol times (IBA vol. 1, 7.9.4), a symbol a byte of each of the port's 4 lanes: the fabric has one data
VL (one service level), so 6 B of every 4 x 65,536 are credits, not packets (:data:`LINK_SHARE`). Ethernet has no
link-level credits (PFC pauses only under congestion, not modelled); its PCS alignment markers (under 0.01 %)
are not charged. The line code and FEC of each port generation are in the port's data rate
(:mod:`models.nic.port_rates`), the rate ``rate_Bps`` is.
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
FC_PACKET = 6
"""One InfiniBand link-level flow-control packet (bytes)."""
FC_PERIOD = 4 * 65536
"""The most bytes of a 4X port between two flow-control packets of one data VL (65,536 symbol times x 4 lanes)."""
LINK_SHARE = {"ib": 1 - FC_PACKET / FC_PERIOD, "roce": 1.0}
"""Share of the port's data rate left for packets after the link's own traffic, per transport."""


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

    def wire_bytes(self, nbytes: int, first_extra: int = 0, per_packet_extra: int = 0, last_extra: int = 0) -> int:
        """Bytes on the wire for a message: payload and its padding to 4 bytes, transport headers and the opcode's
        extension headers (``first_extra`` on the first packet, ``last_extra`` on the last one when the message has
        more than one: a one-packet message carries its headers in ``first_extra``)."""
        pkts = self.packets(nbytes)
        ends = first_extra + (last_extra if pkts > 1 else 0)
        return nbytes + -nbytes % 4 + pkts * (TRANSPORT_HEADER[self.transport] + per_packet_extra) + ends

    @property
    def packet_Bps(self) -> float:
        """The rate packets are serialized at (bytes/s): ``rate_Bps`` less the link's own traffic
        (:data:`LINK_SHARE`)."""
        return self.rate_Bps * LINK_SHARE[self.transport]

    def serialize_ps(self, nbytes: int, first_extra: int = 0, per_packet_extra: int = 0, last_extra: int = 0) -> int:
        """Time to put a whole message on the wire (ps)."""
        return transfer_ps(self.wire_bytes(nbytes, first_extra, per_packet_extra, last_extra), self.packet_Bps)

    def first_packet_ps(self, nbytes: int, first_extra: int = 0, per_packet_extra: int = 0) -> int:
        """Time to serialize the message's first packet (ps): the cut-through head delay."""
        return self.serialize_ps(min(nbytes, self.mtu), first_extra, per_packet_extra)

    def efficiency(self, nbytes: int, first_extra: int = 0, last_extra: int = 0) -> float:
        """Payload bandwidth of back-to-back messages of ``nbytes`` (bytes/s)."""
        return self.packet_Bps * nbytes / self.wire_bytes(nbytes, first_extra, 0, last_extra)


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
