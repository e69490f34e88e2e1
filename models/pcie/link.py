"""A PCIe link at TLP granularity: encoding, lanes, MPS/MRRS/RCB, TLP and DLLP overheads, read tags.

Rates and byte counts come from :mod:`models.pcie.closed_form` (pcie-model of Neugebauer et al., SIGCOMM'18,
restated); :mod:`models.pcie.tlp` checks them TLP by TLP. Each direction of the link is its own FIFO server.

The event engine streams whole messages, so it holds read tags as a fluid resource (:func:`read_tags`): by
Little's law ``tags`` requests in flight, each held for its round trip, serve at most ``tags`` requests per
round trip, so a read occupies the device's tag pool for its requests' summed round trips / ``tags``. A tag
also stays held while its completions queue on the link, so a read occupies the pool at least as long as its
completions occupy the device's link: queued reads then issue their requests as tags come back, not all at
once. The engine's transfers are aligned (unaligned starts are in the closed form and the TLP model).

Two limits of the device's DMA engine lie beyond the link (both off by default, set per preset): posted writes
issued no closer than ``dma_write_issue_ps`` apart (:func:`write_issue`), and a read whose latency grows with
its size by more than its completions' link time (``read_latency_ps_per_byte``, :meth:`PcieParams.read_size_ps`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from models.pcie import closed_form as cf
from models.pcie.closed_form import GT_PER_S
from sim.core import FifoServer, PS_PER_NS, transfer_ps
from sim.core.steps import Claim

MWR_HEADER_64 = MRD_HEADER_64 = cf.REQUEST_HEADER[True]
"""4DW MWr/MRd header with a 64-bit address (bytes)."""


@dataclass(frozen=True)
class PcieParams:
    """One PCIe link between a device and its upstream port.

    :raises ValueError: on a generation, width, MPS, MRRS, RCB or tag count PCIe does not have.
    """

    gen: int = 5
    """Generation 1..6."""
    lanes: int = 16
    """Link width: 1, 2, 4, 8 or 16."""
    mps: int = 256
    """Max payload size (bytes); x86 servers typically negotiate 256 (pcie-model default)."""
    mrrs: int = 512
    """Max read request size (bytes); pcie-model's default 512."""
    ecrc: bool = False
    """End-to-end CRC digest on every TLP."""
    read_latency_ps: int = 550 * PS_PER_NS
    """DMA read round trip, request to first completion (pcie-bench, Xeon E5, 64 B read median 546-560 ns)."""
    write_latency_ps: int = 150 * PS_PER_NS
    """Posted-write flight from device to memory visibility (one-way, about half a read round trip less the
    memory access)."""
    rcb: int = 64
    """Read completion boundary of the completer (bytes): 64 on root complexes (cache line), pcie-model default."""
    rcb_chunks: bool = False
    """The completer returns one CplD per RCB block instead of MPS-sized ones (seen on older chipsets,
    pcie-model ``rcb_chunks``)."""
    read_tags: int | None = 256
    """Outstanding MRd requests the device may have (8-bit Extended Tags: 256; 10-bit tags of Gen4+ allow
    768); None: unlimited, as pcie-model assumes."""
    addr64: bool = True
    """64-bit addresses (4DW MWr/MRd headers) rather than 32-bit ones (3DW)."""
    dma_write_issue_ps: int = 0
    """Least spacing between the starts of two posted-write DMA requests of the device's engine, whatever their
    size (ps; 0: the link alone limits writes). Small writes then run at most one per this time."""
    read_latency_ps_per_byte: float = 0.0
    """What each byte of a DMA read adds to its latency beyond the completions' link time, which the link
    already charges (ps per byte; the device's engine taking the data in). Latency only: read bandwidth and
    read-tag hold times are unchanged."""

    def __post_init__(self) -> None:
        if self.gen not in GT_PER_S or self.lanes not in (1, 2, 4, 8, 16):
            raise ValueError(f"PcieParams: no PCIe Gen{self.gen} x{self.lanes} link (gen 1..6, lanes 1..16)")
        if self.mps not in cf.MPS_CHOICES or self.mrrs not in cf.MPS_CHOICES:
            raise ValueError(f"PcieParams: mps {self.mps} and mrrs {self.mrrs} must be one of {cf.MPS_CHOICES}")
        if self.rcb not in (64, 128, 256, 512) or self.rcb > self.mps:
            raise ValueError(f"PcieParams: rcb {self.rcb} must be 64..512 and at most mps {self.mps}")
        if self.read_tags is not None and self.read_tags < 1:
            raise ValueError(f"PcieParams: read_tags {self.read_tags} must be at least 1 (or None: unlimited)")
        if self.dma_write_issue_ps < 0 or self.read_latency_ps_per_byte < 0:
            raise ValueError(f"PcieParams: dma_write_issue_ps {self.dma_write_issue_ps} and read_latency_ps_per_byte "
                             f"{self.read_latency_ps_per_byte} must not be negative")

    @cached_property
    def raw_Bps(self) -> float:
        """Raw rate per direction after line coding (bytes/s)."""
        return cf.raw_Bps(self.gen, self.lanes)

    @cached_property
    def tlp_Bps(self) -> float:
        """Rate left for TLPs after ACK/FC DLLPs and SKIP ordered sets (bytes/s)."""
        return cf.tlp_Bps(self.gen, self.lanes, self.mps)

    def write_wire_bytes(self, nbytes: int) -> int:
        """Bytes on the link for a posted DMA write of ``nbytes`` (payload + per-TLP overhead)."""
        return cf.write_wire_bytes(self, nbytes)

    def read_completion_bytes(self, nbytes: int) -> int:
        """Bytes flowing back to the requester for a DMA read of ``nbytes`` (data + CplD overheads)."""
        return cf.read_completion_wire_bytes(self, nbytes)

    def read_request_bytes(self, nbytes: int) -> int:
        """Bytes of MRd requests sent by the requester for a DMA read of ``nbytes``."""
        return cf.read_request_wire_bytes(self, nbytes)

    def write_ps(self, nbytes: int) -> int:
        """Link occupancy of a DMA write of ``nbytes`` (ps)."""
        return transfer_ps(self.write_wire_bytes(nbytes), self.tlp_Bps)

    def read_return_ps(self, nbytes: int) -> int:
        """Downstream link occupancy of the completions of a DMA read of ``nbytes`` (ps)."""
        return transfer_ps(self.read_completion_bytes(nbytes), self.tlp_Bps)

    def read_request_ps(self, nbytes: int) -> int:
        """Upstream link occupancy of the MRd requests of a DMA read of ``nbytes`` (ps)."""
        return transfer_ps(self.read_request_bytes(nbytes), self.tlp_Bps)

    def read_size_ps(self, nbytes: int) -> int:
        """Latency a DMA read of ``nbytes`` adds after its last completion has arrived (ps)."""
        return round(self.read_latency_ps_per_byte * nbytes)

    def lone_read_ps(self, nbytes: int) -> int:
        """Latency of one aligned DMA read of ``nbytes`` alone on the link, first request out to the data in the
        engine, as the event engine's read stages (:func:`models.nic.stages.dma_read`) give it (ps): the first
        request's wire time, the round trip, every completion's wire time and the size term, each in whole ps.

        Later requests go out while the first one's round trip runs, so they cost nothing here as long as a request
        is shorter than the round trip (always, for real links). A read whose requests outnumber its tags by far
        waits for tags instead (:func:`~models.pcie.closed_form.read_tag_hold_ps`); this is the latency of one that
        does not.
        """
        return (self.read_request_ps(min(nbytes, self.mrrs)) + self.read_latency_ps + self.read_return_ps(nbytes)
                + self.read_size_ps(nbytes))

    def write_efficiency(self, nbytes: int) -> float:
        """Effective DMA-write bandwidth for back-to-back ``nbytes`` writes: the link or the engine's issue
        spacing, whichever is lower (bytes/s)."""
        return cf.write_Bps(self, nbytes)

    def read_efficiency(self, nbytes: int) -> float:
        """Effective DMA-read bandwidth for back-to-back ``nbytes`` reads, limited by the busier direction of
        the link (tags unlimited, like the event engine) (bytes/s)."""
        return cf.read_link_Bps(self, nbytes)


class PcieLink:
    """The two directions of one link as separate FIFO servers: ``up`` (device to host: DMA writes, read
    requests) and ``down`` (host to device: read completions, MMIO doorbells); ``tags``, the read tags of the
    device below the link (see :func:`read_tags`); ``writes``, its DMA engine's posted-write issue (see
    :func:`write_issue`)."""

    def __init__(self, name: str, params: PcieParams) -> None:
        self.name = name
        self.params = params
        self.up = FifoServer(f"{name}.up")
        self.down = FifoServer(f"{name}.down")
        self.tags = FifoServer(f"{name}.tags")
        self.writes = FifoServer(f"{name}.write_issue")


def write_issue(link: PcieLink) -> list[Claim]:
    """The issue-spacing stage of a posted DMA write by the device below ``link``; empty when its engine has no
    issue limit (``dma_write_issue_ps`` 0).

    The claim holds the engine for ``dma_write_issue_ps`` from the write's start, so the next write starts no
    earlier; its negative delay takes the time back off head and tail, so a write that finds the engine free is
    not delayed (a spacing, not a latency).
    """
    issue = link.params.dma_write_issue_ps
    return [Claim(link.writes, issue, issue, 0, -issue)] if issue else []


def read_tags(link: PcieLink, nbytes: int, round_trip_ps: int) -> tuple[Claim, int] | None:
    """How a DMA read of ``nbytes`` by the device below ``link`` holds its read tags, whose route has a read
    latency of ``round_trip_ps``: the tag-pool stage (see :mod:`models.nic.stages`) and the least time its
    completions take on the device's link (ps). None when tags are unlimited.

    The pool serves the read for max(its requests' summed round trips / ``read_tags``, its completions' link
    time), which spaces consecutive reads; the stage only delays the read's start (the negative delay takes
    the service back off head and tail, so the request TLPs are not stretched over the tag time). Within the
    read, the last completion cannot arrive before the summed round trips / ``read_tags`` have passed since
    the start, which lengthens the completions on a tag-limited read.
    """
    p = link.params
    if p.read_tags is None:
        return None
    total = cf.read_tag_hold_ps(p, nbytes, round_trip_ps)
    hold = -(-int(total + 0.5) // p.read_tags)
    completions = p.read_return_ps(nbytes)
    service = max(hold, completions)
    first_request = p.read_request_ps(min(nbytes, p.mrrs))
    pool = Claim(link.tags, service, service, 0, -service)
    return pool, max(completions, hold - first_request - round_trip_ps)
