"""Work requests that complete in error after a scenario event, on the vectorized core.

When an event leaves a buffer a stream reads from unreachable (VFIO revoked it, the exporter's re-map fails), the
next access of it answers an error status (:meth:`models.ib.dmabuf_mr.DmabufBacking.translate`, asked on the
testbed at that access's time by :class:`sim.engine.planner.events.Watch`). The event engine then runs
:meth:`~models.nic.work_request.WorkRequestRun._fail`: the work request writes its error CQE from the source
check's time and goes no further, and its send queue stops there (:attr:`models.verbs.qp.QueuePair.sq_failed`):
each later work request is flushed (IBV_WC_WR_FLUSH_ERR) at its requester check, or, where it passed that check
before the failure, at its source check, its access not made. Its completion, delivered in posting order
(:func:`models.nic.completion.complete_at`), moves the QP to the error state. ``ib_write_bw``'s loop goes on
posting as completions are polled, and on to its later message sizes, whose work requests the requester flushes
at its check, every one.

A :class:`Failure` holds where that split falls in a stream; the vectorized core solves each part with the steps
of :func:`models.nic.datapath.failing` (a continuation group each, :attr:`sim.fast.Group.first`) and checks the
split against the solve (:meth:`Failure.settled`): the requester's check times (labelled ``requester``) against
the failure's time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from models.nic.datapath import Path, failing
from models.nic.wqe import WcStatus
from models.verbs.workloads import SUCCESS
from sim.core.steps import Check
from sim.core.units import format_time

NONE = -1
"""The mark of an operation whose steps have no check of that label (a work request flushed before its source)."""
REQUESTER, SOURCE = "requester", "source"
"""The checks of a WRITE's path where the requester flushes or checks its keys, and where it translates its
source."""


@dataclass
class Failure:
    """Operation ``first`` of stream ``stream``'s ``size`` found buffer ``name`` unreachable at ``at_ps`` (its
    first access after ``after_ps``, answered ``status``); the requester flushes from operation ``flushed`` on, the
    ones between are flushed at their source check."""

    name: str
    stream: int
    size: int
    first: int
    at_ps: int
    after_ps: int
    status: WcStatus
    flushed: int

    def parts(self, lo: int, hi: int, found: Path, size: int) -> list[tuple[int, int, tuple]]:
        """Operations ``lo..hi-1`` of path ``found`` at message ``size`` as ``(lo, hi, steps)`` runs: at the failed
        size, as the path goes before ``first``, failing at the source check up to ``flushed``, flushed at the
        requester check after; at a later size, every one flushed there (the QP is in the error state)."""
        if size != self.size:
            return [(lo, hi, failing(found, REQUESTER))]
        cuts = [(lo, found.steps), (max(lo, self.first), failing(found, SOURCE)),
                (max(lo, self.flushed), failing(found, REQUESTER)), (hi, None)]
        return [(a, min(b, hi), steps) for (a, steps), (b, _) in zip(cuts, cuts[1:]) if min(b, hi) > a]

    def statuses(self, n: int, size: int) -> np.ndarray:
        """The ``ibv_wc_status`` values of the stream's ``n`` completions at message ``size``: at the failed size,
        success, the failed one's status, then flushes; at a later size, flushes."""
        out = np.full(n, WcStatus.WR_FLUSH_ERR.value, dtype=np.uint8)
        if size == self.size:
            out[:self.first] = SUCCESS
            out[self.first] = self.status.value
        return out

    def settled(self, marks: dict[str, np.ndarray]) -> str | int | None:
        """Check the split against a complete solve's ``marks``: None when it holds, the operation the requester
        really flushes from when only that differs, or why it cannot be settled."""
        local, requester = marks["local"], marks[REQUESTER]
        j, at = self.first, self.at_ps
        after = local[j + 1:]
        if local[j] != at or (local[:j] >= self.after_ps).any() or (after[after != NONE] <= at).any():
            return f"buffer '{self.name}': the run with its error completion reached it first at another time"
        later = requester[j + 1:]
        if (later == at).any():
            return f"a work request reaches its requester check at {format_time(at)}, as its send queue stops"
        flushed = first_flushed(j, at, marks)
        if (later[flushed - j - 1:] <= at).any():
            return "the requester checks of the work requests after the failed one come out of order"
        return None if flushed == self.flushed else flushed


def failed_by(failures: dict[tuple[int, int], Failure], stream: int, sizes: list[int], size: int) -> Failure | None:
    """The error completion of ``stream`` (whose message sizes are ``sizes``, in run order) at ``size`` or a size
    before it, if any: it fails or flushes the work requests at ``size``."""
    return next((failures[stream, s] for s in sizes[:sizes.index(size) + 1] if (stream, s) in failures), None)


def first_flushed(first: int, at_ps: int, marks: dict[str, np.ndarray]) -> int:
    """Where the requester starts flushing, operation ``first`` failing at ``at_ps``: the first operation after it
    whose requester check comes later (from a solve in which the ones after it still succeeded, a first guess)."""
    later = marks[REQUESTER][first + 1:]
    return first + 1 + int(np.argmax(later > at_ps)) if (later > at_ps).any() else len(marks[REQUESTER])


def labelled(steps: tuple) -> tuple:
    """``steps`` with their requester check labelled."""
    return tuple(replace(s, label=REQUESTER) if isinstance(s, Check) and s.name == REQUESTER else s for s in steps)
