"""Transaction-level PCIe: the TLPs of a DMA transfer, and a stream of transfers moved TLP by TLP.

A transfer is split into TLPs by the rules of the PCIe Base Spec: a request carries at most MPS (MWr) or asks
for at most MRRS (MRd) bytes and never crosses a 4 KiB boundary; a completer answers a request with CplDs of
at most MPS bytes, each but the last ending on an RCB-aligned address (or one CplD per RCB block when
``rcb_chunks``). Our requester cuts at MPS-/MRRS-aligned addresses (powers of two that divide 4 KiB, which
keeps the 4 KiB rule), so an unaligned start costs extra TLPs.

The link is two independent directions that send TLPs first come first served at the raw rate, in *byte
times* (one byte at the raw rate). Each direction counts the bytes it has sent (TLPs, DLLPs, SKIPs) and, after
the TLP in which a due point falls, sends the ACK and FC-update DLLPs (8 B each, one pair every Ack = FC bytes)
and a 4 B SKIP every 1538 bytes, as :mod:`models.pcie.closed_form` charges them. A read request waits for a
free tag (``read_tags``; request j reuses request j - tags's); its completions leave the host
``read_latency_ps`` after the request arrived, and the tag is free again when its last completion has arrived.
A write's first TLP is ready ``dma_write_issue_ps`` after the previous write's (the engine's issue spacing).

Steady-state bandwidth is measured over a window of whole transfers long enough (and, with tags, a whole
number of tag rounds) that start-up and DLLP granularity disappear; this is what the closed form is checked
against. With few tags the link idles between bursts and DLLPs due at a burst's end cost nothing, so such
streams run up to about 0.5 % faster than the closed form, which charges every byte at the TLP-layer rate.

At the knee, where the tags and the busier direction allow about the same rate, a stream can also run slower
than both bounds, and not only while it starts: a tag comes back late whenever its request or completions
queued behind a run of TLPs bigger than the average, or behind DLLPs and SKIPs due together, and with no slack
on the link that lateness is never made up. :func:`knee_shortfall` bounds it.
"""

from __future__ import annotations

from math import gcd
from typing import NamedTuple

from models.pcie import closed_form as cf
from models.pcie.closed_form import DLLP_FRAMING, DLLP_SIZE, ECRC, SKIP_BYTES, SKIP_INTERVAL, dllp_interval
from models.pcie.link import PcieParams

OPS = ("write", "read", "read_write")
"""Stream kinds: posted writes, non-posted reads, or one read and one write of the size per transaction."""
WINDOW_BYTES = 1 << 16
"""Least busiest-direction wire bytes in a measurement window: DLLP granularity (<= 20 B at either end)
then moves the result by < 0.07 %."""


class Tlp(NamedTuple):
    """One transaction layer packet."""

    kind: str
    """``MWr``, ``MRd`` or ``CplD``."""
    addr: int
    """First byte address written, requested or returned."""
    length: int
    """Bytes written, requested or returned."""
    wire: int
    """Bytes it occupies on the link: framing, header, data payload and ECRC."""


class StreamResult(NamedTuple):
    """Steady state of back-to-back transfers of one size."""

    Bps: float
    """Payload bandwidth (bytes/s; for ``read_write``, each way)."""
    up_wire: int
    """TLP bytes per transfer device -> host (MWr, MRd), framing included."""
    down_wire: int
    """TLP bytes per transfer host -> device (CplD), framing included."""
    up_tlps: int
    """TLPs per transfer device -> host."""
    down_tlps: int
    """TLPs per transfer host -> device."""


def _header_bytes(p: PcieParams, kind: str) -> int:
    dwords = 3 if kind == "CplD" or not p.addr64 else 4  # MWr/MRd need a 4th DW for a 64-bit address
    return 4 * dwords


def _tlp(p: PcieParams, kind: str, addr: int, length: int) -> Tlp:
    data = 0 if kind == "MRd" else length
    return Tlp(kind, addr, length, DLLP_FRAMING + _header_bytes(p, kind) + data + (ECRC if p.ecrc else 0))


def _split(addr: int, nbytes: int, size: int) -> list[tuple[int, int]]:
    """(address, length) pieces of [addr, addr + nbytes) cut at every multiple of ``size``; ``size`` divides
    4 KiB, so no piece crosses a 4 KiB boundary."""
    pieces, end = [], addr + nbytes
    while True:
        stop = min(end, (addr // size + 1) * size)
        pieces.append((addr, stop - addr))
        if stop >= end:
            return pieces
        addr = stop


def write_tlps(p: PcieParams, addr: int, nbytes: int) -> list[Tlp]:
    """The MWr TLPs of a DMA write of ``nbytes`` at ``addr``."""
    return [_tlp(p, "MWr", a, n) for a, n in _split(addr, nbytes, p.mps)]


def completion_tlps(p: PcieParams, request: Tlp) -> list[Tlp]:
    """The CplD TLPs a completer returns for one MRd."""
    if p.rcb_chunks:
        return [_tlp(p, "CplD", a, n) for a, n in _split(request.addr, request.length, p.rcb)]
    cpls, addr, end = [], request.addr, request.addr + request.length
    while True:
        stop = min(end, (addr + p.mps) // p.rcb * p.rcb)  # at most MPS, ending on an RCB boundary
        cpls.append(_tlp(p, "CplD", addr, stop - addr))
        if stop >= end:
            return cpls
        addr = stop


def read_tlps(p: PcieParams, addr: int, nbytes: int) -> list[tuple[Tlp, list[Tlp]]]:
    """The MRd requests of a DMA read of ``nbytes`` at ``addr``, each with the CplDs answering it."""
    requests = [_tlp(p, "MRd", a, n) for a, n in _split(addr, nbytes, p.mrrs)]
    return [(r, completion_tlps(p, r)) for r in requests]


def _longest_excess(wires: list[int]) -> float:
    """Most bytes a run of consecutive entries of the periodic sequence ``wires`` holds beyond its length times
    the mean (bytes). A run longer than the period holds a whole period more, whose excess is 0, so runs
    through two periods cover them all."""
    mean = sum(wires) / len(wires)
    best = run = 0.0
    for w in wires + wires:
        run = max(0.0, run + w - mean)
        best = max(best, run)
    return best


def knee_shortfall(p: PcieParams, op: str, nbytes: int, addr: int = 0) -> float:
    """How far a stream of ``op`` transfers can fall below the closed form, as a fraction of it (0 without tags).

    A tag's round trip is made longer than the average only on the link, by a run of requests (or of their
    completions) holding more wire bytes than the mean, plus the ACK/FC pair and SKIP that may fall due
    within it beyond their average share: at most :func:`_longest_excess` + 2 x 8 B + 4 B at the TLP-layer rate
    per direction. The tag comes back that late once per tag round (``read_tags`` requests at the closed form's
    rate), so the stream keeps at least 1 / (1 + shortfall) of the closed form. This is a bound: away from the
    knee the link's slack absorbs the lateness and the stream agrees with the closed form.
    """
    reads = read_tlps(p, addr, nbytes) if op != "write" else []
    if p.read_tags is None or not reads:
        return 0.0
    up = [r.wire for r, _ in reads]
    up[-1] += sum(t.wire for t in write_tlps(p, addr, nbytes)) if op == "read_write" else 0
    down = [sum(c.wire for c in cpls) for _, cpls in reads]
    stretch = 2 * DLLP_SIZE + SKIP_BYTES
    late_s = (_longest_excess(up) + _longest_excess(down) + 2 * stretch) / p.tlp_Bps
    bound_Bps = cf.read_Bps(p, nbytes, addr) if op == "read" else cf.read_write_Bps(p, nbytes, addr)
    round_s = p.read_tags * nbytes / len(reads) / bound_Bps
    return late_s / round_s


class _Direction:
    """One direction of the link: FIFO at one byte per byte time, DLLPs and SKIPs between TLPs. ACK and
    FC-update DLLPs share one interval, so they fall due together and go out as a pair."""

    __slots__ = ("free", "sent", "interval", "dllp_due", "skip_due")

    def __init__(self, p: PcieParams) -> None:
        self.free = 0.0  # byte time at which the last TLP, DLLP or SKIP is across
        self.sent = 0  # bytes sent so far: TLPs, DLLPs and SKIPs
        self.interval = self.dllp_due = dllp_interval(p.gen, p.lanes, p.mps)
        self.skip_due = SKIP_INTERVAL

    def send(self, ready: float, nbytes: int) -> float:
        """Send a TLP of ``nbytes`` ready at ``ready``; return when its last byte is across."""
        done = (ready if ready > self.free else self.free) + nbytes
        self.free = done
        self.sent += nbytes
        if self.sent >= self.dllp_due or self.sent >= self.skip_due:
            self._send_due()
        return done

    def _send_due(self) -> None:
        """Send every DLLP pair and SKIP that fell due (sending one may make the next due)."""
        sent = self.sent
        while True:
            if sent >= self.dllp_due:
                sent += 2 * DLLP_SIZE
                self.dllp_due += self.interval
            elif sent >= self.skip_due:
                sent += SKIP_BYTES
                self.skip_due += SKIP_INTERVAL
            else:
                break
        self.free += sent - self.sent
        self.sent = sent


def simulate_stream(p: PcieParams, op: str, nbytes: int, addr: int = 0) -> StreamResult:
    """Move back-to-back transfers of ``nbytes`` (each starting at ``addr``) and measure the steady state.

    Reads (also in ``read_write``) are limited by ``p.read_tags`` and ``p.read_latency_ps``, writes by
    ``p.dma_write_issue_ps``.

    :raises ValueError: on an unknown ``op`` or a size below 1 byte.
    """
    if op not in OPS or nbytes < 1:
        raise ValueError(f"simulate_stream: op must be one of {OPS} and nbytes >= 1, got {op!r}, {nbytes}")
    writes = write_tlps(p, addr, nbytes) if op != "read" else []
    reads = read_tlps(p, addr, nbytes) if op != "write" else []
    up_wire = sum(t.wire for t in writes) + sum(r.wire for r, _ in reads)
    down_wire = sum(c.wire for _, cpls in reads for c in cpls)
    tags = p.read_tags if reads else None
    window = -(-WINDOW_BYTES // max(up_wire, down_wire))
    warmup = 1
    if tags is not None:  # whole tag rounds: requests come back in waves of ``tags``
        per_round = tags // gcd(tags, len(reads))
        window = -(-window // per_round) * per_round
        warmup += -(-2 * tags // len(reads))
    ends = _run(p, writes, reads, tags, warmup + window)
    Bps = window * nbytes / (ends[-1] - ends[warmup - 1]) * p.raw_Bps
    return StreamResult(Bps, up_wire, down_wire, len(writes) + len(reads), sum(len(c) for _, c in reads))


def _run(p: PcieParams, writes: list[Tlp], reads: list[tuple[Tlp, list[Tlp]]], tags: int | None,
         transfers: int) -> list[float]:
    """Send ``transfers`` transfers (read requests first, then writes); return when each has finished."""
    up, down = _Direction(p), _Direction(p)
    latency = p.read_latency_ps * 1e-12 * p.raw_Bps  # in byte times
    issue = p.dma_write_issue_ps * 1e-12 * p.raw_Bps
    released: list[float] = []  # when each read request's tag came free
    ends = []
    for k in range(transfers):
        end = 0.0
        for request, cpls in reads:
            ready = released[-tags] if tags is not None and len(released) >= tags else 0.0
            at = up.send(ready, request.wire) + latency
            for cpl in cpls:
                at = down.send(at, cpl.wire)
            released.append(at)
            end = at
        for j, tlp in enumerate(writes):
            done = up.send(0.0 if j else k * issue, tlp.wire)
            end = done if done > end else end
        ends.append(end)
    return ends
