"""Work requests that complete in error after a scenario event, on the vectorized core.

When an event leaves a buffer a stream reads from unreachable (VFIO revoked it, the exporter's re-map fails), the
next access of it answers an error status (:meth:`models.ib.dmabuf_mr.DmabufBacking.translate`, asked on the
testbed at that access's time by :class:`sim.engine.planner.events.Watch`). The event engine then runs
:meth:`~models.nic.work_request.WorkRequestRun._fail`: the work request writes its error CQE from the source
check's time and goes no further; its completion, delivered in posting order
(:func:`models.nic.completion.complete_at`), moves the QP to the error state once the model is told of it and of
every earlier one; from then
on the requester flushes each work request at its requester check (IBV_WC_WR_FLUSH_ERR), while those past that
check when the QP moved still reach the source check, where the model answers each again: in error, or (an
exporter whose next map succeeds) with a re-fault, after which that work request and those behind it go on as the
path goes, their transmit claims waiting in the send queue's turn for the failed one's end (where the interpreter
passes the ticket of an operation that made no claim in a turn; :attr:`sim.fast.solver.Problem.unclaimed`). Every
completion after the failed one is delivered as a flush. ``ib_write_bw``'s loop goes on posting as completions are
polled, and on to its later message sizes, whose work requests the requester flushes at its check, every one.

A :class:`Failure` holds where that split falls in a stream; the vectorized core solves each part with the steps
of :func:`models.nic.datapath.failing` (a continuation group each, :attr:`sim.fast.Group.first`) and checks the
split against the solve (:meth:`Failure.settled`): the requester's check times (labelled ``requester``) against
the time the model learns of the failed completion and of every one before it (``completing``, an inline check
before the poll's wake, where the event engine's run calls :func:`~models.nic.completion.complete_at`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from models.nic.datapath import Path, failing
from models.nic.wqe import WcStatus
from models.verbs.workloads import SUCCESS
from sim.core.steps import Check, Wake
from sim.core.units import format_time

NONE = -1
"""The mark of an operation whose steps have no check of that label (a work request flushed before its source)."""
REQUESTER, SOURCE, COMPLETING = "requester", "source", "completing"
"""The checks of a WRITE's path where the requester flushes or checks its keys, and where it translates its
source; the label of the time the model is told of a completion."""


@dataclass
class Failure:
    """Operation ``first`` of stream ``stream``'s ``size`` found buffer ``name`` unreachable at ``at_ps`` (its
    first access after ``after_ps``, answered ``status``); the requester flushes from operation ``flushed`` on, the
    ones between reach the source check and fail there. ``asked``: the operations whose source access the model
    answered on the testbed, with its time."""

    name: str
    stream: int
    size: int
    first: int
    at_ps: int
    after_ps: int
    status: WcStatus
    flushed: int
    asked: dict[int, int] = field(default_factory=dict)
    went_on: int | None = None
    """The operation whose source access re-faulted after the error (the exporter's next map succeeded): it and
    the ones after it up to ``flushed`` go on as the path goes, their completions delivered as flushes."""

    def parts(self, lo: int, hi: int, found: Path, size: int) -> list[tuple[int, int, tuple]]:
        """Operations ``lo..hi-1`` of path ``found`` at message ``size`` as ``(lo, hi, steps)`` runs: at the failed
        size, as the path goes before ``first``, failing at the source check up to ``flushed`` (or up to ``went_on``,
        as the path goes from there), flushed at the requester check after; at a later size, every one flushed
        there (the QP is in the error state)."""
        if size != self.size:
            return [(lo, hi, failing(found, REQUESTER))]
        on = self.flushed if self.went_on is None else min(self.went_on, self.flushed)
        cuts = [(lo, found.steps), (max(lo, self.first), failing(found, SOURCE)), (max(lo, on), found.steps),
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

    def pending(self, lo: int, local: np.ndarray | None) -> list[tuple[int, int]]:
        """``(time, operation)`` of the source accesses among operations ``lo..`` (their times ``local``; None:
        they make none) that fail there and that the model has not answered yet."""
        if local is None:
            return []
        ops = np.arange(lo, lo + len(local))
        mine = (ops > self.first) & (ops < (self.flushed if self.went_on is None else self.went_on))
        return [(int(t), int(j)) for t, j in zip(local[mine], ops[mine]) if j not in self.asked]

    def settled(self, marks: dict[str, np.ndarray]) -> str | int | None:
        """Check the split against a complete solve's ``marks``: None when it holds, the operation the requester
        really flushes from when only that differs, or why it cannot be settled."""
        local, requester, told = marks["local"], marks[REQUESTER], marks[COMPLETING]
        j = self.first
        after = local[j + 1:]
        if local[j] != self.at_ps or (local[:j] >= self.after_ps).any() or (after[after != NONE] <= self.at_ps).any():
            return f"buffer '{self.name}': the run with its error completion reached it first at another time"
        moved = int(told[:j + 1].max())  # the QP moves to the error state when the model is told of them all
        later = requester[j + 1:]
        if (later == moved).any():
            return f"a work request reaches its requester check at {format_time(moved)}, as its QP moves to error"
        flushed = j + 1 + int(np.argmax(later > moved)) if (later > moved).any() else len(local)
        if (later[flushed - j - 1:] <= moved).any():
            return "the requester checks of the work requests after the failed one come out of order"
        if any(local[k] != t or not j < k < flushed for k, t in self.asked.items() if k != j):
            return f"buffer '{self.name}': the accesses after its error completion came at other times"
        return None if flushed == self.flushed else flushed


def failed_by(failures: dict[tuple[int, int], Failure], stream: int, sizes: list[int], size: int) -> Failure | None:
    """The error completion of ``stream`` (whose message sizes are ``sizes``, in run order) at ``size`` or a size
    before it, if any: it fails or flushes the work requests at ``size``."""
    return next((failures[stream, s] for s in sizes[:sizes.index(size) + 1] if (stream, s) in failures), None)


def first_flushed(first: int, at_ps: int, marks: dict[str, np.ndarray]) -> int:
    """A first guess of where the requester starts flushing, from a solve in which operation ``first`` (failing at
    ``at_ps``) and the ones after it still succeeded: after the first requester check later than the time the model
    is told of the earlier completions and of the failed one (its error CQE write starts at its check's time)."""
    moved = max(int(marks[COMPLETING][:first].max(initial=0)), at_ps)
    later = marks[REQUESTER][first + 1:]
    return first + 1 + int(np.argmax(later > moved)) if (later > moved).any() else len(marks[REQUESTER])


def labelled(steps: tuple) -> tuple:
    """``steps`` with their requester check labelled and, before the main chain's last wake, an inline check
    labelled :data:`COMPLETING` (where the model is told of the completion)."""
    out = [replace(s, label=REQUESTER) if isinstance(s, Check) and s.name == REQUESTER else s for s in steps]
    k = max((k for k, s in enumerate(out) if isinstance(s, Wake)), default=None)
    if k is not None:
        out.insert(k, Check(COMPLETING, label=COMPLETING))
    return tuple(out)
