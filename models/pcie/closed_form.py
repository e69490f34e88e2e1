"""Closed-form PCIe DMA bandwidth: the pcie-model formulas (Neugebauer et al., SIGCOMM'18) in our own words.

Sizes are bytes, rates bytes/s per direction, times ps. Sources: the constants and formulas of
pcie-model (github.com/pcie-bench/pcie-model, 40703cf) citing PCIe Base Spec 5.0.

* **Raw rate** R = lanes x GT/s x line-code efficiency / 8.
* **TLP-layer rate** T = R x (1 - 8/Ack - 8/FC - 4/1538): an 8 B ACK DLLP every Ack bytes, an 8 B FC-update
  DLLP every FC bytes and a 4 B SKIP ordered set every 1538 bytes of link time. Ack = FC = the spec's
  Ack-latency table value for (generation, width, MPS); Gen3 x8 and x16 from pcie-model's tables, x1/x2/x4 and
  Gen1/Gen2 come from the same spec tables via pcie-model, Gen4-6 reuse Gen3's (pcie-model does the same and
  calls Gen6 a guess). Caveat kept for agreement with the published anchors: the spec tables are in *symbol
  times*, and a symbol time carries ``lanes`` bytes, so this DLLP overhead is about ``lanes`` times too high
  (about 10 % instead of 0.9 % on x16). Gen6 also keeps per-TLP framing although FLIT mode has none.
* **Per-TLP wire bytes**: payload + 8 B framing (sequence number, LCRC, start/end) + header (3DW = 12 B with
  32-bit addresses, 4DW = 16 B with 64-bit ones; a CplD header is always 12 B) + 4 B ECRC if enabled.
* **Splitting** (the same rules ``pcie_tlp`` applies TLP by TLP; a transfer of ``n`` B starts at ``addr``):
  MWr TLPs end at every MPS-aligned address, MRd requests at every MRRS-aligned one (both powers of two that
  divide 4096, so no TLP crosses a 4 KiB boundary). A completer returns each request as CplDs of at most MPS
  bytes that end on RCB-aligned addresses, or one CplD per RCB-aligned block when ``rcb_chunks``. Aligned
  transfers with MRRS >= MPS give pcie-model's counts ceil(n/MPS), ceil(n/MRRS), ceil(n/MPS or n/RCB);
  MRRS < MPS (one completion per request) and unaligned starts (extra TLPs) generalise them.
* **Write**: B = T x n / W, W = wire bytes of the MWr TLPs, and no more than one write per
  ``dma_write_issue_ps`` (the device's DMA engine, not the link: pcie-bench's NFP-6000 issues at most one
  posted write per 21.1 ns, whatever its size up to 64 B: models/data/pciebench_dma_read_sizes.json).
* **Read**: requests (Q wire bytes) flow device->host, completions (C) host->device, each direction at T;
  link-limited B = T x n / max(Q, C) (pcie-model's RX/TX min logic). Reads are non-posted: each MRd holds one
  of ``read_tags`` tags for its round trip (request serialisation + ``read_latency_ps`` + its completions),
  so B <= tags x n / sum of round trips. Read B = min of the two.
* **Mixed**: the device reads n and writes n per transaction: B = T x n / max(W + Q, C) each way (pcie-model),
  and no more than the read tags and the write issue spacing allow. Exact while a transfer is one read request;
  past that, a device that
  issues each transaction's writes behind its reads on one in-order queue (as :mod:`models.pcie.tlp` does)
  idles the link while the next reads wait for tags, which this bound does not see.
* **Read latency** of a single outstanding read on an idle link: its first request's serialisation, the
  round trip ``read_latency_ps``, all its completions' serialisation, and ``read_latency_ps_per_byte`` x n, the
  engine's own size term beyond what the completions' link time already explains.
"""

from __future__ import annotations

from math import gcd
from typing import Protocol

GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
"""Transfer rate per lane by generation (GT/s)."""
ENCODING = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
"""Line-code efficiency: 8b/10b (Gen1/2), 128b/130b (Gen3-5), Gen6 FLIT mode 242/256 as in pcie-model."""

DLLP_FRAMING = 8
"""Sequence number, LCRC and start/end framing charged to every TLP (bytes)."""
REQUEST_HEADER = {False: 12, True: 16}
"""MWr/MRd header by ``addr64``: 3DW with a 32-bit address, 4DW with a 64-bit one (bytes)."""
CPLD_HEADER = 12
"""Completion-with-data header, 3DW (bytes)."""
ECRC = 4
"""Optional end-to-end CRC digest per TLP (bytes)."""
DLLP_SIZE = 8
"""ACK and FC-update DLLPs: 2 B framing + 4 B DLLP + 2 B CRC (bytes)."""
SKIP_BYTES, SKIP_INTERVAL = 4, 1538
"""A SKIP ordered set of 4 B every 1538 B of link time (clock compensation)."""

MPS_CHOICES = (128, 256, 512, 1024, 2048, 4096)


class LinkParams(Protocol):
    """The link parameters the formulas read (:class:`~models.pcie.link.PcieParams` has them)."""

    mps: int
    mrrs: int
    rcb: int
    rcb_chunks: bool
    ecrc: bool
    addr64: bool
    read_latency_ps: int
    read_tags: int | None
    dma_write_issue_ps: int
    read_latency_ps_per_byte: float

    @property
    def tlp_Bps(self) -> float:
        """Rate left for TLPs after DLLPs and SKIP ordered sets (bytes/s)."""

_DLLP_INTERVAL = {
    1: {1: (237, 416, 559, 1071, 2095, 4143), 2: (128, 217, 289, 545, 1057, 2081),
        4: (73, 118, 154, 282, 538, 1050), 8: (67, 107, 86, 150, 278, 534), 16: (48, 72, 86, 150, 278, 534)},
    2: {1: (288, 467, 610, 1122, 2146, 4194), 2: (179, 268, 340, 596, 1108, 2132),
        4: (124, 169, 205, 333, 589, 1101), 8: (118, 158, 137, 201, 329, 585), 16: (99, 123, 137, 201, 329, 585)},
    3: {1: (333, 512, 655, 1167, 2191, 4239), 2: (224, 313, 385, 641, 1153, 2177),
        4: (169, 214, 250, 378, 634, 1146), 8: (163, 203, 182, 246, 374, 630), 16: (144, 168, 182, 246, 374, 630)},
}
"""ACK (= FC-update) interval by generation (3 stands for 3-6), width and MPS: PCIe Base Spec 5.0 Tables
3-7..3-9 and 2-46..2-48 as tabulated by pcie-model (symbol times, used as bytes)."""


def raw_Bps(gen: int, lanes: int) -> float:
    """Raw rate of one direction after line coding (bytes/s)."""
    return lanes * GT_PER_S[gen] * 1e9 * ENCODING[gen] / 8


def dllp_interval(gen: int, lanes: int, mps: int) -> int:
    """Bytes of link time between two ACK (and between two FC-update) DLLPs."""
    return _DLLP_INTERVAL[min(gen, 3)][lanes][MPS_CHOICES.index(mps)]


def dllp_overhead(gen: int, lanes: int, mps: int) -> float:
    """Fraction of link time taken by ACK and FC-update DLLPs and SKIP ordered sets."""
    interval = dllp_interval(gen, lanes, mps)
    return 2 * DLLP_SIZE / interval + SKIP_BYTES / SKIP_INTERVAL


def tlp_Bps(gen: int, lanes: int, mps: int) -> float:
    """Rate left for TLPs in one direction (bytes/s)."""
    return raw_Bps(gen, lanes) * (1 - dllp_overhead(gen, lanes, mps))


def request_overhead(addr64: bool, ecrc: bool) -> int:
    """Wire bytes of an MWr TLP beyond its payload, and of a whole MRd TLP."""
    return DLLP_FRAMING + REQUEST_HEADER[addr64] + (ECRC if ecrc else 0)


def completion_overhead(ecrc: bool) -> int:
    """Wire bytes of a CplD TLP beyond its payload."""
    return DLLP_FRAMING + CPLD_HEADER + (ECRC if ecrc else 0)


def _blocks(addr: int, nbytes: int, size: int) -> int:
    """Number of ``size``-aligned blocks that [addr, addr + nbytes) touches (at least 1)."""
    return max(1, -(-(addr % size + nbytes) // size))


def write_tlps(p: LinkParams, nbytes: int, addr: int = 0) -> int:
    """MWr TLPs of a DMA write."""
    return _blocks(addr, nbytes, p.mps)


def read_requests(p: LinkParams, nbytes: int, addr: int = 0) -> int:
    """MRd requests of a DMA read."""
    return _blocks(addr, nbytes, p.mrrs)


def _request_completions(p: LinkParams, addr: int, nbytes: int) -> int:
    """CplDs answering one request; only the first may start off an RCB boundary."""
    if p.rcb_chunks:
        return _blocks(addr, nbytes, p.rcb)
    first_end = (addr + p.mps) // p.rcb * p.rcb  # the longest first CplD ends on an RCB boundary
    if addr + nbytes <= first_end:
        return 1
    return 1 + -(-(addr + nbytes - first_end) // p.mps)


def _request_split(p: LinkParams, nbytes: int, addr: int) -> tuple[int, int, int]:
    """A read's requests: the first one's length, how many full MRRS ones follow, the last one's length
    (0: none)."""
    first = min(nbytes, p.mrrs - addr % p.mrrs)
    full, last = divmod(nbytes - first, p.mrrs)
    return first, full, last


def read_completions(p: LinkParams, nbytes: int, addr: int = 0) -> int:
    """CplD TLPs returning a DMA read: the first request may be unaligned, the rest start MRRS-aligned."""
    first, full, last = _request_split(p, nbytes, addr)
    count = _request_completions(p, addr, first) + full * _request_completions(p, 0, p.mrrs)
    return count + (_request_completions(p, 0, last) if last else 0)


def write_wire_bytes(p: LinkParams, nbytes: int, addr: int = 0) -> int:
    """Bytes of MWr TLPs on the link for a DMA write."""
    return nbytes + write_tlps(p, nbytes, addr) * request_overhead(p.addr64, p.ecrc)


def read_request_wire_bytes(p: LinkParams, nbytes: int, addr: int = 0) -> int:
    """Bytes of MRd TLPs (device -> host) for a DMA read."""
    return read_requests(p, nbytes, addr) * request_overhead(p.addr64, p.ecrc)


def read_completion_wire_bytes(p: LinkParams, nbytes: int, addr: int = 0) -> int:
    """Bytes of CplD TLPs (host -> device) for a DMA read."""
    return nbytes + read_completions(p, nbytes, addr) * completion_overhead(p.ecrc)


def write_link_Bps(p: LinkParams, nbytes: int, addr: int = 0) -> float:
    """Bandwidth of back-to-back DMA writes of ``nbytes`` limited by the link alone (bytes/s)."""
    return p.tlp_Bps * nbytes / write_wire_bytes(p, nbytes, addr)


def write_issue_Bps(p: LinkParams, nbytes: int) -> float:
    """Bandwidth the engine's write issue spacing allows, ``nbytes`` per ``dma_write_issue_ps`` (bytes/s;
    infinite without a limit)."""
    return nbytes / p.dma_write_issue_ps * 1e12 if p.dma_write_issue_ps else float("inf")


def write_Bps(p: LinkParams, nbytes: int, addr: int = 0) -> float:
    """Bandwidth of back-to-back DMA writes of ``nbytes``: the link or the issue spacing, whichever is lower
    (bytes/s)."""
    return min(write_link_Bps(p, nbytes, addr), write_issue_Bps(p, nbytes))


def read_link_Bps(p: LinkParams, nbytes: int, addr: int = 0) -> float:
    """Bandwidth of back-to-back DMA reads limited by the link alone, unlimited tags (bytes/s)."""
    busiest = max(read_request_wire_bytes(p, nbytes, addr), read_completion_wire_bytes(p, nbytes, addr))
    return p.tlp_Bps * nbytes / busiest


def _round_trip_ps(p: LinkParams, addr: int, nbytes: int) -> float:
    """How long one MRd of ``nbytes`` holds its tag on an otherwise idle link: its own serialisation, the
    read latency and its completions' serialisation (ps)."""
    wire = request_overhead(p.addr64, p.ecrc) + nbytes + _request_completions(p, addr, nbytes) * \
        completion_overhead(p.ecrc)
    return wire / p.tlp_Bps * 1e12 + p.read_latency_ps


def read_tag_hold_ps(p: LinkParams, nbytes: int, latency_ps: int, addr: int = 0) -> float:
    """Summed round trips of a DMA read's requests on an otherwise idle link whose read latency is
    ``latency_ps``: how long the read holds one tag in all (ps)."""
    wire = read_request_wire_bytes(p, nbytes, addr) + read_completion_wire_bytes(p, nbytes, addr)
    return read_requests(p, nbytes, addr) * latency_ps + wire / p.tlp_Bps * 1e12


def read_tag_Bps(p: LinkParams, nbytes: int, addr: int = 0) -> float:
    """Bandwidth allowed by ``read_tags`` outstanding requests (bytes/s; infinite when unlimited).

    Request j reuses the tag of request j - tags, so with ``k`` requests per read and g = gcd(tags, k) the
    tags fall into g classes, class c serving the requests at positions = c mod g with tags/g tags. A read
    takes at least the class's summed round trips / (tags/g); with g = 1 this is tags x n / all round trips.
    """
    if p.read_tags is None:
        return float("inf")
    first, full, last = _request_split(p, nbytes, addr)
    g = gcd(p.read_tags, 1 + full + (1 if last else 0))
    class_ps = [0.0] * g
    class_ps[0] += _round_trip_ps(p, addr, first)
    full_ps = _round_trip_ps(p, 0, p.mrrs)
    for c in range(g):  # full requests sit at positions 1..full
        class_ps[c] += ((full - c) // g + 1 if c else full // g) * full_ps
    if last:
        class_ps[(full + 1) % g] += _round_trip_ps(p, 0, last)
    return p.read_tags / g * nbytes / max(class_ps) * 1e12


def read_Bps(p: LinkParams, nbytes: int, addr: int = 0) -> float:
    """Bandwidth of back-to-back DMA reads: link- or tag-limited, whichever is lower (bytes/s)."""
    return min(read_link_Bps(p, nbytes, addr), read_tag_Bps(p, nbytes, addr))


def read_write_Bps(p: LinkParams, nbytes: int, addr: int = 0) -> float:
    """Bandwidth each way when every transaction reads ``nbytes`` and writes ``nbytes``: the busier direction
    of the link, or the read tags (bytes/s)."""
    up = write_wire_bytes(p, nbytes, addr) + read_request_wire_bytes(p, nbytes, addr)
    link = p.tlp_Bps * nbytes / max(up, read_completion_wire_bytes(p, nbytes, addr))
    return min(link, read_tag_Bps(p, nbytes, addr), write_issue_Bps(p, nbytes))
