"""Port rates per InfiniBand and Ethernet generation: lanes, signalling, line code and the data rate they carry.

A port's data rate is what is left of its lanes' signalling rate after the line code (64b/66b; or 256b/257b
transcoding with Reed-Solomon FEC on the PAM4 generations): the port's ``rate_Bps`` in
:class:`~models.fabric.FabricParams`. perftest's bandwidth counts payload only, so what it reports is that rate
less the link's own traffic (InfiniBand's flow-control credits) times the payload's share of the wire
(:func:`perftest_Bps`): the transport headers of every packet (InfiniBand LRH, BTH, ICRC and VCRC; RoCEv2
Ethernet, IPv4, UDP, BTH, ICRC, FCS, preamble and inter-frame gap), the first packet's RETH and the padding to
4 bytes, per path MTU (:mod:`models.fabric`, the one place those sizes and the credits' share live).
:mod:`models.nic.port_calibration` holds the result against perftest's published EDR rows.

Sources: InfiniBand lane rates and line codes, the InfiniBand Trade Association's data rates (EDR 25, HDR 50,
NDR 100, XDR 200 Gb/s per lane) as tabulated in Wikipedia's "InfiniBand" performance table; EDR 4 x 25.78125 Gb/s
64b/66b (ConnectX-5 Ex user manual 1.2) and HDR100 2 x 53.125 Gb/s (ConnectX-6 user manual features table); the lane modulations (25G NRZ, 50G and 100G PAM4 per lane) from NVIDIA's LinkX "Key
Technologies" page (docs.nvidia.com/networking/display/CABLEOVpub/Key+Technologies). Ethernet: IEEE 802.3 clauses
82 and 91 (100GBASE-R: 64b/66b, RS(528,514) FEC with 256b/257b transcoding keeps 25.78125 Gb/s per lane),
119 and 134 (200G/400G: 256b/257b and RS(544,514) over 26.5625 or 53.125 GBd PAM4 lanes) and 802.3df (800GbE,
8 x 106.25 Gb/s). XDR's 212.5 Gb/s lane (106.25 GBd PAM4) is the vendors' figure for 800 Gb/s ConnectX-8 ports.
A HDR100 table row naming 64b/66b would be wrong: 53.125 Gb/s lanes carry 50 Gb/s only under RS(544,514) over
256b/257b, as Ethernet's PAM4 lanes do, which is the code taken for HDR, NDR and XDR. GRH (40 B, routed
InfiniBand) is not counted: the fabric is one subnet.

Examples
--------
>>> PORT_RATES["ndr"].data_Gbps, PORT_RATES["400gbe"].data_Gbps
(400.0, 400.0)
>>> round(perftest_Bps(PORT_RATES["edr"], 65536, 4096) / 1e9, 2)
12.42
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from models.fabric import RETH, FabricParams

CODES = {"64b/66b": Fraction(64, 66),
         "256b/257b, RS(528,514)": Fraction(256, 257) * Fraction(514, 528),
         "256b/257b, RS(544,514)": Fraction(256, 257) * Fraction(514, 544)}
"""Line code and FEC -> share of the signalling rate left for data. RS(528,514) over 256b/257b (100GBASE-R, 802.3
clause 91) leaves exactly what 64b/66b does; RS(544,514) is the PAM4 generations' FEC (clauses 119, 134)."""


@dataclass(frozen=True, slots=True)
class PortRate:
    """One port generation."""

    name: str
    """The scenario's name for it (a node's ``nic: {port: ...}``)."""
    transport: str
    """``ib`` (InfiniBand) or ``roce`` (Ethernet, RoCEv2): which headers the fabric puts on each packet."""
    lanes: int
    lane_Gbps: float
    """Signalling rate of one lane (Gb/s on the wire, FEC and line code included)."""
    modulation: str
    """NRZ (one bit per symbol) or PAM4 (two)."""
    code: str
    """Line code and FEC (a key of :data:`CODES`)."""

    @property
    def lane_data_Gbps(self) -> float:
        """Data rate of one lane after the line code (Gb/s)."""
        return float(Fraction(str(self.lane_Gbps)) * CODES[self.code])

    @property
    def data_Gbps(self) -> float:
        """The port's data rate (Gb/s): the rate packets are serialized at."""
        return self.lanes * self.lane_data_Gbps

    @property
    def gbaud(self) -> float:
        """Symbol rate of one lane (GBd)."""
        return self.lane_Gbps / (2 if self.modulation == "PAM4" else 1)


PORT_RATES: dict[str, PortRate] = {p.name: p for p in (
    PortRate("edr", "ib", 4, 25.78125, "NRZ", "64b/66b"),
    PortRate("hdr", "ib", 4, 53.125, "PAM4", "256b/257b, RS(544,514)"),
    PortRate("ndr", "ib", 4, 106.25, "PAM4", "256b/257b, RS(544,514)"),
    PortRate("xdr", "ib", 4, 212.5, "PAM4", "256b/257b, RS(544,514)"),
    PortRate("100gbe", "roce", 4, 25.78125, "NRZ", "256b/257b, RS(528,514)"),
    PortRate("200gbe", "roce", 4, 53.125, "PAM4", "256b/257b, RS(544,514)"),
    PortRate("400gbe", "roce", 4, 106.25, "PAM4", "256b/257b, RS(544,514)"),
    PortRate("800gbe", "roce", 8, 106.25, "PAM4", "256b/257b, RS(544,514)"),
)}
"""Every port generation by name (see the module docstring for sources)."""


def port_rate(name: str) -> PortRate:
    """The port generation called ``name``.

    :raises KeyError: naming the known ports.
    """
    if name not in PORT_RATES:
        raise KeyError(f"no port '{name}' (known: {', '.join(PORT_RATES)})")
    return PORT_RATES[name]


def fabric_of(port: PortRate, mtu: int = 4096) -> FabricParams:
    """A fabric of ``port``'s rate and headers at path MTU ``mtu`` (the other parameters at their defaults)."""
    return FabricParams(rate_Bps=port.data_Gbps * 1e9 / 8, mtu=mtu, transport=port.transport)


def perftest_Bps(port: PortRate, message_bytes: int, mtu: int = 4096, first_extra: int = RETH) -> float:
    """What perftest reports for back-to-back messages of ``message_bytes`` at path MTU ``mtu`` over ``port``
    (bytes/s of payload; ``first_extra``: the opcode's extension header, an RDMA WRITE's RETH by default)."""
    return fabric_of(port, mtu).efficiency(message_bytes, first_extra)
