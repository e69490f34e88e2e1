"""Page faults of on-demand-paged (ODP) buffers the workloads read from, followed under the vectorized core.

An access through an ODP MR (explicit or implicit) is decided by which pages earlier faults mapped and when
their handlers finish (:meth:`~models.ib.mr_backing.OdpBacking.lookup`): the first access to a page not mapped
faults, and the accesses that reach those pages before the handler is done wait for it. Both are holds of the
access's check, which the vectorized core knows (:attr:`sim.core.steps.Check.holds`). So the watch
(:class:`sim.engine.planner.events.Watch`) scans each solved piece for the earliest access the NIC's table does not let
through, makes that very call on the testbed at that access's time (counted as the event engine counts it), and
the run is solved again with the access held until the handler is done, as a moved dma-buf's re-fault is.

The accesses followed are a stream's own (a WRITE's or SEND's payload read, a READ's or atomic's response
written, never a ping-pong's) of a buffer no responder reaches: a responder's fault answers an RNR NAK, which
the event engine simulates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from models.ib.implicit_odp import ImplicitOdpBacking
from models.ib.mr_backing import OdpBacking
from models.nic.odp_caps import gated_translate, mlx5_ib_odp_opcode_cap
from models.nic.translation import Fault
from models.nic.wqe import ATOMIC_BYTES
from sim.core.units import format_size, format_time
from sim.engine.harness import workload_opcode
from sim.fast import Finished


class Unfollowed(Exception):
    """A page fault the watch cannot follow exactly: the event engine decides it."""


class Access(NamedTuple):
    """An access of a stream through an ODP MR: when it reaches its check (ps), the stream (its index), and its
    bytes (from the stream's :attr:`Source.offset` in the MR)."""

    at_ps: int
    stream: int
    length: int


def faults_followed(mr) -> bool:
    """Whether the vectorized core follows the page faults of a stream's own accesses through ``mr``."""
    return isinstance(mr.backing, (OdpBacking, ImplicitOdpBacking))


class Source(NamedTuple):
    """A stream whose own accesses fault: its buffer, the MR, where the stream's range starts in it, whether it
    posts atomics, its requester's QP and the ODP capability its faults need
    (:func:`~models.nic.odp_caps.mlx5_ib_odp_opcode_cap`)."""

    buffer: str
    mr: object
    offset: int
    atomic: bool
    qp: object
    need: object


class FaultScan:
    """The earliest access of a solve that the NIC's table does not let through (:attr:`found`), from the
    solved pieces as they come; ``holds(name)`` gives the intervals the run already holds the buffer's
    accesses in (each a fault made, or an event's re-fault), which the scan checks the table agrees with."""

    def __init__(self, streams, holds) -> None:
        self.sources = {k: Source(end.buffers[0], end.src.mr, end.src.iova - end.src.mr.iova,
                                  end.work.rule.verb == "atomic", end.src.qp,
                                  mlx5_ib_odp_opcode_cap(workload_opcode(end.work)))
                        for k, end in enumerate(streams)
                        if not end.work.rule.ping_pong and faults_followed(end.src.mr)}
        self.holds = holds
        self.found: Access | None = None

    def restart(self) -> None:
        """A new solve begins."""
        self.found = None

    def scan(self, key: tuple[int, int], piece: Finished, from_ps: int) -> None:
        """Look at ``piece`` of ``key`` (stream, size): its accesses at or after ``from_ps`` (those before were
        looked at in an earlier solve, the same up to there).

        :raises Unfollowed: an access the run holds that the table would let through, or hold until another time.
        """
        source = self.sources.get(key[0])
        local = None if source is None else piece.marks.get("local")
        if local is None:
            return
        name, backing, offset = source.buffer, source.mr.backing, source.offset
        length = ATOMIC_BYTES if source.atomic else key[1]
        times = local[local >= from_ps]
        for start, end in self.holds(name):
            inside = (times >= start) & (times < end)
            if inside.any():
                at = int(times[inside].min())
                answer = backing.lookup(at, offset, length)
                if not (isinstance(answer, Fault) and answer.ready_ps == end):
                    raise Unfollowed(f"buffer '{name}': an access of {format_size(length)} at {format_time(at)} "
                                     "reaches pages another fault maps, with a handler of its own")
                times = times[~inside]
        if len(times):
            at = int(np.min(times))
            if (self.found is None or at < self.found.at_ps) and backing.lookup(at, offset, length) is not None:
                self.found = Access(at, key[0], length)

    def make(self, access: Access) -> int:
        """The NIC's access at its time on the testbed, as the event engine makes it (its device's ODP
        capabilities deciding whether it may fault): the time its fault (or the handler it waits for) is done.

        :raises Unfollowed: the access completes in error instead.
        """
        source = self.sources[access.stream]
        answer = gated_translate(source.qp, source.mr, source.need, access.at_ps, source.offset, access.length)
        if not isinstance(answer, Fault):
            raise Unfollowed(f"buffer '{source.buffer}': the access at {format_time(access.at_ps)} "
                             + (f"completes in error ({answer.ibv_name})" if answer is not None else
                                "goes on without the fault handler"))
        return answer.ready_ps
